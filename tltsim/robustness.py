"""How sure an answer is: the recommendation re-run over the inputs nobody measured.

A spread over simulation seeds says how much the dealing and the sampled accept lengths move an
answer; it says nothing about the inputs the simulation *assumed*. A user's drafter may be staler
than assumed, their GPU's kernels slower than its data sheet, the cost model another one, the
length predictor perfect or not, the RL phases after rollout longer or shorter. Each of those is an
*unmeasured input* (:data:`UNMEASURED`, with its range and why); :func:`assess` sets each to the
ends of its defensible range, one at a time, re-simulates the top settings of the ranking (the
recommendation, the runners-up and no SD) at the same seeds, and asks :func:`tltsim.advise.recommend`
again. The answer *holds* where the same setting wins (or ties within its spread), and *flips*
where another does: "flips to no SD if the drafter quality is 0.89". The recommendation's speedup
over all those runs is the band that includes what was not measured.

================= =========================================== =============================================
input             range                                       why
================= =========================================== =============================================
drafter quality   the stale floor (0.89 of it by default) /   a drafter goes stale between trainings (the
                  x 1.15 (at most the acceptance limit);      paper: accept length 4.59 stale vs 6.53
                  model-based kinds only. With a measured     adapted); a user's drafter may beat the fit.
                  profile only the stale floor: the profile   A measured profile is the user's drafter:
                  is the drafter's own acceptance             nothing above it is assumed
n-gram alpha      0.3 / 0.7 (n-gram drafter without a         our 0.5 is an assumption, not a measurement
                  measured profile only)
GPU efficiency    FLOP/s x 0.75, bandwidth x 0.85 / FLOP/s    the roofline's per-layer error against
                  x 1.2, bandwidth x 1.1 (at most 1; only     measured kernels is 9-24% (the calibrated
                  where the roofline prices)                  model's 3-4%): GEMMs at small batch reach
                                                              less of the peak than large ones
GPU efficiency    the borrowed fit's FLOP/s x 0.6, band-      the GPU was never measured: its kernels are
(borrowed)        width x 0.8 / FLOP/s x 1.2, bandwidth       priced with another architecture's fitted
                  x 1.1 (at most 1; a GPU priced with the     fractions of peak. The three measured fits
                  nearest measured architecture's             span 0.78-0.90 of peak bandwidth (13%);
                  calibration)                                MI300X is reported at ~45% of peak FLOP/s
                                                              and ~81% of peak bandwidth on AI workloads,
                                                              against H100's fitted 0.76 and 0.90
cost model        the other of roofline and calibrated        where measured profiles cover the GPU (H100,
                  (on GPUs with measured profiles, own or     A100, A40) the two disagree by up to ~20%;
                  borrowed)                                   for a borrowed calibration neither is a
                                                              measurement of this GPU
routing skew      0 (uniform) / 1.0 (Zipf; MoE targets only)  the experts a verify touches depend on the
                                                              router; correlated routing (Cohere measured
                                                              ~2.5x one token's experts for 4 tokens, not
                                                              4x) lowers it, skew 1.0 gives ~2.8x
length predictor  cost-aware told the true lengths            cost-aware predicts remaining lengths; a
                  (cost-aware settings only)                  perfect predictor bounds what it leaves
RL phase times    the phases after rollout x 1/2 / x 2        reward, log-probs, update and sync are
                  (end to end only: no re-simulation)         priced from defaults unless the user set them
                                                              (users report reward at up to 40% of a step)
================= =========================================== =============================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tltcore.errors import InputError
from tltsim.scenario import BASELINE_POLICY, Scenario, with_values

#: How many SD settings of the ranking (from the top) are re-simulated under each variant.
TOP_SD = 3
FLOPS_LOW, FLOPS_HIGH = 0.75, 1.2
BANDWIDTH_LOW, BANDWIDTH_HIGH = 0.85, 1.1
#: A GPU priced from a borrowed calibration (never measured): wider below, where an unmeasured
#: architecture's kernels are likelier to fall (MI300X is reported at ~45% of peak FLOP/s and ~81% of
#: peak bandwidth on AI workloads, i.e. 0.59x and 0.90x H100's fitted 0.76 and 0.90; the measured
#: fits themselves span 0.78-0.90 of peak bandwidth across H100, A100 and A40).
BORROWED_FLOPS_LOW, BORROWED_FLOPS_HIGH = 0.6, 1.2
BORROWED_BANDWIDTH_LOW, BORROWED_BANDWIDTH_HIGH = 0.8, 1.1
QUALITY_HIGH = 1.15
#: MoE targets: the router's skew (:mod:`tltcore.cost.moe`) is varied from uniform (0) to this Zipf exponent,
#: which at 4 tokens of Qwen3-30B-A3B touches ~2.8x the experts of one token where uniform routing touches 3.6x;
#: Cohere measured ~2.5x on its production MoE (correlated routing, "Why MoE models get more from speculative
#: decoding", 2026), so the range spans independent routing and what was measured.
ROUTING_SKEW_HIGH = 1.0
NGRAM_ALPHAS = (0.3, 0.7)
PHASE_SCALES = (0.5, 2.0)


@dataclass(frozen=True)
class Unmeasured:
    """One input the answer rests on without a measurement: its name, the rule for its range, why."""

    name: str
    rule: str
    why: str


UNMEASURED: tuple[Unmeasured, ...] = (
    Unmeasured("drafter quality", "the stale floor / x 1.15",
               "a drafter goes stale between trainings (the paper: accept length 4.59 stale vs 6.53 adapted) and a "
               "user's may beat the paper's fit"),
    Unmeasured("n-gram alpha", "0.3 / 0.7", "the n-gram drafter's 0.5 is an assumption, not a measurement"),
    Unmeasured("GPU efficiency", f"FLOP/s x {FLOPS_LOW}, bandwidth x {BANDWIDTH_LOW} / x {FLOPS_HIGH}, "
               f"x {BANDWIDTH_HIGH}", "the data-sheet roofline's per-layer error is 9-24% against measured kernels"),
    Unmeasured("GPU efficiency (borrowed calibration)",
               f"the borrowed fit's FLOP/s x {BORROWED_FLOPS_LOW}, bandwidth x {BORROWED_BANDWIDTH_LOW} / "
               f"x {BORROWED_FLOPS_HIGH}, x {BORROWED_BANDWIDTH_HIGH}",
               "the GPU was never measured: another architecture's fitted fractions of peak price it (MI300X is "
               "reported at ~45% of peak FLOP/s against H100's fitted 0.76)"),
    Unmeasured("cost model", "the other of roofline and calibrated",
               "on GPUs with measured profiles the two disagree by up to ~20% per layer; a borrowed calibration is "
               "no measurement of this GPU either"),
    Unmeasured("routing skew", f"0 (uniform) / {ROUTING_SKEW_HIGH:g} (MoE targets only)",
               "how many distinct experts a verify forward touches depends on the router, which nobody measured "
               "here; correlated routing (Cohere: 4 tokens load ~2.5x one token's experts, not 4x) lowers it"),
    Unmeasured("length predictor", "cost-aware told the true lengths",
               "cost-aware predicts remaining lengths; a perfect predictor bounds what a wrong one costs"),
    Unmeasured("RL phase times", "x 1/2 / x 2 (end to end only)",
               "the phases after rollout are priced from defaults unless set (reward can be 40% of a step)"),
)


@dataclass(frozen=True)
class Variant:
    """One input set to one end of its range: the scenario fields it sets, and for the length
    predictor a rewrite of the policy specs."""

    input: str
    value: str  # the value in words ("0.89 (the stale floor)")
    sets: dict[str, Any] = field(default_factory=dict)
    spec: Callable[[str], str] | None = None


def _known_lengths(spec: str) -> str:
    """``spec`` with cost-aware told the true remaining lengths (``lengths=known``)."""
    from tltcore.policy.registry import policy_spec
    from tltcore.policy.spec import CostAwareSpec, with_base

    typed = policy_spec(spec)
    if isinstance(typed.base, CostAwareSpec) and typed.base.lengths is None:
        return with_base(typed, lengths="known").name
    return spec


def variants(s: Scenario, cost: Any, specs: Sequence[str]) -> tuple[list[Variant], list[str]]:
    """Every variant of :data:`UNMEASURED` that applies to ``s`` (priced by ``cost``, ranking the
    policy ``specs``), and one line per input left out with why."""
    from tltcore.drafter.kinds import drafter_kind
    from tltsim.scenario.build import is_borrowed, is_calibrated
    from tltsim.sensitivity import drafter_quality_limit

    out: list[Variant] = []
    skipped: list[str] = []
    d = s.drafter
    measured = s.acceptance.measured
    if d.kind == "ngram" and not measured:
        out += [Variant("n-gram alpha", f"{a:g}", {"drafter.ngram_alpha": a}) for a in NGRAM_ALPHAS]
        skipped.append("drafter quality: the n-gram drafter has none (its alpha is varied instead)")
    elif drafter_kind(d.kind).model_free:
        skipped.append(f"drafter quality: the {d.kind} drafter is model-free (no weights to go stale)"
                       + ("; its acceptance is the measured profile" if measured else
                          "; its published profile is not varied: give a measured profile (--acceptance FILE)"))
        skipped.append("n-gram alpha: the measured profile replaces it" if d.kind == "ngram" else
                       "n-gram alpha: the drafter is not the n-gram one")
    else:
        floor = round(d.floor, 4)
        high = round(min(QUALITY_HIGH * d.quality, max(d.quality, drafter_quality_limit(s))), 4)
        if floor < d.quality:
            out.append(Variant("drafter quality", f"{floor:g} (the stale floor)", {"drafter.quality": floor}))
        if measured:  # the profile is the user's drafter: only its going stale is left unmeasured
            skipped.append(f"drafter quality above {d.quality:g}: not varied, the measured acceptance profile is your "
                           "drafter's own (only its going stale between trainings, the low end, is unmeasured)")
        elif high > d.quality:
            out.append(Variant("drafter quality", f"{high:g}", {"drafter.quality": high}))
        skipped.append("n-gram alpha: the drafter is not the n-gram one")
    calibrated, borrowed = is_calibrated(cost), is_borrowed(cost)
    roofline_prices = s.cost.model in ("roofline", "measured") and not calibrated
    if roofline_prices or borrowed:
        fe, be = _efficiencies(s, cost)
        lo_f, hi_f, lo_b, hi_b = ((BORROWED_FLOPS_LOW, BORROWED_FLOPS_HIGH, BORROWED_BANDWIDTH_LOW,
                                   BORROWED_BANDWIDTH_HIGH) if borrowed
                                  else (FLOPS_LOW, FLOPS_HIGH, BANDWIDTH_LOW, BANDWIDTH_HIGH))
        what = "the borrowed calibration's" if borrowed else "the roofline's"
        for tag, fx, bx in (("low", lo_f, lo_b), ("high", hi_f, hi_b)):
            f, b = round(min(1.0, fe * fx), 4), round(min(1.0, be * bx), 4)
            out.append(Variant("GPU efficiency", f"{tag} (FLOP/s {f:g}, bandwidth {b:g}: {what} x {fx:g}, x {bx:g})",
                               {"cluster.flops_efficiency": f, "cluster.bandwidth_efficiency": b}))
    else:
        skipped.append("GPU efficiency: the calibrated model's kernel efficiencies are fitted on this GPU (the cost "
                       "model input varies it instead)" if calibrated else "GPU efficiency: a measured table prices it")
    near = _nearest(s)
    if s.cost.model == "table":
        skipped.append("cost model: a measured table of this engine prices it")
    elif near is None:
        skipped.append(f"cost model: no measured profiles for {s.cluster.gpu}, only the roofline prices it")
    elif calibrated:
        out.append(Variant("cost model", "roofline", {"cost.model": "roofline"}))
    elif s.cost.model == "measured":
        skipped.append(f"cost model: no profiles of {near.key} found on the search path, only the roofline prices it")
    else:
        out.append(Variant("cost model", "calibrated" if near.own else f"calibrated on {near.key} (borrowed)",
                           {"cost.model": "measured"}))
    if s.cost.model == "table":
        skipped.append("routing skew: a measured table prices it")
    elif _is_moe(s):
        skew = s.model.routing_skew or 0.0
        other = ROUTING_SKEW_HIGH if skew < ROUTING_SKEW_HIGH else 0.0
        out.append(Variant("routing skew", f"{other:g} ({'a skewed router' if other else 'uniform routing'})",
                           {"model.routing_skew": other}))
    else:
        skipped.append("routing skew: the target is dense")
    if any(_known_lengths(p) != p for p in specs):
        out.append(Variant("length predictor", "the true lengths (cost-aware)", spec=_known_lengths))
    else:
        skipped.append("length predictor: no cost-aware setting among the top ones")
    return out, skipped


def _is_moe(s: Scenario) -> bool:
    """Whether the scenario's target is a mixture of experts (its routing skew is then an input)."""
    from tltcore.model_shape import get_model

    return get_model(s.model.name).moe is not None


