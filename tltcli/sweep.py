"""`tlt sweep …`: run a sweep spec's points (resumably), see where a sweep stands, list its points.

A spec (TOML, see :mod:`tltsim.sweep.spec`) is a base scenario plus grid, zip and random axes over
any dotted scenario field. ``tlt sweep run`` evaluates every point that has no result yet in the
sweep folder (``results/sweeps/<spec name>/`` by default) and commits each one as it finishes, so a
killed sweep resumes where it stopped; ``tlt sweep status`` counts done, failed and pending points
and prints the failures' errors; ``tlt sweep points`` lists what a spec expands to before anything
runs.
"""

from __future__ import annotations

import json
import math
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from tltcore.errors import InputError

app = typer.Typer(help="Sweep scenario fields over grids, zips and random samples, resumably, locally or on Ray.",
                  no_args_is_help=True)

SPEC_HELP = "Sweep spec TOML, or a bundled spec's name (elastic_threshold_gpu)."


class ExecutorChoice(StrEnum):
    local = "local"
    ray = "ray"


def _console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 140)


def _default_out(spec_path: Path) -> Path:
    from tltsim.sweep.runner import DEFAULT_SWEEPS

    return DEFAULT_SWEEPS / spec_path.stem


class _PlainProgress:
    """Off a terminal (CI logs, nohup): one line per tenth of the points, with the ETA."""

    def __init__(self, console: Console) -> None:
        self.console, self.total, self.done, self.failed, self.shown, self.t0 = console, 0, 0, 0, 0, 0.0

    def start(self, total: int, skipped: int) -> None:
        self.total, self.t0 = total, time.perf_counter()
        self.console.print(f"{total:,} points to run ({skipped:,} already have results)", highlight=False)

    def advance(self, ok: bool) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        if self.done - self.shown >= max(1, self.total // 10) or self.done == self.total:
            self.shown = self.done
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / self.done * (self.total - self.done)
            self.console.print(f"  {self.done:,}/{self.total:,} points ({self.failed:,} failed), "
                               f"{elapsed:.0f} s elapsed, ETA {eta:.0f} s", highlight=False)


@app.command()
def run(
    spec: Annotated[str, typer.Argument(help=SPEC_HELP, show_default=False)],
    out: Annotated[Path | None, typer.Option(help="Sweep folder (default results/sweeps/<spec name>).")] = None,
    backend: Annotated[ExecutorChoice, typer.Option(
        help="local worker processes, or Ray tasks.")] = ExecutorChoice.local,
    workers: Annotated[int | None, typer.Option(
        help="Local worker processes, or CPUs of a local Ray (default: min(cores, 4)).")] = None,
    address: Annotated[str | None, typer.Option(
        help="Ray cluster to join (ray://host:10001 or host:6379); default: start a local Ray.")] = None,
    retry_failed: Annotated[bool, typer.Option(help="Evaluate points that failed before once more.")] = False,
    limit: Annotated[int | None, typer.Option(help="Evaluate at most this many points in this run.")] = None,
) -> None:
    """Evaluate every point of SPEC that has no result yet, committing each as it finishes.

    Re-running skips finished points, so a killed sweep resumes; a failing point is recorded, the rest go on.

    Results: a Parquet dataset, OUT/results (read it with tltsim.sweep.SweepStore(OUT).read()).

    Example: tlt sweep run elastic_threshold_gpu --workers 4 (or --backend ray --address HOST:6379)
    """
    from tltsim.sweep.runner import run_sweep
    from tltsim.sweep.spec import load_spec

    s = load_spec(spec)
    dest = out if out is not None else _default_out(s.path)
    console = _console()
    if console.is_terminal:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("points"),
                   TextColumn("[red]{task.fields[failed]} failed"), TimeElapsedColumn(), TextColumn("ETA"),
                   TimeRemainingColumn())
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task(f"sweep {s.name}", total=None, failed=0)
            failed = [0]

            def on_start(total: int, skipped: int) -> None:
                bar.update(task, total=total)
                if skipped:
                    console.print(f"{skipped:,} points already have results; {total:,} to run", highlight=False)

            def on_point(point: Any, outcome: Any) -> None:
                failed[0] += 0 if outcome.ok else 1
                bar.update(task, advance=1, failed=failed[0])

            report = run_sweep(s, dest, backend=backend.value, workers=workers, address=address,
                               retry_failed=retry_failed, limit=limit, progress=on_point, on_start=on_start)
    else:
        plain = _PlainProgress(console)
        report = run_sweep(s, dest, backend=backend.value, workers=workers, address=address,
                           retry_failed=retry_failed, limit=limit, progress=lambda p, o: plain.advance(o.ok),
                           on_start=plain.start)
    rate = "" if math.isnan(report.points_per_min) else f", {report.points_per_min:,.1f} points/min"
    console.print(f"{report.total:,} points: {report.skipped:,} done before, {report.ok:,} ok and "
                  f"{report.failed:,} failed now, {report.pending:,} pending{rate}", highlight=False)
    if report.failed:
        console.print(f"[yellow]failed points and their errors: tlt sweep status {dest}[/]")
    console.print(f"results: {report.out}", highlight=False)


