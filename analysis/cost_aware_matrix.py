"""cost-aware against TLT's elastic+BEG-MAB and no SD over every trace the reports use, two models,
three GPUs and two cluster sizes, seeds 0-2, with the provable upper bound beside them (issue 25's
done-when table).

Why. A policy of our own is only worth recommending if it wins where TLT's does not *and* never loses
where TLT's already works; one scenario cannot show that. This runs the whole grid and checks the
four claims per setting, on the median over the simulation seeds:

* ``gain``: cost-aware's median rollout makespan at least 5% shorter than elastic+beg-mab's;
* ``near_best``: never more than 1% longer than the better of no-SD and elastic+beg-mab;
* ``not_slower``: never slower than no-SD, at any seed;
* ``bounded``: no policy finishes under the upper bound (:mod:`tltsim.upper_bound`; acceptance in
  ``expected`` mode, where the bound is a proof, so this is a check of the simulator and the bound).

Where even the bound is less than 5% under elastic+beg-mab no policy can gain 5%: the table says so
(``headroom``) rather than counting it as a miss of the policy. ``cost-aware:lengths=known`` (:data:`KNOWN`,
the same policy given the trace's lengths, which only a simulator has) runs beside it and gets the first
three claims too: a miss it does not share is the length predictor's, not the policy's.

Settings. Traces: the step each report uses of every catalogued source the reports draw (AIME
R1-distill, PolyTrace's verl DAPO-32B, rllm DeepCoder-14B and verl video VL-7B, and the Intern-S1 math
length profile of the paper reproduction at 64 prompts x 8). Models: Qwen2.5-7B at TP 4 and
Qwen2.5-32B at TP 8 (TLT's released scripts). GPUs: H100, A100, H20 (the measured cost model; H20 has
no measured profile, so the roofline serves it and the run says so); 16 and 64 GPUs. Engine: the
scenario defaults (veRL's vLLM rollout settings), the response cap the trace shows as its max_new_tokens
(``StepWorkload.cap``; none for DAPO-32B, whose source declares none). Acceptance: the paper-fitted ``paper-qwen32b``
preset in ``expected`` mode; a seed changes which worker serves which prompt group.

Reproduce: ``python -m analysis.cost_aware_matrix --out reports/cost-aware`` (about 5 CPU minutes;
``--workers``). ``--traces search-r1 --out reports/cost-aware-heldout`` runs the same grid on a trace no
report uses (:data:`HELD_OUT`), ``--gpus A40,L40S --out reports/cost-aware-heldout-gpus`` the grid's traces
on GPUs outside it (:data:`HELD_OUT_GPUS`): the policy checked on data it was not tuned on.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.markdown import markdown_table
from analysis.provenance import provenance_line
from analysis.style import colors_for, legend_outside, paper_rc, save_figure
from tltcore.atomic import atomic_dir

#: cost-aware with the trace's lengths (clairvoyant: only a simulator has them), run beside the policy to
#: tell the misses a length predictor could remove from those of the policy's logic.
KNOWN = "cost-aware:lengths=known"
POLICIES: tuple[str, ...] = ("no-sd", "elastic+beg-mab", "cost-aware", KNOWN)
BOUND = "upper bound"

#: trace label -> scenario settings (dotted field, value) picking the step its reports use.
TRACES: dict[str, tuple[tuple[str, str], ...]] = {
    "aime-r1distill": (("trace.name", "r1distill_qwen1.5b_aime_8samples"),),
    "dapo-32b": (("trace.name", "polytrace_rl_rollouts"), ("trace.source", "polytrace/verl_dapo_qwen2.5-32b"),
                 ("trace.step", "0")),
    "deepcoder-14b": (("trace.name", "polytrace_rl_rollouts"), ("trace.source", "polytrace/rllm_deepcoder_14b_16k"),
                      ("trace.step", "0")),
    "video-vl-7b": (("trace.name", "polytrace_rl_rollouts"), ("trace.source", "polytrace/verl_video_qwen2.5-vl-7b"),
                    ("trace.step", "1")),
    "intern-s1-math": (("trace.name", "intern_s1_math"), ("trace.prompts_per_step", "64"), ("trace.samples", "8"),
                       ("trace.cap", "32768")),
}
#: Traces no report uses, so outside the issue's grid: run apart (``--traces``) to check the policy on
#: data nobody tuned it to. PolyTrace's Search-R1 multi-turn run: 2,048 responses, a 3k response cap.
HELD_OUT: dict[str, tuple[tuple[str, str], ...]] = {
    "search-r1": (("trace.name", "polytrace_search_r1_multiturn"),),
}
MODELS: dict[str, int] = {"Qwen2.5-7B": 4, "Qwen2.5-32B": 8}  # model -> TP (TLT's released scripts)
GPUS: tuple[str, ...] = ("H100", "A100", "H20")
#: GPUs outside the issue's grid, run apart (``--gpus``) for the same reason as :data:`HELD_OUT`: A40 (a
#: measured profile) and L40S (the roofline), both PCIe cards with far less HBM bandwidth than the grid's.
HELD_OUT_GPUS: tuple[str, ...] = ("A40", "L40S")
SIZES: tuple[int, ...] = (16, 64)
GAIN, NEAR = 0.05, 0.01


@dataclass(frozen=True)
class Setting:
    """One cell of the grid."""

    trace: str
    model: str
    gpu: str
    gpus: int

    @property
    def label(self) -> str:
        return f"{self.trace} {self.model.removeprefix('Qwen2.5-')} {self.gpus}x{self.gpu}"

    def settings(self) -> list[tuple[str, str, str]]:
        given = [*{**TRACES, **HELD_OUT}[self.trace], ("model.name", self.model), ("cluster.gpu", self.gpu),
                 ("cluster.gpus", str(self.gpus)), ("cluster.tp", str(MODELS[self.model])),
                 ("cost.model", "measured"), ("acceptance.preset", "paper-qwen32b"), ("acceptance.mode", "expected"),
                 ("policies", ",".join(POLICIES))]
        return [(k, v, "cost_aware_matrix") for k, v in given]


def grid(traces: Sequence[str] = tuple(TRACES), models: Sequence[str] = tuple(MODELS),
         gpus: Sequence[str] = GPUS, sizes: Sequence[int] = SIZES) -> list[Setting]:
    return [Setting(t, m, g, n) for t in traces for m in models for g in gpus for n in sizes]


def run_setting(setting: Setting, seeds: int) -> pd.DataFrame:
    """Every policy and the bound at each seed: one row per (seed, policy) with the makespan."""
    from tltcore.cost.measured import MeasuredCostModel
    from tltsim.scenario import compare_policies, prepare, resolve
    from tltsim.seeds import seed_values, with_seed
    from tltsim.upper_bound import scenario_bounds

    s = resolve(None, setting.settings()).scenario
    inputs = prepare(s)
    rows = []
    for k in seed_values(s.seed, seeds):
        sk, ik = with_seed(s, inputs, k)
        t0 = time.process_time()
        _, summary = compare_policies(sk, ik)
        for r in summary.itertuples():
            rows.append({"policy": r.policy, "seed": k, "makespan_s": float(r.makespan_s)})
        (bound,) = scenario_bounds(ik, tuple(POLICIES))
        rows.append({"policy": BOUND, "seed": k, "makespan_s": float(bound.makespan)})
        for row in rows[-len(POLICIES) - 1:]:
            row["cpu_s"] = time.process_time() - t0
    served = f"measured ({setting.gpu})" if isinstance(inputs.cost, MeasuredCostModel) and inputs.cost.measured \
        else f"roofline ({setting.gpu})"
    return pd.DataFrame(rows).assign(trace=setting.trace, model=setting.model, gpu=setting.gpu, gpus=setting.gpus,
                                     responses=len(inputs.workload.response_tokens), cost_served_by=served,
                                     response_cap=inputs.response_cap)


def _task(args: tuple[Setting, int]) -> pd.DataFrame:
    return run_setting(*args)


def run_grid(settings: Sequence[Setting], seeds: int, workers: int = 1, log=print) -> pd.DataFrame:
    """Every setting's rows, in grid order (the same with any number of workers)."""
    tasks = [(s, seeds) for s in settings]
    if workers <= 1:
        frames = []
        for i, t in enumerate(tasks):
            frames.append(_task(t))
            log(f"[cost-aware] {i + 1}/{len(tasks)} {t[0].label}")
    else:
        with ProcessPoolExecutor(workers) as pool:
            frames = list(pool.map(_task, tasks))
    return pd.concat(frames, ignore_index=True)


