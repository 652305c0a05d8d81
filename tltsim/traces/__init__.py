"""The trace layer: read, validate and catalogue response-length traces; build RL-step workloads."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence

import pandas as pd

from tltcore.config import suggest
from tltcore.errors import InputError
from tltsim.traces.catalog import CatalogEntry, catalog, resolve, search_path
from tltsim.traces.frameworks.tokens import tokenizer_file
from tltsim.traces.profiles import PROFILES
from tltsim.traces.readers import read_trace
from tltsim.traces.schema import TRACE_COLUMNS
from tltsim.traces.stats import trace_stats
from tltsim.traces.workload import StepWorkload, build_workload


def load_trace(name_or_path: str | os.PathLike, mapping: Mapping[str, str] | None = None, *,
               seed: int = 0, tokenizer: str | os.PathLike | None = None) -> pd.DataFrame:
    """A validated trace in the canonical schema, by path (a file, or an RL framework's rollout dump
    folder), catalog name or search-path file name. ``mapping`` is the ``{canonical: spec}`` column
    and value mapping (:mod:`tltsim.traces.mapping`, the scenario's ``trace.map``); ``tokenizer``
    counts tokens of a text-only dump (``trace.tokenizer``).

    Parametric profiles (e.g. ``intern_s1_math``) are generated: 512 groups x 8 samples, cap
    32,768, seeded; a mapping or tokenizer given with one is refused (there is no file to map).
    """
    found = resolve(name_or_path)
    if isinstance(found, CatalogEntry):
        if mapping or tokenizer is not None:
            what = "column mapping (trace.map, --map)" if mapping else "tokenizer (trace.tokenizer, --tokenizer)"
            raise InputError(f"'{found.name}' is a parametric length profile, not a file: a {what} has nothing to "
                             "apply to", field="trace.map" if mapping else "trace.tokenizer")
        return PROFILES[found.name].sample(512, 8, seed=seed)
    return _read_cached(found, mapping, tokenizer)


def _stamp(path: os.PathLike | str) -> tuple[tuple[str, int, int], ...]:
    """What identifies a trace's bytes on disk without reading them: (name, size, mtime) of the file,
    or of each file of a dump folder (a step file added or rewritten is read again)."""
    p = os.fspath(path)
    if os.path.isdir(p):
        from pathlib import Path

        from tltsim.traces.frameworks import dump_files

        files = [os.fspath(f) for f in dump_files(Path(p))]
    else:
        files = [p]
    out = []
    for f in files:
        st = os.stat(f)
        out.append((os.path.realpath(f), st.st_size, st.st_mtime_ns))
    return tuple(out)


def _read_cached(path: os.PathLike | str, mapping: Mapping[str, str] | None,
                 tokenizer: str | os.PathLike | None = None) -> pd.DataFrame:
    """A copy of the parsed trace, from this process's cache when its files are unchanged.

    Why: a sweep evaluates every point in a worker process that re-read and re-validated the same
    16,000-row CSV each time (~45% of a point's CPU). The cache key carries the files' sizes and
    mtimes, the mapping and the tokenizer (its file's size and mtime too), so a file that changes on
    disk or a different mapping is read again; callers get a copy, never the cached frame."""
    try:
        stamp = _stamp(path)
        tok = None if tokenizer is None else (os.fspath(tokenizer), *_stamp(tokenizer_file(tokenizer)))
    except (OSError, InputError):
        return read_trace(path, mapping, tokenizer=tokenizer)  # read_trace says what is wrong, in one line
    return _parsed(os.fspath(path), stamp, None if not mapping else tuple(sorted(mapping.items())), tok).copy()


@functools.lru_cache(maxsize=4)
def _parsed(path: str, stamp: tuple[tuple[str, int, int], ...], mapping: tuple[tuple[str, str], ...] | None,
            tokenizer: tuple[object, ...] | None) -> pd.DataFrame:
    """The parsed trace at ``path`` (errors name it as the user gave it); ``stamp`` and the rest of
    ``tokenizer`` after its path are part of the cache key only."""
    if tokenizer is None:
        return read_trace(path, None if mapping is None else dict(mapping))
    return read_trace(path, None if mapping is None else dict(mapping), tokenizer=str(tokenizer[0]))


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
