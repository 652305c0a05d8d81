"""`tlt trace …`: list, summarise and plot response-length traces.

Each command's help ends with an example line, and ``tlt trace --help`` lists the scenario's
``trace.*`` fields with their defaults, generated from :class:`tltsim.scenario.TraceSection` so the
list cannot fall behind the schema: this is where a user deciding how to feed a trace to
``tlt sim run --set trace.FIELD=...`` looks first.
"""

from __future__ import annotations

import json
import math
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import click
import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from tltcore.input_files import sha256_of
from tltsim.traces import catalog, load_trace, search_path, select_sources, trace_stats
from tltsim.traces.catalog import find_file, how_to_get
from tltsim.traces.mapping import parse_mapping

#: What each ``trace.*`` scenario field does, in one line (defaults are appended from the schema).
TRACE_FIELD_HELP = {
    "name": "catalog name (tlt trace list), file on the trace search path, or a path",
    "step": "first trace step to simulate; none = the trace's first",
    "num_steps": "consecutive RL steps to simulate",
    "source": "keep only rows whose source column equals this, like --source here",
    "prompts_per_step": "prompt groups per step: subsample each step, or cut a one-step trace into steps",
    "samples": "keep the first n samples of every prompt group",
    "expand_samples": "grow one-sample groups to n samples with the log-normal sibling model",
    "dispersion_sigma": "sd of log length within a group, used by expand_samples",
    "cap": "clip responses to this many tokens and mark them hit_cap; none = the trace's own cap",
    "snap_capped": "simulate every capped response at exactly its cap",
    "default_prompt_tokens": "prompt length where the trace records none",
    "deal": "which worker serves which group: shuffle (seeded) or trace (trace order)",
    "seed": "which responses are simulated: samples trace.prompts_per_step groups, trace.expand_samples siblings "
            "and parametric profiles; dealing groups to workers and the policies' randomness follow the top-level "
            "seed (--seed)",
    "map": "a foreign file's columns as canonical ones, a table such as {response_tokens = \"response_length\", "
           "hit_cap = \"finish_reason:length\"} (COLUMN:VALUE|VALUE marks hit_cap where the column holds one of the "
           "values); --map CANONICAL=SPEC on tlt trace stats/plot/import, tlt sim run and tlt advise sets it",
    "tokenizer": "a tokenizer.json (or its folder) counting the tokens of a rollout dump that holds text only "
                 "(verl's), like --tokenizer",
}


def _toml_text(value: object) -> str:
    """A default as a user would write it in TOML or --set (true, none, 0.33)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def trace_fields_epilog() -> str:
    """The ``trace.*`` scenario fields, one paragraph each (Typer keeps paragraphs as lines)."""
    from tltsim.scenario import TraceSection

    default = TraceSection()
    lines = ["Scenario fields trace.* (in a scenario file's trace table, or tlt sim run --set trace.FIELD=VALUE):"]
    for name in TraceSection.model_fields:
        what = TRACE_FIELD_HELP.get(name, "see tltsim.scenario.TraceSection")
        lines.append(f"trace.{name}: {what} (default {_toml_text(getattr(default, name))}).")
    lines.append("Example: tlt sim run --trace polytrace_rl_rollouts --set trace.source=polytrace/"
                 "verl_dapo_qwen2.5-32b --set trace.step=3")
    return "\n\n".join(lines)


class TraceGroup(TyperGroup):
    """``tlt trace``: its help ends with the ``trace.*`` scenario fields (:func:`trace_fields_epilog`),
    written when the help is shown: they come from the scenario schema, whose import was a fifth of
    the start of every ``tlt trace`` command (~0.17 of ~0.8 CPU s for ``tlt trace stats``)."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.epilog is None:
            self.epilog = trace_fields_epilog()
        super().format_help(ctx, formatter)


app = typer.Typer(help="Inspect response-length traces: list, fetch, stats, plot, import.", no_args_is_help=True,
                  cls=TraceGroup)