KEYS = ["trace", "model", "gpu", "gpus"]


def checks(per_seed: pd.DataFrame) -> pd.DataFrame:
    """One row per setting: each policy's median (min, max) makespan over the seeds, cost-aware's gain
    over elastic+beg-mab and the bound's, and the four claims (module docstring)."""
    rows = []
    for key, part in per_seed.groupby(KEYS, sort=False):
        wide = part.pivot(index="seed", columns="policy", values="makespan_s")
        row: dict[str, object] = dict(zip(KEYS, key, strict=True))
        row["responses"] = int(part["responses"].iloc[0])
        row["seeds"] = len(wide)
        ran = [p for p in POLICIES if p in wide.columns]  # KNOWN is optional (tables written without it)
        for p in [*ran, BOUND]:
            row[f"{p}_s"] = float(wide[p].median())
            row[f"{p}_min"], row[f"{p}_max"] = float(wide[p].min()), float(wide[p].max())
        ca, el, nosd = row["cost-aware_s"], row["elastic+beg-mab_s"], row["no-sd_s"]
        row["headroom"] = 1.0 - row[f"{BOUND}_s"] / el  # the most any policy could gain over elastic+beg-mab
        row["gain_possible"] = row["headroom"] >= GAIN
        row.update(_claims(wide, "cost-aware"))
        if KNOWN in ran:
            row.update({f"known_{k}": v for k, v in _claims(wide, KNOWN).items()})
        lowest = wide[ran].min(axis=1)
        row["bounded"] = bool((lowest >= wide[BOUND] * (1 - 1e-9)).all())
        row["speedup_cost_aware"] = nosd / ca
        row["speedup_elastic"] = nosd / el
        row["speedup_bound"] = nosd / row[f"{BOUND}_s"]
        rows.append(row)
    return pd.DataFrame(rows)


