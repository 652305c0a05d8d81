"""`tlt demo`: the main job run by `make run` — a small, reproducible report under reports/demo/.

It answers the first questions a user asks: how long is the tail of a real RL trace, how much does
the slowest response stretch each step, how much would elastic speculative decoding with BEG-MAB cut
one step's rollout, and what do whole RL steps gain end to end with TLT and its peers (`verl`,
`tlt`, `tlt-base`, `static-drafter`) on H100, on a compute-poor H20, on AMD's MI300X and on a
mixture-of-experts target?
Everything is simulated. The report folder is built aside and swapped in atomically.

Every speedup and makespan it prints is the median (min–max) over ``--seeds`` simulation seeds (3 by
default; :mod:`tltsim.seeds`): on a long-tailed trace the dealing seed alone moves a speedup by
several percent and can flip a ranking, so one number per policy would claim more than the
simulation knows. Each seed's speedup is over the same seed's baseline.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    import pandas as pd

    from tltsim.scenario import Scenario
    from tltsim.seeds import SeedRuns

DEFAULT_TRACE = "polytrace_rl_rollouts"
#: What the demo analyses when the scenario's trace is not downloaded (a fresh clone has no
#: ../shared/traces): the published Intern-S1 math RLVR length mixture, generated, so ``make run``
#: works anywhere; it has the long reasoning tail the demo is about (our own GRPO trace is capped at 400).
FALLBACK_TRACE = "intern_s1_math"
DEFAULT_SCENARIO = "dapo_qwen32b_polytrace"  # a bundled scenario (tltsim/data/scenarios/)
#: Whole-RL-run presets the demo compares with ``verl`` (always added as the baseline).
DEMO_PRESETS = ("tlt", "tlt-base", "static-drafter")
#: RL steps per whole run (fewer when the trace has fewer): enough for a static drafter to go stale.
DEMO_RL_STEPS = 4
#: The whole-run cases, (GPU, TP or None for the scenario's, target model or None for the scenario's):
#: H100, where the paper measured; H20 at TP 8 (one rollout group per node), whose 148 dense TFLOPS beside
#: 4 TB/s make verifying a draft tree cost several decode steps; AMD's MI300X, a GPU nobody measured here
#: (priced with H100's calibration, borrowed); and a mixture-of-experts target (Qwen3-30B-A3B), whose
#: verify forwards touch many more experts than its decode steps.
DEMO_CASES: tuple[tuple[str, int | None, str | None], ...] = (
    ("H100", None, None), ("H20", 8, None), ("MI300X", None, None), ("H100", None, "Qwen/Qwen3-30B-A3B"))


def case_label(gpu: str, tp: int, model: str | None) -> str:
    """A whole-run case's name in the README: ``H20, TP 8``, with the target when it is not the scenario's."""
    return f"{gpu}, TP {tp}" + (f", {model.split('/')[-1]}" if model else "")
#: Simulation seeds per number by default: the fewest that give a median with a min and a max. Three
#: seeds roughly double the demo's simulation time (about 4 s of CPU to about 10 s), which ``make run``
#: can afford; ``--seeds 1`` is the old single-number demo and its README says it shows no spread.
DEFAULT_SEEDS = 3
#: Per-policy columns of the one-step table, with their formats.
SIM_METRICS = {"makespan_s": ",.1f", "speedup": ".3f", "idle_fraction": ".3f", "mean_accept_length": ".2f",
               "sd_share": ".3f"}
#: Per-preset columns of the whole-run table, with their formats.
RL_METRICS = {"total_s": ",.1f", "rollout_share": ".2f", "mean_accept_length": ".2f", "rollout_speedup": ".3f",
              "speedup": ".3f"}


def _with_trace(s: Scenario, trace: str | None) -> tuple[Scenario, str]:
    """``s`` simulating ``trace`` instead of its own trace, and the ``--set`` flags that say so.

    The report is titled by the trace it analyses, so the simulation must run on that trace too. A
    different trace drops the scenario's ``trace.source`` and ``trace.step``: they name rows of the
    scenario's own trace and would not exist in another. The same trace (by name or by path) keeps
    the scenario as it is.
    """
    from tltcore.errors import InputError
    from tltsim.scenario import apply_override, with_values
    from tltsim.traces.catalog import resolve

    if trace is None or trace == s.trace.name:
        return s, ""
    try:
        same = resolve(trace) == resolve(s.trace.name)
    except InputError:  # the scenario's own trace is not downloaded: certainly not the same
        same = False
    if same:
        return s, ""
    s = apply_override(s, "trace.name", trace, path="--trace")
    s = with_values(s, {"trace.source": None, "trace.step": None})
    return s, f" --trace {trace} --set trace.source=none --set trace.step=none"


def _default_trace(scenario: str) -> tuple[str, str | None]:
    """The trace the demo analyses when none is given: the scenario's, or :data:`FALLBACK_TRACE` when
    that is a catalogued file not on the search path. Returns (trace, the one-line note saying so or
    None). A trace the user names is never replaced: a missing one is an error that says how to get it."""
    from tltsim.scenario import load_scenario
    from tltsim.traces.catalog import catalog, find_file, how_to_get

    name = load_scenario(scenario).trace.name
    entry = catalog().get(name)
    if entry is None or entry.file is None or find_file(entry.file) is not None:
        return name, None
    return FALLBACK_TRACE, (f"trace {name} is not downloaded, so this demo uses {FALLBACK_TRACE} (a published "
                            f"math RLVR length mixture) instead; for the real one: {how_to_get(entry)}")


def _simulate(scenario: str, trace: str | None = None, seeds: int = 1) -> tuple[Scenario, SeedRuns, str]:
    """Run the scenario's policies on one step of ``trace`` (None: the scenario's trace) at ``seeds``
    simulation seeds from the scenario's; return (scenario, the seed runs, extra ``tlt sim run``
    flags that reproduce it)."""
    from tltsim.scenario import load_scenario
    from tltsim.seeds import check_seeds, run_policy_seeds

    s, flags = _with_trace(load_scenario(scenario), trace)
    check_seeds(seeds, s.seed)
    return s, run_policy_seeds(s, seeds), flags


def _rl_steps(s: Scenario) -> int:
    """How many consecutive RL steps the scenario's trace offers from its first step (at most
    :data:`DEMO_RL_STEPS`); 1 for a trace with one snapshot."""
    from tltsim.scenario import trace_rows

    df = trace_rows(s.trace)
    steps = sorted(int(x) for x in df["step"].unique())
    first = s.trace.step if s.trace.step is not None else steps[0]
    return max(1, min(DEMO_RL_STEPS, sum(x >= first for x in steps))) if len(steps) > 1 else 1


def _rl_runs(s: Scenario, seeds: int = 1) -> tuple[dict[str, Scenario], pd.DataFrame, pd.DataFrame]:
    """Whole RL runs of :data:`DEMO_PRESETS` (and verl) in each of :data:`DEMO_CASES` at ``seeds``
    simulation seeds: (scenario per case label, the steps table and the summary table, both with a
    ``seed`` and a ``case`` column)."""
    import pandas as pd

    from tltsim.scenario import with_values
    from tltsim.seeds import run_preset_seeds

    n = _rl_steps(s)
    cases, steps, summaries = {}, [], []
    for gpu, tp, model in DEMO_CASES:
        tp = tp or s.cluster.tp
        case = with_values(s, {"presets": DEMO_PRESETS, "cluster.gpu": gpu, "cluster.tp": tp,
                               "trace.num_steps": n, **({"model.name": model} if model else {})})
        label = case_label(gpu, tp, model)
        runs = run_preset_seeds(case, seeds)
        cases[label] = case
        steps.append(runs.steps.assign(case=label))
        summaries.append(runs.summary.assign(case=label))
    return cases, pd.concat(steps, ignore_index=True), pd.concat(summaries, ignore_index=True)


def _spread_table(per_seed: pd.DataFrame, keys: list[str], metrics: dict[str, str]) -> pd.DataFrame:
    """Per ``keys`` (first-seen order): ``seeds`` and, per metric, ``<metric>_median``/``_min``/``_max``
    over the seeds (:func:`tltsim.seeds.aggregate`) and ``<metric>`` the README cell: the median
    (min–max) with the metric's format, or the bare number when one seed ran (no spread to show)."""
    import numpy as np

    from tltsim.seeds import aggregate, fmt_range

    agg = aggregate(per_seed, keys, list(metrics))
    one = per_seed["seed"].nunique() == 1
    for m, spec in metrics.items():
        med, lo, hi = agg[f"{m}_median"], agg[f"{m}_min"], agg[f"{m}_max"]
        agg[m] = [("–" if not np.isfinite(a) else format(a, spec)) if one else fmt_range(a, b, c, spec)
                  for a, b, c in zip(med, lo, hi, strict=True)]
    return agg


