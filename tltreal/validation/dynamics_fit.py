"""Fit the simulator's drafter dynamics to accept lengths measured over a real RL run.

The simulator moves a drafter's ``quality`` (a multiplier of every per-position acceptance
probability; :mod:`tltcore.drafter.dynamics`) with three numbers the paper does not publish:
``stale_quality`` and ``drift`` (how fast a drafter trained once goes stale as the policy changes)
and ``recovery_samples`` (how much training brings it back). A real run measures, per RL step, the
accept length of the static drafter (trained once before RL) and of the adaptive one (trained on
every step's bubble), both on the same policy and prompts, so both curves can be turned into
qualities and fitted:

1. **Accept length -> per-position acceptance.** For a chain of ``depth`` drafted tokens whose
   positions are each accepted with probability ``a`` (independently, until the first rejection),
   the expected tokens per SD iteration are ``1 + a + a^2 + ... + a^depth``; :func:`per_position_rate`
   inverts that (monotone, by bisection).
2. **Quality** is the rate relative to the drafter trained for the initial policy: ``a_t / a_0``
   (step 0, before any update), so quality 1 is "as fitted", as in the simulator.
3. **Static curve** -> ``stale_quality``, ``drift``: the simulator's static drafter has
   ``q_t = stale + (1 - stale) (1 - drift)^t``; least squares over a grid (deterministic).
4. **Adaptive curve** -> ``recovery_samples``: the simulator's order within a step (the drafter trains
   on step ``t``'s bubble, then the policy update makes it staler) replayed with the measured
   samples per step; least squares over a log grid.

The result is a ``drafter:`` section a scenario takes as it is (:func:`scenario_section`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tltcore.drafter.dynamics import DrafterConfig
from tltcore.drafter.state import DrafterState


def expected_accept_length(rate: float, depth: int) -> float:
    """Tokens per SD iteration of a ``depth`` chain with per-position acceptance ``rate``."""
    return float(sum(rate**j for j in range(depth + 1)))


def per_position_rate(accept_length: float, depth: int) -> float:
    """The per-position acceptance ``a`` whose chain gives ``accept_length`` (clipped to [0, 1])."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if not np.isfinite(accept_length):
        return float("nan")
    lo, hi = 0.0, 1.0
    if accept_length <= 1.0:
        return 0.0
    if accept_length >= depth + 1:
        return 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_accept_length(mid, depth) < accept_length else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class DynamicsFit:
    """Fitted parameters and the qualities they were fitted to (per RL step)."""

    stale_quality: float
    drift: float
    recovery_samples: float
    static_quality: tuple[float, ...]
    adaptive_quality: tuple[float, ...]
    static_rms: float  # fit error of the static curve (quality units)
    adaptive_rms: float

    def dynamics(self) -> DrafterConfig:
        """The fitted dynamics as the scenario's drafter section (quality 1: the initial drafter)."""
        return DrafterConfig(quality=1.0, stale_quality=self.stale_quality, drift=self.drift,
                             recovery_samples=self.recovery_samples)


def static_curve(stale: float, drift: float, steps: int) -> np.ndarray:
    """The simulator's static drafter quality at steps ``0..steps-1``."""
    dyn = DrafterConfig(stale_quality=stale, drift=drift)
    state, out = dyn.initial(), []
    for _ in range(steps):
        out.append(state.quality)
        state = dyn.after_update(state)
    return np.array(out)


def adaptive_curve(dyn: DrafterConfig, samples: Sequence[float]) -> np.ndarray:
    """The simulator's adaptive drafter quality at each step: step ``t`` rolls out with the drafter
    trained up to step ``t - 1``'s bubble (``samples[t - 1]``) and staled by ``t`` updates."""
    state: DrafterState = dyn.initial()
    out = []
    for n in samples:
        out.append(state.quality)
        state = dyn.after_update(dyn.after_training(state, float(n)))
    return np.array(out)


def fit_dynamics(static_accept: Sequence[float], adaptive_accept: Sequence[float], samples: Sequence[float], *,
                 depth: int) -> DynamicsFit:
    """Fit (module docstring). ``samples[t]`` is how many samples the adaptive drafter trained on in
    step ``t``'s bubble; all three sequences are per RL step, step 0 first."""
    if not len(static_accept) == len(adaptive_accept) == len(samples) >= 2:
        raise ValueError("need >= 2 steps and equally long static, adaptive and samples sequences")
    base = per_position_rate(static_accept[0], depth)
    if not base > 0:
        raise ValueError(f"the initial drafter accepts nothing (accept length {static_accept[0]})")
    q_static = np.array([per_position_rate(a, depth) / base for a in static_accept])
    q_adapt = np.array([per_position_rate(a, depth) / base for a in adaptive_accept])
    n = len(q_static)
    best = (np.inf, 1.0, 0.0)
    for stale in np.linspace(0.0, 1.0, 201):
        for drift in np.linspace(0.0, 1.0, 101):
            err = float(np.mean((static_curve(stale, drift, n) - q_static) ** 2))
            if err < best[0] - 1e-15:
                best = (err, float(stale), float(drift))
    static_err, stale, drift = best
    best_r = (np.inf, 1.0)
    for recovery in np.geomspace(1.0, 1e6, 241):
        dyn = DrafterConfig(stale_quality=stale, drift=drift, recovery_samples=float(recovery))
        err = float(np.mean((adaptive_curve(dyn, samples) - q_adapt) ** 2))
        if err < best_r[0] - 1e-15:
            best_r = (err, float(recovery))
    return DynamicsFit(stale, drift, best_r[1], tuple(map(float, q_static)), tuple(map(float, q_adapt)),
                       float(np.sqrt(static_err)), float(np.sqrt(best_r[0])))


def scenario_section(fit: DynamicsFit) -> dict[str, float]:
    """The fitted numbers as a scenario's ``drafter:`` section (quality 1: the initial drafter)."""
    d = fit.dynamics()
    return {"quality": d.quality, "stale_quality": d.stale_quality, "drift": d.drift,
            "recovery_samples": d.recovery_samples}


__all__ = ["DynamicsFit", "adaptive_curve", "expected_accept_length", "fit_dynamics", "per_position_rate",
           "scenario_section", "static_curve"]
