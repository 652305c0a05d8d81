"""How a drafter's acceptance moves over RL steps: it goes stale when the policy changes and
recovers when it is trained.

TLT's premise (DESIGN §1, "Adaptive drafter"): RL updates the target every step, so a drafter
trained once drifts out of alignment (the paper measures accept length 4.59 for the stale drafter
during RL), while one trained continuously on fresh rollouts stays aligned (6.53). The simulator
represents the drafter as a :class:`~tltcore.drafter.state.DrafterState` whose ``quality``
multiplies every per-position acceptance probability, and the scenario's ``[drafter]`` section,
:class:`DrafterConfig` (this module), moves that quality:

* **after each policy update** (:meth:`DrafterConfig.after_update`) the quality decays toward
  the stale floor (:attr:`DrafterConfig.floor`) by the fraction ``drift``: ``q <- stale + (q - stale) *
  (1 - drift)``. A drafter never trained again tends to the floor; ``drift = 0`` leaves it unchanged.
* **after training on n samples** (:meth:`DrafterConfig.after_training`) the quality recovers
  toward ``quality`` (the trained ceiling): ``q <- trained - (trained - q) * exp(-n / recovery_samples)``:
  monotone in ``n``, never above the ceiling, and never lower than before (training does not harm).

The ceiling is ``drafter.quality`` (the drafter trained for the initial policy, which training can
bring back); 1.0, the drafter the paper-fitted tree acceptance
(``paper-qwen32b``) describes, gives accept lengths 5.9-7.1 across BEG-MAB's arms, around the
paper's adapted 6.53. The stale floor is a *fraction of that ceiling*: by default
:data:`DEFAULT_STALE_FRACTION` (0.89) of ``quality`` (at quality 1: accept lengths 4.3-5.1 across the
arms, around the paper's stale 4.59), so a drafter that starts weaker goes stale too (an absolute
floor of 0.89 left a drafter of quality 0.85 forever fresh, and a frozen drafter compared equal to
a trained one). ``stale_quality`` sets the floor as an absolute quality instead (a fitted value,
:mod:`tltreal.validation.dynamics_fit`). The fraction, ``drift`` and ``recovery_samples`` are not
published; the defaults make a stale drafter lose most of its edge within ~5 policy updates and a
drafter trained on a few hundred samples per step stay near the ceiling. ``reports/paper-repro``
shows the resulting curves beside the paper's two numbers; the real adaptive-drafter runs are meant
to replace these numbers with measured ones.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from tltcore.config import ConfigModel, Float, Str
from tltcore.drafter.state import DrafterState
from tltcore.errors import InputError

#: What drafts (:mod:`tltcore.drafter.kinds`, whose ``DRAFTER_KINDS`` is this list, tested).
DrafterKind = Literal["eagle", "eagle3", "mtp", "block", "ngram", "suffix", "draft-model"]
#: The kinds without weights (:attr:`tltcore.drafter.kinds.DrafterKind.model_free`): nothing to go stale or train.
MODEL_FREE_KINDS = ("ngram", "suffix")
#: The stale floor as a fraction of the trained quality when ``stale_quality`` is not set.
DEFAULT_STALE_FRACTION = 0.89
#: The stale floor of a drafter of quality 1 (the paper-fitted one).
DEFAULT_STALE_QUALITY = DEFAULT_STALE_FRACTION
_SCALE = Annotated[float, Field(allow_inf_nan=False, strict=True)]


class DrafterConfig(ConfigModel):
    """The drafter the workers hold (the scenario's ``[drafter]`` section) and how its quality moves.

    ``quality`` is a scale of the kind's per-position acceptance profile: it multiplies every
    per-position acceptance probability of the profile that prices the drafter (the initial
    :class:`~tltcore.drafter.state.DrafterState` and the ceiling training recovers toward). Quality 1
    is that profile as it stands: for ``eagle`` (and ``draft-model``) the scenario's acceptance preset,
    by default ``paper-qwen32b``, the paper's adapted EAGLE drafter of Qwen2.5-32B (TP 4, top-k 8)
    fitted to its depth x verify table (:mod:`tltcore.acceptance`); for ``eagle3``, ``mtp`` and ``block``
    their published profiles (:mod:`tltcore.drafter.kinds`, each with its source); for a measured
    profile (``acceptance.profile``, ``acceptance.alphas``), the drafter that was measured. Below 1 is a
    staler or weaker drafter, above 1 a better one (up to where one position's acceptance would pass 1).
    ``position_scale`` refines it per draft position. Whole RL runs (``presets``) move it (module
    docstring): each policy update decays it toward the stale floor by the fraction ``drift``,
    training recovers it toward ``quality`` with ``recovery_samples`` samples per e-folding. ``kind``
    (:mod:`tltcore.drafter.kinds`): ``eagle`` (TLT's one-layer EAGLE-1/2 drafter), ``eagle3``, ``mtp``
    (the target's MTP head), ``block`` (DFlash/DSpark), ``draft-model`` (the separate LM
    ``draft_model``), or the model-free ``ngram`` (chain acceptance ``ngram_alpha``) and ``suffix``, which
    spend ``ngram_lookup_s`` of CPU per SD iteration; a preset names its own kind.

    ``stale_quality`` (None: :data:`DEFAULT_STALE_FRACTION` of ``quality``) above ``quality`` would be
    no staleness at all, so it is refused. The model-free kinds have no weights to go stale or train
    (``ngram``'s acceptance is ``ngram_alpha`` alone), so a ``quality`` other than 1 is refused beside
    them."""

    SECTION = "drafter"

    quality: Float = Field(1.0, ge=0, le=10)
    position_scale: tuple[_SCALE, ...] = ()
    kind: DrafterKind = "eagle"
    draft_model: Str = "Qwen2.5-0.5B"
    stale_quality: Float | None = None
    drift: Float = Field(0.3, ge=0, le=1)
    recovery_samples: Float = Field(400.0, gt=0)
    ngram_alpha: Float = Field(0.5, ge=0, le=1)
    #: CPU seconds a model-free drafter (ngram, suffix) spends looking up one SD iteration's drafts.
    ngram_lookup_s: Float = Field(5e-5, ge=0, le=1)

    @field_validator("position_scale")
    @classmethod
    def _scales(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        for x in v:
            if not 0 <= x <= 10:
                raise InputError(f"must be in [0, 10], got {x}")
        return v

    @model_validator(mode="after")
    def _stale(self) -> DrafterConfig:
        if self.stale_quality is not None and not 0 <= self.stale_quality <= self.quality:
            raise InputError(f"must be in [0, drafter.quality = {self.quality:g}] (a stale drafter is never better "
                             f"than the trained one), got {self.stale_quality:g}", field="stale_quality")
        if self.kind == "ngram" and self.quality != 1.0:
            raise InputError(f"is {self.quality:g}, but the model-free n-gram drafter (drafter.kind = 'ngram') has no "
                             "weights to be stale or trained: its acceptance is drafter.ngram_alpha; leave "
                             "drafter.quality at 1", field="quality")
        if self.kind == "suffix" and self.quality != 1.0:
            raise InputError(f"is {self.quality:g}, but the model-free suffix drafter (drafter.kind = 'suffix') has no "
                             "weights to be stale or trained: give its measured acceptance (acceptance.profile) "
                             "instead; leave drafter.quality at 1", field="quality")
        return self

    @property
    def trained_quality(self) -> float:
        """The ceiling training recovers toward: ``quality``."""
        return self.quality

    @property
    def floor(self) -> float:
        """What a drafter never trained again tends to: ``stale_quality``, or by default
        :data:`DEFAULT_STALE_FRACTION` of ``quality`` (module docstring)."""
        if self.stale_quality is not None:
            return self.stale_quality
        return DEFAULT_STALE_FRACTION * self.quality

    def initial(self, kind: str | None = None) -> DrafterState:
        """The drafter of kind ``kind`` (None: ``self.kind``) trained for the initial policy (version 0,
        at the ceiling). A model-free drafter is quality 1: its acceptance is its own
        (:func:`tltcore.drafter.kinds.drafter_acceptance`)."""
        if (kind or self.kind) in MODEL_FREE_KINDS:
            return DrafterState()
        return DrafterState(quality=self.quality, position_scale=self.position_scale)

    def after_update(self, state: DrafterState) -> DrafterState:
        """The same drafter after the policy changed under it (one actor update)."""
        return decayed(state, self.floor, self.drift)

    def after_training(self, state: DrafterState, samples: float, *, checkpoints: int = 1) -> DrafterState:
        """The drafter after training on ``samples`` more samples of the current policy, committed in
        ``checkpoints`` checkpoints (the version counts them). Zero samples: unchanged."""
        return recovered(state, self.quality, self.recovery_samples, samples, checkpoints)


def decayed(state: DrafterState, floor: float, drift: float) -> DrafterState:
    """``state`` after one policy update: its quality decays toward ``floor`` by the fraction ``drift``."""
    floor = min(floor, state.quality)  # a drafter already below the floor gets no better
    return replace(state, quality=floor + (state.quality - floor) * (1.0 - drift))


def recovered(state: DrafterState, ceiling: float, recovery_samples: float, samples: float,
              checkpoints: int) -> DrafterState:
    """``state`` after training on ``samples`` samples in ``checkpoints`` checkpoints: its quality
    recovers toward ``ceiling`` (never above it, never below where it was)."""
    if samples < 0:
        raise ValueError(f"samples must be >= 0, got {samples}")
    if samples == 0 or checkpoints == 0:
        return state
    ceiling = max(ceiling, state.quality)
    q = ceiling - (ceiling - state.quality) * math.exp(-samples / recovery_samples)
    return replace(state, version=state.version + checkpoints, quality=q,
                   trained_samples=state.trained_samples + round(samples))