def _seed_note(seeds: list[int], baseline: str) -> str:
    """The sentence under a table that says what its numbers are over."""
    if len(seeds) == 1:
        return (f"One simulation seed ({seeds[0]}), so these numbers show **no spread**: the dealing seed alone "
                "can move a speedup by several percent and flip a ranking on a long-tailed trace. `tlt demo "
                f"--seeds {DEFAULT_SEEDS}` gives each number as the median (min–max) over the seeds.")
    return (f"Each number is the **median (min–max) over {len(seeds)} simulation seeds** ({seeds[0]}–{seeds[-1]}: "
            "which worker serves which prompt group, stochastic accept lengths, the bandit's exploration; the "
            f"responses are the same at every seed); each seed's speedup is over the same seed's `{baseline}`.")


def _ranking_line(per_seed: pd.DataFrame, name: str, kinds: str) -> str:
    """:func:`tltsim.seeds.ranking_flip`'s line when the seeds order ``name`` differently from the
    medians, else one line saying that they agree (or that one seed cannot disagree)."""
    from tltsim.seeds import ranking_flip

    if per_seed["seed"].nunique() == 1:
        return f"One seed: whether it orders the {kinds} as other seeds would is not known."
    flip = ranking_flip(per_seed, name, "speedup")
    return flip[0].upper() + flip[1:] + "." if flip else f"Every seed orders the {kinds} as the medians do."


