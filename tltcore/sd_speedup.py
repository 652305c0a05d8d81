"""Speedup of one SD iteration shape over plain decoding at a fixed batch: the numbers behind the SD
heat map (depth x verify) and the speedup-vs-batch curves.

``speedup = accept_length(config) * decode_time(ctx) / sd_time(ctx, config)``: tokens per second with
SD over tokens per second without, for ``batch`` requests at ``context_tokens`` each, under the
scenario's cost and acceptance models. It is the per-iteration ratio the elastic switch and BEG-MAB
weigh, not a rollout's makespan ratio (that one also pays the switch and the long tail).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from tltcore.cost.protocol import CostModelBase
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.policy.base import SDConfig, max_tree_nodes


def sd_speedup_table(cost, accept, configs: Iterable[SDConfig], batches: Iterable[int], *,
                     context_tokens: int = 2048, drafter: DrafterState = INITIAL_DRAFTER) -> pd.DataFrame:
    """One row per (batch, config): depth, topk, verify_tokens, accept length, decode and SD
    iteration seconds, and ``speedup`` (module docstring). Below 1 SD does not pay at that batch.

    Built by columns: each shape's accept length once (it does not depend on the batch) and the SD
    times by :func:`_sd_seconds` (each float the one its own ``sd_time`` gives); the run warnings
    look up a few hundred batch sizes per policy and step, and a dict and a dozen ``sd_time`` calls
    per row made this ~40 ms of every call."""
    configs = list(configs)
    sizes = [int(b) for b in batches]
    accept_lens = [accept.expected_accept_length(c, drafter) for c in configs]
    plains = [cost.decode_time(np.full(b, int(context_tokens))) for b in sizes]
    sds = _sd_seconds(cost, configs, sizes, int(context_tokens))
    cols: dict[str, list] = {k: [] for k in ("batch", "config", "depth", "topk", "verify_tokens", "accept_length",
                                             "decode_s", "sd_s", "speedup")}
    for i, (b, plain) in enumerate(zip(sizes, plains, strict=True)):
        for c, accept_len, sd in zip(configs, accept_lens, sds[i], strict=True):
            cols["batch"].append(b)
            cols["config"].append(c.name)
            cols["depth"].append(c.depth)
            cols["topk"].append(c.topk)
            cols["verify_tokens"].append(c.verify_tokens)
            cols["accept_length"].append(accept_len)
            cols["decode_s"].append(plain)
            cols["sd_s"].append(sd)
            cols["speedup"].append(accept_len * plain / sd)
    if not cols["batch"]:
        return pd.DataFrame()
    return pd.DataFrame(cols)


def _sd_seconds(cost, configs: list[SDConfig], sizes: list[int], context_tokens: int) -> list[list[float]]:
    """``[batch][config]`` SD iteration seconds at ``context_tokens`` each, every float the one
    ``cost.sd_time`` gives: where the model reads contexts only through paged-KV sums
    (``paged_kv_times``), each shape over all batch sizes in one ``sd_times_from_sums`` call (equal
    contexts: the sums are the batch times one context's), else one ``sd_times`` call per batch."""
    paged_kv = cost.paged_kv_times() if isinstance(cost, CostModelBase) else None
    enabled = all(c.enabled for c in configs)
    if paged_kv is None or not configs or not sizes or not enabled or context_tokens < 0:
        return [cost.sd_times(np.full(b, context_tokens), configs) if configs else [] for b in sizes]
    block = int(paged_kv.kv_block_size)
    batch = np.array(sizes, dtype=np.int64)
    one_paged = -(-context_tokens // block) * block
    by_config = [paged_kv.sd_times_from_sums(batch * one_paged, batch * context_tokens, batch, c).tolist()
                 for c in configs]
    return [list(row) for row in zip(*by_config, strict=True)]


def grid_configs(depths: Iterable[int], verifies: Iterable[int], topk: int = 4) -> list[SDConfig]:
    """Every depth x verify shape with ``topk`` children per step, skipping trees too small to hold
    ``verify`` nodes."""
    return [SDConfig(d, topk, v) for d in depths for v in verifies if v <= max_tree_nodes(d, topk)]