TraceArg = Annotated[str, typer.Argument(help="Catalog name, file name on the search path, or a path.")]
MapOpt = Annotated[list[str] | None, typer.Option(
    "--map", help="CANONICAL=COLUMN, or hit_cap=COLUMN:VALUE[|VALUE...] (true where the column holds a value), "
    "repeatable; scenario field trace.map.")]
TokenizerOpt = Annotated[Path | None, typer.Option(
    "--tokenizer", help="tokenizer.json (or its folder) to count tokens of a rollout dump holding text only "
    "(verl's); scenario field trace.tokenizer.")]
SourceOpt = Annotated[list[str] | None, typer.Option(
    "--source", help="Keep only rows of this source (the trace's source column), repeatable; the same "
    "selection as scenario field trace.source (all trace.* fields: tlt trace --help).")]


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command("list")
def list_traces() -> None:
    """Show the catalogued traces and profiles, and where each file was found.

    Example: tlt trace list
    """
    table = Table(title="Traces (search path: " + ", ".join(str(p) for p in search_path()) + ")")
    for col in ("name", "rows", "found at", "checksum", "licence", "description"):
        table.add_column(col, overflow="fold")
    for entry in catalog().values():
        if entry.file is None:
            table.add_row(entry.name, "-", "(parametric profile)", "-", entry.license, entry.description)
            continue
        path = find_file(entry.file)
        check = "-" if path is None else ("ok" if sha256_of(path) == entry.sha256 else "DIFFERS")
        where = str(path) if path else f"[yellow]not downloaded — {how_to_get(entry)}[/yellow]"
        table.add_row(entry.name, f"{entry.rows:,}" if entry.rows else "?", where, check, entry.license,
                      entry.description)
    Console(width=200).print(table)


@app.command("fetch", epilog=(
        "Downloads go to $XDG_CACHE_HOME/tlt/traces (default ~/.cache/tlt/traces), the last folder of the "
        "trace search path. TLT_TRACE_MIRROR (or --mirror) replaces https://raw.githubusercontent.com/ with "
        "another base URL laid out as OWNER/REPO/COMMIT/PATH (http, https or file); TLT_FETCH_TIMEOUT is a "
        "deadline on the whole download (seconds, default 300)."))
def fetch(name: Annotated[str, typer.Argument(help="Catalog name (tlt trace list).")],
          force: Annotated[bool, typer.Option(help="Download again even if a checked copy is already on the "
                                              "search path.")] = False,
          mirror: Annotated[str | None, typer.Option(help="Base URL replacing https://raw.githubusercontent.com/ "
                                                     "(default: $TLT_TRACE_MIRROR).")] = None) -> None:
    """Download a catalogued public trace from its original source, verify its checksum, cache it.

    The upstream files are pinned to a commit; each is checked (size and sha256), converted to the
    canonical CSV and checked again against the catalog before it is cached. A failure leaves nothing in
    the cache; a second fetch is a cache hit.

    Example: tlt trace fetch polytrace_rl_rollouts
    """
    from tltsim.traces.fetch import fetch as fetch_trace

    typer.echo(fetch_trace(name, force=force, mirror=mirror).message)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.1%}" if abs(v) <= 1 else f"{v:,.1f}" if v < 100 else f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


#: Table headers (two lines, to stay narrow): each names its unit, and no two are alike; the CSV and
#: JSON columns keep the data names (``max``, ``straggler_max``...).
STAT_LABELS = {
    "n": "n", "mean": "mean\ntok", "p50": "p50\ntok", "p90": "p90\ntok", "p99": "p99\ntok", "max": "max\ntok",
    "top5_share": "top-5%\ntok share", "straggler_mean": "straggler\nmean ×", "straggler_min": "straggler\nmin ×",
    "straggler_max": "straggler\nmax ×", "group_tail": "group\nmax/mean ×", "hit_cap_frac": "hit cap\n%",
    "steps": "steps",
}
UNDEFINED = "–"


