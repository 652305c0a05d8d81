"""The cost-model contract: how long one engine iteration takes on one rollout worker.

All times are seconds on one rollout worker (a tensor-parallel group). Context lengths are *per
request* numpy int arrays, never a batch mean: with long tails the mean mis-states KV traffic and
attention work. ``context_lens[i]`` is request i's prompt + generated tokens (the engines'
``BatchView.context_lens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from tltcore.policy.base import SDConfig


@runtime_checkable
class CostModel(Protocol):
    """Iteration costs for one rollout instance."""

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        """One prefill pass: request i processes ``new_tokens[i]`` tokens on top of
        ``cached_tokens[i]`` already in its KV cache."""
        ...

    def decode_time(self, context_lens: np.ndarray) -> float:
        """One plain decode iteration (one token per request) at these context lengths."""
        ...

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        """Sum of ``n_iters`` consecutive plain decode iterations starting at ``context_lens``,
        every context growing by one token per iteration. Lets the simulator advance in closed
        form between events."""
        ...

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        """One speculative iteration: ``config.depth`` drafter steps plus one target verify
        forward over ``config.verify_tokens`` (+1 root) tokens per request."""
        ...

    def sd_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> list[float]:
        """``sd_time`` of every config at the same contexts, each bit-identical to its own call. A
        policy pricing a dozen draft shapes per decision (cost-aware) pays the contexts' checks and
        reductions once instead of once per shape; :class:`PerConfigSDTimes` is the plain loop for
        a model with nothing to share."""
        ...

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        """One drafter-only prefill pass (no LM head): what bringing a drafter up to date over
        already generated tokens costs (elastic switch, drafter catch-up)."""
        ...


class _SDTime(Protocol):
    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float: ...


class PerConfigSDTimes:
    """``sd_times`` as one ``sd_time`` call per config: the definition every faster version is
    pinned to, and all a cost model needs when its shapes share nothing worth computing once."""

    def sd_times(self: _SDTime, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> list[float]:
        return [float(self.sd_time(context_lens, c)) for c in configs]
