"""How cost-aware prices a batch: from per-request numpy arrays through any
:class:`~tltcore.cost.protocol.CostModel`, or from the batch's size and longest context alone (and a
prefill pass's tokens in all) where the cost model reads no more
(:class:`~tltcore.cost.protocol.LongestContextTimes`, a measured table under the ``max`` rule), on
Python ints.

Why two: on the CPU engine, whose forward passes leave the caches cold, each numpy call on a few dozen
contexts cost ~15-20 us, and an evaluation that made ~30 of them took ~0.3 ms of a ~3 ms iteration.
Both give the very same floats (``tests/policy/test_cost_aware.py`` pins it); the policy reads a batch
only through :class:`BatchPricing`, so its switch cost, plan and drain prediction are written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

import numpy as np

from tltcore.cost.protocol import CostModel, CostModelBase, LongestContextTimes
from tltcore.errors import InputError
from tltcore.policy.base import BatchView, SDConfig

Contexts = Sequence[int]  # a tuple of Python ints or an int64 array, as the pricing makes them


class BatchPricing(Protocol):
    """A batch's times and the few whole-batch operations the policy needs, in one representation."""

    def contexts(self, view: BatchView) -> Contexts | None:
        """The view's contexts (no contexts given: empty ones); None for an empty batch."""
        ...

    def times(self, ctx: Contexts) -> tuple[list[float], float]:
        """(every candidate's SD time, the plain time) of one iteration at the (non-empty) contexts."""
        ...

    def one(self, context: int) -> Contexts:
        """A batch of one request at ``context``."""
        ...

    def above(self, ctx: Contexts, remaining: Sequence[float], x: float, grow: int) -> Contexts:
        """The contexts, grown by ``grow`` tokens, of the requests with more than ``x`` tokens to go."""
        ...

    def remaining(self, ctx: Contexts, hint: Sequence[float] | None, floor: float | None,
                  cap: float | None) -> Sequence[float]:
        """Tokens each request is expected still to emit: ``hint`` (clipped at 0) when given, else its
        context, floored at ``floor`` and capped at ``cap`` (each when not None)."""
        ...

    def whole(self, n: int, top: float) -> Sequence[float]:
        """``n`` requests with ``top`` tokens to go each."""
        ...

    def longest(self, remaining: Sequence[float]) -> float:
        """The most tokens any request has to go."""
        ...

    def prefill(self, new: Contexts, cached: Contexts | None) -> float:
        """One target prefill pass of ``new`` tokens per request on top of ``cached`` (None: none)."""
        ...

    def drafter_prefill(self, new: Contexts, cached: Contexts | None) -> float:
        """One drafter prefill pass, as :meth:`prefill`."""
        ...

    def lagging(self, ctx: Contexts, lag: int) -> tuple[Contexts, Contexts | None]:
        """(the last ``lag`` tokens of each context, the tokens before them): a drafter catch-up's pass."""
        ...


def view_contexts(view: BatchView) -> Sequence[int] | None:
    """The batch's context lengths; a view that gives only a size prices as that many empty contexts
    (None for an empty batch)."""
    ctx = view.context_lens
    if len(ctx) == 0:
        if view.batch_size <= 0:
            return None
        ctx = (0,) * view.batch_size
    return ctx