def _claims(wide: pd.DataFrame, policy: str) -> dict[str, float | bool]:
    """``gain``, ``near_best`` and ``not_slower`` of ``policy`` (per-seed makespans in ``wide``)."""
    ca, el, nosd = (float(wide[p].median()) for p in (policy, "elastic+beg-mab", "no-sd"))
    over_best = ca / min(nosd, el) - 1.0
    return {"gain_vs_elastic": 1.0 - ca / el, "over_best": over_best, "gain": 1.0 - ca / el >= GAIN,
            "near_best": over_best <= NEAR, "not_slower": bool((wide[policy] <= wide["no-sd"] * (1 + 1e-9)).all())}


def headline(table: pd.DataFrame) -> list[str]:
    """The claims in words, with counts."""
    n = len(table)
    possible = table[table["gain_possible"]]
    lines = [
        f"- Settings: {n} (traces x models x GPUs x sizes), {int(table['seeds'].min())} seeds each.",
        f"- cost-aware's median makespan is >= 5% shorter than elastic+beg-mab's in **{int(table['gain'].sum())} of "
        f"{n}** settings; the median gain over all settings is **{100 * table['gain_vs_elastic'].median():.1f}%** "
        f"(range {100 * table['gain_vs_elastic'].min():.1f}% to {100 * table['gain_vs_elastic'].max():.1f}%).",
        f"- Where the bound leaves room for a 5% gain ({len(possible)} settings) cost-aware gains >= 5% in "
        f"{int(possible['gain'].sum())}; in the other {n - len(possible)} even the upper bound is less than 5% "
        "under elastic+beg-mab, so no policy could.",
        f"- Never more than 1% longer than the better of no-SD and elastic+beg-mab: "
        f"**{int(table['near_best'].sum())} of {n}** (worst {100 * table['over_best'].max():+.1f}%).",
        f"- Never slower than no-SD at any seed: **{int(table['not_slower'].sum())} of {n}**.",
        f"- No policy under the upper bound at any seed: **{int(table['bounded'].sum())} of {n}**.",
    ]
    if "known_gain" in table:
        lines.append(
            f"- With the trace's lengths (`{KNOWN}`: clairvoyant, which only a simulator can be, run to tell the "
            f"predictor's misses from the policy's): gain >= 5% in {int(table['known_gain'].sum())} of {n} "
            f"({int(table.loc[table['gain_possible'], 'known_gain'].sum())} of the {len(possible)} where the bound "
            f"allows it), within 1% of the better baseline in {int(table['known_near_best'].sum())}, never slower "
            f"than no-SD in {int(table['known_not_slower'].sum())} (worst "
            f"{100 * table['known_over_best'].max():+.1f}%).")
    return lines