def _spec_store(spec: Any, out: Path | None) -> Any:
    """The sweep folder a spec's results are read from (``--out``, else the default). A path that
    exists but is not a sweep tlt wrote (no ``sweep.json`` saying so) is refused: read as a sweep,
    ``--out /etc`` would list every point as pending without a word. A folder not made yet is a
    sweep not started: every point pending is the truth."""
    from tltsim.sweep.store import SweepStore

    store = SweepStore(out if out is not None else _default_out(spec.path))
    if (store.root.exists() or store.root.is_symlink()) and not store.is_sweep():
        raise InputError("is not a sweep folder tlt wrote (no sweep.json); give the folder `tlt sweep run` wrote for "
                         "this spec", path=store.root, field="--out")
    return store


def _status_frames(target: str, out: Path | None) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """(sweep folder, its points, its deduplicated results) for a spec or a sweep folder."""
    from tltcore.errors import warn
    from tltsim.sweep.runner import points_frame
    from tltsim.sweep.spec import expand, load_spec
    from tltsim.sweep.store import DamagedFile, SweepStore

    p = Path(target)
    if p.is_dir():
        if out is not None:
            raise InputError("give either a sweep folder or a spec with --out, not both", path="--out")
        store = SweepStore(p)
        if not store.is_sweep():
            raise InputError("is not a tlt sweep folder (no sweep.json)", path=p)
        try:
            points = store.points()
        except DamagedFile as exc:
            points = None
            warn(f"{exc.path} is damaged ({exc.reason}); counting the points that have results and the total in "
                 f"{store.root / 'sweep.json'}: `tlt sweep run` with the spec and --out rebuilds it")
    else:
        s = load_spec(target)
        store = _spec_store(s, out)
        points = points_frame(s, expand(s))
    results = store.read() if store.results.is_dir() else pd.DataFrame(columns=["key", "status", "error"])
    if points is None:
        points = _points_from_results(store, results)
    return store.root, points, results


def _points_from_results(store: Any, results: pd.DataFrame) -> pd.DataFrame:
    """A stand-in for a damaged ``points.parquet``: the points that have results (key and axis values),
    then one placeholder row per point the sweep's ``sweep.json`` counts beyond them (pending)."""
    axes = [a for a in store.meta().get("axes", []) if isinstance(a, str)]
    firsts = results.drop_duplicates("key") if len(results) else pd.DataFrame(columns=["key"])
    frame = pd.DataFrame({"index": range(len(firsts)), "key": list(firsts["key"].astype(str))})
    for a in axes:
        frame[a] = list(firsts[a]) if a in firsts.columns else None
    total = store.meta().get("points")
    extra = total - len(frame) if isinstance(total, int) and not isinstance(total, bool) and total > len(frame) else 0
    if extra:
        more = pd.DataFrame({"index": range(len(frame), len(frame) + extra),
                             "key": [f"(unknown {i})" for i in range(extra)]})
        frame = pd.concat([frame, more], ignore_index=True)
    frame["invalid"] = ""
    return frame