def _x(r: object, seeds: int) -> str:
    """A row's speedup as ``0.966x (0.965–0.967)``, or ``0.966x`` from one seed."""
    from tltsim.seeds import fmt_range

    med, lo, hi = (getattr(r, f"speedup_{k}") for k in ("median", "min", "max"))
    return fmt_range(med, lo, hi, ".3f", "x") if seeds > 1 else f"{med:.3f}x"


def _verdict(agg: pd.DataFrame, seeds: int) -> str:
    """Where SD does not pay, judged by the median speedup; a min–max that straddles 1x is named too,
    so a preset whose median pays but whose unlucky seed does not is not shown as a sure gain."""
    import numpy as np

    rest = agg[(agg["preset"] != "verl") & np.isfinite(agg["speedup_median"])]
    below = rest[rest["speedup_median"] < 1.0]
    straddle = rest[(rest["speedup_min"] < 1.0) & (rest["speedup_max"] >= 1.0)] if seeds > 1 else rest.iloc[0:0]
    lines = [("**Where SD does not pay** (median speedup below 1x): " + ", ".join(
                 f"`{r.preset}` on {r.case} ({_x(r, seeds)})" for r in below.itertuples()) + ".")
             if len(below) else "Every preset's median speedup is at least 1x in every case."]
    if len(straddle):
        lines.append("The min–max over the seeds straddles 1x for " + ", ".join(
            f"`{r.preset}` on {r.case}" for r in straddle.itertuples())
            + ": whether SD pays there depends on the seed.")
    elif seeds > 1:
        lines.append("No preset's min–max over the seeds straddles 1x: every seed agrees on where SD pays.")
    return " ".join(lines)