#: Why each claim can fail, in the policy's own terms (tltcore.policy.cost_aware's docstring).
WHY = {
    "gain": "even the upper bound is less than 5% under elastic+beg-mab here: TLT's switch already takes "
            "nearly all SD can give, so no policy can gain 5%",
    "not_slower": "at the step's first decision SD pays at the whole batch by the length predictor (as many "
                  "tokens again as each context holds), so the policy starts on and pays the drafter's prefill "
                  "of the prompts; where the contexts are mostly prompt (video frames) and the responses short, "
                  "the worker that ends last gets less back than that prefill cost, and the step ends slower "
                  "than plain decoding. With the trace's lengths (`cost-aware:lengths=known`, the table's column "
                  "beside it) the plan decides instead and the miss goes; a mean length learnt from earlier "
                  "steps only raises the prediction, so it does not remove it",
}


def misses(table: pd.DataFrame) -> list[str]:
    """One line per setting that fails a claim: its numbers and why (:data:`WHY`)."""
    lines = []
    for r in table.itertuples(index=False):
        failed = [c for c in ("gain", "near_best", "not_slower", "bounded") if not getattr(r, c)]
        if not failed:
            continue
        label = f"{r.trace} {r.model} {r.gpus}x{r.gpu}"
        nums = (f"cost-aware {r.speedup_cost_aware:.3f}x, elastic+beg-mab {r.speedup_elastic:.3f}x, bound "
                f"{r.speedup_bound:.3f}x over no-SD (medians); fails {', '.join(failed)}")
        why = [WHY[c] for c in failed if c in WHY and (c != "gain" or not r.gain_possible)]
        lines.append(f"- **{label}**: {nums}." + (f" Why: {'; '.join(why)}." if why else ""))
    return lines or ["- none"]