def _undefined(v: object) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float | np.floating) and not math.isfinite(float(v)))


def _cell(col: str, v: object, keys: list[str]) -> str:
    """One table cell; a statistic that is undefined for its group (NaN) shows as an en dash."""
    if col in keys:
        return _fmt(v)
    if _undefined(v):
        return UNDEFINED
    if col.startswith("straggler") or col == "group_tail":
        return f"{v:.2f}×"
    if col in ("top5_share", "hit_cap_frac"):
        return f"{v:.1%}"
    if col in ("n", "steps"):
        return _fmt(v)
    return f"{v:,.0f}"


def _json_value(v: object) -> object:
    """Plain JSON data: NaN/inf become null (JSON has no NaN), numpy scalars Python numbers."""
    if _undefined(v):
        return None
    if isinstance(v, np.integer | np.bool_):
        return v.item()
    if isinstance(v, np.floating):
        return float(v)
    return v


def stats_json(out: pd.DataFrame) -> str:
    """The statistics as strict JSON (``allow_nan=False``: a bare NaN would break every parser)."""
    rows = [{k: _json_value(v) for k, v in row.items()} for row in out.to_dict(orient="records")]
    return json.dumps(rows, indent=2, allow_nan=False, default=str)


@app.command("stats", epilog=(
        "Columns: n responses; mean/p50/p90/p99/max length in tokens; top-5% tok share = share of all tokens "
        "in the 5% longest responses; straggler = per-step max/mean length (mean, min, max over steps); "
        "group max/mean = mean over prompt groups of longest/mean sample; hit cap = share of responses cut "
        "at the cap; steps = (source, step) pairs.\n\n"
        f"{UNDEFINED} (null in JSON, empty in CSV): undefined for that group, e.g. group max/mean when no "
        "prompt group has two samples. Rows whose --by key is empty form the group '(empty)'; numeric keys "
        "sort as numbers."))
def stats(trace: TraceArg,
          by: Annotated[str, typer.Option(help="Columns to group by, e.g. source,step.")] = "",
          fmt: Annotated[Format, typer.Option("--format", help="table, csv or json.")] = Format.table,
          source: SourceOpt = None,
          mapping: MapOpt = None,
          tokenizer: TokenizerOpt = None) -> None:
    """n, mean, p50/p90/p99, max, top-5% token share, per-step straggler factor, hit_cap fraction.

    Example: tlt trace stats polytrace_rl_rollouts --by source,step --format json

    Example: tlt trace stats polytrace_rl_rollouts --source polytrace/verl_dapo_qwen2.5-32b --by step

    Example: tlt trace stats rollouts.csv.gz --map response_tokens=response_length --map hit_cap=finish_reason:length
    """
    df = select_sources(load_trace(trace, parse_mapping(mapping), tokenizer=tokenizer), source, trace=trace)
    keys = [c.strip() for c in by.split(",") if c.strip()]
    out = trace_stats(df, keys)
    if fmt is Format.csv:
        typer.echo(out.to_csv(index=False), nl=False)
        return
    if fmt is Format.json:
        typer.echo(stats_json(out))
        return
    shown = f" ({', '.join(source)})" if source else ""
    Console(width=200).print(stats_table(out, keys, f"{trace}{shown}"))


def stats_table(out: pd.DataFrame, keys: list[str], name: str) -> Table:
    """The statistics of :func:`trace_stats` as a rich table headed by :data:`STAT_LABELS`."""
    table = Table(title=f"{name}: response-length statistics (tok = tokens)",
                  caption=f"straggler = per-step max/mean length; {UNDEFINED} = undefined for the group")
    for col in out.columns:
        if col in keys:  # never cut a key: it is what the row is about
            table.add_column(col, justify="left", min_width=max(len(_fmt(v)) for v in [col, *out[col]]))
        else:
            table.add_column(STAT_LABELS.get(col, col), justify="right")
    for row in out.itertuples(index=False):
        table.add_row(*(_cell(col, v, keys) for col, v in zip(out.columns, row, strict=True)))
    return table


