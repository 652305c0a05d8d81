"""Cost-aware's plan: the predicted drain of the live batch cut into phases, each priced plain, with
the best SD shape and with a switch at its start, and the two-state dynamic program over them (OFF ->
ON costs the switch at the phase start, ON -> OFF is free) that gives the cheapest plan if the policy
is off now and if it is on now.

:meth:`Drain.totals` over every phase is the definition; :meth:`Drain.waiting_dominates` is the one
shortcut, pinned to it by ``tests/policy/test_cost_aware.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


def phase_edges(remaining: np.ndarray | Sequence[float], levels: Sequence[float]) -> list[float]:
    """``np.unique(np.concatenate(([0.0], q[q > 0])))`` for ``q = np.quantile(remaining, levels)`` (numpy's
    default ``linear`` method) as Python floats: every value the very float numpy gives (the same index,
    weight and interpolation operations, in the same order, on IEEE doubles), for finite ``remaining``.
    A plan cuts the predicted drain at these edges at every re-plan; ``np.quantile`` over a few dozen
    requests was half of a plan's time (~120 us), on the CPU engine's critical path."""
    values = sorted(remaining.tolist() if isinstance(remaining, np.ndarray) else remaining)
    n = len(values)
    last = n - 1
    edges = {0.0}
    for q in levels:
        at = last * q  # numpy's virtual index (n - 1) * q
        if at >= last:
            v = values[last]  # numpy interpolates the last value with itself: exactly it, for a finite value
        else:
            i = math.floor(at)
            lo, hi = values[i], values[i + 1]
            gamma = at - i
            diff = hi - lo
            v = hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma  # numpy's _lerp
        if v > 0:
            edges.add(v)
    return sorted(edges)


class Drain:
    """The phases between ``edges`` (tokens from now) of a drain whose longest request has ``top``
    tokens to go, priced on demand: ``switch_at(k, lo)`` is what switching on at the start of phase ``k``
    (``lo`` tokens from now) costs, ``times_at(mid)`` the candidates' SD times and the plain time of
    one iteration of the requests live at ``mid``; ``acc`` the candidates' accept lengths."""

    def __init__(self, edges: Sequence[float], top: float, acc: Sequence[float],
                 switch_at: Callable[[int, float], float], times_at: Callable[[float], tuple[list[float], float]]
                 ) -> None:
        self.edges, self.top, self.acc = edges, top, acc
        self.switch_at, self.times_at = switch_at, times_at
        self.n = n = len(edges) - 1
        self.plain, self.sd, self.switch = [0.0] * n, [0.0] * n, [0.0] * n

    def price(self, k: int, switch_cost: bool = True, times: bool = True) -> None:
        """Price phase ``k`` (its switch and/or its iterations), where any request is live at its middle."""
        lo, hi = float(self.edges[k]), float(self.edges[k + 1])
        mid = 0.5 * (lo + hi)
        if self.top <= mid:  # no request outlives the phase's middle
            return
        if switch_cost:
            self.switch[k] = self.switch_at(k, lo)
        if times:
            length = hi - lo
            sd_t, plain_t = self.times_at(mid)
            self.plain[k] = length * plain_t
            self.sd[k] = length * min(t / a for t, a in zip(sd_t, self.acc, strict=True))

    def waiting_dominates(self) -> tuple[float, float] | None:
        """Off, the plan switches on now only if that beats waiting. Waiting one phase and then doing
        what switching now would have done costs plain[0] + switch[1] + (the rest), switching now
        switch[0] + sd[0] + (the same rest): where the first is no dearer, no later phase can make
        switching now the better plan, and the pair returned is the two totals less that common rest
        (callers only compare them); else None. Needs phase 0 priced and phase 1's switch. A hair of
        margin keeps float sums from deciding a tie."""
        wait = float(self.plain[0] + (self.switch[1] if self.n > 1 else 0.0))
        now = float(self.switch[0] + self.sd[0])
        return (wait, now) if wait <= now * (1 - 1e-9) else None

    def totals(self, on: bool) -> tuple[float, float]:
        """(best time to drain if off now, best if on now, the switch included when ``on`` is False): the
        two-state dynamic program over every priced phase."""
        plain, sd, switch = self.plain, self.sd, self.switch
        on_next = off_next = 0.0
        for k in range(self.n - 1, 0, -1):
            on_k = min(sd[k] + on_next, plain[k] + off_next)
            off_k = min(plain[k] + off_next, switch[k] + sd[k] + on_next)
            on_next, off_next = on_k, off_k
        off_now = plain[0] + off_next
        on_now = sd[0] + on_next
        return off_now, on_now if on else switch[0] + on_now
