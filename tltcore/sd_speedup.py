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

    Built by columns: each shape's accept length once (it does not depend on the batch), the plain and
    SD times by :func:`_decode_seconds` and :func:`_sd_seconds` (each float the one its own
    ``decode_time`` / ``sd_time`` gives), the columns as numpy arrays; the run warnings look up a few
    hundred batch sizes per policy and step, and a dict and a dozen ``sd_time`` calls per row made
    this ~40 ms of every call."""
    configs = list(configs)
    sizes = [int(b) for b in batches]
    if not configs or not sizes:
        return pd.DataFrame()
    accept_lens = [accept.expected_accept_length(c, drafter) for c in configs]
    plains = _decode_seconds(cost, sizes, int(context_tokens))
    sds = _sd_seconds(cost, configs, sizes, int(context_tokens))
    n, k = len(sizes), len(configs)
    accept_col = np.tile(np.array(accept_lens, dtype=np.float64), n)
    plain_col = np.repeat(np.array(plains, dtype=np.float64), k)
    sd_col = np.array(sds, dtype=np.float64).reshape(n * k)
    return pd.DataFrame({
        "batch": np.repeat(np.array(sizes, dtype=np.int64), k), "config": [c.name for c in configs] * n,
        "depth": np.tile(np.array([c.depth for c in configs], dtype=np.int64), n),
        "topk": np.tile(np.array([c.topk for c in configs], dtype=np.int64), n),
        "verify_tokens": np.tile(np.array([c.verify_tokens for c in configs], dtype=np.int64), n),
        "accept_length": accept_col, "decode_s": plain_col, "sd_s": sd_col,
        "speedup": accept_col * plain_col / sd_col,  # (accept x plain) / sd, element by element
    })


def _decode_seconds(cost, sizes: list[int], context_tokens: int) -> list[float]:
    """Plain iteration seconds per batch size at ``context_tokens`` each, every float ``cost.decode_time``'s:
    from the paged-KV sums (``decode_times_from_sums``) where the model reads contexts only through them."""
    paged_kv = cost.paged_kv_times() if isinstance(cost, CostModelBase) else None
    if paged_kv is None or min(sizes) < 1 or context_tokens < 0:
        return [cost.decode_time(np.full(b, context_tokens)) for b in sizes]
    block = int(paged_kv.kv_block_size)
    batch = np.array(sizes, dtype=np.int64)
    one_paged = -(-context_tokens // block) * block
    return paged_kv.decode_times_from_sums(batch * one_paged, batch * context_tokens, batch)


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
