"""Long-tail statistics of a trace: how long is the tail, and how much does it stretch a step.

``straggler`` is the per-step max/mean of response lengths — the factor by which the slowest
response stretches a synchronous step beyond its average response. ``group_tail`` is the mean over
groups of (longest sample / group mean), the intra-group tail that GRPO-style groups suffer; it is
undefined (NaN here, ``null`` in JSON, ``–`` in tables) when no group has two samples.

Grouping (``by``) keeps every row: an empty key (a blank CSV cell, a JSON null) is a group of its
own, labelled :data:`EMPTY_KEY` and listed after the others: silently dropped rows would make the
groups no longer add up to the ``all`` row, with nothing to say why. Keys whose values are all
numbers (even when a foreign column was read as text) sort as numbers, so step 10 follows 9.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from tltcore.errors import InputError

#: The label of the group of rows whose ``by`` key is empty.
EMPTY_KEY = "(empty)"
#: The label of the whole-trace row that follows the groups.
ALL_KEY = "all"

STAT_COLUMNS = ["n", "mean", "p50", "p90", "p99", "max", "top5_share", "straggler_mean", "straggler_min",
                "straggler_max", "group_tail", "hit_cap_frac", "steps"]


def top_share(lengths: np.ndarray, frac: float = 0.05) -> float:
    """Share of all tokens produced by the ``frac`` longest responses."""
    x = np.sort(np.asarray(lengths, dtype=np.float64))[::-1]
    k = max(1, int(np.ceil(frac * len(x))))
    return float(x[:k].sum() / x.sum())


def _one(g: pd.DataFrame) -> dict[str, float]:
    r = g["response_tokens"].to_numpy(np.float64)
    per_step = g.groupby(["source", "step"])["response_tokens"].agg(["max", "mean"])
    strag = (per_step["max"] / per_step["mean"]).to_numpy()
    grp = g.groupby(["source", "step", "group_id"])["response_tokens"].agg(["max", "mean", "size"])
    grp = grp[grp["size"] > 1]
    p50, p90, p99 = np.percentile(r, [50, 90, 99])
    return {
        "n": len(r), "mean": r.mean(), "p50": p50, "p90": p90, "p99": p99, "max": r.max(),
        "top5_share": top_share(r), "straggler_mean": strag.mean(), "straggler_min": strag.min(),
        "straggler_max": strag.max(),
        "group_tail": float((grp["max"] / grp["mean"]).mean()) if len(grp) else float("nan"),
        "hit_cap_frac": float(g["hit_cap"].mean()), "steps": len(per_step),
    }


def _is_empty(value: object) -> bool:
    """A missing key: NaN/NA/None, or text that is blank (a JSONL ``""``)."""
    if isinstance(value, str):
        return not value.strip()
    return value is None or bool(pd.isna(value))  # type: ignore[arg-type]


def _numeric_columns(df: pd.DataFrame, by: Sequence[str]) -> set[str]:
    """The ``by`` columns whose non-empty values are all numbers (numeric dtype, or text such as an
    extra CSV column, which readers keep as text)."""
    out = set()
    for col in by:
        values = df[col]
        if pd.api.types.is_bool_dtype(values):
            continue
        if pd.api.types.is_numeric_dtype(values):
            out.add(col)
            continue
        present = values[~values.map(_is_empty).astype(bool)]
        if len(present) and pd.to_numeric(present.astype(str).str.strip(), errors="coerce").notna().all():
            out.add(col)
    return out


def _sort_key(key: tuple, by: Sequence[str], numeric: set[str]) -> tuple:
    """Empty keys last; numeric columns by value, the rest as text."""
    parts = []
    for col, v in zip(by, key, strict=True):
        if _is_empty(v):
            parts.append((1, 0.0, ""))
        elif col in numeric:
            parts.append((0, float(str(v).strip()), ""))
        else:
            parts.append((0, 0.0, str(v)))
    return tuple(parts)


def trace_stats(df: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """One row of statistics per ``by`` group (or one row for the whole trace), plus an ``all`` row
    when grouping. Every row of ``df`` is in exactly one group (see the module docstring)."""
    by = list(by)
    unknown = [c for c in by if c not in df.columns]
    if unknown:
        raise InputError(f"cannot group by {unknown}: not a trace column ({list(df.columns)})", field="--by")
    if not by:
        return pd.DataFrame([_one(df)], columns=STAT_COLUMNS)
    # Blank text is as empty as a missing cell: give both one group.
    keys = [df[c].where(~df[c].map(_is_empty).astype(bool)) if not pd.api.types.is_numeric_dtype(df[c])
            else df[c] for c in by]
    groups = [(k if isinstance(k, tuple) else (k,), g)
              for k, g in df.groupby(keys, sort=False, dropna=False)]
    numeric = _numeric_columns(df, by)
    groups.sort(key=lambda kg: _sort_key(kg[0], by, numeric))
    rows = []
    for key, g in groups:
        labels = [EMPTY_KEY if _is_empty(v) else v for v in key]
        rows.append({**dict(zip(by, labels, strict=True)), **_one(g)})
    rows.append({**dict.fromkeys(by, ALL_KEY), **_one(df)})
    return pd.DataFrame(rows, columns=[*by, *STAT_COLUMNS])
