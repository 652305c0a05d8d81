"""A ``tlt sim run`` results folder: the files it holds and the upper bound written beside the tables.

Shared by the one-seed run (:mod:`tltcli.sim`) and the ``--seeds`` run (:mod:`tltcli.sim_uncertainty`),
so neither imports the other for them.
"""

from __future__ import annotations

import functools
import gc
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


#: How :class:`EventsParquet` spools a table's rows until the row groups they fall in are written: one
#: Arrow IPC stream per column in a folder beside the file (``events.parquet.spool/<table>/``, each
#: table's removed once its rows are written), compressed with LZ4 (~45 MB for a 100-step seed's ~940k
#: rows; ~0.4 CPU s to compress and read back). One stream per column, so that a row group is read back
#: a column at a time: only the group itself is whole in memory; in batches of at most
#: :data:`SPOOL_BATCH` rows, so that little more than the group is read.
SPOOL_CODEC = "lz4"
SPOOL_BATCH = 64 * 1024


class EventsParquet:
    """``events.parquet`` written table by table (a ``--seeds`` run's seeds in turn): the schema and row
    groups of :data:`PARQUET_ROW_GROUP` rows (a group may span two tables) that
    ``pandas.concat(tables).to_parquet(path, index=False)`` writes, byte for byte the file the writer
    wrote when it held the waiting rows in memory (the tests keep that writer). A table comes whole
    (:meth:`add`) or in parts (:meth:`add_part` for each, :meth:`end_table` after the last: a seed's
    runs, so that no seed's whole table is built). Each table is spooled to compressed files beside
    the file as it comes (:data:`SPOOL_CODEC`), and once it is whole every row group it completes is
    written, one group in memory at a time, and the spool of the tables written removed (the spool
    holds at most the rows of one group and one table): a row group waiting in memory for the next
    seed's rows (~190 MB) was the largest thing alive while that seed ran. Use as a context manager
    (:meth:`close`; on an error the spool is removed).

    The bytes of a parquet column chunk can depend on how its rows were split into Arrow chunks (where
    a column's dictionary outgrows its page and falls back to plain encoding), so each row group is
    handed to the writer in the chunks the in-memory writer had: each table as
    ``pyarrow.Table.from_pandas`` of the frame holds it (of a table in parts: each number column one
    chunk, each Arrow-backed column its parts' chunks, as ``pandas.concat`` keeps them), the rows
    waiting from a previous group as one chunk (:meth:`_table_done`)."""

    def __init__(self, path: Path, row_group: int = PARQUET_ROW_GROUP) -> None:
        self.path, self.row_group = path, row_group
        self.spool_path = path.with_name(path.name + ".spool")
        self._schema: Any = None
        self._arrow_backed: list[bool] = []  # per column: pandas keeps its chunks when it concatenates
        self._writer: Any = None
        self._tables = 0  # tables spooled (their folders are numbered)
        self._spools: list[tuple[Any, Any]] = []  # the table being spooled: (file, stream) per column
        self._open: list[list[list[int]]] | None = None  # the table in parts: per part, per column
        self._waiting: list[list[int]] = []  # per column: the chunks of the rows not yet written
        self._rows = 0
        # reading back: the whole tables' numbers in order, and per column the table it reads, its
        # reader, the arrays read and not yet written and their rows
        self._done: list[int] = []
        self._at: list[int] = []
        self._readers: list[tuple[Any, Any] | None] = []
        self._read: list[list[Any]] = []
        self._have: list[int] = []
        self._removed = 0  # tables whose spool is removed (every column read past them)
        self._closed = False

    def __enter__(self) -> EventsParquet:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            if self._writer is not None:
                self._writer.close()
            self._drop_spool()

    def add(self, frame: pd.DataFrame) -> None:
        """Append a whole table, ``frame``'s rows (an empty one adds nothing, as ``concat`` of stacked
        seeds skips it), and write the row groups it completes."""
        if self._open is not None:
            raise ValueError(f"{self.path.name}: a table in parts is not ended")
        layout = self._spool_frame(frame)
        if layout is not None:
            self._table_done(layout)

    def add_part(self, frame: pd.DataFrame) -> None:
        """Append ``frame``'s rows as the next part of a table that :meth:`end_table` ends."""
        layout = self._spool_frame(frame)
        self._open = self._open or []
        if layout is not None:
            self._open.append(layout)

    def end_table(self) -> None:
        """The parts since the last table are one table, as their ``pandas.concat`` would be; write the
        row groups it completes."""
        parts, self._open = self._open or [], None
        if parts:
            self._table_done([
                [n for part in parts for n in part[c]] if arrow else [sum(n for part in parts for n in part[c])]
                for c, arrow in enumerate(self._arrow_backed)])

    def _spool_frame(self, frame: pd.DataFrame) -> list[list[int]] | None:
        import pyarrow as pa
        from pandas.arrays import ArrowExtensionArray

        if frame.empty:
            return None
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self._schema is None:
            self._schema = table.schema
            self._arrow_backed = [isinstance(frame[c].array, ArrowExtensionArray) for c in frame.columns]
            n = len(table.schema)
            self._waiting, self._at, self._readers = [[] for _ in range(n)], [0] * n, [None] * n
            self._read, self._have = [[] for _ in range(n)], [0] * n
            self.spool_path.mkdir()
        elif not table.schema.equals(self._schema, check_metadata=True):
            raise ValueError(f"{self.path.name}: a table's columns differ from the first's")
        if not self._spools:
            folder = self.spool_path / str(self._tables)
            folder.mkdir()
            options = pa.ipc.IpcWriteOptions(compression=SPOOL_CODEC)
            for c, field in enumerate(self._schema):
                file = pa.OSFile(str(folder / f"{c}.arrows"), "wb")
                self._spools.append((file, pa.ipc.new_stream(file, pa.schema([field]), options=options)))
        for (_, spool), field, column in zip(self._spools, self._schema, table.columns, strict=True):
            spool.write_table(pa.Table.from_arrays([column], schema=pa.schema([field])), max_chunksize=SPOOL_BATCH)
        return [[len(chunk) for chunk in column.chunks] for column in table.columns]

    def _close_spools(self) -> None:
        for file, spool in self._spools:
            spool.close()
            file.close()
        self._spools = []

    def _table_done(self, layout: list[list[int]]) -> None:
        """A whole table is spooled (``layout``: per column, its chunks' lengths): the rows wait behind
        the earlier ones, in its chunks, and each row group they complete is written; the rows after a
        group wait as one chunk (the in-memory writer combined them)."""
        self._close_spools()
        self._done.append(self._tables)
        self._tables += 1
        self._waiting = [w + t for w, t in zip(self._waiting, layout, strict=True)]
        self._rows += sum(layout[0])
        while self._rows >= self.row_group:
            self._write_group([_cut(column, self.row_group) for column in self._waiting])
            self._rows -= self.row_group
            self._waiting = [[self._rows] for _ in self._waiting]

    def _write_group(self, group: list[list[int]]) -> None:
        """One row group, read back a column at a time, each column in the chunks ``group`` gives
        (zero-length chunks left out: they write nothing)."""
        import shutil

        import pyarrow as pa
        import pyarrow.parquet as pq

        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, self._schema)
        need = sum(group[0])
        arrays = []
        for c, lengths in enumerate(group):
            while self._have[c] < need:
                batch = self._next_batch(c)
                self._read[c].append(batch.column(0))
                self._have[c] += batch.num_rows
            arrays.append(pa.chunked_array(_take(self._read[c], [n for n in lengths if n]),
                                           type=self._schema.field(c).type))
            self._have[c] -= need
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema), row_group_size=self.row_group)
        del arrays
        read_past = min(self._at)
        for k in self._done[self._removed:read_past]:
            shutil.rmtree(self.spool_path / str(k), ignore_errors=True)
        self._removed = max(self._removed, read_past)
        release_freed_memory()  # the group's arrays: the allocators keep them resident otherwise

    def _next_batch(self, c: int) -> Any:
        """The next spooled batch of column ``c``, table after table."""
        import pyarrow as pa

        while True:
            if self._readers[c] is None:
                file = pa.OSFile(str(self.spool_path / str(self._done[self._at[c]]) / f"{c}.arrows"), "rb")
                self._readers[c] = (file, pa.ipc.open_stream(file))
            file, reader = self._readers[c]
            try:
                return reader.read_next_batch()
            except StopIteration:
                file.close()
                self._readers[c] = None
                self._at[c] += 1

    def _drop_spool(self) -> None:
        import shutil

        self._close_spools()
        for reader in self._readers:
            if reader is not None:
                reader[0].close()
        self._readers = [None] * len(self._readers)
        shutil.rmtree(self.spool_path, ignore_errors=True)

    def close(self) -> None:
        """Write the last rows (no rows at all: what ``to_parquet`` writes of an empty table) and remove
        the spool; once."""
        if self._closed:
            return
        self._closed = True
        if self._open is not None:
            raise ValueError(f"{self.path.name}: a table in parts is not ended")
        if self._schema is None:
            pd.DataFrame().to_parquet(self.path, index=False)
            return
        if self._rows:
            release_freed_memory(collect=True)
            self._write_group(self._waiting)
            self._rows = 0
        self._writer.close()
        self._drop_spool()


