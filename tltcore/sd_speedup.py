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

from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.policy.base import SDConfig, max_tree_nodes


def sd_speedup_table(cost, accept, configs: Iterable[SDConfig], batches: Iterable[int], *,
                     context_tokens: int = 2048, drafter: DrafterState = INITIAL_DRAFTER) -> pd.DataFrame:
    """One row per (batch, config): depth, topk, verify_tokens, accept length, decode and SD
    iteration seconds, and ``speedup`` (module docstring). Below 1 SD does not pay at that batch.

    Built by columns: each shape's accept length once (it does not depend on the batch) and every
    shape's SD time at a batch in one ``sd_times`` call (each float the one its own ``sd_time``
    gives); the run warnings look up a few hundred batch sizes per policy and step, and a dict per
    row made this ~40 ms of every call."""
    configs = list(configs)
    accept_lens = [accept.expected_accept_length(c, drafter) for c in configs]
    cols: dict[str, list] = {k: [] for k in ("batch", "config", "depth", "topk", "verify_tokens", "accept_length",
                                             "decode_s", "sd_s", "speedup")}
    for b in batches:
        ctx = np.full(int(b), int(context_tokens))
        plain = cost.decode_time(ctx)
        sds = cost.sd_times(ctx, configs) if configs else []
        for c, accept_len, sd in zip(configs, accept_lens, sds, strict=True):
            cols["batch"].append(int(b))
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


def grid_configs(depths: Iterable[int], verifies: Iterable[int], topk: int = 4) -> list[SDConfig]:
    """Every depth x verify shape with ``topk`` children per step, skipping trees too small to hold
    ``verify`` nodes."""
    return [SDConfig(d, topk, v) for d in depths for v in verifies if v <= max_tree_nodes(d, topk)]
