"""Long-tail statistics of a trace: how long is the tail, and how much does it stretch a step.

``straggler`` is the per-step max/mean of response lengths — the factor by which the slowest
response stretches a synchronous step beyond its average response. ``group_tail`` is the mean over
groups of (longest sample / group mean), the intra-group tail that GRPO-style groups suffer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from tltsim.errors import InputError

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


def trace_stats(df: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """One row of statistics per ``by`` group (or one row for the whole trace), plus an ``all`` row
    when grouping."""
    by = list(by)
    unknown = [c for c in by if c not in df.columns]
    if unknown:
        raise InputError(f"cannot group by {unknown}: not a trace column ({list(df.columns)})", field="--by")
    if not by:
        return pd.DataFrame([_one(df)], columns=STAT_COLUMNS)
    rows = []
    for key, g in df.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key, strict=True)), **_one(g)})
    rows.append({**dict.fromkeys(by, "all"), **_one(df)})
    out = pd.DataFrame(rows, columns=[*by, *STAT_COLUMNS])
    return out