def _cut(chunks: list[int], rows: int) -> list[int]:
    """The lengths of the chunks of the first ``rows`` rows of a column chunked as ``chunks``."""
    out = []
    for n in chunks:
        if rows <= 0:
            break
        out.append(min(n, rows))
        rows -= n
    return out


def _take(source: list[Any], lengths: list[int]) -> list[Any]:
    """Arrays of ``lengths`` from the front of ``source`` (Arrow arrays in row order, consumed): one
    source array or a slice of one as it is, pieces of several concatenated."""
    import pyarrow as pa

    out = []
    for n in lengths:
        pieces = []
        while n > 0:
            head = source[0]
            if len(head) <= n:
                pieces.append(source.pop(0))
                n -= len(head)
            else:
                pieces.append(head.slice(0, n))
                source[0] = head.slice(n)
                n = 0
        out.append(pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces))
    return out


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


def release_freed_memory(*, collect: bool = False) -> None:
    """Give the memory freed so far back to the OS: Arrow's pool (mimalloc) and, on glibc, the C
    heap (``malloc_trim``). Both allocators keep freed blocks resident for reuse; between the runs of
    a long ``--seeds`` run that was 100-250 MB of the peak RSS (numpy's freed tables fragment the
    heap, so the next run's tables land beside them instead of in them). Where the C library has no
    ``malloc_trim`` (macOS, musl) only Arrow's pool is released. ``collect``: first free what only
    reference cycles keep (a finished run's workers and event log, ~30 MB at a seed's end; Python's
    collector runs on object counts, not bytes, so it can leave them for a long while)."""
    import pyarrow as pa

    if collect:
        gc.collect()

    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` from the symbols the process already has loaded, or None."""
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


class SeedSink:
    """What ``tlt sim run --seeds N`` does with each seed's run as it ends (``on_seed``), so that no
    seed's event table outlives it: its warnings are checked (``per_seed``), its events appended to
    ``events.parquet`` (``sink``), and the first seed's events kept when trace.json will show them
    (``shown``). The warnings are looked up through :mod:`tltsim.run_warnings` at each call: the tests
    put the per-filter reference in its place.

    Whole RL runs stream finer, one preset's run at a time (:meth:`add_run` as each run ends, then
    :meth:`end_seed`): each run's events are written and only the columns the warnings read are kept
    (:class:`~tltsim.run_warnings.EventColumns`), so no seed's whole table is ever built. ``streams``
    False: the runs of a seed are concatenated and passed whole, as :meth:`__call__` does (the
    reference the tests compare the streamed warnings and files with)."""

    #: Whether :meth:`add_run` keeps columns (True) or whole tables until :meth:`end_seed`.
    streams = True

    def __init__(self, inputs: SimInputs, first_seed: int, perfetto: Perfetto, sink: EventsParquet) -> None:
        self.inputs, self.first_seed, self.perfetto, self.sink = inputs, first_seed, perfetto, sink
        self.per_seed: list[list[RunWarning]] = []
        self.shown: list[pd.DataFrame] = []
        self._runs: list[Any] = []  # this seed's runs so far: EventColumns (streams) or tables
        self._first: list[pd.DataFrame] | None = []  # the first seed's tables while trace.json may show them

    def __call__(self, k: int, events: pd.DataFrame, summary: pd.DataFrame) -> None:
        self._check(k, events, summary)
        if k == self.first_seed and wants_trace(events, self.perfetto):
            self.shown.append(events)
        self.sink.add(events.assign(seed=k)[["seed", *events.columns]])

    def _check(self, k: int, events: Any, summary: pd.DataFrame) -> None:
        import tltsim.run_warnings as checks

        models = checks.scenario_models(self.inputs, summary)
        self.per_seed.append(checks.run_warnings(events, summary, models.pop("cost"), models.pop("accept"),
                                                 **models))

    def add_run(self, k: int, events: pd.DataFrame) -> None:
        """One run (a preset's) of seed ``k`` as it ends: written, its warning columns kept (the table
        itself when not :attr:`streams`), and, of the first seed, the table while trace.json may show
        the seed (``auto`` shows one step only: a run of several steps rules it out)."""
        from tltsim.run_warnings import EventColumns

        if not self.streams:
            self._runs.append(events)
            return
        self.sink.add_part(events.assign(seed=k)[["seed", *events.columns]])
        release_freed_memory()  # the simulation's and the spool's freed blocks: under the next run's peak otherwise
        self._runs.append(EventColumns.of(events).detached())
        if k == self.first_seed and self._first is not None:
            if self.perfetto is Perfetto.off or (self.perfetto is Perfetto.auto and events["step"].nunique() > 1):
                self._first = None
            else:
                self._first.append(events)

    def end_seed(self, k: int, summary: pd.DataFrame) -> None:
        """Seed ``k``'s runs are all in (:meth:`add_run`): its warnings, and whether trace.json shows it."""
        from tltsim.run_warnings import EventColumns

        runs, self._runs = self._runs, []
        if not self.streams:  # the seed's table, as compare_presets concatenates its runs' tables
            self(k, pd.concat(runs, ignore_index=True), summary)
            return
        self._check(k, EventColumns.joined(runs), summary)
        del runs
        release_freed_memory(collect=True)
        self.sink.end_table()  # writes the row groups the seed completes: best where least else is alive
        if k == self.first_seed and self._first is not None:
            shown = pd.concat(self._first, ignore_index=True)
            if wants_trace(shown, self.perfetto):
                self.shown.append(shown)
            self._first = None

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
