"""Elastic SD: keep speculation off while the running batch is large, switch it on for the tail.

TLT (DESIGN §1) turns SD on once the running batch has been small for a while, because at large
batch sizes decode is compute-bound and SD's extra verify work costs more than it saves. Switching
on is one-way for the rest of the rollout: every live request must be re-prefilled through target
and drafter (the drafter has no KV/hidden-state cache for tokens produced without it), so flapping
would pay that price again and again.

Semantics (precise, tested): ``decide()`` counts consecutive calls with
``batch_size <= threshold``; a call with a larger batch resets the count to 0. The call on which
the count reaches ``consecutive`` *is the first SD iteration*: it sets ``switched_on`` and
``just_switched`` and returns the inner policy's decision. So with the defaults the first nine small
batches run without SD and the tenth runs with SD. From then on every call delegates to ``inner``,
whatever the batch size.

One ``Elastic`` object per rollout instance: the counter and the switch describe one instance's
running batch. Sharing one object between instances would mix their batch sizes.
"""

from __future__ import annotations

from tltsim.errors import InputError
from tltsim.policy.base import NO_SD, BatchView, Outcome, SDConfig, SDPolicy

DEFAULT_THRESHOLD = 32
DEFAULT_CONSECUTIVE = 10


class Elastic:
    """Wraps ``inner``: ``NO_SD`` until the batch has been ``<= threshold`` for ``consecutive``
    consecutive ``decide()`` calls, then ``inner``'s choice for the rest of the rollout.

    The engine reads ``just_switched`` after each ``decide()``: when True it must charge the
    re-prefill of every live request before running the iteration.
    """

    per_iteration = True

    def __init__(self, inner: SDPolicy, threshold: int = DEFAULT_THRESHOLD,
                 consecutive: int = DEFAULT_CONSECUTIVE, name: str | None = None) -> None:
        if threshold < 1:
            raise InputError(f"elastic threshold must be >= 1, got {threshold}")
        if consecutive < 1:
            raise InputError(f"elastic consecutive checks must be >= 1, got {consecutive}")
        self.inner = inner
        self.threshold = threshold
        self.consecutive = consecutive
        self.name = name if name is not None else f"elastic+{inner.name}"
        self._small_streak = 0
        self._switched_on = False
        self._just_switched = False

    @property
    def switched_on(self) -> bool:
        """True once SD has been switched on in this rollout (stays True until ``reset()``)."""
        return self._switched_on

    @property
    def just_switched(self) -> bool:
        """True exactly for the ``decide()`` call that switched SD on; False after the next call."""
        return self._just_switched

    def decide(self, view: BatchView) -> SDConfig:
        self._just_switched = False
        if not self._switched_on:
            self._small_streak = self._small_streak + 1 if view.batch_size <= self.threshold else 0
            if self._small_streak < self.consecutive:
                return NO_SD
            self._switched_on = True
            self._just_switched = True
        return self.inner.decide(view)

    def observe(self, outcome: Outcome) -> None:
        """Forward only outcomes of SD-phase iterations: the pre-switch no-SD iterations say nothing
        about the inner policy's arms and would bias a bandit."""
        if self._switched_on:
            self.inner.observe(outcome)

    def reset(self) -> None:
        """Re-arm for a new rollout step: SD off, counter cleared, inner policy reset."""
        self._small_streak = 0
        self._switched_on = False
        self._just_switched = False
        self.inner.reset()