def _efficiencies(s: Scenario, cost: Any) -> tuple[float, float]:
    """The (FLOP/s, bandwidth) efficiencies the GPU is priced at now, which the GPU-efficiency variant
    scales: a borrowed calibration's matmul law's (after any ``cluster.*_efficiency``), else the
    roofline's (set, the spec's, or the preset's default)."""
    from tltsim.scenario import gpu_efficiencies, scenario_gpu
    from tltsim.scenario.build import _inner, is_borrowed

    if is_borrowed(cost):
        m = _inner(cost).calibration.matmul
        return m.flops_efficiency, m.bandwidth_efficiency
    gpu, set_ = scenario_gpu(s), gpu_efficiencies(s)
    return (set_.get("flops_efficiency", gpu.flops_efficiency),
            set_.get("bandwidth_efficiency", gpu.bandwidth_efficiency))


def _nearest(s: Scenario) -> Any:
    """The measured calibration the scenario's GPU is (or would be) priced with, or None
    (:func:`tltcore.cost.measured.nearest_profile`)."""
    from tltcore.cost.measured import nearest_profile
    from tltsim.scenario import scenario_gpu

    return nearest_profile(scenario_gpu(s))


@dataclass(frozen=True)
class VariantResult:
    """One variant's answer: the recommendation's speedup there (median, min, max over the seeds),
    the setting :func:`tltsim.advise.recommend` picks there, and whether that is a flip."""

    variant: Variant
    speedup: tuple[float, float, float]
    best: str
    best_speedup: tuple[float, float, float]
    flips: bool


