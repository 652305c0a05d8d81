"""The canonical trace schema and its validation.

Every reader returns a DataFrame with these columns (plus any optional columns of the source kept
as-is). Validation names the file, the 1-based data row and the field of the first problem, so a
user can fix a foreign trace without reading our code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tltsim.errors import InputError

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


def _int_column(df: pd.DataFrame, col: str, path: Path, *, minimum: int, nullable: bool) -> pd.Series:
    """Parse a column of integers, rejecting text, fractions and values below ``minimum``."""
    raw = df[col]
    blank = raw.isna() | (raw.astype("string").str.strip() == "")
    num = pd.to_numeric(raw.where(~blank), errors="coerce")
    bad = (~blank & num.isna()) | (num.notna() & (np.floor(num) != num)) | np.isinf(num.fillna(0))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"{_show(raw.iloc[i])} is not an integer", path=path, row=i + 1, field=col)
    if blank.any() and not nullable:
        i = int(np.flatnonzero(blank.to_numpy())[0])
        raise InputError("value is missing", path=path, row=i + 1, field=col)
    low = num.notna() & (num < minimum)
    if low.any():
        i = int(np.flatnonzero(low.to_numpy())[0])
        raise InputError(f"{num.iloc[i]:g} is below the minimum {minimum}", path=path, row=i + 1, field=col)
    return num.astype("Int64") if nullable else num.astype("int64")


def _bool_column(df: pd.DataFrame, col: str, path: Path) -> pd.Series:
    text = df[col].astype("string").fillna("").str.strip()
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
    units = df["length_unit"].astype("string").fillna("tokens").str.strip().str.lower()
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
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise InputError(f"missing required column(s) {missing}; found {list(df.columns)}", path=path,
                         field=missing[0])
    _check_units(df, path)
    out = pd.DataFrame(index=df.index)
    out["source"] = df["source"].astype("string").fillna(source or path.stem) if "source" in df else (
        source or path.stem)
    out["step"] = _int_column(df, "step", path, minimum=0, nullable=False) if "step" in df else 0
    if "prompt_id" in df:
        out["prompt_id"] = df["prompt_id"].astype("string")
    elif "group_id" in df:
        out["prompt_id"] = df["group_id"].astype("string")
    else:
        out["prompt_id"] = pd.Series([f"r{i}" for i in range(len(df))], index=df.index, dtype="string")
    if out["prompt_id"].isna().any():
        i = int(np.flatnonzero(out["prompt_id"].isna().to_numpy())[0])
        raise InputError("value is missing", path=path, row=i + 1, field="prompt_id")
    out["group_id"] = df["group_id"].astype("string").fillna(out["prompt_id"]) if "group_id" in df else (
        out["prompt_id"])
    if "sample_idx" in df:
        out["sample_idx"] = _int_column(df, "sample_idx", path, minimum=0, nullable=False)
    else:
        out["sample_idx"] = out.groupby(["source", "step", "prompt_id"]).cumcount()
    out["prompt_tokens"] = (_int_column(df, "prompt_tokens", path, minimum=0, nullable=True)
                            if "prompt_tokens" in df else pd.array([pd.NA] * len(df), dtype="Int64"))
    out["response_tokens"] = _int_column(df, "response_tokens", path, minimum=1, nullable=False)
    if "hit_cap" in df:
        out["hit_cap"] = _bool_column(df, "hit_cap", path)
    elif "response_cap" in df:
        cap = _int_column(df, "response_cap", path, minimum=1, nullable=True)
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
