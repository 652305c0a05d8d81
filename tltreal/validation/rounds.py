"""How ``tlt validate`` spends its rounds on a shared machine: the order, when to stop, and what it claims.

A busy machine changes the cost of the same work by tens of percent from one minute to the next, and
the engine thread's CPU time does not absorb all of it (other processes on the other core still take
cache and memory bandwidth: at load ~16 a plain run's thread time rose 93%). The error under test is a
*ratio* of two measurements, a run and the cost table that prices it, so what matters is that both
see the same conditions. Three rules follow:

* **One balanced order** (:func:`round_schedule`): each round runs every (step, policy) once and
  measures every profile point once (a point is a few seconds: one batch size at one context or
  prompt length), all in one Williams order (:func:`~tltreal.validation.replay.balanced_order`) that
  shifts from round to round, so no run or profile point always comes first or last and a slow spell
  falls on runs and table alike. (Before, each round ran its runs for ~16 s and then profiled for
  ~3 min, so a load change between the two read as simulator error.)
* **Stop on the interval, not a count** (:class:`StoppingRule`): after each round the headline
  median error gets a 95% bootstrap interval over rounds (:func:`headline_interval`: rounds resampled
  with replacement, the headline recomputed); rounds go on until that interval is narrower than a set
  width, within a minimum and a cap.
* **Noise beside the error, and no claim below it** (:func:`run_noise`, :func:`claim`): the machine's
  own noise is the spread of identical runs over the rounds; an error smaller than that cannot be
  told from the machine's jitter, and the report says so instead of printing it as a precision.

Nothing here imports torch: the rules are tested with given numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd

T = TypeVar("T")


def williams_order(items: Sequence[T], repeat: int) -> list[T]:
    """The order of ``items`` at repeat ``repeat`` of a Williams design: over every ``n`` repeats (``2n``
    for an odd number ``n`` of items) each item runs in each position equally often and right after each
    other item equally often; each repeat starts (and ends) on another item."""
    n = len(items)
    base: list[int] = [0]  # 0, 1, n-1, 2, n-2, ...: consecutive differences take every value once
    lo, hi = 1, n - 1
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    k = repeat % (n if n % 2 == 0 else 2 * n) if n else 0
    row = [(b + k % n) % n for b in base] if n else []
    if k >= n:  # odd n: the square's rows mirrored, which balances what one square alone cannot
        row.reverse()
    return [items[i] for i in row]


def spread_among(few: Sequence[T], many: Sequence[T]) -> list[T]:
    """``few`` and ``many`` in one list with ``few`` spaced evenly among ``many`` (the list a Williams
    order permutes: its first repeat then runs them spread out, not in a block)."""
    total = len(few) + len(many)
    slots = {int((i + 0.5) * total / len(few)) for i in range(len(few))} if few else set()
    it_few, it_many = iter(few), iter(many)
    return [next(it_few) if i in slots else next(it_many) for i in range(total)]


def round_schedule(runs: Sequence[T], points: Sequence[T], priced: Sequence[T], repeat: int, *,
                   priced_table_ready: bool) -> list[T]:
    """One round's order: the real ``runs``, the profile ``points`` and the ``priced`` runs (a policy
    that prices its decisions with a cost table) in one balanced order (:func:`williams_order` over
    all of them, the runs first spread among the points by :func:`spread_among`).
    ``priced_table_ready``: a table for the priced runs exists (given, or the previous round's). When
    it does not (the first round of a profiling validation), the priced runs wait for this round's
    points and come last, in their own balanced order."""
    if priced_table_ready:
        return williams_order(spread_among([*runs, *priced], points), repeat)
    return [*williams_order(spread_among(runs, points), repeat), *williams_order(list(priced), repeat)]


# ---- the headline and its interval -------------------------------------------------------------------
def _error_matrix(makespans: pd.DataFrame, column: str) -> np.ndarray:
    """The errors in ``column`` as an array (step, policy) x round (a round a pair lacks: NaN)."""
    wide = makespans.pivot_table(index=["step", "policy"], columns="repeat", values=column, aggfunc="first")
    return wide.to_numpy(dtype=np.float64)


def headline_of(errors: np.ndarray) -> float:
    """The headline: per (step, policy) (rows) the median error over its rounds (columns), then the
    median of its absolute value over (step, policy)."""
    return float(np.nanmedian(np.abs(np.nanmedian(errors, axis=1))))


def headline_interval(makespans: pd.DataFrame, column: str, *, level: float = 0.95, draws: int = 2000,
                      seed: int = 0) -> tuple[float, float]:
    """A bootstrap interval of the headline median error over rounds: the rounds are resampled with
    replacement (every (step, policy) keeps its pairing with its round's table and load), the headline
    recomputed, and the central ``level`` of the draws kept. One round: (nan, nan), no interval.
    Seeded, so the same rows give the same interval."""
    errors = _error_matrix(makespans, column)
    rounds = errors.shape[1]
    if rounds < 2:
        return float("nan"), float("nan")
    picks = np.random.default_rng(seed).integers(0, rounds, size=(draws, rounds))
    per_pair = np.nanmedian(errors[:, picks], axis=2)  # (pairs, draws)
    stats = np.nanmedian(np.abs(per_pair), axis=0)
    tail = (1 - level) / 2
    return float(np.quantile(stats, tail)), float(np.quantile(stats, 1 - tail))


def median_interval(values: Sequence[float], *, level: float = 0.95, draws: int = 2000, seed: int = 0
                    ) -> tuple[float, float, float]:
    """The median of ``values`` (one per round, e.g. a paired ratio) and its bootstrap interval: rounds
    resampled with replacement, the central ``level`` of the medians. Fewer than two values: no
    interval (nan). Seeded."""
    v = np.asarray(values, dtype=np.float64)
    mid = float(np.median(v)) if len(v) else float("nan")
    if len(v) < 2:
        return mid, float("nan"), float("nan")
    meds = np.median(v[np.random.default_rng(seed).integers(0, len(v), size=(draws, len(v)))], axis=1)
    tail = (1 - level) / 2
    return mid, float(np.quantile(meds, tail)), float(np.quantile(meds, 1 - tail))


@dataclass(frozen=True)
class StoppingRule:
    """Rounds go on until the headline interval (:func:`headline_interval`) of every headline is at most
    ``width`` wide (absolute, 0.02 = 2 percentage points), at least ``min_rounds`` and at most
    ``max_rounds`` rounds. ``min_rounds == max_rounds``: a fixed number of rounds."""

    width: float = 0.02
    min_rounds: int = 3
    max_rounds: int = 6

    def reason(self, rounds: int, intervals: Sequence[tuple[float, float]]) -> str | None:
        """Why to stop after ``rounds`` rounds with these intervals, or None to go on."""
        widths = [hi - lo for lo, hi in intervals]
        shown = ", ".join(f"{w:.1%}" for w in widths)
        if rounds < self.min_rounds:
            return None
        if widths and all(np.isfinite(w) and w <= self.width for w in widths):
            return f"the headline intervals ({shown} wide) are within {self.width:.1%}"
        if rounds >= self.max_rounds:
            return f"the cap of {self.max_rounds} rounds (headline intervals {shown} wide, wider than {self.width:.1%})"
        return None


# ---- the machine's noise, and what may be claimed -----------------------------------------------------
def run_noise(makespans: pd.DataFrame, column: str = "real_s") -> pd.Series:
    """The machine's own noise per (step, policy): the median over the rounds of |run / median run - 1|
    of identical runs (a typical run's distance from the centre). Unlike (max - min) / median it does
    not grow with the number of rounds, which the stopping rule makes vary."""
    def spread(v: pd.Series) -> float:
        x = v.to_numpy(dtype=np.float64)
        mid = float(np.median(x))
        return float(np.median(np.abs(x / mid - 1))) if len(x) > 1 and mid > 0 else float("nan")

    return makespans.groupby(["step", "policy"], sort=False)[column].apply(spread)


def claim(error: float, noise: float) -> str | None:
    """The error as the report may state it, or None when it may not: an error below the machine's
    noise cannot be told from that noise, so no number is claimed for it."""
    if not np.isfinite(noise) or error >= noise:
        return f"{error:.1%}"
    return None


__all__ = [
    "StoppingRule",
    "claim",
    "headline_interval",
    "headline_of",
    "median_interval",
    "round_schedule",
    "run_noise",
    "spread_among",
    "williams_order",
]
