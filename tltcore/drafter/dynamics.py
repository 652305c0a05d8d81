"""How a drafter's acceptance moves over RL steps: it goes stale when the policy changes and
recovers when it is trained.

TLT's premise (DESIGN §1, "Adaptive drafter"): RL updates the target every step, so a drafter
trained once drifts out of alignment (the paper measures accept length 4.59 for the stale drafter
during RL), while one trained continuously on fresh rollouts stays aligned (6.53). The simulator
represents the drafter as a :class:`~tltcore.drafter.state.DrafterState` whose ``quality``
multiplies every per-position acceptance probability, and this module moves that quality:

* **after each policy update** (:meth:`DrafterDynamics.after_update`) the quality decays toward
  ``stale_quality`` by the fraction ``drift``: ``q <- stale + (q - stale) * (1 - drift)``. A drafter
  never trained again tends to ``stale_quality``; ``drift = 0`` leaves it unchanged.
* **after training on n samples** (:meth:`DrafterDynamics.after_training`) the quality recovers
  toward ``trained_quality``: ``q <- trained - (trained - q) * exp(-n / recovery_samples)``:
  monotone in ``n``, never above the ceiling, and never lower than before (training does not harm).

``trained_quality`` is the scenario's ``drafter.quality`` (the drafter trained for the initial
policy, which training can bring back); 1.0, the drafter the paper-fitted tree acceptance
(``paper-qwen32b``) describes, gives accept lengths 5.9-7.1 across BEG-MAB's arms, around the
paper's adapted 6.53. ``stale_quality`` (0.89: 4.3-5.1 across the arms, around the paper's stale
4.59), ``drift`` and ``recovery_samples`` are not published; the defaults make a stale drafter lose
most of its edge within ~5 policy updates and a drafter trained on a few hundred samples per step
stay near the ceiling. ``reports/paper-repro`` shows the resulting curves beside the paper's two
numbers; the real adaptive-drafter runs are meant to replace these numbers with measured ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tltcore.drafter.state import DrafterState
from tltcore.errors import InputError


@dataclass(frozen=True)
class DrafterDynamics:
    """Staleness and recovery of a drafter's quality (see module docstring)."""

    trained_quality: float = 1.0
    stale_quality: float = 0.89
    drift: float = 0.3
    recovery_samples: float = 400.0

    def __post_init__(self) -> None:
        if not 0 <= self.stale_quality <= self.trained_quality:
            raise InputError(f"needs 0 <= stale_quality <= trained_quality, got {self.stale_quality} and "
                             f"{self.trained_quality}", field="drafter.stale_quality")
        if not 0 <= self.drift <= 1:
            raise InputError(f"must be in [0, 1], got {self.drift}", field="drafter.drift")
        if not (math.isfinite(self.recovery_samples) and self.recovery_samples > 0):
            raise InputError(f"must be > 0, got {self.recovery_samples}", field="drafter.recovery_samples")

    def initial(self) -> DrafterState:
        """The drafter trained for the initial policy (version 0, at the ceiling)."""
        return DrafterState(quality=self.trained_quality)

    def after_update(self, state: DrafterState) -> DrafterState:
        """The same drafter after the policy changed under it (one actor update)."""
        floor = min(self.stale_quality, state.quality)  # a drafter already below the floor gets no better
        return replace(state, quality=floor + (state.quality - floor) * (1.0 - self.drift))

    def after_training(self, state: DrafterState, samples: float, *, checkpoints: int = 1) -> DrafterState:
        """The drafter after training on ``samples`` more samples of the current policy, committed in
        ``checkpoints`` checkpoints (the version counts them). Zero samples: unchanged."""
        if samples < 0:
            raise ValueError(f"samples must be >= 0, got {samples}")
        if samples == 0 or checkpoints == 0:
            return state
        ceiling = max(self.trained_quality, state.quality)
        q = ceiling - (ceiling - state.quality) * math.exp(-samples / self.recovery_samples)
        return replace(state, version=state.version + checkpoints, quality=q,
                       trained_samples=state.trained_samples + round(samples))
