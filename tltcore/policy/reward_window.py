"""A sliding window of rewards with O(1) median, for bandits that decide every decode iteration.

BEG-MAB ranks arms by the *median* of their last N rewards (N = 300 in TLT), so a single slow
iteration (a GC pause, a prefill squeezed in) cannot flip the choice the way it would flip a mean.
The simulator may call ``decide()`` millions of times, so the window keeps its values sorted as well
as in arrival order: an insert or eviction is a C-level list shift, and the median is an index.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque


class RewardWindow:
    """The last ``size`` rewards, in arrival order and sorted."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"reward window size must be >= 1, got {size}")
        self.size = size
        self._arrivals: deque[float] = deque()
        self._sorted: list[float] = []
        self._sum = 0.0

    def __len__(self) -> int:
        return len(self._arrivals)

    def add(self, reward: float) -> None:
        """Append ``reward``, evicting the oldest one when the window is full."""
        if len(self._arrivals) == self.size:
            old = self._arrivals.popleft()
            del self._sorted[bisect_left(self._sorted, old)]
            self._sum -= old
        self._arrivals.append(reward)
        insort(self._sorted, reward)
        self._sum += reward

    def median(self) -> float:
        """Median of the window (mean of the two middle values for an even count); 0 when empty."""
        n = len(self._sorted)
        if n == 0:
            return 0.0
        mid = n // 2
        return self._sorted[mid] if n % 2 else 0.5 * (self._sorted[mid - 1] + self._sorted[mid])

    def mean(self) -> float:
        """Mean of the window; 0 when empty."""
        n = len(self._arrivals)
        return self._sum / n if n else 0.0

    def values(self) -> list[float]:
        """The rewards in arrival order (oldest first)."""
        return list(self._arrivals)

    def clear(self) -> None:
        self._arrivals.clear()
        self._sorted.clear()
        self._sum = 0.0
