"""Plain (un-bucketed) bandits over draft shapes: ablations of BEG-MAB.

Both keep one set of arms for every batch size. Their reward is the same as BEG-MAB's (iteration
throughput, tokens/s), which grows with batch size whatever the arm; an un-bucketed bandit
therefore credits whichever arm happened to run at large batch sizes. That bias is what TLT's
bucketing removes, and these variants let a study measure it.

``reset(step)`` (a new rollout step) keeps what was learned, as BEG-MAB does; ``clear()`` forgets it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from random import Random

from tltcore.errors import InputError
from tltcore.policy.arm_bandit import ArmBandit, validate_eps, validate_window
from tltcore.policy.base import Outcome, SDConfig
from tltcore.policy.beg_mab import DEFAULT_ARMS, DEFAULT_EPS
from tltcore.policy.reward_window import RewardWindow

#: Largest UCB1 exploration constant: rewards are scaled to [0, 1], so past ~10 the bonus drowns every
#: mean and UCB1 only cycles through its arms (Auer et al. use sqrt(2), i.e. c = 1 here).
MAX_C = 10.0


class _ArmStats:
    """Reward statistics of one arm: cumulative (window None) or over the last ``window`` rewards."""

    def __init__(self, window: int | None) -> None:
        self._window = RewardWindow(window) if window is not None else None
        self.count = 0  # every reward ever seen, also when windowed (UCB1's n_i)
        self._sum = 0.0

    def add(self, reward: float) -> None:
        self.count += 1
        if self._window is not None:
            self._window.add(reward)
        else:
            self._sum += reward

    def mean(self) -> float:
        if self._window is not None:
            return self._window.mean()
        return self._sum / self.count if self.count else 0.0


class EpsilonGreedy(ArmBandit):
    """Epsilon-greedy on the mean reward, one global arm set; untried arms first (in order)."""

    def __init__(self, arms: Sequence[SDConfig] = DEFAULT_ARMS, eps: float = DEFAULT_EPS,
                 window: int | None = None, seed: int = 0, name: str = "eps-greedy") -> None:
        super().__init__(arms, seed, name)
        self.eps = validate_eps(eps)
        self.window = validate_window(window, optional=True)
        self.clear()

    def clear(self) -> None:
        """Forget every reward and re-seed the RNG."""
        self._rng = Random(self.seed)
        self._stats = {a: _ArmStats(self.window) for a in self.arms}

    def _pick(self, batch_size: int) -> SDConfig:
        for arm in self.arms:
            if self._stats[arm].count == 0:
                return arm
        if len(self.arms) > 1 and self._rng.random() < self.eps:
            return self.arms[self._rng.randrange(len(self.arms))]
        return max(self.arms, key=lambda a: self._stats[a].mean())

    def _record(self, outcome: Outcome) -> None:
        stats = self._stats.get(outcome.config)
        if stats is not None:
            stats.add(outcome.throughput)


class UCB1(ArmBandit):
    """UCB1 (Auer et al. 2002), one global arm set: argmax of ``mean/scale + c*sqrt(2 ln n / n_i)``.

    UCB1 assumes rewards in [0, 1]; throughput is in tokens/s with no a-priori bound, so means are
    divided by the largest reward seen so far (an approximation: the scale moves as rewards arrive).
    Deterministic; ``seed`` is accepted only so every policy shares one constructor shape.
    """

    def __init__(self, arms: Sequence[SDConfig] = DEFAULT_ARMS, c: float = 1.0,
                 window: int | None = None, seed: int = 0, name: str = "ucb1") -> None:
        super().__init__(arms, seed, name)
        if not 0.0 <= c <= MAX_C:
            raise InputError(f"UCB1 exploration constant c must be in [0, {MAX_C:g}], got {c}")
        self.c = float(c)
        self.window = validate_window(window, optional=True)
        self.clear()

    def clear(self) -> None:
        """Forget every reward."""
        self._stats = {a: _ArmStats(self.window) for a in self.arms}
        self._total = 0
        self._scale = 0.0

    def score(self, arm: SDConfig) -> float:
        """The arm's upper confidence bound (inf while untried)."""
        stats = self._stats[arm]
        if stats.count == 0:
            return math.inf
        mean = stats.mean() / self._scale if self._scale > 0 else 0.0
        return mean + self.c * math.sqrt(2.0 * math.log(self._total) / stats.count)

    def _pick(self, batch_size: int) -> SDConfig:
        return max(self.arms, key=self.score)

    def _record(self, outcome: Outcome) -> None:
        stats = self._stats.get(outcome.config)
        if stats is None:
            return
        reward = outcome.throughput
        stats.add(reward)
        self._total += 1
        self._scale = max(self._scale, reward)
