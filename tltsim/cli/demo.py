"""`tlt demo`: the main job run by `make run` — a small, reproducible report under reports/demo/.

It answers the first question a user asks of a trace: how long is the tail, and how much does the
slowest response stretch each step. The report folder is built aside and swapped in atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_TRACE = "polytrace_rl_rollouts"


def _markdown_table(df) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        cells = [f"{v:,.2f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)
                 for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def demo(trace: Annotated[str, typer.Option(help="Trace to analyse.")] = DEFAULT_TRACE,
         out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports/demo")) -> None:
    """Analyse the default trace and write a small report under reports/demo/."""
    from analysis.style import save_figure
    from analysis.trace_plots import length_cdf, straggler_factor
    from tltsim.atomic import atomic_dir, write_text
    from tltsim.traces import load_trace, trace_stats

    df = load_trace(trace)
    stats = trace_stats(df, ["source"])
    with atomic_dir(out) as tmp:
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
        ]))
    typer.echo(f"wrote {out}/ (README.md, trace_stats.csv, length_cdf.png/pdf, straggler_factor.png/pdf)")
