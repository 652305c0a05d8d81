"""Read trace files (CSV, Parquet, JSONL) into the canonical schema.

Foreign formats are read with a column mapping ``{canonical: foreign}``, e.g.
``{"response_tokens": "output_len"}``. Every failure becomes one :class:`InputError` line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from tltsim.errors import InputError
from tltsim.traces.schema import TRACE_COLUMNS, normalize

SUFFIXES = (".csv", ".parquet", ".jsonl", ".ndjson")


def parse_mapping(items: list[str] | None) -> dict[str, str]:
    """Parse ``["response_tokens=output_len", ...]`` into ``{canonical: foreign}``."""
    mapping: dict[str, str] = {}
    for item in items or []:
        canon, sep, foreign = item.partition("=")
        if not sep or not canon.strip() or not foreign.strip():
            raise InputError(f"column mapping '{item}' is not of the form canonical=foreign", field="--map")
        if canon.strip() not in TRACE_COLUMNS:
            raise InputError(f"column mapping '{item}': '{canon}' is not a canonical column "
                             f"{list(TRACE_COLUMNS)}", field="--map")
        mapping[canon.strip()] = foreign.strip()
    return mapping


def _read_raw(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"unknown trace format '{suffix}' (expected one of {', '.join(SUFFIXES)})",
                         path=path)
    if path.stat().st_size == 0:
        raise InputError("file is empty", path=path)
    try:
        if suffix == ".csv":
            # Read as text: validation decides what is an integer, not pandas' type guessing.
            return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
        if suffix == ".parquet":
            return pd.read_parquet(path)
        return _read_jsonl(path)
    except InputError:
        raise
    except pd.errors.EmptyDataError:
        raise InputError("file is empty", path=path) from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
        raise InputError(f"cannot parse {suffix[1:]} file: {str(exc).splitlines()[0]}", path=path) from None


def _read_jsonl(path: Path) -> pd.DataFrame:
    records = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"invalid JSON ({exc.msg})", path=path, row=lineno) from None
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
    raw = _read_raw(path)
    if mapping:
        absent = [f for f in mapping.values() if f not in raw.columns]
        if absent:
            raise InputError(f"mapped column(s) {absent} not in file; found {list(raw.columns)}", path=path,
                             field=absent[0])
        raw = raw.drop(columns=[c for c in mapping if c in raw.columns and c not in mapping.values()])
        raw = raw.rename(columns={v: k for k, v in mapping.items()})
    return normalize(raw, path)