@dataclass(frozen=True)
class Robustness:
    """Every variant's result, the end-to-end range over the RL phase times, the inputs left out, and
    the recommendation's speedup range over everything run (the band with the unmeasured inputs)."""

    label: str
    results: tuple[VariantResult, ...]
    e2e: tuple[tuple[float, float], ...]  # (phase scale, end-to-end speedup) per PHASE_SCALES
    skipped: tuple[str, ...]
    band: tuple[float, float]
    settings: tuple[str, ...]  # the labels re-simulated
    gpu_note: str = ""  # said when the GPU was never measured (a borrowed calibration prices it)
    #: every run behind ``band``: the scenario's own (``variant`` "") and each variant's, one row per
    #: (variant, seed, label) with ``rollout_s``, ``speedup`` and ``gpu_idle_s`` (hours and dollars,
    #: :mod:`tltsim.units`, take their band from the same runs)
    runs: pd.DataFrame = field(default_factory=pd.DataFrame, compare=False)

    @property
    def flips(self) -> tuple[VariantResult, ...]:
        return tuple(r for r in self.results if r.flips)

    def table(self) -> pd.DataFrame:
        """One row per variant: the input, its value, the recommendation's speedup there (median, min,
        max), the setting recommended there and whether that is a flip (``robustness.csv``)."""
        return pd.DataFrame([{"input": r.variant.input, "value": r.variant.value, "speedup_median": r.speedup[0],
                              "speedup_min": r.speedup[1], "speedup_max": r.speedup[2], "recommended_there": r.best,
                              "its_speedup_median": r.best_speedup[0], "flips": r.flips} for r in self.results],
                            columns=["input", "value", "speedup_median", "speedup_min", "speedup_max",
                                     "recommended_there", "its_speedup_median", "flips"])

    def line(self) -> str:
        """``holds across ...`` or ``flips to X if ...``, with the band: one line for the screen."""
        if not self.results:
            return "not assessed: no unmeasured input applies here (" + "; ".join(self.skipped) + ")"
        held = sorted({r.variant.input for r in self.results if not r.flips})
        parts = []
        for r in self.flips:
            to = "no SD" if r.best == BASELINE_POLICY else r.best
            parts.append(f"flips to {to} ({r.best_speedup[0]:.3f}x; the recommendation {r.speedup[0]:.3f}x) if "
                         f"{r.variant.input} is {r.variant.value}")
        if held:
            parts.append(("otherwise " if parts else "") + "holds across " + ", ".join(held))
        band = f"rollout speedup {self.band[0]:.3f}-{self.band[1]:.3f}x over those runs"
        note = f"; {self.gpu_note}" if self.gpu_note else ""
        return "; ".join(parts) + f" ({band}{note})"