@app.command("plot")
def plot(trace: TraceArg,
         out: Annotated[Path | None, typer.Option(
             help="Results folder for PNG + PDF (default reports/traces/TRACE). Replaced as a whole if an "
             "earlier tlt trace plot wrote it; any other existing folder is refused unless --force.")] = None,
         by: Annotated[str, typer.Option(help="Column to colour by.")] = "source",
         source: SourceOpt = None,
         mapping: MapOpt = None,
         tokenizer: TokenizerOpt = None,
         force: Annotated[bool, typer.Option(help="Write into an existing --out folder tlt did not create "
                                             "(same-named files replaced, nothing deleted).")] = False) -> None:
    """Length CDF (log x) and per-step straggler factor, as PNG + PDF.

    Example: tlt trace plot polytrace_rl_rollouts --source polytrace/verl_dapo_qwen2.5-32b --out reports/traces/dapo
    """
    from analysis.style import save_figure
    from analysis.trace_plots import length_cdf, straggler_factor
    from tltcore.atomic import atomic_dir, check_output_dir
    from tltsim.traces.catalog import resolve

    stem = trace if trace in catalog() else Path(trace).stem  # r1distill_qwen1.5b_... is a name, not a suffix
    out = out if out is not None else Path("reports/traces") / stem
    found = resolve(trace)
    inputs = [found] if isinstance(found, Path) else []
    # The results-folder rules, checked before any work: a folder tlt did not create (or holding
    # another command's results) is refused unless --force, which never deletes; the trace itself
    # (or a folder holding it) is never an output.
    check_output_dir(out, force, kind="trace-plot", inputs=inputs)
    df = select_sources(load_trace(trace, parse_mapping(mapping), tokenizer=tokenizer), source, trace=trace)
    if by not in df.columns:
        from tltcore.errors import InputError

        raise InputError(f"cannot colour by '{by}': not a trace column", field="--by")
    names = []
    with atomic_dir(out, kind="trace-plot", force=force, inputs=inputs) as tmp:
        names += [p.name for p in save_figure(length_cdf(df, by), tmp / f"{stem}_length_cdf")]
        names += [p.name for p in save_figure(straggler_factor(df, by), tmp / f"{stem}_straggler")]
    for name in names:
        typer.echo(str(out / name))


@app.command("import")
def import_(src: Annotated[str, typer.Argument(help="A trace file (.csv, .jsonl, .parquet, optionally .gz/.zst), "
                                               "an RL framework's rollout dump folder (verl, NeMo-RL), or a "
                                               "catalog name.")],
            out: Annotated[Path, typer.Option(help="The canonical CSV to write; FILE.provenance.json goes beside it. "
                                              "A file this command did not write is never overwritten.")],
            mapping: MapOpt = None,
            tokenizer: TokenizerOpt = None) -> None:
    """Write any trace tlt reads as one canonical CSV (source, step, prompt_id, group_id, sample_idx,
    prompt_tokens, response_tokens, hit_cap) with a provenance file: where each column came from (file
    column, mapping, value mapping or default), the source files' sha256, the tokenizer and the tlt
    version.

    Example: tlt trace import rollouts.csv.gz --out canonical.csv --map hit_cap=finish_reason:length

    Example: tlt trace import logs/exp1 --out exp1.csv
    """
    from tltsim.traces.importer import import_trace

    done = import_trace(src, out, parse_mapping(mapping), tokenizer=tokenizer)
    typer.echo(f"{done.rows:,} responses: {done.out}")
    for col, where in done.columns.items():
        typer.echo(f"  {col}: {where}")
    typer.echo(f"provenance: {done.provenance}")
