"""Named systems a user compares over whole RL runs (``tlt sim run --preset NAME``).

Each preset is a rollout SD policy (a policy spec, :mod:`tltcore.policy.registry`), a drafter kind
(:mod:`tltcore.drafter.kinds`) and a drafter-training policy (:mod:`tltcore.spot_coordinator`):

============== ======================= =========== ==========================================
preset         SD policy               drafter     drafter training
============== ======================= =========== ==========================================
verl           no-sd                   none        none (veRL: the baseline every speedup is over)
tlt-base       elastic + static chain  ngram       none (model-free: nothing to train)
static-drafter elastic + BEG-MAB       eagle       trained once before RL, never again (goes stale)
tlt            elastic + BEG-MAB       eagle       Spot Trainer on released workers
tlt-no-spot    elastic + BEG-MAB       eagle       the same samples as a serial stage after rollout
tlt-periodic   elastic + BEG-MAB       eagle       a serial stage after every ``spot.retrain_every``-th
                                                   rollout (TLT's released trainer: every 10 steps)
tlt-no-elastic BEG-MAB (SD always on)  eagle       Spot Trainer
tlt-no-mab     elastic + static 8_4_32 eagle       Spot Trainer
speco-bubble   static chain 4_1_4      eagle       in rollout bubbles on a fixed sample budget,
                                                   full synchronous checkpoints
============== ======================= =========== ==========================================

A preset's ``eagle`` is TLT's trainable drafter: when the scenario's own drafter is another trainable
kind (``eagle3``, ``mtp``, ``block``), those presets run that kind instead (:func:`preset_drafter`), so
``--drafter eagle3`` compares the upkeep of an EAGLE-3 head, not of the drafter it replaced. A
scenario's ``draft-model``, ``ngram`` or ``suffix`` leaves every preset its own kind.

``speco-bubble`` models verl-SpeCo as we read its public code: vLLM's chain EAGLE drafting at a
fixed draft length (no batch-size switch, no tree tuner) and a fixed number of drafter training
steps per RL step ("fixed-step drafter update strategy", verl-project/verl-SpeCo PR #93), run in
the rollout's bubbles. The sample budget and checkpoint cost are scenario fields
(``spot.bubble_budget``, ``spot.full_checkpoint_s``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tltcore.config import suggest
from tltcore.errors import InputError
from tltcore.policy.spec import PolicyBase

TRAINING_MODES = ("none", "never", "spot", "inline", "periodic", "bubble")


@dataclass(frozen=True)
class Preset:
    name: str
    sd_policy: str
    drafter: str  # "none" or one of tltcore.drafter.kinds.DRAFTER_KINDS
    training: str  # one of TRAINING_MODES
    description: str

    @property
    def adapts(self) -> bool:
        """Whether the drafter is trained during RL (its quality recovers)."""
        return self.training in ("spot", "inline", "periodic", "bubble")


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("verl", "no-sd", "none", "none", "veRL: no speculative decoding"),
    Preset("tlt-base", "elastic+static:4_1_4", "ngram", "none", "TLT-Base: elastic SD, model-free n-gram drafter"),
    Preset("static-drafter", "elastic+beg-mab", "eagle", "never", "TLT's rollout engine, drafter trained once (stale)"),
    Preset("tlt", "elastic+beg-mab", "eagle", "spot", "TLT: elastic SD, BEG-MAB, Spot Trainer"),
    Preset("tlt-no-spot", "elastic+beg-mab", "eagle", "inline", "TLT with drafter training as a serial stage"),
    Preset("tlt-periodic", "elastic+beg-mab", "eagle", "periodic", "TLT's rollout engine, drafter retrained as a "
           "serial stage every spot.retrain_every steps"),
    Preset("tlt-no-elastic", "beg-mab", "eagle", "spot", "TLT with SD on at every batch size"),
    Preset("tlt-no-mab", "elastic+static:8_4_32", "eagle", "spot", "TLT with one fixed draft tree (8_4_32)"),
    Preset("speco-bubble", "static:4_1_4", "eagle", "bubble", "verl-SpeCo-style: fixed chain SD, fixed-budget "
           "bubble training"),
)}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)
BASELINE_PRESET = "verl"
#: TLT's rollout engine: the SD policy of the presets that differ only in how the drafter is kept fresh.
TLT_ROLLOUT = "elastic+beg-mab"


def rollout_policy(preset: Preset, presets_policy: PolicyBase | None) -> str:
    """The SD policy ``preset``'s rollouts run: the scenario's ``presets_policy`` in place of TLT's
    :data:`TLT_ROLLOUT` where the preset runs it (``tlt``, ``tlt-no-spot``, ``tlt-periodic``,
    ``static-drafter``: they differ only in drafter upkeep, so a user can compare upkeep under the
    setting they will run, which ``tlt advise`` does with its recommendation), else the preset's own
    (a preset named for its policy, ``tlt-no-mab``, ``tlt-base``, keeps it)."""
    if presets_policy is not None and preset.sd_policy == TLT_ROLLOUT:
        return presets_policy.name
    return preset.sd_policy


#: Trainable drafter kinds that take the place of a preset's ``eagle`` (module docstring).
FOLLOWED_KINDS = ("eagle3", "mtp", "block")


def preset_drafter(preset: Preset, scenario_kind: str) -> str:
    """The drafter kind ``preset`` runs under a scenario whose drafter is ``scenario_kind``: its own, or
    for TLT's trainable ``eagle`` the scenario's trainable kind when it is one of :data:`FOLLOWED_KINDS`."""
    if preset.drafter == "eagle" and scenario_kind in FOLLOWED_KINDS:
        return scenario_kind
    return preset.drafter


def get_preset(name: str) -> Preset:
    """The preset called ``name``; an unknown name raises with the closest one suggested."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise InputError(f"unknown preset '{name}'{suggest(key, list(PRESETS))}; known: {', '.join(PRESETS)}",
                         field="presets")
    return PRESETS[key]


def presets_with_baseline(names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` with ``verl`` first (added when missing), duplicates dropped, order kept."""
    out = [BASELINE_PRESET]
    for n in names:
        key = get_preset(n).name
        if key not in out:
            out.append(key)
    return tuple(out)
