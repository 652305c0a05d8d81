"""Read trace files (CSV, Parquet, JSONL) into the canonical schema.

Foreign formats are read with a column mapping ``{canonical: foreign}``, e.g.
``{"response_tokens": "output_len"}``. Every failure becomes one :class:`InputError` line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from tltcore.errors import InputError, reason
from tltsim.traces.schema import TRACE_COLUMNS, check_unique_columns, column_name, column_names, normalize

SUFFIXES = (".csv", ".parquet", ".jsonl", ".ndjson")
_BOM = "\ufeff"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def parse_mapping(items: list[str] | None) -> dict[str, str]:
    """Parse ``["response_tokens=output_len", ...]`` into ``{canonical: foreign}``."""
    mapping: dict[str, str] = {}
    for item in items or []:
        canon, sep, foreign = item.partition("=")
        canon, foreign = canon.strip(), foreign.strip()
        if not sep or not canon or not foreign:
            raise InputError(f"column mapping '{item}' is not of the form canonical=foreign", field="--map")
        if canon not in TRACE_COLUMNS:
            raise InputError(f"column mapping '{item}': '{canon}' is not a canonical column "
                             f"{list(TRACE_COLUMNS)}", field="--map")
        if canon in mapping:
            raise InputError(f"'{canon}' is mapped twice ('{mapping[canon]}' and '{foreign}'); give one "
                             f"--map {canon}=COLUMN", field="--map")
        mapping[canon] = foreign
    _check_one_to_one(mapping)
    return mapping


def _check_one_to_one(mapping: Mapping[str, str]) -> None:
    """Each file column feeds at most one canonical column."""
    seen: dict[str, str] = {}
    for canon, foreign in mapping.items():
        if foreign in seen:
            raise InputError(f"'{seen[foreign]}' and '{canon}' are both mapped to column '{foreign}'; a "
                             "column can feed one canonical column only: drop one of the two --map options",
                             field="--map")
        seen[foreign] = canon


def _check_collisions(mapping: Mapping[str, str], columns: pd.Index, path: Path) -> None:
    """A foreign name that is itself a canonical column of the file would lose that column's data."""
    for canon, foreign in mapping.items():
        if foreign != canon and foreign in TRACE_COLUMNS and foreign in columns and foreign not in mapping:
            raise InputError(
                f"'{canon}={foreign}' reads the file's own {foreign} column as {canon}, leaving {foreign} "
                f"without data; map {foreign} too (--map {foreign}=OTHER) or map {canon} to a non-canonical "
                "column", path=path, field="--map")


def _read_csv(path: Path) -> pd.DataFrame:
    # The header as written (pandas silently renames a repeated name to 'x.1'); blank names are
    # left to pandas ('Unnamed: 3'), they cannot collide with a real column.
    header = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False)
    names = [str(c).lstrip(_BOM) for c in header.iloc[0]] if len(header) else []
    check_unique_columns([c for c in names if c.strip()], path)
    # Read as text: validation decides what is an integer, not pandas' type guessing.
    df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
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
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"unknown trace format '{suffix}' (expected one of {', '.join(SUFFIXES)})",
                         path=path)
    if path.stat().st_size == 0:
        raise InputError("file is empty", path=path)
    if suffix != ".parquet":
        with path.open("rb") as fh:
            if fh.read(2) in _UTF16_BOMS:
                raise InputError(f"file is UTF-16 encoded; save it as UTF-8 {suffix[1:]}", path=path)
    try:
        if suffix == ".csv":
            return _read_csv(path)
        if suffix == ".parquet":
            return _read_parquet(path)
        return _read_jsonl(path)
    except InputError:
        raise
    except pd.errors.EmptyDataError:
        raise InputError("file is empty", path=path) from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
        first = reason(exc)
        raise InputError(f"cannot parse {suffix[1:]} file: {first}", path=path) from None


class _DuplicateKey(Exception):
    pass


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _read_jsonl(path: Path) -> pd.DataFrame:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        row = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})", path=path,
                         row=row) from None
    records = []
    for lineno, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        line = line.lstrip(_BOM)  # a BOM opens the file, or each file that was concatenated into it
        if not line.strip():
            continue
        try:
            obj = json.loads(line, object_pairs_hook=_unique_object)
        except _DuplicateKey as exc:
            key = str(exc.args[0])
            raise InputError(f"key {column_name(key)} appears more than once in one object; keep one", path=path,
                             row=lineno, field=column_name(key)[1:-1]) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON ({exc.msg})", path=path, row=lineno) from None
        except (ValueError, RecursionError) as exc:  # >4300-digit integers, absurd nesting
            msg = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
            raise InputError(f"invalid JSON ({msg})", path=path, row=lineno) from None
        if not isinstance(obj, dict):
            raise InputError("line is not a JSON object", path=path, row=lineno)
        records.append(obj)
    if not records:
        raise InputError("trace has no rows", path=path)
    return pd.DataFrame.from_records(records)


def read_trace(path: str | Path, mapping: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Read and validate one trace file; ``mapping`` renames foreign columns to canonical ones."""
    path = Path(path)
    if not path.is_file():
        raise InputError("trace file not found", path=path)
    if mapping:
        _check_one_to_one(mapping)
    raw = _read_raw(path)
    if mapping:
        absent = [f for f in mapping.values() if f not in raw.columns]
        if absent:
            raise InputError(f"mapped column(s) {absent} not in file; found {column_names(raw.columns)}", path=path,
                             field=absent[0])
        _check_collisions(mapping, raw.columns, path)
        raw = raw.drop(columns=[c for c in mapping if c in raw.columns and c not in mapping.values()])
        raw = raw.rename(columns={v: k for k, v in mapping.items()})
    return normalize(raw, path)
