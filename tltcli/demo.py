"""`tlt demo`: the main job run by `make run` — a small, reproducible report under reports/demo/.

It answers the first questions a user asks: how long is the tail of a real RL trace, how much does
the slowest response stretch each step, how much would elastic speculative decoding with BEG-MAB cut
one step's rollout, and what do whole RL steps gain end to end with TLT and its peers (`verl`,
`tlt`, `tlt-base`, `static-drafter`) on a GPU where SD pays (H100) and one where it does not (H20)?
Everything is simulated. The report folder is built aside and swapped in atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from tltsim.scenario import Scenario

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
#: The two whole-run cases, (GPU, TP or None for the scenario's): H100, where SD pays, and H20 at TP 8
#: (one rollout group per node), where it does not: 148 dense TFLOPS beside 4 TB/s make verifying a
#: draft tree cost several decode steps.
DEMO_CASES = (("H100", None), ("H20", 8))


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


def _simulate(scenario: str, trace: str | None = None) -> tuple[Any, ...]:
    """Run the scenario's policies on one step of ``trace`` (None: the scenario's trace); return
    (scenario, events, summary, extra ``tlt sim run`` flags that reproduce it)."""
    from tltsim.scenario import compare_policies, load_scenario

    s, flags = _with_trace(load_scenario(scenario), trace)
    return (s, *compare_policies(s), flags)


def _rl_steps(s: Scenario) -> int:
    """How many consecutive RL steps the scenario's trace offers from its first step (at most
    :data:`DEMO_RL_STEPS`); 1 for a trace with one snapshot."""
    from tltsim.traces import load_trace

    df = load_trace(s.trace.name, seed=s.trace.seed)
    if s.trace.source is not None:
        df = df[df["source"] == s.trace.source]
    steps = sorted(int(x) for x in df["step"].unique())
    first = s.trace.step if s.trace.step is not None else steps[0]
    return max(1, min(DEMO_RL_STEPS, sum(x >= first for x in steps))) if len(steps) > 1 else 1


def _rl_runs(s: Scenario) -> tuple[Any, ...]:
    """Whole RL runs of :data:`DEMO_PRESETS` (and verl) in each of :data:`DEMO_CASES`: (scenario per
    case label, the steps table and the summary table, both with a ``case`` column)."""
    import pandas as pd

    from tltsim.rl.run import compare_presets
    from tltsim.scenario import with_values

    n = _rl_steps(s)
    cases, steps, summaries = {}, [], []
    for gpu, tp in DEMO_CASES:
        tp = tp or s.cluster.tp
        case = with_values(s, {"presets": DEMO_PRESETS, "cluster.gpu": gpu, "cluster.tp": tp,
                               "trace.num_steps": n})
        label = f"{gpu}, TP {tp}"
        _, st, summ = compare_presets(case)
        cases[label] = case
        steps.append(st.assign(case=label))
        summaries.append(summ.assign(case=label))
    return cases, pd.concat(steps, ignore_index=True), pd.concat(summaries, ignore_index=True)


def _rl_section(cases: dict, steps, summary, scenario_arg: str) -> list[str]:
    """The README's whole-RL-run section (tables with the commands that reproduce them)."""
    from analysis.markdown import markdown_table

    cols = ["case", "preset", "steps", "total_s", "rollout_share", "mean_accept_length", "rollout_speedup",
            "speedup"]
    first = next(iter(cases.values()))
    runs = "\n".join(f"- {label}: `tlt sim run --scenario {scenario_arg} --set cluster.gpu={c.cluster.gpu} "
                     f"--set cluster.tp={c.cluster.tp} --steps {c.trace.num_steps} "
                     + " ".join(f"--preset {p}" for p in DEMO_PRESETS) + "`" for label, c in cases.items())
    pays = summary[(summary["preset"] != "verl") & (summary["speedup"] < 1.0)]
    verdict = ("**Where SD does not pay**: " + ", ".join(f"`{r.preset}` on {r.case} ({r.speedup:.3f}x)"
                                                         for r in pays.itertuples()) + "."
               if len(pays) else "Every preset is at least 1x in both cases.")
    return [
        f"## Simulated: whole RL steps, veRL vs TLT presets ({first.model.name}, {first.cluster.gpus} GPUs, "
        f"{first.trace.num_steps} steps)",
        "",
        "Each RL step runs rollout, drafter training (the Spot Trainer on released workers for `tlt`), "
        "reward, old log-probs, reference, actor update and weight sync on one clock. `speedup` is the "
        "end-to-end step-time speedup over `verl`, `rollout_speedup` the rollout's alone. `tlt-base` is the "
        "model-free n-gram drafter; `static-drafter` is trained once and goes stale as the policy moves. "
        "On H100 SD pays; on H20 at TP 8 (148 dense TFLOPS beside 4 TB/s) verifying a draft tree costs "
        "several decode steps, so it does not: the n-gram drafter loses time and TLT gains little.",
        "",
        "Reproduce:",
        runs,
        "",
        markdown_table(summary[cols], {"total_s": ",.1f", "rollout_share": ".2f", "mean_accept_length": ".2f",
                                       "rollout_speedup": ".3f", "speedup": ".3f"}),
        "",
        verdict,
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
    from tltcore.atomic import atomic_dir, check_output_dir, write_text
    from tltsim.scenario import scenario_toml
    from tltsim.traces import load_trace, trace_stats

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
    typer.echo(f"demo: simulating one rollout step of scenario {scenario} under SD policies")
    s, events, summary, trace_flags = _simulate(scenario, trace)
    shown_path = scenario + trace_flags
    typer.echo("demo: simulating whole RL runs (verl, tlt, tlt-base, static-drafter)")
    cases, rl_steps, rl_summary = _rl_runs(s)
    first_case = next(iter(cases))
    typer.echo(f"demo: writing figures and README to {out}")
    with atomic_dir(out, kind="demo", force=force) as tmp:
        write_text(tmp / "sim_summary.csv", summary.to_csv(index=False))
        write_text(tmp / "scenario.resolved.toml", scenario_toml(s))
        save_figure(rollout_timeline(events), tmp / "rollout_timeline")
        save_figure(makespan_bars(summary), tmp / "makespan")
        sim_cols = ["policy", "makespan_s", "speedup", "idle_fraction", "mean_accept_length", "sd_share"]
        write_text(tmp / "trace_stats.csv", stats.to_csv(index=False))
        save_figure(length_cdf(df), tmp / "length_cdf")
        save_figure(straggler_factor(df), tmp / "straggler_factor")
        write_text(tmp / "rl_summary.csv", rl_summary.to_csv(index=False))
        write_text(tmp / "rl_steps.csv", rl_steps.to_csv(index=False))
        save_figure(speedup_bars(rl_summary[rl_summary["status"] == "ok"], group="case", series="preset",
                                 title="End-to-end RL step speedup over veRL (simulated)"), tmp / "rl_speedup")
        save_figure(step_breakdown(rl_summary[rl_summary["case"] == first_case],
                                   title=f"Where an RL step's time goes ({first_case})"), tmp / "rl_step_breakdown")
        accept = accept_over_steps(rl_steps[rl_steps["case"] == first_case],
                                   title=f"Accept length over RL steps ({first_case})")
        save_figure(accept, tmp / "rl_accept_over_steps")
        shown = stats[["source", "n", "mean", "p50", "p99", "max", "top5_share", "straggler_mean"]]
        write_text(tmp / "README.md", "\n".join([
            f"# tlt demo: the long tail of `{trace}`",
            "",
            f"Reproduce: `tlt demo --trace {trace}`.",
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
            f"Reproduce: `tlt sim run --scenario {shown_path}` "
            "(resolved scenario in `scenario.resolved.toml`). The cost model is an analytic roofline and",
            "the acceptance model is fitted to the paper's depth x verify table: predictions, not measurements.",
            "",
            markdown_table(summary[sim_cols], {"makespan_s": ",.1f", "speedup": ".3f", "idle_fraction": ".3f",
                                               "mean_accept_length": ".2f", "sd_share": ".3f"}),
            "",
            "![makespan](makespan.png)",
            "",
            "![rollout timeline](rollout_timeline.png)",
            "",
            *_rl_section(cases, rl_steps, rl_summary, shown_path),
        ]))
    typer.echo(f"wrote {out}/ (README.md, trace_stats.csv, sim_summary.csv, rl_summary.csv, rl_steps.csv, "
               "7 figures as PNG + PDF)")