def figure(table: pd.DataFrame) -> plt.Figure:
    """Speedup over no-SD per setting (median, min-max bars) of both policies, the bound as a mark."""
    traces = list(dict.fromkeys(table["trace"]))
    names = ["elastic+beg-mab", "cost-aware", *([KNOWN] if f"{KNOWN}_s" in table else [])]
    colours = colors_for([*names, BOUND])
    with plt.rc_context(paper_rc()):
        fig, axes = plt.subplots(len(traces), 1, figsize=(9.5, 2.2 * len(traces)), squeeze=False)
        for ax, trace in zip(axes[:, 0], traces, strict=True):
            part = table[table["trace"] == trace].reset_index(drop=True)
            x = np.arange(len(part))
            for j, name in enumerate(names):
                med = part["no-sd_s"] / part[f"{name}_s"]
                lo = part["no-sd_s"] / part[f"{name}_max"]
                hi = part["no-sd_s"] / part[f"{name}_min"]
                ax.errorbar(x + (j - (len(names) - 1) / 2) * 0.22, med, yerr=[med - lo, hi - med], fmt="o", ms=4,
                            capsize=2, color=colours[name], label=name)
            ax.plot(x, part["speedup_bound"], "_", ms=14, mew=2, color=colours[BOUND], label=BOUND + " (median)")
            ax.axhline(1.0, color="#999999", lw=0.8, ls="--")
            ax.set_xticks(x, [f"{m.removeprefix('Qwen2.5-')} {n}x{g}" for m, g, n in
                              zip(part["model"], part["gpu"], part["gpus"], strict=True)], rotation=30, ha="right",
                          fontsize=7)
            ax.set_ylabel("rollout speedup\nover no-SD (x)")
            ax.set_title(trace, fontsize=9)
        legend_outside(axes[0, 0])
        fig.suptitle("cost-aware vs elastic+beg-mab per setting (median over seeds, bars: min–max)", fontsize=10)
        fig.tight_layout()
    return fig


def _fmt_cell(med: float, lo: float, hi: float) -> str:
    return f"{med:.2f} ({lo:.2f}–{hi:.2f})"


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    out = table[[*KEYS, "responses"]].copy()
    for p in [*(p for p in POLICIES if f"{p}_s" in table), BOUND]:
        out[f"{p} (s)"] = [_fmt_cell(a, b, c) for a, b, c in zip(table[f"{p}_s"], table[f"{p}_min"],
                                                                 table[f"{p}_max"], strict=True)]
    out["gain vs elastic"] = [f"{100 * v:+.1f}%" for v in table["gain_vs_elastic"]]
    out["bound's room"] = [f"{100 * v:.1f}%" for v in table["headroom"]]
    out["vs best of both"] = [f"{100 * v:+.1f}%" for v in table["over_best"]]
    out["claims"] = ["".join(sym if ok else "·" for sym, ok in zip("GNSB", flags, strict=True))
                     for flags in table[["gain", "near_best", "not_slower", "bounded"]].itertuples(index=False)]
    if "known_gain" in table:
        out["claims, known lengths"] = ["".join(sym if ok else "·" for sym, ok in zip("GNS", flags, strict=True))
                                        for flags in table[["known_gain", "known_near_best", "known_not_slower"]
                                                           ].itertuples(index=False)]
    return out


