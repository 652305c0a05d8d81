"""The engines' running estimate of accept length, shown to policies as ``BatchView.recent_accept``.

Both engines (simulator and native) keep exactly this object, so "recent accept length" means one
thing everywhere: an exponential moving average over SD spans of the accept length (tokens emitted
per request per iteration, bonus included), weight ``WEIGHT`` on the newest iteration. A span of
``n`` iterations at one accept length is folded in as ``n`` iterations would be:
``ema <- a + (1 - w)^n (ema - a)``. Plain iterations leave it unchanged (they say nothing about the
drafter). None until the first SD iteration of the run.
"""

from __future__ import annotations

#: EMA weight of the newest SD iteration (a few dozen iterations of memory).
WEIGHT = 0.2


class RecentAccept:
    """EMA of the accept length over SD iterations (see module docstring)."""

    def __init__(self, weight: float = WEIGHT) -> None:
        if not 0.0 < weight <= 1.0:
            raise ValueError(f"recent-accept weight must be in (0, 1], got {weight}")
        self.weight = weight
        self.value: float | None = None

    def update(self, accept_length: float, iterations: int = 1) -> None:
        """Fold in ``iterations`` SD iterations whose mean accept length was ``accept_length``."""
        if iterations < 1:
            return
        if self.value is None:
            self.value = accept_length
            iterations -= 1
        keep = (1.0 - self.weight) ** iterations
        self.value = accept_length + keep * (self.value - accept_length)
