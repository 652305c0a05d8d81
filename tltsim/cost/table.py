"""The calibrated cost model: iteration times interpolated from a measured table (the profiler's)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tltsim.cost.lengths import as_lengths
from tltsim.errors import InputError
from tltsim.policy.base import SDConfig

TABLE_COLUMNS = ("kind", "batch_size", "context", "verify_tokens", "seconds")
# kind -> grid axes (CSV columns). ``topk`` is an optional column, needed by draft_step rows.
TABLE_KINDS: dict[str, tuple[str, ...]] = {
    "decode": ("batch_size", "context"),  # one plain decode iteration
    "verify": ("batch_size", "context", "verify_tokens"),  # target forward over verify_tokens+1 / req
    "draft_step": ("batch_size", "context", "topk"),  # one drafter step over topk tokens / req
    "sd_overhead": ("batch_size",),  # per SD iteration, beyond draft steps and verify
    "prefill": ("context",),  # one prefill pass of `context` new tokens in total
    "drafter_prefill": ("context",),  # one drafter-only pass over `context` new tokens (switch, catch-up)
}


def _bracket(points: np.ndarray, x: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Left index and weight for piecewise-linear interpolation, extrapolating linearly past
    both ends (KV traffic keeps growing with context beyond the last measurement)."""
    i = np.clip(np.searchsorted(points, x, side="right") - 1, 0, len(points) - 2)
    return i, (x - points[i]) / (points[i + 1] - points[i])


def _reduce_axis(values: np.ndarray, points: np.ndarray, x: float) -> np.ndarray:
    """Interpolate the leading axis of ``values`` at scalar ``x``."""
    if len(points) == 1:
        return values[0]
    i, w = _bracket(points, x)
    return values[i] * (1 - w) + values[i + 1] * w


@dataclass(frozen=True)
class _Grid:
    """Measured seconds on a full rectangular grid; multilinear interpolation."""

    axes: tuple[np.ndarray, ...]
    values: np.ndarray

    def at(self, *coords: float) -> float:
        v = self.values
        for points, x in zip(self.axes, coords, strict=True):
            v = _reduce_axis(v, points, x)
        return max(float(v), 0.0)

    def along_last(self, *coords: float, last: np.ndarray) -> np.ndarray:
        """Vectorised over the last axis (e.g. many context values at one batch size)."""
        v = self.values
        for points, x in zip(self.axes[:-1], coords, strict=True):
            v = _reduce_axis(v, points, x)
        points = self.axes[-1]
        if len(points) == 1:
            return np.full(last.shape, max(float(v[0]), 0.0))
        i, w = _bracket(points, last)
        return np.maximum(v[i] * (1 - w) + v[i + 1] * w, 0.0)


def _parse_table_row(rec: dict, path: Path, row: int, has_topk: bool) -> tuple[str, dict[str, float], float]:
    kind = (rec.get("kind") or "").strip()
    if kind not in TABLE_KINDS:
        raise InputError(f"unknown kind '{kind}'; known: {', '.join(TABLE_KINDS)}", path=path, row=row,
                         field="kind")
    coords = {}
    for col in TABLE_KINDS[kind]:
        if col == "topk" and not has_topk:
            raise InputError("draft_step rows need a topk column", path=path, row=row, field="topk")
        try:
            coords[col] = float(rec[col])
        except (TypeError, ValueError):
            raise InputError(f"not a number: {rec.get(col)!r}", path=path, row=row, field=col) from None
    try:
        seconds = float(rec["seconds"])
    except (TypeError, ValueError):
        raise InputError(f"not a number: {rec.get('seconds')!r}", path=path, row=row, field="seconds") from None
    if not seconds >= 0 or not math.isfinite(seconds):
        raise InputError(f"must be a finite non-negative time, got {seconds}", path=path, row=row,
                         field="seconds")
    return kind, coords, seconds


