"""The canonical trace schema and its validation.

Every reader returns a DataFrame with these columns (plus any optional columns of the source kept
as-is). Validation names the file, the 1-based data row and the field of the first problem, so a
user can fix a foreign trace without reading our code.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tltcore.errors import InputError
from tltcore.input_files import quoted_name

#: canonical column -> pandas dtype
TRACE_COLUMNS: dict[str, str] = {
    "source": "string",
    "step": "int64",
    "prompt_id": "string",
    "group_id": "string",
    "sample_idx": "int64",
    "prompt_tokens": "Int64",  # nullable: some traces do not record prompts
    "response_tokens": "int64",
    "hit_cap": "bool",
}

REQUIRED = ("response_tokens",)
KEY = ("source", "step", "prompt_id", "sample_idx")
_TRUE = {"1", "1.0", "true", "True", "TRUE", "yes"}
_FALSE = {"0", "0.0", "false", "False", "FALSE", "no", ""}


def _show(value: object) -> str:
    """A cell value quoted for a one-line message (newlines escaped, long text cut)."""
    text = repr(str(value))
    return text if len(text) <= 40 else text[:37] + "...'"


def column_name(column: object) -> str:
    """A column name for a one-line message: quoted, control characters escaped, long names cut."""
    return quoted_name(column)


def column_names(columns: object, limit: int = 20) -> str:
    """Column names for a one-line message: the first ``limit`` of them and how many more."""
    names = [column_name(c) for c in columns]  # type: ignore[attr-defined]
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return "[" + ", ".join(names[:limit]) + more + "]"


def check_unique_columns(columns: object, path: Path, *, where: str = "in the header") -> None:
    """Refuse a repeated column name: readers would otherwise keep one copy silently."""
    seen: set[object] = set()
    for c in columns:  # type: ignore[attr-defined]
        if c in seen:
            raise InputError(f"column {column_name(c)} appears more than once {where}; rename or remove one "
                             "of them", path=path, field=column_name(c)[1:-1])
        seen.add(c)


#: Largest token count accepted in ``response_tokens``, ``prompt_tokens`` and ``response_cap``:
#: 10^7 tokens is at or above the longest context window any model advertises (1-10 M tokens) and
#: ~75x the 128k caps RL rollouts use, so no real trace comes near it; it also keeps every sum the
#: simulator forms exact (a trace of 10^8 such rows totals 10^15 < 2^53, exact in float64 and far
#: inside int64), so a garbage value can never wrap or silently lose precision downstream.
MAX_TOKENS = 10**7
#: Largest ``step`` / ``sample_idx``: 10^9 fits int32 and is far beyond any RL run (10^3-10^4 steps,
#: <= a few hundred samples per prompt), yet leaves room for ids that are not dense counters.
MAX_INDEX = 10**9
#: column -> (minimum, maximum), both inclusive. Checked on the value as read (text, unsigned,
#: float, decimal...), before anything is cast to int64, so an out-of-range value cannot wrap.
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "step": (0, MAX_INDEX),
    "sample_idx": (0, MAX_INDEX),
    "prompt_tokens": (0, MAX_TOKENS),
    "response_tokens": (1, MAX_TOKENS),
    "response_cap": (1, MAX_TOKENS),
}
_DIGITS = r"\s*[+-]?[0-9]+\s*"  # ASCII digits only: int("１２") is 12, to_numeric says NaN
_NOT_INT = "is not an integer"


def _plain_digits(text: pd.Series) -> np.ndarray | None:
    """Fast path for the common case, Arrow-backed text where every cell is missing or 1-15 ASCII
    digits: those values as float64 (exact: < 2^53; NaN where missing), else None."""
    if not (isinstance(text.dtype, pd.StringDtype) and str(text.dtype.storage).startswith("pyarrow")):
        return None
    arr = pa.array(text.array)  # zero-copy
    if not pc.all(pc.match_substring_regex(arr, r"^[0-9]{1,15}$")).as_py():  # nulls skipped
        return None
    return np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), dtype="float64")


def _text_numbers(text: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Text cells as (float64 values, blank, not-an-integer); NaN where blank or bad.

    float64 is exact for every integer up to 2^53, far above the bounds, and cannot wrap: a huge
    integer becomes a huge (or infinite) float that the range check then reports.
    """
    plain = _plain_digits(text)
    if plain is not None:
        return plain, np.isnan(plain), np.zeros(len(plain), bool)
    blank = (text.isna() | (text.str.strip() == "")).to_numpy(bool)
    num = pd.to_numeric(text.where(~blank), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    with np.errstate(invalid="ignore"):
        bad = ~blank & (np.isnan(num) | (np.isfinite(num) & (np.floor(num) != num)))
    odd = ~blank & ~np.isfinite(num)
    if odd.any():  # 'inf', '1e999', 'x' are not integers; 10^400 written out is one, just too large
        rows, num = np.flatnonzero(odd), num.copy()  # to_numpy may hand back a read-only view
        digits = text.iloc[rows].str.fullmatch(_DIGITS).fillna(False).to_numpy(bool)
        negative = text.iloc[rows].str.strip().str.startswith("-").fillna(False).to_numpy(bool)
        num[rows[digits]] = np.where(negative[digits], -np.inf, np.inf)
        bad[rows] = ~digits
    return np.where(bad, np.nan, num), blank, bad


def _object_numbers(raw: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mixed Python values (JSON, Parquet decimals, dates...) as (values, blank, bad, is-boolean)."""
    cells = raw.to_numpy(dtype=object)
    n = len(cells)
    num, blank = np.full(n, np.nan), np.zeros(n, bool)
    bad, boolean = np.zeros(n, bool), np.zeros(n, bool)
    texts: list[int] = []
    for i, v in enumerate(cells):
        if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float | np.floating) and v != v):
            blank[i] = True
        elif isinstance(v, bool | np.bool_):  # before int: True is an int to Python, not to us
            bad[i] = boolean[i] = True
        elif isinstance(v, int | np.integer):
            num[i] = float(v) if abs(int(v)) <= 2**62 else float(np.sign(int(v))) * np.inf
        elif isinstance(v, float | np.floating):
            bad[i] = not (np.isfinite(v) and float(v).is_integer())
            num[i] = v
        elif isinstance(v, Decimal):
            if v.is_nan():
                blank[i] = True
            elif not v.is_finite() or v != v.to_integral_value():
                bad[i] = True
            else:
                num[i] = float(v)  # a huge decimal becomes inf: out of range, never wrapped
        elif isinstance(v, str):
            texts.append(i)
        else:  # bytes, lists, objects, timestamps, durations
            bad[i] = True
    if texts:
        t_num, t_blank, t_bad = _text_numbers(pd.Series([cells[i] for i in texts], dtype="string"))
        num[texts], blank[texts], bad[texts] = t_num, t_blank, t_bad
    num[bad] = np.nan
    return num, blank, bad, boolean


def _int_column(df: pd.DataFrame, col: str, path: Path, *, nullable: bool) -> pd.Series:
    """Parse a column of integers within :data:`INT_BOUNDS`; text, fractions, NaN/inf and booleans
    are errors. Every check runs on float64 values (exact in range, saturating outside it) before
    the one cast to int64."""
    raw = df[col]
    lo, hi = INT_BOUNDS[col]
    dtype = raw.dtype
    boolean = None
    if dtype.kind in "iuf":  # signed, unsigned (uint64 too), float; numpy, nullable or Arrow
        blank = raw.isna().to_numpy(bool)
        num = raw.to_numpy(dtype="float64", na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad = ~blank & ~(np.isfinite(num) & (np.floor(num) == num))
        num = np.where(bad, np.nan, num)
    elif isinstance(dtype, pd.StringDtype):  # CSV: every cell is text
        num, blank, bad = _text_numbers(raw)
    else:  # mixed JSON values, booleans (true is not 1 token), decimals, dates, bytes, categories
        num, blank, bad, boolean = _object_numbers(raw)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "is a boolean, not an integer" if boolean is not None and boolean[i] else _NOT_INT
        raise InputError(f"{_show(raw.iloc[i])} {what} (allowed: {lo} to {hi:,})", path=path, row=i + 1,
                         field=col)
    if blank.any() and not nullable:
        i = int(np.flatnonzero(blank)[0])
        raise InputError("value is missing", path=path, row=i + 1, field=col)
    out = (num < lo) | (num > hi)
    if out.any():
        i = int(np.flatnonzero(out)[0])
        side = "below the minimum" if num[i] < lo else "above the maximum"
        raise InputError(f"{_show(raw.iloc[i])} is {side} (allowed: {lo} to {hi:,})", path=path, row=i + 1,
                         field=col)
    values = pd.Series(num, index=raw.index)  # NaN only where blank; all else integral and in range
    return values.astype("Int64") if nullable else values.astype("int64")


def _text(df: pd.DataFrame, col: str, path: Path) -> pd.Series:
    """A column as pandas strings; a cell that has no text form (e.g. non-UTF-8 bytes) is an error."""
    try:
        return df[col].astype("string")
    except (UnicodeDecodeError, TypeError, ValueError):
        for i, v in enumerate(df[col].to_numpy(dtype=object)):
            try:
                pd.Series([v], dtype=object).astype("string")
            except (UnicodeDecodeError, TypeError, ValueError):
                raise InputError(f"{_show(v)} is not text", path=path, row=i + 1, field=col) from None
        raise


def _bool_column(df: pd.DataFrame, col: str, path: Path) -> pd.Series:
    text = _text(df, col, path).fillna("").str.strip()
    bad = ~text.isin(_TRUE | _FALSE)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"{_show(text.iloc[i])} is not a boolean (0/1/true/false)", path=path, row=i + 1,
                         field=col)
    return text.isin(_TRUE)


def _check_units(df: pd.DataFrame, path: Path) -> None:
    """Lengths must be tokens; characters or words would silently skew every cost."""
    if "length_unit" not in df.columns:
        return
    units = _text(df, "length_unit", path).fillna("tokens").str.strip().str.lower()
    bad = units != "tokens"
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"unit {_show(units.iloc[i])} is not 'tokens'", path=path, row=i + 1, field="length_unit")


def normalize(df: pd.DataFrame, path: str | Path, *, source: str | None = None) -> pd.DataFrame:
    """Validate a raw table and return it in the canonical schema.

    Missing optional columns get defaults: ``source`` = the file stem, ``step`` = 0, ``prompt_id`` =
    ``group_id`` or a per-row id, ``group_id`` = ``prompt_id``, ``sample_idx`` = position within the
    prompt, ``prompt_tokens`` = missing, ``hit_cap`` = ``response_tokens >= response_cap`` when a
    ``response_cap`` column exists, else False.
    """
    path = Path(path)
    if len(df) == 0:
        raise InputError("trace has no rows", path=path)
    check_unique_columns(df.columns, path, where="in the table")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(f"missing required column(s) {missing}; found {column_names(df.columns)}", path=path,
                         field=missing[0])
    _check_units(df, path)
    out = pd.DataFrame(index=df.index)
    out["source"] = _text(df, "source", path).fillna(source or path.stem) if "source" in df else (
        source or path.stem)
    out["step"] = _int_column(df, "step", path, nullable=False) if "step" in df else 0
    if "prompt_id" in df:
        out["prompt_id"] = _text(df, "prompt_id", path)
    elif "group_id" in df:
        out["prompt_id"] = _text(df, "group_id", path)
    else:
        out["prompt_id"] = pd.Series([f"r{i}" for i in range(len(df))], index=df.index, dtype="string")
    if out["prompt_id"].isna().any():
        i = int(np.flatnonzero(out["prompt_id"].isna().to_numpy())[0])
        raise InputError("value is missing", path=path, row=i + 1, field="prompt_id")
    out["group_id"] = _text(df, "group_id", path).fillna(out["prompt_id"]) if "group_id" in df else (
        out["prompt_id"])
    if "sample_idx" in df:
        out["sample_idx"] = _int_column(df, "sample_idx", path, nullable=False)
    else:
        out["sample_idx"] = out.groupby(["source", "step", "prompt_id"]).cumcount()
    out["prompt_tokens"] = (_int_column(df, "prompt_tokens", path, nullable=True)
                            if "prompt_tokens" in df else pd.array([pd.NA] * len(df), dtype="Int64"))
    out["response_tokens"] = _int_column(df, "response_tokens", path, nullable=False)
    # A response_cap column is checked even when hit_cap is given: workloads snap capped responses to it.
    cap = _int_column(df, "response_cap", path, nullable=True) if "response_cap" in df else None
    if "hit_cap" in df:
        out["hit_cap"] = _bool_column(df, "hit_cap", path)
    elif cap is not None:
        out["hit_cap"] = (cap.notna() & (out["response_tokens"] >= cap.fillna(0))).astype(bool)
    else:
        out["hit_cap"] = False
    out = out.astype(TRACE_COLUMNS)
    _check_duplicates(out, path)
    extra = [c for c in df.columns if c not in out.columns]
    return pd.concat([out, df[extra]], axis=1).reset_index(drop=True)


def _check_duplicates(df: pd.DataFrame, path: Path) -> None:
    dup = df.duplicated(list(KEY), keep=False)
    if dup.any():
        rows = np.flatnonzero(dup.to_numpy())[:2] + 1
        r = df.iloc[rows[0] - 1]
        raise InputError(
            f"duplicate key (source, step, prompt_id, sample_idx) = ({_show(r['source'])}, {r['step']}, "
            f"{_show(r['prompt_id'])}, {r['sample_idx']}) also at row {rows[1]}",
            path=path, row=int(rows[0]), field="sample_idx")
