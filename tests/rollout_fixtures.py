"""Stand-ins the rollout tests share: one step's workload and a simple positive cost model.

The rollout runner only reads a workload's four arrays (the ``StepRequests`` protocol) and a cost
model's five prices, so tests that pin scheduling, dealing, switching or the event log use these
instead of a trace and the roofline: small, exact and fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.policy.base import SDConfig


@dataclass(frozen=True)
class Work:
    """One step's requests (``tltsim.rollout.StepRequests``)."""

    step: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray


class LinearCost(PerConfigSDTimes):
    """Iteration times linear in the summed context; an SD iteration costs more with depth."""

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return 1e-2 + 1e-5 * float(np.sum(new_tokens))

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return 2e-3 + 3e-6 * float(np.sum(new_tokens))

    def decode_time(self, context_lens: np.ndarray) -> float:
        return 1e-3 + 1e-6 * float(np.sum(context_lens))

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        return sum(self.decode_time(np.asarray(context_lens) + i) for i in range(n_iters))

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        return 1.5 * self.decode_time(context_lens) + config.depth * 1e-4
