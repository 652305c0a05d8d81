"""A ``tlt sim run`` results folder: the files it holds and the upper bound written beside the tables.

Shared by the one-seed run (:mod:`tltcli.sim`) and the ``--seeds`` run (:mod:`tltcli.sim_uncertainty`),
so neither imports the other for them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from rich.table import Table

from tltcore.atomic import atomic_dir
from tltsim.scenario import BASELINE_POLICY, Scenario, SimInputs, scenario_toml

if TYPE_CHECKING:
    from tltsim.run_warnings import RunWarning


class Perfetto(StrEnum):
    auto = "auto"
    on = "on"
    off = "off"


#: ``--perfetto auto`` writes trace.json only up to this estimated size (large runs: ~250 B per row).
PERFETTO_AUTO_MAX_BYTES = 64 * 2**20


#: The upper bound's file in a results folder (policies, not presets): :func:`upper_bound_table`'s rows.
BOUND_CSV = "bound.csv"


def upper_bound_table(inputs: SimInputs, specs: tuple[Any, ...], summary: pd.DataFrame) -> pd.DataFrame:
    """Per step, the makespan no policy of ``specs`` can beat under the model (:mod:`tltsim.upper_bound`)
    and the speedup over no-sd it caps: printed, and written to :data:`BOUND_CSV` (a file of its own,
    not columns of summary.csv: a ``--seeds`` run's per-seed rows must stay the plain run's rows at
    that seed; its ``bound.csv`` is these rows per seed)."""
    from tltsim.upper_bound import scenario_bounds

    bounds = scenario_bounds(inputs, specs)
    base = summary[summary["policy"] == BASELINE_POLICY].set_index("step")["makespan_s"]
    return pd.DataFrame({"step": [b.step for b in bounds], "bound_makespan_s": [b.makespan for b in bounds],
                         "bound_speedup": [float(base.get(b.step, float("nan"))) / b.makespan if b.makespan > 0
                                           else float("nan") for b in bounds],
                         "queued_workers": [int(b.queued.sum()) for b in bounds]})


def bound_caveat(mode: str) -> str:
    """What the upper bound's line adds under stochastic acceptance: it bounds expected lengths only."""
    return "" if mode == "expected" else " (a bound on expected accept lengths: stochastic runs may dip below)"


def upper_bound_line(bound: pd.DataFrame, mode: str) -> str:
    """One line: the bound over the whole run (steps back to back)."""
    total = float(bound["bound_makespan_s"].sum())
    line = f"upper bound: no policy above finishes in under {total:.2f} s"
    if len(bound) == 1 and bound["bound_speedup"].notna().all():
        line += f" (speedup <= {float(bound['bound_speedup'].iloc[0]):.3f}x)"
    return line + bound_caveat(mode)


#: Rows per row group of ``events.parquet``: pyarrow's default (``write_table``'s ``row_group_size``),
#: which :class:`EventsParquet` keeps so that a file written seed by seed is the one written whole.
PARQUET_ROW_GROUP = 1024 * 1024