class PerRequestPricing:
    """Per-request int64 arrays through the cost model's own methods."""

    def __init__(self, cost: CostModel, candidates: tuple[SDConfig, ...]) -> None:
        self.cost, self.candidates = cost, candidates
        # both prices from one reading of the contexts where the model says how (CostModelBase's
        # iteration_times; a stand-in that only matches the protocol is asked twice)
        self._both = cost.iteration_times if isinstance(cost, CostModelBase) else None

    def contexts(self, view: BatchView) -> Contexts | None:
        ctx = view_contexts(view)
        return None if ctx is None else np.asarray(ctx, dtype=np.int64)

    def times(self, ctx: Contexts) -> tuple[list[float], float]:
        arr = cast(np.ndarray, ctx)
        if self._both is not None:
            return self._both(arr, self.candidates)
        return self.cost.sd_times(arr, self.candidates), float(self.cost.decode_time(arr))

    def one(self, context: int) -> Contexts:
        return np.array([context], dtype=np.int64)

    def above(self, ctx: Contexts, remaining: Sequence[float], x: float, grow: int) -> Contexts:
        return cast(np.ndarray, ctx)[cast(np.ndarray, remaining) > x] + grow

    def remaining(self, ctx: Contexts, hint: Sequence[float] | None, floor: float | None,
                  cap: float | None) -> Sequence[float]:
        if hint is not None:
            return np.maximum(np.asarray(hint, dtype=float), 0.0)
        predicted = cast(np.ndarray, ctx).astype(float)
        if floor is not None:
            predicted = np.maximum(predicted, floor)
        if cap is not None:
            predicted = np.minimum(predicted, cap)
        return predicted

    def whole(self, n: int, top: float) -> Sequence[float]:
        return np.full(n, top)

    def longest(self, remaining: Sequence[float]) -> float:
        return float(cast(np.ndarray, remaining).max())

    def prefill(self, new: Contexts, cached: Contexts | None) -> float:
        return float(self.cost.prefill_time(cast(np.ndarray, new), self._cached(new, cached)))

    def drafter_prefill(self, new: Contexts, cached: Contexts | None) -> float:
        return float(self.cost.drafter_prefill_time(cast(np.ndarray, new), self._cached(new, cached)))

    def lagging(self, ctx: Contexts, lag: int) -> tuple[Contexts, Contexts | None]:
        arr = cast(np.ndarray, ctx)
        missed = np.minimum(arr, lag)
        return missed, arr - missed

    @staticmethod
    def _cached(new: Contexts, cached: Contexts | None) -> np.ndarray:
        return np.zeros(len(new), dtype=np.int64) if cached is None else cast(np.ndarray, cached)


class LongestContextPricing:
    """Python ints read through the batch's size and longest context (a prefill pass: the requests with
    tokens to prefill)."""

    def __init__(self, at: LongestContextTimes, candidates: tuple[SDConfig, ...]) -> None:
        self.at, self.candidates = at, candidates

    def contexts(self, view: BatchView) -> Contexts | None:
        ctx = view_contexts(view)
        if ctx is None:
            return None
        if min(ctx) < 0:
            raise InputError("context_lens must be non-negative", field="context_lens")
        return ctx

    def times(self, ctx: Contexts) -> tuple[list[float], float]:
        b, top = len(ctx), max(ctx)
        return self.at.sd_times_at(b, top, self.candidates), self.at.decode_time_at(b, top)

    def one(self, context: int) -> Contexts:
        return (context,)

    def above(self, ctx: Contexts, remaining: Sequence[float], x: float, grow: int) -> Contexts:
        return [c + grow for c, r in zip(ctx, remaining, strict=True) if r > x]

    def remaining(self, ctx: Contexts, hint: Sequence[float] | None, floor: float | None,
                  cap: float | None) -> Sequence[float]:
        # PerRequestPricing's, elementwise on Python floats (np.maximum/np.minimum keep the first of equal
        # values, as max/min do)
        if hint is not None:
            return [max(float(h), 0.0) for h in hint]
        listed = [float(c) for c in ctx]
        if floor is not None:
            listed = [max(p, floor) for p in listed]
        if cap is not None:
            listed = [min(p, cap) for p in listed]
        return listed

    def whole(self, n: int, top: float) -> Sequence[float]:
        return [top] * n

    def longest(self, remaining: Sequence[float]) -> float:
        return max(remaining)

    def prefill(self, new: Contexts, cached: Contexts | None) -> float:
        todo = [c for c in new if c > 0]
        return self.at.prefill_time_at(len(todo), max(todo), sum(todo)) if todo else 0.0

    def drafter_prefill(self, new: Contexts, cached: Contexts | None) -> float:
        todo = [c for c in new if c > 0]
        return self.at.drafter_prefill_time_at(len(todo), max(todo)) if todo else 0.0

    def lagging(self, ctx: Contexts, lag: int) -> tuple[Contexts, Contexts | None]:
        return [min(c, lag) for c in ctx], None
