"""The trace layer: read, validate and catalogue response-length traces; build RL-step workloads."""

from __future__ import annotations

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


#: Parsed trace files of this process, by (path, size, mtime, mapping): a sweep evaluates every point
#: in a worker process that re-read and re-validated the same 16,000-row CSV each time (~45% of a
#: point's CPU). A file that changes on disk changes its key; callers get a copy, never the cached frame.
_CACHE: dict[tuple[object, ...], pd.DataFrame] = {}
_CACHE_FILES = 4


def _read_cached(path: os.PathLike | str, mapping: Mapping[str, str] | None) -> pd.DataFrame:
    try:
        st = os.stat(path)
    except OSError:
        return read_trace(path, mapping)  # read_trace says what is wrong with it, in one line
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, tuple(sorted((mapping or {}).items())))
    df = _CACHE.get(key)
    if df is None:
        df = read_trace(path, mapping)
        if len(_CACHE) >= _CACHE_FILES:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = df
    return df.copy()


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