def assess(s: Scenario, ranking: pd.DataFrame, candidates: Sequence[Any], seeds: Sequence[int],
           switches: Sequence[str], rec: Any, rows: pd.DataFrame, later_s: float | None, cost: Any,
           run: Callable[[list[Any]], pd.DataFrame]) -> Robustness:
    """Re-run the top of ``ranking`` (``rec``, the :data:`TOP_SD` best SD settings, no SD) under each
    :func:`variants` of ``s`` at ``seeds`` (``run``: the advise task runner), and recommend again."""
    from tltsim import advise as adv

    order = [str(x) for x in ranking["label"]]
    sd = [lab for lab in order if lab != BASELINE_POLICY][:TOP_SD]
    keep = list(dict.fromkeys([rec.label, *sd, BASELINE_POLICY]))
    by_label = {c.label: c for c in candidates}
    top = [by_label[lab] for lab in keep if lab in by_label]
    vs, skipped = variants(s, cost, [c.policy for c in top])
    results = []
    speeds = [float(v) for v in rows.loc[rows["label"] == rec.label, "speedup"]]
    cols = [c for c in ("label", "seed", "rollout_s", "speedup", "gpu_idle_s") if c in rows]
    runs = [rows[rows["label"].isin(keep)][cols].assign(variant="")]
    for v in vs:
        cands = [adv.Candidate(c.label, v.spec(c.policy) if v.spec else c.policy, c.switch) for c in top]
        try:
            sv = with_values(s, v.sets) if v.sets else s
        except InputError as exc:
            skipped.append(f"{v.input} {v.value}: {exc.message}")
            continue
        modes = [m for m in dict.fromkeys(switches) if any(c.switch in (m, None) for c in cands)]
        raw = run(adv.plan_tasks(sv, cands, seeds, modes or list(switches)))
        vrows = adv.label_rows(raw, cands)
        vrank = adv.rank(vrows)
        vrec = adv.recommend(vrank)
        mine = vrank[vrank["label"] == rec.label]
        sp = (float(mine["speedup_median"].iloc[0]), float(mine["speedup_min"].iloc[0]),
              float(mine["speedup_max"].iloc[0])) if len(mine) else (float("nan"),) * 3
        speeds += [float(x) for x in vrows.loc[vrows["label"] == rec.label, "speedup"]]
        runs.append(vrows[[c for c in cols if c in vrows]].assign(variant=f"{v.input} {v.value}"))
        # SD stopping (or starting) to pay is a flip; another SD setting is one only outside the spread
        flips = vrec.label != rec.label and (vrec.is_sd != rec.is_sd or rec.label not in vrec.ties)
        results.append(VariantResult(v, sp, vrec.label, vrec.speedup, flips))
    e2e = []
    base_rows = rows[rows["label"] == BASELINE_POLICY].drop_duplicates("seed").set_index("seed")["rollout_s"]
    mine_rows = rows[rows["label"] == rec.label].set_index("seed")["rollout_s"]
    if later_s is not None and math.isfinite(later_s):
        for k in PHASE_SCALES:
            ratio = (base_rows + k * later_s) / (mine_rows + k * later_s)
            e2e.append((k, float(np.median(ratio.dropna().to_numpy()))))
    finite = [x for x in speeds if math.isfinite(x)]
    band = (min(finite), max(finite)) if finite else (float("nan"), float("nan"))
    return Robustness(rec.label, tuple(results), tuple(e2e), tuple(skipped), band, tuple(keep), unmeasured_gpu(s, cost),
                      pd.concat(runs, ignore_index=True))


