"""`tlt demo`: the main job run by `make run` — a small, reproducible report under reports/demo/.

It answers the first questions a user asks: how long is the tail of a real RL trace, how much does
the slowest response stretch each step, and how much would elastic speculative decoding with
BEG-MAB cut one step's rollout (simulated). The report folder is built aside and swapped in
atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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


def _simulate(scenario: str):
    """Run the scenario's policies on one step; return (scenario, events, summary)."""
    from tltsim.scenario import compare_policies, load_scenario

    s = load_scenario(scenario)
    return (s, *compare_policies(s))


def demo(trace: Annotated[str, typer.Option(help="Trace to analyse.")] = DEFAULT_TRACE,
         scenario: Annotated[str, typer.Option(help="Scenario TOML (path or bundled name) to simulate.")]
         = DEFAULT_SCENARIO,
         out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports/demo"),
         force: Annotated[bool, typer.Option(help="Write into an existing --out folder tlt did not create "
                                             "(same-named files replaced, nothing deleted).")] = False) -> None:
    """Analyse the default trace, simulate one RL step under SD policies, write reports/demo/."""
    from analysis.rollout_plots import makespan_bars, rollout_timeline
    from analysis.style import save_figure
    from analysis.trace_plots import length_cdf, straggler_factor
    from tltsim.atomic import atomic_dir, check_output_dir, write_text
    from tltsim.scenario import scenario_toml
    from tltsim.traces import load_trace, trace_stats

    check_output_dir(out, force)
    df = load_trace(trace)
    stats = trace_stats(df, ["source"])
    s, events, summary = _simulate(scenario)
    shown_path = scenario
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
