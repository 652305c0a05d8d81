"""One-at-a-time sensitivity of the answer to the inputs nobody measured (``tlt sim sensitivity``).

*The answer* is the speedup over the baseline (``no-sd``, or ``verl`` for whole RL runs) of the
policy or preset that is best at the scenario as given (the median over the seeds): whole-run
rollout speedup in policies mode, end-to-end speedup in presets mode. Each factor below is set to
a low and a high value, one at a time, everything else as given; each point runs at the same seeds
(:mod:`tltsim.seeds`), and the factors are ranked by their *swing*: the largest minus the smallest
median answer among (low, base, high).

The ranges (:data:`FACTORS`, each with its reason; ``README`` of the results folder repeats them):

================= ============================ =============================================================
factor            low / high                   why
================= ============================ =============================================================
prompts per step  x 1/2 / x 2 (at most what    RL recipes use 32-512 prompts per step (TLT's released 7B
                  the trace holds)             script: 64 x 8; the paper: 128 x 8); halving/doubling spans
                                               the recipes around any one of them.
rollout TP        / 2 / x 2 (when it fits)     TLT's scenario files use TP 1 for 7B, its released scripts
                                               TP 4 (7B) and TP 8 (32B): a factor of 2 either way.
drafter quality   x 0.89 / x 1.15 (at most     The stale drafter the default dynamics decay to (0.89 of the
                  the acceptance model's limit) trained one) vs one better than the paper's fit.
length cap        1/2 of the longest response  RL recipes cap at 8K-20K tokens; the trace cannot be longer
                  / as given                   than it was generated, so the high side is the scenario's.
training MFU      x 0.7 / / 0.7 (<= 1)        FSDP training of 7-32B models on long sequences: 25-50% MFU
                  (presets only)               (default 0.35 -> 0.245 / 0.50).
reward time       / 10 / max(x 10, 1 s)        Rule-based math checkers take milliseconds; sandboxed code or
                  (presets only)               an LLM judge about a second per sample (users report reward
                                               at up to 40% of a step).
================= ============================ =============================================================

A side that the scenario cannot take (a TP whose weights do not fit, more prompts than the trace
holds) is reported with its reason and left out of the swing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tltcore.drafter.dynamics import DEFAULT_STALE_FRACTION
from tltcore.errors import InputError
from tltsim.scenario import Scenario, prepare, with_values
from tltsim.seeds import headline, run_policy_seeds, run_preset_seeds


@dataclass(frozen=True)
class Factor:
    """One input varied: its name, the dotted scenario field, the rule for low/high, and why."""

    name: str
    field: str
    rule: str
    why: str
    rl_only: bool = False


FACTORS: tuple[Factor, ...] = (
    Factor("prompts per step", "trace.prompts_per_step", "x 1/2 / x 2 (at most what the trace holds)",
           "RL recipes use 32-512 prompts per step (TLT's released 7B script 64 x 8, the paper 128 x 8); "
           "halving and doubling spans the recipes around any one of them"),
    Factor("rollout TP", "cluster.tp", "/ 2 / x 2 (when the model fits and divides)",
           "TLT's scenario files use TP 1 for Qwen2.5-7B, its released scripts TP 4 (7B) and TP 8 (32B): "
           "a factor of 2 either way"),
    Factor("drafter quality", "drafter.quality", "x 0.89 / x 1.15 (at most the acceptance model's limit)",
           "the stale drafter the default dynamics decay to (drafter.stale_quality 0.89 of the trained one) vs "
           "one better than the paper's fit (capped where an acceptance mass would pass 1)"),
    Factor("length cap", "trace.cap", "1/2 of the longest response / as given",
           "RL recipes cap responses at 8K-20K tokens; a trace cannot be longer than it was generated, so "
           "the high side is the scenario's own cap"),
    Factor("training MFU", "rl.train_mfu", "x 0.7 / / 0.7 (at most 1)",
           "FSDP training of 7-32B models on long sequences reaches 25-50% MFU (default 0.35 -> 0.245 / 0.50)",
           rl_only=True),
    Factor("reward time per sample", "rl.reward_s_per_sample", "/ 10 / max(x 10, 1 s)",
           "rule-based math checkers take milliseconds, sandboxed code or an LLM judge about a second per "
           "sample (users report reward at up to 40% of a step)", rl_only=True),
)


def factors_for(s: Scenario) -> tuple[Factor, ...]:
    """The factors that change the answer of this kind of run (rollout ones only without presets)."""
    from tltcore.drafter.kinds import drafter_kind

    model_free = drafter_kind(s.drafter.kind).model_free  # n-gram and suffix drafters have no quality to vary
    return tuple(f for f in FACTORS if (s.presets or not f.rl_only)
                 and not (model_free and f.field == "drafter.quality"))


def _groups_available(s: Scenario) -> int:
    """Prompt groups one step can draw from (the largest step of the trace)."""
    from tltsim.scenario import trace_rows

    df = trace_rows(s.trace)
    per_step = df.groupby("step")["group_id"].nunique()
    if len(per_step) == 1 and s.trace.prompts_per_step is not None:  # one snapshot cut into num_steps steps
        return int(per_step.iloc[0]) // s.trace.num_steps
    return int(per_step.max())


def drafter_quality_limit(s: Scenario) -> float:
    """The highest drafter quality the acceptance the drafter is priced with admits (no depth's
    acceptance mass above 1), to three decimals: the high end of a quality range (here and in
    :mod:`tltsim.robustness`)."""
    from tltsim.scenario import drafter_acceptance

    mass = drafter_acceptance(s).max_row_mass()
    scales = max(s.drafter.position_scale, default=1.0) if s.drafter.position_scale else 1.0
    return float(np.floor(1e3 / (mass * max(scales, 1e-9))) / 1e3) if mass > 0 else 10.0


def low_high(f: Factor, s: Scenario, inputs) -> tuple[object, object, object]:
    """(base, low, high) values of factor ``f`` for scenario ``s`` (``inputs``: its prepared inputs)."""
    t, rl = s.trace, s.rl
    if f.field == "trace.prompts_per_step":
        base = t.prompts_per_step if t.prompts_per_step is not None else inputs.workload.n_groups
        return base, max(1, base // 2), min(2 * base, max(base, _groups_available(s)))
    if f.field == "cluster.tp":
        return s.cluster.tp, max(1, s.cluster.tp // 2), 2 * s.cluster.tp
    if f.field == "drafter.quality":
        q = s.drafter.quality
        return q, round(DEFAULT_STALE_FRACTION * q, 4), round(min(1.15 * q, max(q, drafter_quality_limit(s))), 4)
    if f.field == "trace.cap":
        longest = int(max(int(w.response_tokens.max()) for w in inputs.workloads if w.n_requests))
        base = t.cap if t.cap is not None else longest
        return t.cap, max(1, min(base, longest) // 2), t.cap
    if f.field == "rl.train_mfu":
        return rl.train_mfu, round(0.7 * rl.train_mfu, 4), round(min(1.0, rl.train_mfu / 0.7), 4)
    if f.field == "rl.reward_s_per_sample":
        r = rl.reward_s_per_sample
        return r, r / 10, max(10 * r, 1.0)
    raise ValueError(f"unknown factor field {f.field}")


@dataclass(frozen=True)
class Point:
    """One simulated point: the answer's median and range over the seeds, or why it did not run."""

    value: object
    median: float = float("nan")
    lo: float = float("nan")
    hi: float = float("nan")
    best: str = ""
    note: str = ""


