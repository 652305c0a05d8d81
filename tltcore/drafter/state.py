"""The drafter a rollout worker holds: which version, and how well it matches the current policy.

TLT's drafter is retrained while RL changes the target every step, so its acceptance is a *state*:
it drops after each policy update (the drafter goes stale) and recovers as it trains. Everything
that needs acceptance (the acceptance model, the greedy-oracle policy, the engines' event logs) reads it
from one :class:`DrafterState`, never from a frozen copy, so a drafter update reaches all of them.

Pure Python (no SimPy, torch or vLLM): the policy layer, the simulator and the real coordinator
share it.

``quality`` multiplies every per-position acceptance probability of the acceptance model (1 = the
drafter the model was fitted to; a stale drafter builds the same tree from its own confidences, but
the target accepts less of it). ``position_scale`` optionally refines that per draft position
(``scale[d]`` for depth ``d + 1``; positions past its end reuse the last value), e.g. acceptance
measured per position on a real run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class DrafterState:
    """One drafter checkpoint as the engines see it. ``version`` counts trained checkpoints (0 =
    the initial drafter); ``trained_samples`` is how many samples it has been trained on."""

    version: int = 0
    quality: float = 1.0
    position_scale: tuple[float, ...] = ()
    trained_samples: int = 0

    def __post_init__(self) -> None:
        if self.version < 0 or self.trained_samples < 0:
            raise ValueError(f"drafter version and trained_samples must be >= 0, got {self!r}")
        if not (math.isfinite(self.quality) and self.quality >= 0):
            raise ValueError(f"drafter quality must be a finite number >= 0, got {self.quality}")
        if any(not (math.isfinite(s) and s >= 0) for s in self.position_scale):
            raise ValueError(f"drafter position_scale must hold finite numbers >= 0, got {self.position_scale}")

    def scale_at(self, depth: int) -> float:
        """Multiplier of the acceptance probability at draft position ``depth`` (1-based)."""
        if not self.position_scale:
            return self.quality
        return self.quality * self.position_scale[min(depth, len(self.position_scale)) - 1]

    def scales(self, depth: int) -> tuple[float, ...]:
        """Multipliers for draft positions ``1..depth``."""
        return tuple(self.scale_at(d) for d in range(1, depth + 1))


INITIAL_DRAFTER = DrafterState()
