"""What every bandit over draft shapes shares: its arms, seed and name, the validation of its knobs,
and the decide/observe/reset plumbing around its own pick and reward rules.

BEG-MAB (:mod:`tltcore.policy.beg_mab`) and its un-bucketed ablations (:mod:`tltcore.policy.bandits`)
differ only in how they pick an arm and how they keep rewards. Written once here, the parts they share
cannot drift apart, so a study comparing them compares their rules and nothing else: the same arm
validation, the same one-iteration decisions (a bandit learns from every iteration), the same outcomes
ignored (empty or zero-time iterations carry no throughput), and the same ``reset(step)`` that keeps
what was learned across RL steps (the tuner belongs to the engine and persists, as in TLT).
"""

from __future__ import annotations

from collections.abc import Sequence

from tltcore.errors import InputError
from tltcore.policy.base import MAX_ARMS, BatchView, Decision, Outcome, SDConfig

#: Most rewards a window keeps (TLT keeps 300): each reward is inserted into a sorted list, so a
#: window of millions would cost a memory shift per decode iteration and remember a whole run.
MAX_WINDOW = 100_000


def validate_arms(arms: Sequence[SDConfig]) -> tuple[SDConfig, ...]:
    """Arms as a tuple: 1 to :data:`~tltcore.policy.base.MAX_ARMS`, no duplicates (a duplicate would get
    two windows), at least one that drafts."""
    arms = tuple(arms)
    if not arms:
        raise InputError("a bandit needs at least one arm")
    if len(set(arms)) != len(arms):
        raise InputError(f"duplicate bandit arms in {[a.name for a in arms]}")
    if len(arms) > MAX_ARMS:
        raise InputError(f"a bandit takes at most {MAX_ARMS} arms, got {len(arms)}")
    if not any(a.enabled for a in arms):  # a bandit choosing among 'off' alone is no SD under another name
        raise InputError(f"bandit arms {[a.name for a in arms]} never draft: name a shape, or use the policy no-sd")
    return arms


def validate_eps(eps: float) -> float:
    """Epsilon as a float in [0, 1]: an exploration probability."""
    if not 0.0 <= eps <= 1.0:
        raise InputError(f"epsilon must be in [0, 1], got {eps}")
    return float(eps)


def validate_window(window: int | None, *, optional: bool) -> int | None:
    """A reward window of 1 to :data:`MAX_WINDOW` rewards; ``None`` (cumulative statistics) only when
    ``optional``."""
    if optional:
        if window is not None and not 1 <= window <= MAX_WINDOW:
            raise InputError(f"reward window must be in [1, {MAX_WINDOW:,}] or None, got {window}")
    elif window is None or not 1 <= window <= MAX_WINDOW:
        raise InputError(f"reward window must be in [1, {MAX_WINDOW:,}], got {window}")
    return window


class ArmBandit:
    """Base of the bandits: validates and holds ``arms``, ``seed`` and ``name``; a subclass validates
    its own knobs, then calls :meth:`clear`, and supplies :meth:`clear`, :meth:`_pick` and
    :meth:`_record` (see the module docstring for why this is shared)."""

    def __init__(self, arms: Sequence[SDConfig], seed: int, name: str) -> None:
        self.arms = validate_arms(arms)
        self.seed = seed
        self.name = name
        self._decisions = {a: Decision(a) for a in self.arms}  # one iteration each: it learns every time

    def clear(self) -> None:
        """Forget every reward (and re-seed any RNG): a brand-new tuner."""
        raise NotImplementedError

    def _pick(self, batch_size: int) -> SDConfig:
        raise NotImplementedError

    def _record(self, outcome: Outcome) -> None:
        raise NotImplementedError

    def decide(self, view: BatchView) -> Decision:
        return self._decisions[self._pick(view.batch_size)]

    def observe(self, outcome: Outcome) -> None:
        """Record the outcome's reward; empty or zero-time iterations carry no throughput and are ignored,
        and so are configs that are not this bandit's arms (not its decision)."""
        if outcome.batch_size > 0 and outcome.elapsed_s > 0:
            self._record(outcome)

    def reset(self, step: int) -> None:
        """New rollout step: nothing per-rollout to clear; what was learned persists (module doc)."""
        return None