class EventsParquet:
    """``events.parquet`` written table by table (a ``--seeds`` run's seeds in turn), byte for byte the
    file ``pandas.concat(tables).to_parquet(path, index=False)`` writes: the same schema and row groups
    of :data:`PARQUET_ROW_GROUP` rows (a group may span two tables), so no run holds every seed's events
    at once. Rows wait here only until a row group is full. Use as a context manager (:meth:`close`)."""

    def __init__(self, path: Path, row_group: int = PARQUET_ROW_GROUP) -> None:
        self.path, self.row_group = path, row_group
        self._writer: Any = None
        self._parts: list[Any] = []
        self._rows = 0
        self._closed = False

    def __enter__(self) -> EventsParquet:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        elif self._writer is not None:
            self._writer.close()

    def add(self, frame: pd.DataFrame) -> None:
        """Append ``frame``'s rows (an empty one adds nothing, as ``concat`` of stacked seeds skips it)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if frame.empty:
            return
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, table.schema)
        elif not table.schema.equals(self._writer.schema, check_metadata=True):
            raise ValueError(f"{self.path.name}: a table's columns differ from the first's")
        self._parts.append(table)
        self._rows += len(table)
        while self._rows >= self.row_group:
            whole = pa.concat_tables(self._parts)
            self._writer.write_table(whole.slice(0, self.row_group), row_group_size=self.row_group)
            rest = whole.slice(self.row_group).combine_chunks()  # a copy: the written rows' buffers are freed
            self._parts, self._rows = [rest], len(rest)

    def close(self) -> None:
        """Write the last rows (a file with no rows: what ``to_parquet`` writes of an empty table); once."""
        import pyarrow as pa

        if self._closed:
            return
        self._closed = True
        if self._writer is None:
            pd.DataFrame().to_parquet(self.path, index=False)
            return
        if self._rows:
            self._writer.write_table(pa.concat_tables(self._parts), row_group_size=self.row_group)
        self._parts, self._rows = [], 0
        self._writer.close()


def write_results(dest: Path, events: pd.DataFrame | None, summary: pd.DataFrame, s: Scenario,
                  perfetto: Perfetto = Perfetto.auto, *, force: bool = False,
                  steps: pd.DataFrame | None = None, trace_events: pd.DataFrame | None = None,
                  extra_csv: Mapping[str, pd.DataFrame] | None = None,
                  also: Callable[[Path], None] | None = None) -> bool:
    """The results folder, built aside and swapped in atomically. Returns whether trace.json was
    written (``auto`` writes it for single-step runs up to ~64 MB only: it is tens of seconds and
    hundreds of MB on big runs, and most of a multi-step run's fixed cost; ``on`` always writes it).
    ``trace_events``: the events trace.json shows (default ``events``; ``--seeds`` shows its first
    seed); ``extra_csv``: more tables by file name; ``also(folder)`` writes anything else (figures)."""
    with atomic_dir(dest, kind="sim-run", force=force) as tmp:
        return fill_results(tmp, events, summary, s, perfetto, steps=steps, trace_events=trace_events,
                            extra_csv=extra_csv, also=also)


def wants_trace(shown: pd.DataFrame, perfetto: Perfetto) -> bool:
    """Whether trace.json is written of the events ``shown`` (:func:`write_results`)."""
    from tltsim.perfetto import estimated_bytes

    return perfetto is Perfetto.on or (perfetto is Perfetto.auto and shown["step"].nunique() <= 1
                                       and estimated_bytes(shown) <= PERFETTO_AUTO_MAX_BYTES)


class SeedSink:
    """What ``tlt sim run --seeds N`` does with each seed's run as it ends (``on_seed``), so that no
    seed's event table outlives it: its warnings are checked (``per_seed``), its events appended to
    ``events.parquet`` (``sink``), and the first seed's events kept when trace.json will show them
    (``shown``). The warnings are looked up through :mod:`tltsim.run_warnings` at each call: the tests
    put the per-filter reference in its place."""

    def __init__(self, inputs: SimInputs, first_seed: int, perfetto: Perfetto, sink: EventsParquet) -> None:
        self.inputs, self.first_seed, self.perfetto, self.sink = inputs, first_seed, perfetto, sink
        self.per_seed: list[list[RunWarning]] = []
        self.shown: list[pd.DataFrame] = []

    def __call__(self, k: int, events: pd.DataFrame, summary: pd.DataFrame) -> None:
        import tltsim.run_warnings as checks

        models = checks.scenario_models(self.inputs, summary)
        self.per_seed.append(checks.run_warnings(events, summary, models.pop("cost"), models.pop("accept"),
                                                 **models))
        if k == self.first_seed and wants_trace(events, self.perfetto):
            self.shown.append(events)
        self.sink.add(events.assign(seed=k)[["seed", *events.columns]])

    @property
    def first(self) -> pd.DataFrame | None:
        """The first seed's events when trace.json shows them, else None."""
        return self.shown[0] if self.shown else None


def fill_results(tmp: Path, events: pd.DataFrame | None, summary: pd.DataFrame, s: Scenario,
                 perfetto: Perfetto = Perfetto.auto, *, steps: pd.DataFrame | None = None,
                 trace_events: pd.DataFrame | None = None, extra_csv: Mapping[str, pd.DataFrame] | None = None,
                 also: Callable[[Path], None] | None = None) -> bool:
    """:func:`write_results` into the folder ``tmp`` being built (an :func:`~tltcore.atomic.atomic_dir`);
    ``events`` None: ``events.parquet`` is already there (:class:`EventsParquet`), and ``trace_events``
    are the events trace.json would show (None: it is not written)."""
    from tltsim.perfetto import chrome_trace_json

    shown = events if trace_events is None else trace_events
    trace = shown is not None and wants_trace(shown, perfetto)
    if events is not None:
        events.to_parquet(tmp / "events.parquet", index=False)
    summary.to_csv(tmp / "summary.csv", index=False)
    for name, frame in (extra_csv or {}).items():
        frame.to_csv(tmp / name, index=False)
    if steps is not None:
        steps.to_csv(tmp / "steps.csv", index=False)
    if trace:
        (tmp / "trace.json").write_text(chrome_trace_json(shown), encoding="utf-8")
    (tmp / "scenario.resolved.toml").write_text(scenario_toml(s), encoding="utf-8")
    if also is not None:
        also(tmp)
    return trace


def _fmt(v: float, spec: str) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def comparison_table(summary: pd.DataFrame, title: str) -> Table:
    """Rich table comparing policies step by step (a step column when there are several)."""
    multi = summary["step"].nunique() > 1
    table = Table(title=title)
    table.add_column("policy", no_wrap=True)
    if multi:
        table.add_column("step", justify="right")
    for col in ("makespan s", "speedup", "GPU idle", "accept", "SD share", "tok/s"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in summary.itertuples(index=False):
        cells = [str(r.policy), *([str(r.step)] if multi else [])]
        table.add_row(*cells, _fmt(r.makespan_s, ".2f"), _fmt(r.speedup, ".3f") + "x",
                      _fmt(100 * r.idle_fraction, ".1f") + "%", _fmt(r.mean_accept_length, ".2f"),
                      _fmt(100 * r.sd_share, ".1f") + "%", _fmt(r.tokens_per_s, ",.0f"))
    return table


#: What a one-seed run prints under its tables: it has no spread, and how to get one.
ONE_SEED = ("one simulation seed (--seeds 1): no spread; the default --seeds 3 gives each speedup and makespan "
            "as the median (min–max) over seeds")


def _why_no_trace(events: pd.DataFrame, perfetto: Perfetto) -> str:
    if perfetto is Perfetto.off:
        return "--perfetto off"
    steps = events["step"].nunique()
    return f"{steps} steps" if steps > 1 else f"{len(events):,} event rows"