def per_seed_speedups(s: Scenario, n_seeds: int, inputs=None,
                      progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Per seed and policy (or preset), the headline speedup: a frame with ``seed``, ``name``, ``speedup``."""
    runs = (run_preset_seeds if s.presets else run_policy_seeds)(s, n_seeds, inputs, progress=progress)
    frame, name, metric = headline(runs)
    return frame[["seed", name, metric]].rename(columns={name: "name", metric: "speedup"})


def best_name(per_seed: pd.DataFrame, baseline: str) -> str:
    """The non-baseline policy or preset with the highest median speedup (the first on ties)."""
    med = per_seed.groupby("name", sort=False)["speedup"].median()
    med = med.drop(baseline, errors="ignore").dropna()
    if med.empty:
        raise InputError("no policy or preset besides the baseline ran, so there is no speedup to vary",
                         field="policies")
    return str(med.idxmax())


def answer(per_seed: pd.DataFrame, name: str) -> tuple[float, float, float]:
    """(median, min, max) over the seeds of ``name``'s speedup."""
    v = per_seed.loc[per_seed["name"] == name, "speedup"].to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return float("nan"), float("nan"), float("nan")
    return float(np.median(v)), float(v.min()), float(v.max())


def _fmt_value(v: object) -> str:
    if v is None:
        return "none"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def sensitivity(s: Scenario, n_seeds: int = 1, *, on_point: Callable[[str], None] | None = None,
                progress: Callable[[int], None] | None = None) -> tuple[pd.DataFrame, dict[str, object]]:
    """Run the base point and every factor's low and high (module docstring). Returns the table (one
    row per factor, sorted by swing, largest first) and the base point's facts (``best``,
    ``baseline``, ``answer``, ``answer_min``, ``answer_max``, ``seeds``, ``metric``)."""
    from tltsim.rl.presets import BASELINE_PRESET
    from tltsim.scenario import BASELINE_POLICY

    baseline = BASELINE_PRESET if s.presets else BASELINE_POLICY
    inputs = prepare(s)
    if on_point is not None:
        on_point("base")
    base_runs = per_seed_speedups(s, n_seeds, inputs, progress)
    best = best_name(base_runs, baseline)
    b_med, b_lo, b_hi = answer(base_runs, best)
    rows = []
    for f in factors_for(s):
        base_value, low, high = low_high(f, s, inputs)
        points = []
        for side, value in (("low", low), ("high", high)):
            if value == base_value:
                points.append(Point(value, b_med, b_lo, b_hi, best, "as given"))
                continue
            if on_point is not None:
                on_point(f"{f.name} = {_fmt_value(value)} ({side})")
            try:
                sv = with_values(s, {f.field: value}, path=f"{f.name} {side}")
                per_seed = per_seed_speedups(sv, n_seeds, progress=progress)
            except InputError as exc:
                points.append(Point(value, note=f"not run: {exc}"))
                continue
            med, lo, hi = answer(per_seed, best)
            try:
                other = best_name(per_seed, baseline)
            except InputError:  # nothing besides the baseline ran there (out of memory)
                other = best
            note = "" if other == best else f"best there: {other}"
            if not np.isfinite(med):
                note = f"{best} did not run there" + (f" ({note})" if note else "")
            points.append(Point(value, med, lo, hi, other, note))
        low_p, high_p = points
        meds = [m for m in (low_p.median, b_med, high_p.median) if np.isfinite(m)]
        rows.append({
            "factor": f.name, "field": f.field, "base_value": _fmt_value(base_value),
            "low_value": _fmt_value(low), "high_value": _fmt_value(high),
            "answer_low": low_p.median, "answer_low_min": low_p.lo, "answer_low_max": low_p.hi,
            "answer_base": b_med,
            "answer_high": high_p.median, "answer_high_min": high_p.lo, "answer_high_max": high_p.hi,
            "swing": (max(meds) - min(meds)) if meds else float("nan"),
            "note_low": low_p.note, "note_high": high_p.note, "rule": f.rule, "why": f.why,
        })
    table = pd.DataFrame(rows)
    table = table.sort_values("swing", ascending=False, kind="stable", na_position="last").reset_index(drop=True)
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    facts = {"best": best, "baseline": baseline, "answer": b_med, "answer_min": b_lo, "answer_max": b_hi,
             "seeds": n_seeds, "first_seed": s.seed,
             "metric": "end-to-end speedup over verl" if s.presets else "rollout speedup over no-sd (whole run)"}
    return table, facts


__all__ = ["FACTORS", "Factor", "Point", "answer", "best_name", "factors_for", "low_high", "per_seed_speedups",
           "sensitivity"]
