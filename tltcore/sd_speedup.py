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
    iteration seconds, and ``speedup`` (module docstring). Below 1 SD does not pay at that batch."""
    rows = []
    for b in batches:
        ctx = np.full(int(b), int(context_tokens))
        plain = cost.decode_time(ctx)
        for c in configs:
            accept_len = accept.expected_accept_length(c, drafter)
            sd = cost.sd_time(ctx, c)
            rows.append({"batch": int(b), "config": c.name, "depth": c.depth, "topk": c.topk,
                         "verify_tokens": c.verify_tokens, "accept_length": accept_len, "decode_s": plain,
                         "sd_s": sd, "speedup": accept_len * plain / sd})
    return pd.DataFrame(rows)


def grid_configs(depths: Iterable[int], verifies: Iterable[int], topk: int = 4) -> list[SDConfig]:
    """Every depth x verify shape with ``topk`` children per step, skipping trees too small to hold
    ``verify`` nodes."""
    return [SDConfig(d, topk, v) for d in depths for v in verifies if v <= max_tree_nodes(d, topk)]
