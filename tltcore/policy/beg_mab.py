"""BEG-MAB: TLT's Bucketed Epsilon-Greedy Multi-Armed-Bandit tuner of the draft-tree shape.

Why buckets: the best tree shape depends mostly on batch size. At batch 1 the target forward is
memory-bound and verifying 48 tree nodes costs about as much as verifying 8, so a big verify budget
is free accept length; at batch 32 verify work is compute-bound and a big budget is pure cost. TLT
therefore splits batch sizes into buckets ``[1,2)``, ``[2,5)``, ``[5,21)``, ``[21,inf)`` (thresholds
``[1, 2, 5, 21]``) and gives bucket *i* only the arms with the *i*-th largest verify budget. Within a
bucket, arms that share that budget (e.g. different depths) compete with epsilon-greedy.

Rules (DESIGN §1, parameters from the paper's code):

* An arm's reward is one iteration's throughput, accept length x batch size / step time
  (:attr:`~tltcore.policy.base.Outcome.throughput`), kept in a sliding window (300 by default).
* ``decide()``: every untried arm of the bucket first, in the order the arms were given; then with
  probability ``1 - eps`` the arm with the largest window *median* (ties go to the earlier arm), else
  an arm drawn uniformly from the bucket (the greedy arm included). ``eps = 0.1``; the RNG is seeded.
* Budget-to-bucket mapping: distinct verify budgets sorted from largest to smallest; bucket *i* gets
  budget *i*. With fewer budgets than buckets the remaining buckets reuse the smallest budget; with
  more budgets than buckets the last bucket gets all the remaining (smaller) budgets.

Windows are kept per (bucket, arm). With the default arms every arm lives in exactly one bucket, so
this is TLT's per-arm window; when a budget is reused by several buckets it keeps rewards measured at
very different batch sizes (throughput scales with batch) from polluting each other.

Holds (the :mod:`~tltcore.policy.base` contract). In a bucket with a single arm there is nothing
to choose: untried-first and epsilon-greedy both return that arm, and no random number is drawn.
The answer can change only when the batch size leaves the bucket, which only a finish or an
admission does, so ``decide()`` there returns ``hold = HOLD_UNTIL_EVENT`` and the simulator runs
the arm in one span instead of asking every iteration. This matters because TLT's default arms
give every bucket exactly one arm (DESIGN §1): with them BEG-MAB is a batch-size table and never
explores. Buckets with several arms still decide one iteration at a time (a bandit learns from
every reward). The one trace a span leaves on the state: a one-arm bucket's window then holds one
reward per span (the span's throughput) instead of one per iteration. No decision reads that
window (there is no second arm to compare it with), so every decision and every simulated number
is what one-iteration rounds give; only :meth:`rewards` of a one-arm bucket shows the difference.

A new rollout step (``reset(step)``) keeps the learned windows: the tuner belongs to the engine and
persists across RL steps in TLT, and the sliding window is what lets it follow the drafter as it
is retrained. ``clear()`` forgets everything (and re-seeds), for a fresh tuner.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from random import Random

from tltcore.errors import InputError
from tltcore.policy.arm_bandit import ArmBandit, validate_eps, validate_window
from tltcore.policy.base import HOLD_UNTIL_EVENT, MAX_ARMS, MAX_POLICY_BATCH, BatchView, Decision, Outcome, SDConfig
from tltcore.policy.reward_window import RewardWindow

DEFAULT_ARMS: tuple[SDConfig, ...] = (  # TLT's published arms (DESIGN §1)
    SDConfig(8, 4, 48),
    SDConfig(8, 4, 32),
    SDConfig(8, 4, 16),
    SDConfig(8, 4, 8),
)
DEFAULT_THRESHOLDS: tuple[int, ...] = (1, 2, 5, 21)
DEFAULT_EPS = 0.1
DEFAULT_WINDOW = 300


def bucket_arms(arms: Sequence[SDConfig], n_buckets: int) -> list[tuple[SDConfig, ...]]:
    """Arms of each batch-size bucket: bucket *i* gets the arms with the *i*-th largest verify
    budget (see the module docstring for fewer/more budgets than buckets). Arm order is kept."""
    budgets = sorted({a.verify_tokens for a in arms}, reverse=True)
    last = len(budgets) - 1
    wanted = [{budgets[min(i, last)]} for i in range(n_buckets - 1)]
    wanted.append(set(budgets[min(n_buckets - 1, last):]))  # the last bucket takes every leftover budget
    return [tuple(a for a in arms if a.verify_tokens in w) for w in wanted]


class BucketedEpsilonGreedy(ArmBandit):
    """BEG-MAB. See the module docstring for the exact rules."""

    def __init__(self, arms: Sequence[SDConfig] = DEFAULT_ARMS,
                 thresholds: Sequence[int] = DEFAULT_THRESHOLDS, eps: float = DEFAULT_EPS,
                 window: int = DEFAULT_WINDOW, seed: int = 0, name: str = "beg-mab") -> None:
        super().__init__(arms, seed, name)
        self.thresholds = tuple(int(t) for t in thresholds)
        if not self.thresholds or any(b <= a for a, b in pairwise(self.thresholds)):
            raise InputError(f"bucket thresholds must be a strictly increasing list, got {list(thresholds)}")
        if self.thresholds[0] < 0 or self.thresholds[-1] > MAX_POLICY_BATCH or len(self.thresholds) > MAX_ARMS:
            raise InputError(f"bucket thresholds must be at most {MAX_ARMS} batch sizes in [0, {MAX_POLICY_BATCH:,}], "
                             f"got {list(thresholds)}")
        self.eps = validate_eps(eps)
        validate_window(window, optional=False)
        self.window = window
        self.buckets = bucket_arms(self.arms, len(self.thresholds))
        # per bucket: the held decision of its only arm, or None where arms compete (module docstring)
        self._lone = [Decision(g[0], HOLD_UNTIL_EVENT) if len(g) == 1 else None for g in self.buckets]
        self.clear()

    def clear(self) -> None:
        """Forget every reward and re-seed the RNG: a brand-new tuner."""
        self._rng = Random(self.seed)
        self._windows = [{a: RewardWindow(self.window) for a in group} for group in self.buckets]

    def bucket_of(self, batch_size: int) -> int:
        """Index of the bucket holding ``batch_size``; sizes below the first threshold use bucket 0."""
        # Thresholds strictly increase: the last one <= batch_size, found by bisection (called twice
        # per decode iteration, once in decide and once in observe).
        return max(bisect_right(self.thresholds, batch_size) - 1, 0)

    def rewards(self, batch_size: int, arm: SDConfig) -> list[float]:
        """The windowed rewards of ``arm`` in the bucket of ``batch_size`` (oldest first)."""
        window = self._windows[self.bucket_of(batch_size)].get(arm)
        return window.values() if window is not None else []

    def decide(self, view: BatchView) -> Decision:
        """A one-arm bucket's arm, held until the batch changes; elsewhere one iteration's pick."""
        lone = self._lone[self.bucket_of(view.batch_size)]
        return lone if lone is not None else self._decisions[self._pick(view.batch_size)]

    def _pick(self, batch_size: int) -> SDConfig:
        b = self.bucket_of(batch_size)
        group, windows = self.buckets[b], self._windows[b]
        for arm in group:
            if len(windows[arm]) == 0:
                return arm
        if len(group) == 1:
            return group[0]
        if self._rng.random() < self.eps:
            return group[self._rng.randrange(len(group))]
        return max(group, key=lambda a: windows[a].median())  # max keeps the first of equal keys

    def _record(self, outcome: Outcome) -> None:
        """The outcome's throughput, into its arm's window in its batch-size bucket (outcomes of configs
        that are not arms of that bucket are ignored)."""
        window = self._windows[self.bucket_of(outcome.batch_size)].get(outcome.config)
        if window is not None:
            window.add(outcome.throughput)


BegMab = BucketedEpsilonGreedy
