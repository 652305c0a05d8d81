"""`tlt demo`: the main job run by `make run` — a small, reproducible report under reports/demo/.

It answers the first questions a user asks: how long is the tail of a real RL trace, how much does
the slowest response stretch each step, and how much would elastic speculative decoding with
BEG-MAB cut one step's rollout (simulated). The report folder is built aside and swapped in
atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from tltsim.scenario import Scenario

DEFAULT_TRACE = "polytrace_rl_rollouts"
DEFAULT_SCENARIO = "dapo_qwen32b_polytrace"  # a bundled scenario (tltsim/data/scenarios/)


def _markdown_table(df) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        cells = [f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)
                 for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _with_trace(s: Scenario, trace: str | None) -> tuple[Scenario, str]:
    """``s`` simulating ``trace`` instead of its own trace, and the ``--set`` flags that say so.

    The report is titled by the trace it analyses, so the simulation must run on that trace too. A
    different trace drops the scenario's ``trace.source`` and ``trace.step``: they name rows of the
    scenario's own trace and would not exist in another. The same trace (by name or by path) keeps
    the scenario as it is.
    """
    from dataclasses import replace

    from tltsim.scenario import apply_override
    from tltsim.traces.catalog import resolve

    if trace is None or resolve(trace) == resolve(s.trace.name):
        return s, ""
    s = apply_override(s, "trace.name", trace, path="--trace")
    s = replace(s, trace=replace(s.trace, source=None, step=None))
    return s, f" --trace {trace} --set trace.source=none --set trace.step=none"


def _simulate(scenario: str, trace: str | None = None) -> tuple[Any, ...]:
    """Run the scenario's policies on one step of ``trace`` (None: the scenario's trace); return
    (scenario, events, summary, extra ``tlt sim run`` flags that reproduce it)."""
    from tltsim.scenario import compare_policies, load_scenario

    s, flags = _with_trace(load_scenario(scenario), trace)
    return (s, *compare_policies(s), flags)


def demo(trace: Annotated[str | None, typer.Option(
             help=f"Trace to analyse and simulate (default: the scenario's trace, {DEFAULT_TRACE}).")] = None,
         scenario: Annotated[str, typer.Option(help="Scenario TOML (path or bundled name) to simulate.")]
         = DEFAULT_SCENARIO,
         out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports/demo"),
         force: Annotated[bool, typer.Option(help="Write into an existing --out folder tlt did not create "
                                             "(same-named files replaced, nothing deleted).")] = False) -> None:
    """Analyse a trace's long tail, simulate one RL step of it under SD policies, write reports/demo/.

    Example: tlt demo --trace r1distill_qwen1.5b_aime_8samples --out reports/demo-aime
    """
    from analysis.rollout_plots import makespan_bars, rollout_timeline
    from analysis.style import save_figure
    from analysis.trace_plots import length_cdf, straggler_factor
    from tltsim.atomic import atomic_dir, check_output_dir, write_text
    from tltsim.scenario import scenario_toml
    from tltsim.traces import load_trace, trace_stats

    check_output_dir(out, force)
    if trace is None:
        from tltsim.scenario import load_scenario

        trace = load_scenario(scenario).trace.name
    df = load_trace(trace)
    stats = trace_stats(df, ["source"])
    s, events, summary, trace_flags = _simulate(scenario, trace)
    shown_path = scenario + trace_flags
    with atomic_dir(out, force=force) as tmp:
        write_text(tmp / "sim_summary.csv", summary.to_csv(index=False))
        write_text(tmp / "scenario.resolved.toml", scenario_toml(s))
        save_figure(rollout_timeline(events), tmp / "rollout_timeline")
        save_figure(makespan_bars(summary), tmp / "makespan")
        sim_cols = ["policy", "makespan_s", "speedup", "idle_fraction", "mean_accept_length", "sd_share"]
        write_text(tmp / "trace_stats.csv", stats.to_csv(index=False))
        save_figure(length_cdf(df), tmp / "length_cdf")
        save_figure(straggler_factor(df), tmp / "straggler_factor")
        shown = stats[["source", "n", "mean", "p50", "p99", "max", "top5_share", "straggler_mean"]]
        write_text(tmp / "README.md", "\n".join([
            f"# tlt demo: the long tail of `{trace}`",
            "",
            f"Reproduce: `tlt demo --trace {trace}`.",
            "",
            "Response-length statistics (tokens). `top5_share` = share of all tokens in the 5% longest",
            "responses; `straggler_mean` = mean over steps of max/mean length, the factor by which the",
            "slowest response stretches a synchronous rollout step.",
            "",
            _markdown_table(shown),
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
            _markdown_table(summary[sim_cols]),
            "",
            "![makespan](makespan.png)",
            "",
            "![rollout timeline](rollout_timeline.png)",
            "",
        ]))
    typer.echo(f"wrote {out}/ (README.md, trace_stats.csv, sim_summary.csv, 4 figures as PNG + PDF)")
