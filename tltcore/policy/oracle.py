"""Greedy oracle (``greedy-oracle``): the throughput-best draft shape for every iteration, from the
true models.

It knows the acceptance model and the cost model the engine runs with: no exploration, no stale
estimates. It reads the drafter the worker holds from each :class:`BatchView` (``view.drafter``), so
when the drafter goes stale or is retrained it sees it at once. It is greedy per iteration, so it
ignores costs that span iterations: turning SD off and on again costs the drafter catch-up it never
weighs, and it never sets ``switch_on`` (wrap it in ``Elastic`` to study the switch). So it is *not*
an upper bound -- other policies beat it (SGLang-EMA on the AIME 7B scenario); the bound every
policy is tested against is :func:`tltsim.upper_bound.makespan_lower_bound`.

The two models are typed by what the greedy oracle calls (structural Protocols below), so this module
imports neither the simulator's acceptance nor its cost model. Per-request context lengths are
passed on as an int64 array, never a mean. The constructor does not touch the models (scenario
validation builds policies with placeholders).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from tltcore.drafter.state import DrafterState
from tltcore.policy.base import NO_SD, BatchView, Decision, Outcome, SDConfig
from tltcore.policy.beg_mab import DEFAULT_ARMS


class OracleAcceptance(Protocol):
    def expected_accept_length(self, config: SDConfig, drafter: DrafterState) -> float: ...


class OracleCost(Protocol):
    def decode_time(self, context_lens: np.ndarray) -> float: ...

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float: ...


class GreedyOracle:
    """Per ``decide()``, the config among ``candidates`` and ``NO_SD`` that maximises
    ``expected_accept_length(config, drafter) * batch / time``. Ties go to ``NO_SD``, then to the
    earlier candidate: speculation must strictly pay for itself. Contexts change every iteration,
    so each decision holds for one iteration."""

    def __init__(self, accept_model: OracleAcceptance, cost_model: OracleCost,
                 candidates: Sequence[SDConfig] = DEFAULT_ARMS, name: str = "greedy-oracle") -> None:
        self.accept_model = accept_model
        self.cost_model = cost_model
        self.candidates: tuple[SDConfig, ...] = (NO_SD, *(c for c in candidates if c.enabled))
        self._decisions = {c: Decision(c) for c in self.candidates}
        self.name = name

    def throughput(self, config: SDConfig, ctx: np.ndarray, drafter: DrafterState) -> float:
        """Expected tokens/s of one iteration with ``config`` at these per-request contexts."""
        if config.enabled:
            tokens = float(self.accept_model.expected_accept_length(config, drafter))
            time = float(self.cost_model.sd_time(ctx, config))
        else:
            tokens, time = 1.0, float(self.cost_model.decode_time(ctx))
        return tokens * len(ctx) / time if time > 0 else 0.0

    def decide(self, view: BatchView) -> Decision:
        ctx = np.asarray(view.context_lens, dtype=np.int64)
        if len(ctx) == 0:
            if view.batch_size <= 0:
                return self._decisions[NO_SD]
            # The engine gave no context lengths: assume empty contexts rather than fail.
            ctx = np.zeros(view.batch_size, dtype=np.int64)
        best, best_tput = NO_SD, -1.0
        for config in self.candidates:
            tput = self.throughput(config, ctx, view.drafter)
            if tput > best_tput:
                best, best_tput = config, tput
        return self._decisions[best]

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        return None
