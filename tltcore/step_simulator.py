"""The simulator as the real half's validator sees it: one step of one policy on one worker, given a
cost model, an acceptance model and an engine description, returning the step's event log.

``tltreal.validation`` measures the simulator's error against real runs without importing the
simulator: the caller (the ``tlt validate`` command) hands it ``tltsim.rollout.simulate_policy_step``,
which satisfies :class:`StepSimulator`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd

from tltcore.cost.protocol import CostModel
from tltcore.engine_limits import EngineLimits


@dataclass(frozen=True)
class SimulatedEngine:
    """How the simulator schedules to mirror a real backend: the shared limits, how accept lengths are
    drawn (``expected`` or ``stochastic``) and whether admissions join decode iterations (vLLM's mixed
    prefill) or run as passes of their own (the native engine)."""

    limits: EngineLimits = field(default_factory=EngineLimits)
    acceptance_mode: str = "stochastic"
    mixed_prefill: bool = False


class StepSimulator(Protocol):
    """Simulate ``workload`` (one step's requests) under the policy ``spec`` on one worker; returns the
    event log (:mod:`tltcore.events`)."""

    def __call__(self, workload: Any, spec: str, cost: CostModel, accept: Any, *, engine: SimulatedEngine,
                 seed: int, deal_mode: str) -> pd.DataFrame: ...
