"""The trace layer: read, validate and catalogue response-length traces; build RL-step workloads."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence

import pandas as pd

from tltcore.config import suggest
from tltcore.errors import InputError
from tltsim.traces.catalog import CatalogEntry, catalog, resolve, search_path
from tltsim.traces.profiles import PROFILES
from tltsim.traces.readers import read_trace
from tltsim.traces.schema import TRACE_COLUMNS
from tltsim.traces.stats import trace_stats
from tltsim.traces.workload import StepWorkload, build_workload


def load_trace(name_or_path: str | os.PathLike, mapping: Mapping[str, str] | None = None, *,
               seed: int = 0) -> pd.DataFrame:
    """A validated trace in the canonical schema, by path, catalog name or search-path file name.

    Parametric profiles (e.g. ``intern_s1_math``) are generated: 512 groups x 8 samples, cap
    32,768, seeded.
    """
    found = resolve(name_or_path)
    if isinstance(found, CatalogEntry):
        return PROFILES[found.name].sample(512, 8, seed=seed)
    return _read_cached(found, mapping)


def _read_cached(path: os.PathLike | str, mapping: Mapping[str, str] | None) -> pd.DataFrame:
    """A copy of the parsed trace file, from this process's cache when the file is unchanged.

    Why: a sweep evaluates every point in a worker process that re-read and re-validated the same
    16,000-row CSV each time (~45% of a point's CPU). The cache key carries the file's size and
    mtime, so a file that changes on disk is read again; callers get a copy, never the cached frame."""
    try:
        st = os.stat(path)
    except OSError:
        return read_trace(path, mapping)  # read_trace says what is wrong with it, in one line
    return _parsed(os.fspath(path), os.path.realpath(path), st.st_size, st.st_mtime_ns,
                   None if mapping is None else tuple(sorted(mapping.items()))).copy()


@functools.lru_cache(maxsize=4)
def _parsed(path: str, real: str, size: int, mtime_ns: int,
            mapping: tuple[tuple[str, str], ...] | None) -> pd.DataFrame:
    """The parsed trace at ``path`` (errors name it as the user gave it); ``real``, ``size`` and
    ``mtime_ns`` are part of the cache key only."""
    return read_trace(path, None if mapping is None else dict(mapping))


def select_sources(df: pd.DataFrame, sources: Sequence[str] | None, *, trace: str,
                   field: str = "--source") -> pd.DataFrame:
    """Only the rows whose ``source`` is one of ``sources`` (all rows when none are given).

    An unknown source is refused rather than giving an empty table: a typo would otherwise look like
    a trace with no data. The one-line error names the option, lists the trace's sources and
    suggests the closest one; the scenario field ``trace.source`` selects the same way.
    """
    if not sources:
        return df
    valid = sorted(map(str, df["source"].unique()))
    for wanted in sources:
        if wanted not in valid:
            raise InputError(f"no source '{wanted}' in trace {trace}{suggest(wanted, valid)}; valid sources: "
                             f"{', '.join(valid)}", field=field)
    return df[df["source"].isin(list(sources))].reset_index(drop=True)


__all__ = ["TRACE_COLUMNS", "StepWorkload", "build_workload", "catalog", "load_trace", "read_trace",
           "search_path", "select_sources", "trace_stats"]