def _build_grid(kind: str, points: list[tuple[dict[str, float], float]], path: Path) -> _Grid:
    names = TABLE_KINDS[kind]
    axes = tuple(np.array(sorted({c[n] for c, _ in points})) for n in names)
    values = np.full(tuple(len(a) for a in axes), np.nan)
    for coords, seconds in points:
        index = tuple(int(np.searchsorted(a, coords[n])) for a, n in zip(axes, names, strict=True))
        if not np.isnan(values[index]):
            raise InputError(f"duplicate {kind} row at {coords}", path=path, field="kind")
        values[index] = seconds
    if np.isnan(values).any():
        missing = tuple(float(a[i]) for a, i in zip(axes, np.argwhere(np.isnan(values))[0], strict=True))
        raise InputError(f"{kind} rows must form a full grid over {', '.join(names)}; missing "
                         f"{dict(zip(names, missing, strict=True))}", path=path, field="kind")
    return _Grid(axes, values)


@dataclass(frozen=True)
class TableCostModel:
    """Iteration costs interpolated from measured times (the profiler's calibration table).

    A tidy CSV with columns ``kind, batch_size, context, verify_tokens, seconds`` (+ ``topk`` for
    ``draft_step`` rows); see ``TABLE_KINDS`` for which columns each kind is gridded on. Each kind
    must cover a full grid; values between points are multilinear, beyond them linear.

    Tables are measured at uniform contexts, and decode/verify time is affine in the *sum* of
    context lengths (KV streaming), so a batch is looked up at its mean context: for an affine
    table that is the per-request sum. ``sd_time`` = depth x draft_step + verify (+ sd_overhead if
    the table has it); ``prefill_time`` interpolates on the total new tokens.
    """

    grids: dict[str, _Grid]
    source: str = ""

    @classmethod
    def from_csv(cls, path: str | Path) -> TableCostModel:
        path = Path(path)
        try:
            with path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                columns = set(reader.fieldnames or ())
                for col in TABLE_COLUMNS:
                    if col not in columns:
                        raise InputError("missing column", path=path, field=col)
                by_kind: dict[str, list[tuple[dict[str, float], float]]] = {}
                for row, rec in enumerate(reader, start=2):
                    kind, coords, seconds = _parse_table_row(rec, path, row, "topk" in columns)
                    by_kind.setdefault(kind, []).append((coords, seconds))
        except FileNotFoundError:
            raise InputError("file not found", path=path) from None
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise InputError(f"not a readable CSV file ({exc})", path=path) from None
        for needed in ("decode",):
            if needed not in by_kind:
                raise InputError(f"no {needed} rows", path=path, field="kind")
        grids = {kind: _build_grid(kind, pts, path) for kind, pts in by_kind.items()}
        return cls(grids, source=str(path))

    def _grid(self, kind: str) -> _Grid:
        if kind not in self.grids:
            raise InputError(f"the cost table has no {kind} rows", path=self.source or None, field="kind")
        return self.grids[kind]

    def decode_time(self, context_lens: np.ndarray) -> float:
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0:
            return 0.0
        return self._grid("decode").at(ctx.size, float(ctx.mean()))

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0 or n_iters <= 0:
            return 0.0
        means = float(ctx.mean()) + np.arange(int(n_iters), dtype=float)
        return float(self._grid("decode").along_last(ctx.size, last=means).sum())

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        if not config.enabled:
            return self.decode_time(context_lens)
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0:
            return 0.0
        b, mean = ctx.size, float(ctx.mean())
        total = (config.depth * self._grid("draft_step").at(b, mean, config.topk)
                 + self._grid("verify").at(b, mean, config.verify_tokens))
        if "sd_overhead" in self.grids:
            total += self.grids["sd_overhead"].at(b)
        return total

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        new = as_lengths(new_tokens, "new_tokens")
        total = int(new.sum())
        return self._grid("prefill").at(total) if total else 0.0

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        """From ``drafter_prefill`` rows; a table without them cannot price an elastic switch or a
        drafter catch-up (it is an error, never free)."""
        new = as_lengths(new_tokens, "new_tokens")
        total = int(new.sum())
        return self._grid("drafter_prefill").at(total) if total else 0.0
