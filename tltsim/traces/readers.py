"""Read trace files (CSV, Parquet, JSONL, gzip- or zstd-compressed) into the canonical schema.

Foreign formats are read with a column mapping ``{canonical: spec}``, e.g.
``{"response_tokens": "output_len", "hit_cap": "finish_reason:length"}`` (syntax:
:mod:`tltsim.traces.mapping`). A folder is an RL framework's rollout dump
(:mod:`tltsim.traces.frameworks`). Every failure becomes one :class:`InputError` line.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tltcore.errors import InputError, reason
from tltsim.traces.mapping import apply_mapping, check_mapping, parse_mapping
from tltsim.traces.schema import TRACE_COLUMNS, check_unique_columns, normalize
from tltsim.traces.textio import (
    COMPRESSIONS,
    MAX_DECOMPRESSED,
    decompress,
    json_records,
    read_json_lines,
    trace_format,
)

SUFFIXES = (".csv", ".parquet", ".jsonl", ".ndjson")
_BOM = "\ufeff"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _read_csv(path: Path, data: bytes | None = None) -> pd.DataFrame:
    """The CSV at ``path`` (or its decompressed ``data``) as text cells."""
    def source() -> Path | io.BytesIO:
        return path if data is None else io.BytesIO(data)

    # The header as written (pandas silently renames a repeated name to 'x.1'); blank names are
    # left to pandas ('Unnamed: 3'), they cannot collide with a real column.
    header = pd.read_csv(source(), header=None, nrows=1, dtype=str, keep_default_na=False)
    names = [str(c).lstrip(_BOM) for c in header.iloc[0]] if len(header) else []
    check_unique_columns([c for c in names if c.strip()], path)
    # Read as text: validation decides what is an integer, not pandas' type guessing.
    df = pd.read_csv(source(), dtype=str, keep_default_na=False, na_values=[""])
    if len(df.columns) and str(df.columns[0]).startswith(_BOM):  # a second BOM (pandas strips one)
        df = df.rename(columns={df.columns[0]: str(df.columns[0]).lstrip(_BOM)})
    return df


def _read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        check_unique_columns(names, path)
        return pd.read_parquet(path)
    except InputError:
        raise
    except (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError, NotImplementedError,
            OverflowError, MemoryError) as exc:
        # A hostile file can fail anywhere in pyarrow's decoding or in pandas' handling of the
        # metadata it carries (KeyError, TypeError...): all of it is a file we cannot read.
        first = (str(exc).splitlines() or [""])[0]
        raise InputError(f"cannot parse parquet file: {type(exc).__name__}: {first}", path=path) from None


def _read_raw(path: Path) -> pd.DataFrame:
    suffix, compression = trace_format(path)
    if suffix not in SUFFIXES or (compression is not None and suffix == ".parquet"):
        shown = "".join(path.suffixes[-2:]) if compression else suffix
        known = ", ".join([*SUFFIXES, *(f"{s}{c}" for s in SUFFIXES if s != ".parquet" for c in COMPRESSIONS)])
        raise InputError(f"unknown trace format '{shown}' (expected one of {known}, or a framework's rollout dump "
                         "folder)", path=path)
    if path.stat().st_size == 0:
        raise InputError("file is empty", path=path)
    data = decompress(path, compression) if compression is not None else None
    if data is not None and not data:
        raise InputError("file is empty once decompressed", path=path)
    if suffix != ".parquet":
        if data is not None:
            head = data[:2]
        else:
            with path.open("rb") as fh:
                head = fh.read(2)
        if head in _UTF16_BOMS:
            raise InputError(f"file is UTF-16 encoded; save it as UTF-8 {suffix[1:]}", path=path)
    try:
        if suffix == ".csv":
            return _read_csv(path, data)
        if suffix == ".parquet":
            return _read_parquet(path)
        return _read_jsonl(path, data)
    except InputError:
        raise
    except pd.errors.EmptyDataError:
        raise InputError("file is empty", path=path) from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
        first = reason(exc)
        raise InputError(f"cannot parse {suffix[1:]} file: {first}", path=path) from None


def _read_jsonl(path: Path, data: bytes | None = None) -> pd.DataFrame:
    return pd.DataFrame.from_records(json_records(path, path.read_bytes() if data is None else data))


#: Where a canonical column comes from when the file has no such column (the defaults of
#: :func:`tltsim.traces.schema.normalize`), for provenance.
DEFAULT_SOURCES = {
    "source": "default: the file's (or folder's) name",
    "step": "default: step = 0 (one snapshot)",
    "prompt_id": "default: group_id, else one id per row",
    "group_id": "default: = prompt_id",
    "sample_idx": "default: position within its prompt group, in file order",
    "prompt_tokens": "default: missing (the scenario's trace.default_prompt_tokens is used)",
    "response_tokens": "required",
    "hit_cap": "default: response_tokens >= response_cap where a response_cap column exists, else false",
}


@dataclass(frozen=True)
class ReadTrace:
    """A trace read, validated, with where each canonical column came from and the files read."""

    frame: pd.DataFrame
    columns: dict[str, str]
    files: tuple[Path, ...]
    framework: str | None = None


def read_with_provenance(path: str | Path, mapping: Mapping[str, str] | None = None, *,
                         tokenizer: str | Path | None = None) -> ReadTrace:
    """:func:`read_trace` with the provenance of each canonical column (``tlt trace import``)."""
    path = Path(path)
    framework: str | None = None
    if path.is_dir():
        from tltsim.traces.frameworks import load_dump

        dump = load_dump(path, tokenizer=tokenizer)
        raw, files, framework, sources = dump.frame, dump.files, dump.framework, dict(dump.provenance)
    elif not path.is_file():
        raise InputError("trace file not found", path=path)
    else:
        if tokenizer is not None:
            raise InputError("a tokenizer counts tokens in a framework's rollout dump folder; this trace is a file, "
                             "whose lengths must already be tokens", path=path, field="trace.tokenizer")
        if mapping:
            check_mapping(mapping, field="--map")
        raw, files, sources = _read_raw(path), (path,), {}
    for canon in TRACE_COLUMNS:
        if canon not in sources:
            sources[canon] = f"file column '{canon}'" if canon in raw.columns else DEFAULT_SOURCES[canon]
    if mapping:
        raw = apply_mapping(raw, mapping, path)
        for canon, m in check_mapping(mapping, field="--map").items():
            sources[canon] = (f"file column '{m.column}', true where it is {' or '.join(repr(v) for v in m.values)} "
                              f"(--map {canon}={m.text})" if m.values else
                              f"file column '{m.column}' (--map {canon}={m.text})")
    _, compression = trace_format(path)
    stem = path.name[:-len("".join(path.suffixes[-2:]))] if compression and path.is_file() else None
    return ReadTrace(normalize(raw, path, source=stem or None), sources, tuple(files), framework)


def read_trace(path: str | Path, mapping: Mapping[str, str] | None = None, *,
               tokenizer: str | Path | None = None) -> pd.DataFrame:
    """Read and validate one trace file, or an RL framework's rollout dump folder; ``mapping``
    renames foreign columns to canonical ones (and value-maps ``hit_cap``); ``tokenizer`` (a
    ``tokenizer.json``) counts tokens where a dump holds text only."""
    return read_with_provenance(path, mapping, tokenizer=tokenizer).frame


__all__ = ["COMPRESSIONS", "MAX_DECOMPRESSED", "SUFFIXES", "ReadTrace", "decompress", "json_records", "parse_mapping",
           "read_json_lines", "read_trace", "read_with_provenance", "trace_format"]
