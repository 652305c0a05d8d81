"""Elastic SD: keep speculation off while the running batch is large, switch it on for the tail.

TLT (DESIGN §1) turns SD on once the running batch has been small for a while, because at large
batch sizes decode is compute-bound and SD's extra verify work costs more than it saves. Switching
on is one-way for the rest of the rollout: every live request must be re-prefilled through target
and drafter (the drafter has no KV/hidden-state cache for tokens produced without it), so flapping
would pay that price again and again.

Semantics (precise, tested). The switch counts consecutive decode *iterations run* (reported by
``observe``) with ``batch_size <= threshold``; an iteration with a larger batch resets the count to 0.
``decide()`` switches on when the iteration it is deciding would make the count reach
``consecutive``: that iteration *is the first SD iteration*, and its :class:`Decision` has
``switch_on`` set (the engine must bring the drafter up to date for every live request first). So
with the defaults the first nine small-batch iterations run without SD and the tenth runs with SD.
From then on every decision is ``inner``'s, whatever the batch size, until ``reset(step)`` re-arms
the switch for the next rollout step.

Spans. While off, the answer is predictable: with a large batch it cannot change before the batch
does (``hold = HOLD_UNTIL_EVENT``); with a small one it stays NO_SD for exactly the iterations left
before the switch, so engines may run those in one span.

One ``Elastic`` object per rollout worker: the counter and the switch describe one worker's
running batch. Sharing one object between workers would mix their batch sizes.
"""

from __future__ import annotations

from dataclasses import replace

from tltcore.errors import InputError
from tltcore.policy.base import (
    HOLD_UNTIL_EVENT,
    MAX_POLICY_BATCH,
    MAX_POLICY_ITERATIONS,
    NO_SD,
    BatchView,
    Decision,
    Outcome,
    SDPolicy,
    wants_remaining_hint,
)

DEFAULT_THRESHOLD = 32
DEFAULT_CONSECUTIVE = 10


class Elastic:
    """Wraps ``inner``: ``NO_SD`` until the batch has been ``<= threshold`` for ``consecutive``
    consecutive iterations, then ``inner``'s decisions for the rest of the rollout step."""

    def __init__(self, inner: SDPolicy, threshold: int = DEFAULT_THRESHOLD,
                 consecutive: int = DEFAULT_CONSECUTIVE, name: str | None = None) -> None:
        if not 1 <= threshold <= MAX_POLICY_BATCH:
            raise InputError(f"elastic threshold must be a batch size in [1, {MAX_POLICY_BATCH:,}], got {threshold}")
        if not 1 <= consecutive <= MAX_POLICY_ITERATIONS:
            raise InputError(f"elastic consecutive checks must be in [1, {MAX_POLICY_ITERATIONS:,}], got {consecutive}")
        self.inner = inner
        self.threshold = threshold
        self.consecutive = consecutive
        self.name = name if name is not None else f"elastic+{inner.name}"
        self._small_streak = 0
        self._switched_on = False
        self._drafter_stale = False

    @property
    def wants_remaining_hint(self) -> bool:
        """The inner policy's wish for ``BatchView.remaining_hint`` (``elastic+cost-aware:lengths=known``
        must see the lengths the bare policy sees; the switch itself never reads them)."""
        return wants_remaining_hint(self.inner)

    @property
    def switched_on(self) -> bool:
        """True once SD has been switched on in this rollout step (until ``reset``)."""
        return self._switched_on

    def decide(self, view: BatchView) -> Decision:
        if not self._switched_on:
            if view.batch_size > self.threshold:
                return _OFF_UNTIL_EVENT
            left = self.consecutive - self._small_streak  # this iteration included
            if left > 1:
                return Decision(NO_SD, hold=left - 1)
            self._switched_on = True
            self._drafter_stale = True
        decision = self.inner.decide(view)
        if self._drafter_stale and decision.config.enabled:
            # The first speculating iteration after the switch (normally the switch iteration itself;
            # later only when the inner policy chose NO_SD at first) brings the drafter up to date.
            self._drafter_stale = False
            return replace(decision, switch_on=True)
        return decision

    def plain_above(self) -> int | None:
        """While off: plain above the threshold (an iteration there only resets the count), the
        :mod:`~tltcore.policy.base` plain-phase promise; once switched on, none."""
        return None if self._switched_on else self.threshold

    def observe(self, outcome: Outcome) -> None:
        """Count small-batch iterations while off; once on, forward every outcome to ``inner``.
        Pre-switch iterations say nothing about the inner policy's arms and would bias a bandit."""
        if self._switched_on:
            self.inner.observe(outcome)
        elif outcome.batch_size <= self.threshold:
            self._small_streak += outcome.iterations
        else:
            self._small_streak = 0

    def reset(self, step: int) -> None:
        """Re-arm for a new rollout step: SD off, counter cleared; ``inner.reset(step)``."""
        self._small_streak = 0
        self._switched_on = False
        self._drafter_stale = False
        self.inner.reset(step)


_OFF_UNTIL_EVENT = Decision(NO_SD, HOLD_UNTIL_EVENT)