def write_report(out: Path, seeds: int = 3, workers: int = 1, settings: Sequence[Setting] | None = None,
                 command: str = "python -m analysis.cost_aware_matrix --out reports/cost-aware", log=print) -> Path:
    """Run the grid and write ``out`` (README.md, per_seed.csv, matrix.csv, the figure) in one swap."""
    settings = list(settings) if settings is not None else grid()
    held_out = sorted({st.trace for st in settings if st.trace in HELD_OUT}
                      | {st.gpu for st in settings if st.gpu not in GPUS})
    title = "# cost-aware vs elastic+beg-mab over the issue's grid"
    if held_out:
        title = (f"# cost-aware vs elastic+beg-mab on held-out data ({', '.join(held_out)}: outside the issue's "
                 "grid, and no setting of the policy was chosen on it)")
    t0, c0 = time.time(), time.process_time()
    with atomic_dir(out, kind="cost-aware-matrix") as tmp:
        per_seed = run_grid(settings, seeds, workers, log)
        table = checks(per_seed)
        per_seed.to_csv(tmp / "per_seed.csv", index=False)
        table.to_csv(tmp / "matrix.csv", index=False)
        save_figure(figure(table), tmp / "speedups")
        served = sorted(set(per_seed["cost_served_by"]))
        caps = per_seed.groupby("trace", sort=False)["response_cap"].first()
        cap_text = ", ".join(f"{t} {'none' if pd.isna(c) else f'{int(c):,}'}" for t, c in caps.items())
        text = [
            title,
            "",
            f"Reproduce: `{command}` (seeds {seeds}; {time.time() - t0:.0f} s wall, "
            f"{per_seed.groupby([*KEYS, 'seed'])['cpu_s'].first().sum():.0f} s simulation CPU).",
            "",
            provenance_line(),
            "",
            "Simulated, not measured: the measured cost model (kernels calibrated on measured GPU profiles; the "
            f"roofline where a GPU has none — served here by: {', '.join(served)}), acceptance `paper-qwen32b` in "
            "`expected` mode (so the upper bound is a proof, not a bound on expectations), veRL's engine defaults, "
            f"with the response cap each trace shows as the engine's max_new_tokens ({cap_text} tokens; none: the "
            "source declares none and no response hit one), which cost-aware reads. "
            "Each number is the median (min–max) over the simulation seeds (which worker serves which prompt "
            "group). Models run at TLT's released TP (7B: 4, 32B: 8).",
            "",
            "## Headline",
            "",
            *headline(table),
            "",
            "![speedups](speedups.png)",
            "",
            "## Where a claim fails, and why",
            "",
            *misses(table),
            "",
            "## Every setting",
            "",
            "Makespans in seconds. `gain vs elastic` = 1 − cost-aware / elastic+beg-mab; `bound's room` = "
            "1 − bound / elastic+beg-mab (the most any policy could gain); `vs best of both` = cost-aware / "
            "min(no-SD, elastic+beg-mab) − 1. `claims`: G gain ≥ 5%, N within 1% of the better of no-SD and "
            "elastic+beg-mab, S never slower than no-SD at any seed, B no policy under the bound at any seed; "
            "`·` where a claim fails; `claims, known lengths`: G, N and S of `cost-aware:lengths=known` (the "
            "trace's lengths given to the same policy: a clairvoyant reference, not a deployable setting).",
            "",
            markdown_table(display_table(table)),
            "",
            "Where SD does not pay (`speedup` of the bound near 1: short responses, or GPUs whose decode is "
            "compute-bound at these batch sizes), cost-aware's job is to stay off: its `vs best of both` there "
            "is what it pays for finding that out.",
            "",
        ]
        (tmp / "README.md").write_text("\n".join(text))
    log(f"[cost-aware] {len(settings)} settings in {time.time() - t0:.0f} s wall, "
        f"{time.process_time() - c0:.0f} s CPU in this process")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("reports/cost-aware"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--traces", default=",".join(TRACES),
                        help=f"comma-separated trace labels (the grid: {', '.join(TRACES)}; held out: "
                             f"{', '.join(HELD_OUT)})")
    parser.add_argument("--gpus", default=",".join(GPUS),
                        help=f"comma-separated GPUs (the grid: {', '.join(GPUS)}; held out: "
                             f"{', '.join(HELD_OUT_GPUS)})")
    args = parser.parse_args(argv)

    def pick(flag: str, text: str, valid: list[str]) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in valid]
        if unknown or not names:
            parser.error(f"{flag}: unknown {', '.join(unknown) or '(none given)'}; valid: {', '.join(valid)}")
        return names

    traces = pick("--traces", args.traces, [*TRACES, *HELD_OUT])
    gpus = pick("--gpus", args.gpus, [*GPUS, *HELD_OUT_GPUS])
    cmd = f"python -m analysis.cost_aware_matrix --out {args.out} --seeds {args.seeds} --workers {args.workers}"
    if traces != list(TRACES):
        cmd += f" --traces {','.join(traces)}"
    if gpus != list(GPUS):
        cmd += f" --gpus {','.join(gpus)}"
    write_report(args.out, args.seeds, args.workers, settings=grid(traces=traces, gpus=gpus), command=cmd)


if __name__ == "__main__":
    main()