def _rl_section(cases: dict[str, Scenario], steps: pd.DataFrame, summary: pd.DataFrame, scenario_arg: str,
                agg: pd.DataFrame, seeds: list[int]) -> list[str]:
    """The README's whole-RL-run section (tables with the commands that reproduce them)."""
    from analysis.markdown import markdown_table

    first = next(iter(cases.values()))
    runs = "\n".join(f"- {label}: `tlt sim run --scenario {scenario_arg} --set cluster.gpu={c.cluster.gpu} "
                     f"--set cluster.tp={c.cluster.tp} "
                     + (f"--set model.name={c.model.name} " if c.model.name != first.model.name else "")
                     + f"--steps {c.trace.num_steps} "
                     + " ".join(f"--preset {p}" for p in DEMO_PRESETS) + f" --seeds {len(seeds)}` "
                     f"({_cost_line(c).lower()[0]}{_cost_line(c)[1:]})"
                     for label, c in cases.items())
    flips = [f"{label}: {_ranking_line(summary[summary['case'] == label], 'preset', 'presets')}" for label in cases]
    return [
        f"## Simulated: whole RL steps, veRL vs TLT presets ({first.model.name}, {first.cluster.gpus} GPUs, "
        f"{first.trace.num_steps} steps)",
        "",
        "Each RL step runs rollout, drafter training (the Spot Trainer on released workers for `tlt`), "
        "reward, old log-probs, reference, actor update and weight sync on one clock. `speedup` is the "
        "end-to-end step-time speedup over `verl`, `rollout_speedup` the rollout's alone. `tlt-base` is the "
        "model-free n-gram drafter; `static-drafter` is trained once and goes stale as the policy moves. "
        "The cases: H100, where the paper measured; H20 at TP 8, whose 148 dense TFLOPS beside 4 TB/s make "
        "verifying a draft tree cost several decode steps; AMD's MI300X, priced with H100's calibration "
        "(nobody measured it here); and a mixture-of-experts target, Qwen3-30B-A3B on H100, whose verify "
        "forwards touch many more experts than its decode steps. Where SD does not pay is said under the table.",
        "",
        "Reproduce:",
        runs,
        "",
        _seed_note(seeds, "verl"),
        "",
        markdown_table(agg[["case", "preset", *RL_METRICS]]),
        "",
        _verdict(agg, len(seeds)),
        "",
        *(f"- {line}" for line in flips),
        "",
        "![RL speedup](rl_speedup.png)",
        "",
        "![step breakdown](rl_step_breakdown.png)",
        "",
        "![accept length over steps](rl_accept_over_steps.png)",
        "",
    ]


