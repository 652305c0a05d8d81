"""Oracle: the throughput-best draft shape for every iteration, from the true models.

It knows the acceptance model and the cost model the simulator runs with, so it is the upper bound
a learning policy (BEG-MAB, ours) is measured against: no exploration, no stale estimates. It is
greedy per iteration, so it ignores costs that span iterations (e.g. Elastic's one-time
re-prefill); wrap it in ``Elastic`` to study that.

Duck-typed: ``accept_model`` needs ``expected_accept_length(config)`` and ``cost_model`` needs
``sd_time(ctx, config)`` and ``decode_time(ctx)`` (see :mod:`tltsim.acceptance`,
:mod:`tltsim.cost_model`). Per-request context lengths are passed on as an int64 array, never a mean.
The constructor does not touch the models (scenario validation builds policies with placeholders).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tltsim.policy.base import NO_SD, BatchView, Outcome, SDConfig
from tltsim.policy.beg_mab import DEFAULT_ARMS


class Oracle:
    """Per ``decide()``, the config among ``candidates`` and ``NO_SD`` that maximises
    ``expected_accept_length(config) * batch / time``. Ties go to ``NO_SD``, then to the earlier
    candidate: speculation must strictly pay for itself."""

    per_iteration = True

    def __init__(self, accept_model: Any, cost_model: Any, candidates: Sequence[SDConfig] = DEFAULT_ARMS,
                 name: str = "oracle") -> None:
        self.accept_model = accept_model
        self.cost_model = cost_model
        self.candidates: tuple[SDConfig, ...] = (NO_SD, *(c for c in candidates if c.enabled))
        self.name = name

    def throughput(self, config: SDConfig, ctx: np.ndarray) -> float:
        """Expected tokens/s of one iteration with ``config`` at these per-request contexts."""
        if config.enabled:
            tokens = float(self.accept_model.expected_accept_length(config))
            time = float(self.cost_model.sd_time(ctx, config))
        else:
            tokens, time = 1.0, float(self.cost_model.decode_time(ctx))
        return tokens * len(ctx) / time if time > 0 else 0.0

    def decide(self, view: BatchView) -> SDConfig:
        ctx = np.asarray(view.context_lens, dtype=np.int64)
        if len(ctx) == 0:
            if view.batch_size <= 0:
                return NO_SD
            # The engine gave no context lengths: assume empty contexts rather than fail.
            ctx = np.zeros(view.batch_size, dtype=np.int64)
        best, best_tput = NO_SD, -1.0
        for config in self.candidates:
            tput = self.throughput(config, ctx)
            if tput > best_tput:
                best, best_tput = config, tput
        return best

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self) -> None:
        return None
