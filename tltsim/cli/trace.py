"""`tlt trace …`: list, summarise and plot response-length traces."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tltsim.traces import catalog, load_trace, search_path, trace_stats
from tltsim.traces.catalog import find_file, sha256_of
from tltsim.traces.readers import parse_mapping

app = typer.Typer(help="Inspect response-length traces: list, stats, plot.", no_args_is_help=True)

TraceArg = Annotated[str, typer.Argument(help="Catalog name, file name on the search path, or a path.")]
MapOpt = Annotated[list[str] | None, typer.Option("--map", help="canonical=foreign column, repeatable.")]


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command("list")
def list_traces() -> None:
    """Show the catalogued traces and profiles, and where each file was found."""
    table = Table(title="Traces (search path: " + ", ".join(str(p) for p in search_path()) + ")")
    for col in ("name", "rows", "found at", "checksum", "licence", "description"):
        table.add_column(col, overflow="fold")
    for entry in catalog().values():
        if entry.file is None:
            table.add_row(entry.name, "-", "(parametric profile)", "-", entry.license, entry.description)
            continue
        path = find_file(entry.file)
        check = "-" if path is None else ("ok" if sha256_of(path) == entry.sha256 else "DIFFERS")
        table.add_row(entry.name, f"{entry.rows:,}" if entry.rows else "?",
                      str(path) if path else "[red]not found[/red]", check, entry.license, entry.description)
    Console(width=200).print(table)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.1%}" if abs(v) <= 1 else f"{v:,.1f}" if v < 100 else f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


@app.command("stats")
def stats(trace: TraceArg,
          by: Annotated[str, typer.Option(help="Columns to group by, e.g. source,step.")] = "",
          fmt: Annotated[Format, typer.Option("--format", help="table, csv or json.")] = Format.table,
          mapping: MapOpt = None) -> None:
    """n, mean, p50/p90/p99, max, top-5% token share, per-step straggler factor, hit_cap fraction."""
    df = load_trace(trace, parse_mapping(mapping))
    keys = [c.strip() for c in by.split(",") if c.strip()]
    out = trace_stats(df, keys)
    if fmt is Format.csv:
        typer.echo(out.to_csv(index=False), nl=False)
        return
    if fmt is Format.json:
        typer.echo(json.dumps(out.to_dict(orient="records"), indent=2, default=float))
        return
    table = Table(title=f"{trace}: response-length statistics (tokens)")
    labels = {"top5_share": "top5%", "straggler_mean": "max/mean step", "straggler_min": "min",
              "straggler_max": "max", "group_tail": "max/mean group", "hit_cap_frac": "hit cap"}
    for col in out.columns:
        table.add_column(labels.get(col, col), justify="left" if col in keys else "right")
    for row in out.itertuples(index=False):
        cells = []
        for col, v in zip(out.columns, row, strict=True):
            if col.startswith("straggler") or col == "group_tail":
                cells.append(f"{v:.2f}×")
            elif col in ("top5_share", "hit_cap_frac"):
                cells.append(f"{v:.1%}")
            elif col in ("n", "steps") or col in keys:
                cells.append(_fmt(v))
            else:
                cells.append(f"{v:,.0f}")
        table.add_row(*cells)
    Console(width=200).print(table)


@app.command("plot")
def plot(trace: TraceArg,
         out: Annotated[Path, typer.Option(help="Output folder for PNG + PDF.")] = Path("reports/traces"),
         by: Annotated[str, typer.Option(help="Column to colour by.")] = "source",
         mapping: MapOpt = None) -> None:
    """Length CDF (log x) and per-step straggler factor, as PNG + PDF."""
    from analysis.style import save_figure
    from analysis.trace_plots import length_cdf, straggler_factor

    df = load_trace(trace, parse_mapping(mapping))
    if by not in df.columns:
        from tltsim.errors import InputError

        raise InputError(f"cannot colour by '{by}': not a trace column", field="--by")
    stem = Path(trace).stem
    written = save_figure(length_cdf(df, by), out / f"{stem}_length_cdf")
    written += save_figure(straggler_factor(df, by), out / f"{stem}_straggler")
    for p in written:
        typer.echo(str(p))