def demo(trace: Annotated[str | None, typer.Option(
             help=f"Trace to analyse and simulate (default: the scenario's trace, {DEFAULT_TRACE}).")] = None,
         scenario: Annotated[str, typer.Option(help="Scenario TOML (path or bundled name) to simulate.")]
         = DEFAULT_SCENARIO,
         seeds: Annotated[int, typer.Option(
             help="Simulation seeds (the scenario's seed, seed+1, ...; the responses stay the same): every "
                  "speedup and makespan is the median (min–max) over them. 1 shows single numbers and says "
                  "that they have no spread.")] = DEFAULT_SEEDS,
         out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports/demo"),
         force: Annotated[bool, typer.Option(help="Write into an existing --out folder tlt did not create "
                                             "(same-named files replaced, nothing deleted).")] = False) -> None:
    """Analyse a trace's long tail, simulate it under SD policies and whole RL runs, write reports/demo/.

    Example: tlt demo --trace r1distill_qwen1.5b_aime_8samples --out reports/demo-aime
    """
    from analysis.markdown import markdown_table
    from analysis.rl_plots import accept_over_steps, speedup_bars, step_breakdown
    from analysis.rollout_plots import makespan_bars, rollout_timeline
    from analysis.style import save_figure
    from analysis.trace_plots import length_cdf, straggler_factor
    from analysis.uncertainty_plots import seed_spread_figure
    from tltcore.atomic import atomic_dir, check_output_dir, write_text
    from tltsim.scenario import scenario_toml
    from tltsim.seeds import check_seeds
    from tltsim.traces import load_trace, trace_stats

    check_seeds(seeds)
    check_output_dir(out, force, kind="demo", inputs=[scenario, *([trace] if trace else [])])
    note = None
    if trace is None:
        trace, note = _default_trace(scenario)
        if note is not None:
            typer.echo(f"tlt: note: {note}", err=True)
    # Progress, one line per phase: the demo takes about half a minute and should not look stuck.
    typer.echo(f"demo: reading trace {trace}")
    df = load_trace(trace)
    stats = trace_stats(df, ["source"])
    typer.echo(f"demo: simulating one rollout step of scenario {scenario} under SD policies "
               f"({seeds} seed{'s' if seeds > 1 else ''})")
    s, runs, trace_flags = _simulate(scenario, trace, seeds)
    shown_path = scenario + trace_flags
    seed_list = list(runs.seeds)
    summary = runs.summary
    first_step = summary["step"].iloc[0]
    sim = _spread_table(summary, ["policy", "step"], SIM_METRICS)
    sim_flip = _ranking_line(summary[summary["step"] == first_step], "policy", "policies")
    typer.echo("demo: simulating whole RL runs (verl, tlt, tlt-base, static-drafter)")
    cases, rl_steps, rl_summary = _rl_runs(s, seeds)
    rl = _spread_table(rl_summary, ["case", "preset"], RL_METRICS)
    rl["status"] = [_status(rl_summary, c, p) for c, p in zip(rl["case"], rl["preset"], strict=True)]
    first_case = next(iter(cases))
    first_seed = seed_list[0]
    for line in [f"one RL step: {sim_flip}",
                 *(f"{label}: {_ranking_line(rl_summary[rl_summary['case'] == label], 'preset', 'presets')}"
                   for label in cases)]:
        typer.echo(f"demo: {line}")
    typer.echo(f"demo: writing figures and README to {out}")
    sim_shown = sim[["policy", *(["step"] if sim["step"].nunique() > 1 else []), *SIM_METRICS]]
    bars = sim.loc[sim["step"] == first_step, ["policy", "makespan_s_median", "speedup_median"]].set_axis(
        ["policy", "makespan_s", "speedup"], axis=1)  # the makespan figure draws the medians
    with atomic_dir(out, kind="demo", force=force) as tmp:
        write_text(tmp / "sim_summary.csv", summary.to_csv(index=False))
        write_text(tmp / "sim_seeds_summary.csv", sim.drop(columns=list(SIM_METRICS)).to_csv(index=False))
        write_text(tmp / "scenario.resolved.toml", scenario_toml(s))
        save_figure(rollout_timeline(runs.events[runs.events["seed"] == first_seed].drop(columns="seed")
                                     .reset_index(drop=True)), tmp / "rollout_timeline")
        save_figure(makespan_bars(bars), tmp / "makespan")
        if len(seed_list) > 1:
            seed_spread_figure(summary[summary["step"] == first_step], "policy",
                               [("speedup", "rollout speedup over no-sd (x)"), ("makespan_s", "rollout makespan (s)")],
                               tmp / "sim_seeds")
        write_text(tmp / "trace_stats.csv", stats.to_csv(index=False))
        save_figure(length_cdf(df), tmp / "length_cdf")
        save_figure(straggler_factor(df), tmp / "straggler_factor")
        write_text(tmp / "rl_summary.csv", rl_summary.to_csv(index=False))
        write_text(tmp / "rl_seeds_summary.csv", rl.drop(columns=list(RL_METRICS)).to_csv(index=False))
        write_text(tmp / "rl_steps.csv", rl_steps.to_csv(index=False))
        bars_rl = rl.drop(columns=["speedup"]).rename(columns={"speedup_median": "speedup"})
        spread_word = f"median, min–max over {len(seed_list)} seeds" if len(seed_list) > 1 else "one seed"
        save_figure(speedup_bars(bars_rl[bars_rl["status"] == "ok"], group="case", series="preset",
                                 spread=("speedup_min", "speedup_max") if len(seed_list) > 1 else None,
                                 title=f"End-to-end RL step speedup over veRL (simulated; {spread_word})"),
                    tmp / "rl_speedup")
        first_rl = rl_summary[(rl_summary["case"] == first_case) & (rl_summary["seed"] == first_seed)]
        save_figure(step_breakdown(first_rl, title=f"Where an RL step's time goes ({first_case}, seed {first_seed})"),
                    tmp / "rl_step_breakdown")
        accept = accept_over_steps(rl_steps[rl_steps["case"] == first_case],
                                   title=f"Accept length over RL steps ({first_case}; {spread_word})")
        save_figure(accept, tmp / "rl_accept_over_steps")
        shown = stats[["source", "n", "mean", "p50", "p99", "max", "top5_share", "straggler_mean"]]
        seeds_flag = f" --seeds {len(seed_list)}"
        write_text(tmp / "README.md", "\n".join([
            f"# tlt demo: the long tail of `{trace}`",
            "",
            f"Reproduce: `tlt demo --trace {trace}"
            + (f" --scenario {scenario}" if scenario != DEFAULT_SCENARIO else "") + f"{seeds_flag}`.",
            "",
            *([f"Note: {note}.", ""] if note else []),
            "Response-length statistics (tokens). `top5_share` = share of all tokens in the 5% longest",
            "responses; `straggler_mean` = mean over steps of max/mean length, the factor by which the",
            "slowest response stretches a synchronous rollout step.",
            "",
            markdown_table(shown, {"n": ",", "mean": ",.1f", "p50": ",.0f", "p99": ",.0f", "max": ",.0f",
                                   "top5_share": ".3f", "straggler_mean": ".2f"}),
            "",
            "![length CDF](length_cdf.png)",
            "",
            "![straggler factor](straggler_factor.png)",
            "",
            f"## Simulated: one RL step of `{s.trace.name}` ({s.model.name}, {s.cluster.gpus} x {s.cluster.gpu}, "
            f"TP {s.cluster.tp})",
            "",
            f"Reproduce: `tlt sim run --scenario {shown_path}{seeds_flag}` "
            f"(resolved scenario in `scenario.resolved.toml`). {_cost_line(s)}; the acceptance model is",
            "fitted to the paper's depth x verify table: predictions, not measurements.",
            "",
            _seed_note(seed_list, "no-sd"),
            "",
            markdown_table(sim_shown),
            "",
            sim_flip,
            "",
            *(["![seed spread](sim_seeds.png)", ""] if len(seed_list) > 1 else []),
            "![makespan](makespan.png)",
            "",
            f"![rollout timeline (seed {first_seed})](rollout_timeline.png)",
            "",
            *_rl_section(cases, rl_steps, rl_summary, shown_path, rl, seed_list),
        ]))
    figures = 8 if len(seed_list) > 1 else 7
    typer.echo(f"wrote {out}/ (README.md, trace_stats.csv, sim_summary.csv, sim_seeds_summary.csv, rl_summary.csv, "
               f"rl_seeds_summary.csv, rl_steps.csv, {figures} figures as PNG + PDF)")


def _cost_line(s: Scenario) -> str:
    """Which cost model priced ``s``, as a sentence start: the calibrated one on a GPU with measured
    profiles, the data-sheet roofline elsewhere (:func:`tltsim.scenario.build.describe_cost`)."""
    from tltsim.scenario import cost_model
    from tltsim.scenario.build import describe_cost

    return "Cost model: " + describe_cost(cost_model(s)).removeprefix("cost model: ")


def _status(per_seed: pd.DataFrame, case: str, preset: str) -> str:
    """A preset's status over the seeds: ``ok`` when every seed ran, else the first other status
    (``oom``), so a preset that fits at one seed only is not drawn as a clean bar."""
    rows = per_seed[(per_seed["case"] == case) & (per_seed["preset"] == preset)]["status"]
    return next((str(x) for x in rows if x != "ok"), "ok")