def unmeasured_gpu(s: Scenario, cost: Any) -> str:
    """One clause when the scenario's GPU was never measured (a borrowed calibration prices it): which
    calibration, and that the band includes the wider GPU-efficiency variant; "" otherwise."""
    from tltsim.scenario.build import _inner, is_borrowed

    if not is_borrowed(cost):
        return ""
    cal = _inner(cost).calibration
    return (f"{cal.spec.name} was not measured: its kernels are priced with {cal.measured_on}'s calibration, and the "
            f"band includes its efficiency at FLOP/s x {BORROWED_FLOPS_LOW:g}-{BORROWED_FLOPS_HIGH:g}, bandwidth "
            f"x {BORROWED_BANDWIDTH_LOW:g}-{BORROWED_BANDWIDTH_HIGH:g}")


def seed_rows(summary: pd.DataFrame, gpus: int) -> pd.DataFrame:
    """A ``tlt sim run --seeds`` run's per-seed summary (columns ``seed``, ``policy``, per-step metrics) as
    the rows :func:`tltsim.advise.rank` takes: per seed and policy the whole run's rollout seconds,
    speedup over no SD, accept length and SD share, labelled by the policy spec."""
    from tltcore.summary import run_totals
    from tltsim.advise import sd_shares

    frames = []
    for seed, part in summary.groupby("seed", sort=False):
        part = part.drop(columns="seed")
        totals = run_totals(part, gpus=gpus)
        share = sd_shares(part)
        frames.append(pd.DataFrame({
            "label": totals["policy"], "policy": totals["policy"], "switch": None, "seed": int(seed),
            "rollout_s": totals["rollout_s"], "speedup": totals["speedup"], "e2e_speedup": np.nan,
            "sd_share": [share.get(p, 0.0) for p in totals["policy"]], "switch_s": 0.0,
            "accept": totals["mean_accept_length"], "warnings": "[]"}))
    return pd.concat(frames, ignore_index=True)


def rl_defaults(s: Scenario) -> list[str]:
    """The ``rl.*`` fields at tlt's defaults (what the end-to-end speedup assumes unless told)."""
    from tltsim.rl.phases import RLPhaseConfig

    default = RLPhaseConfig()
    return [f"rl.{name}" for name in type(default).model_fields
            if getattr(s.rl, name) == getattr(default, name)]


__all__ = ["PHASE_SCALES", "TOP_SD", "UNMEASURED", "Robustness", "Unmeasured", "Variant", "VariantResult", "assess",
           "rl_defaults", "seed_rows", "unmeasured_gpu", "variants"]