@app.command()
def status(
    target: Annotated[str, typer.Argument(help="A sweep folder, or a spec (its folder is --out or the default).",
                                          show_default=False)],
    out: Annotated[Path | None, typer.Option(help="Sweep folder of the spec (default results/sweeps/<name>).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts and failures as JSON.")] = False,
) -> None:
    """Count a sweep's done, failed and pending points and show each failure's error.

    Example: tlt sweep status results/sweeps/elastic_threshold_gpu
    """
    root, points, results = _status_frames(target, out)
    latest = results.drop_duplicates("key").set_index("key")["status"] if len(results) else pd.Series(dtype=str)
    keys = list(points["key"])
    state = [str(latest.get(k, "pending")) for k in keys]
    done, failed = state.count("ok"), state.count("error")
    pending = len(keys) - done - failed
    extra = len(set(latest.index) - set(keys))
    axis_cols = [c for c in points.columns if c not in ("index", "key", "invalid", "scenario")]
    errors = results.drop_duplicates("key").set_index("key")["error"] if len(results) else pd.Series(dtype=str)
    failures = [{"key": k, **{c: _plain(v) for c, v in zip(axis_cols, row, strict=True)}, "error": str(errors.get(k))}
                for k, st, row in zip(keys, state, points[axis_cols].itertuples(index=False), strict=True)
                if st == "error"]
    if as_json:
        print(json.dumps({"folder": str(root), "points": len(keys), "done": done, "failed": failed,
                          "pending": pending, "not_in_spec": extra, "failures": failures}, indent=1))
        return
    console = _console()
    console.print(f"{root}: {len(keys):,} points: [green]{done:,} done[/], [red]{failed:,} failed[/], "
                  f"{pending:,} pending" + (f" ({extra:,} results of points no longer in the spec)" if extra else ""))
    if failures:
        table = Table(title="Failed points (tlt sweep run --retry-failed evaluates them again)")
        for col in ("key", *axis_cols, "error"):
            table.add_column(col, overflow="fold")
        for f in failures:
            table.add_row(*(str(f[c]) for c in ("key", *axis_cols)), f["error"])
        console.print(table)


def _plain(v: Any) -> Any:
    """A cell as JSON-safe plain data (numpy scalars and NaN become Python values / null)."""
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


#: ``tlt sweep points`` lists this many points unless told otherwise: a 90,000-point table is unreadable,
#: and resolving every point of a big grid just to count it takes minutes.
SHOW_DEFAULT = 100


@app.command()
def points(
    spec: Annotated[str, typer.Argument(help=SPEC_HELP, show_default=False)],
    out: Annotated[Path | None, typer.Option(help="Sweep folder whose results to show beside each point.")] = None,
    show: Annotated[int, typer.Option(help="List at most this many points (0: every point, which resolves them "
                                           "all: minutes for a 100,000-point grid).")] = SHOW_DEFAULT,
) -> None:
    """List the points SPEC expands to, with each one's key and status, before or during a run.

    The count comes from the axes' lengths at once; only the listed points are resolved.

    Example: tlt sweep points elastic_threshold_gpu
    """
    import itertools

    from tltsim.sweep.runner import points_frame
    from tltsim.sweep.spec import expand, iter_points, load_spec

    if show < 0:
        raise InputError(f"must be >= 0 (0 lists every point), got {show}", path="--show")
    s = load_spec(spec)
    store = _spec_store(s, out)
    base = s.base or "defaults"
    if show == 0 or s.size <= show:  # all of them: exact count, and every axis value checked as a run would
        pts = points_frame(s, expand(s))
        title = f"{s.name}: {len(pts):,} points over {base}"
    else:
        pts = points_frame(s, list(itertools.islice(iter_points(s), show)))
        title = (f"{s.name}: {s.size:,} points over {base} (the axes' product; scenarios that coincide run "
                 f"once), the first {len(pts):,} listed (--show N for more, --show 0 for all)")
    have = store.status_by_key() if store.results.is_dir() else {}
    table = Table(title=title)
    for col in ("#", "key", *s.axis_fields, "status"):
        table.add_column(col, overflow="fold")
    n_axes = len(s.axis_fields)
    for row in pts.itertuples(index=False, name=None):
        index, key, values, invalid = row[0], row[1], row[2:2 + n_axes], row[2 + n_axes]
        table.add_row(str(index), key, *(str(v) for v in values),
                      f"invalid: {invalid}" if invalid else have.get(key, "pending"))
    _console().print(table)
