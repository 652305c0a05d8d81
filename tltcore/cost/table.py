"""The calibrated cost model: iteration times interpolated from a measured table (the profiler's).

A table is tidy rows ``kind, batch_size, context, depth, topk, verify_tokens, seconds`` (CSV or
Parquet; ``depth``/``topk``/``verify_tokens`` only where a kind needs them) plus metadata saying
what was measured where (Parquet schema metadata; ``tlt real profile`` writes it):

==================== ============================================ ==========================================
kind                 grid                                         one measurement is
==================== ============================================ ==========================================
``decode``           batch_size x context                          a plain decode iteration
``sd``               batch_size x context, per (depth, topk,      a whole SD iteration of that draft shape
                     verify_tokens)
``draft_step``       batch_size x context, per topk                one drafter step (composes SD shapes that
``verify``           batch_size x context, per verify_tokens       have no ``sd`` rows, with ``sd_overhead``
``sd_overhead``      batch_size                                    per SD iteration)
``prefill``          batch_size x context (new tokens per request) one prefill pass of the target
``drafter_prefill``  batch_size x context (new tokens per request) one drafter-only pass (switch, catch-up)
==================== ============================================ ==========================================

Rows are measured at uniform contexts; a batch is looked up **per request, never at the mean**, by
the table's ``context_rule``: ``sum`` (a paged-KV engine such as vLLM, whose attention reads each
request's own KV: ``T = T(b, 0) + sum_i [T(b, c_i) - T(b, 0)] / b``) or ``max`` (an engine whose
attention pads every request to the longest, such as the native slab engine: ``T = T(b, max_i c_i)``).
Within the grid values are multilinear, beyond it linear (KV traffic keeps growing with context).

A target prefill pass (``prefill`` rows) follows the table's ``prefill_rule`` where it has one, else
its ``context_rule``: ``sum``, ``max``, or ``padded_attention`` (an engine whose prefill pads only its
attention to the longest request and runs the projections and MLP on the real tokens, such as the
native engine: ``T = T(b, m) - s(b) (m - sum_i n_i / b)`` with ``m = max_i n_i``: the ``max`` reading
less the per-token work of the padding it skips). ``s(b)`` is the per-token rate of the rows: a row's
flattest secant along the context axis (its rise is the per-token work plus attention, which grows
faster than linearly with the prompt, and fixed per-pass costs bend its shortest end up), linear in
the batch between rows, 0 for a single context column. A uniform batch reads its row exactly under
all three rules. ``drafter_prefill`` rows always follow ``context_rule`` (the native drafter's
catch-up pads every request).

Metadata keys (all optional, strings): ``device`` (GPU preset the times belong to), ``model``
(:func:`shape_fingerprint`), ``tp``, ``dtype``, ``context_rule``, ``prefill_rule``,
``engine``, ``versions``, ``date``, ``command``. :meth:`TableCostModel.check_matches` refuses a table
measured for another model or device than the scenario's.
"""

from __future__ import annotations

import csv
import json
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from tltcore.cost.lengths import as_lengths
from tltcore.cost.protocol import CostModelBase
from tltcore.errors import InputError, reason
from tltcore.model_shape import ModelShape
from tltcore.policy.base import SDConfig

TABLE_COLUMNS = ("kind", "batch_size", "context", "seconds")
SHAPE_COLUMNS = ("depth", "topk", "verify_tokens")
# kind -> the shape columns that select a sub-table (each sub-table is gridded on batch x context)
TABLE_KINDS: dict[str, tuple[str, ...]] = {
    "decode": (),
    "sd": ("depth", "topk", "verify_tokens"),
    "draft_step": ("topk",),
    "verify": ("verify_tokens",),
    "sd_overhead": (),
    "prefill": (),
    "drafter_prefill": (),
}
CONTEXT_RULES = ("sum", "max")
PREFILL_RULES = (*CONTEXT_RULES, "padded_attention")
META_KEY = b"tlt.cost_table"


def table_frame(rows: list[dict]) -> pd.DataFrame:
    """Profiler rows as a table frame: every shape column present (NaN where a kind has none)."""
    df = pd.DataFrame(rows)
    for col in SHAPE_COLUMNS:
        if col not in df.columns:
            df[col] = np.nan
    return df


def shape_fingerprint(shape: ModelShape) -> str:
    """The architecture numbers that decide iteration cost, as one comparable string."""
    s = shape
    text = (f"L{s.num_hidden_layers}-h{s.hidden_size}-a{s.num_attention_heads}-kv{s.num_key_value_heads}"
            f"-hd{s.head_dim}-i{s.intermediate_size}-v{s.vocab_size}")
    if s.moe is not None:  # a dense model's fingerprint is unchanged, so its tables still match
        m = s.moe
        text += (f"-e{m.num_experts}k{m.experts_per_token}ei{m.expert_intermediate_size}"
                 f"s{m.shared_intermediate_size}d{m.dense_layers}")
    if s.mla is not None:
        a = s.mla
        text += f"-mla{a.q_lora_rank}.{a.kv_lora_rank}.{a.qk_nope_head_dim}.{a.qk_rope_head_dim}.{a.v_head_dim}"
    if s.weight_dtype != "bf16":
        text += f"-{s.weight_dtype}"
    return text


def _bracket(points: np.ndarray, x: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """Left index and weight for piecewise-linear interpolation, extrapolating linearly past both ends."""
    i = np.clip(np.searchsorted(points, x, side="right") - 1, 0, len(points) - 2)
    return i, (x - points[i]) / (points[i + 1] - points[i])


@dataclass(frozen=True)
class _Grid:
    """Measured seconds on a full batch x context grid (a single context column is allowed)."""

    batches: np.ndarray
    contexts: np.ndarray
    values: np.ndarray  # (len(batches), len(contexts))

    def _row(self, b: float) -> np.ndarray:
        """Values along the context axis, interpolated at batch ``b``."""
        if len(self.batches) == 1:
            return self.values[0]
        i, w = _bracket(self.batches, float(b))
        return self.values[i] * (1 - w) + self.values[i + 1] * w

    def at_one(self, b: float, context: float) -> float:
        """:meth:`at` for one context, on Python floats: the same interpolation, operation for operation
        (so bit-identical), without numpy's per-call overhead. A policy pricing a dozen shapes at a
        dozen phases per decision makes ~100 lookups; at numpy's ~60 us each that was a CPU engine
        iteration's worth of time per decision."""
        nb, nc = len(self.batches), len(self.contexts)
        if nb == 1:
            i, wb = 0, 0.0
        else:
            i = min(max(bisect_right(self._batch_list, b) - 1, 0), nb - 2)
            wb = (b - self._batch_list[i]) / (self._batch_list[i + 1] - self._batch_list[i])
        rows = self._value_rows
        if nc == 1:
            v = rows[i][0] if nb == 1 else rows[i][0] * (1 - wb) + rows[i + 1][0] * wb
            return max(v, 0.0)
        cl = self._context_list
        j = min(max(bisect_right(cl, context) - 1, 0), nc - 2)
        wc = (context - cl[j]) / (cl[j + 1] - cl[j])
        if nb == 1:
            lo, hi = rows[i][j], rows[i][j + 1]
        else:
            lo = rows[i][j] * (1 - wb) + rows[i + 1][j] * wb
            hi = rows[i][j + 1] * (1 - wb) + rows[i + 1][j + 1] * wb
        return max(lo * (1 - wc) + hi * wc, 0.0)

    def token_slope(self, b: float) -> float:
        """Seconds per token per request at batch ``b`` of the work that grows linearly with the
        context: each batch row's flattest secant, linear in the batch between rows (as :meth:`_row`),
        never below 0; 0 for a single context column (the ``padded_attention`` rule, module docstring)."""
        slopes = self._token_slopes
        if len(self.batches) == 1:
            return slopes[0]
        i = min(max(bisect_right(self._batch_list, b) - 1, 0), len(self.batches) - 2)
        wb = (b - self._batch_list[i]) / (self._batch_list[i + 1] - self._batch_list[i])
        return max(slopes[i] * (1 - wb) + slopes[i + 1] * wb, 0.0)

    @cached_property
    def _token_slopes(self) -> list[float]:
        if len(self.contexts) == 1:
            return [0.0] * len(self.batches)
        secants = np.diff(self.values, axis=1) / np.diff(self.contexts)
        return [max(float(x), 0.0) for x in secants.min(axis=1)]

    @cached_property
    def _batch_list(self) -> list[float]:
        return [float(x) for x in self.batches]

    @cached_property
    def _context_list(self) -> list[float]:
        return [float(x) for x in self.contexts]

    @cached_property
    def _value_rows(self) -> list[list[float]]:
        return [[float(x) for x in row] for row in self.values]

    def at(self, b: float, contexts: np.ndarray | float) -> np.ndarray:
        """Seconds at batch ``b`` for each context (vectorised), never below 0."""
        row = self._row(b)
        c = np.asarray(contexts, dtype=np.float64)
        if len(self.contexts) == 1:
            return np.maximum(np.full(c.shape, row[0]), 0.0)
        i, w = _bracket(self.contexts, c)
        return np.maximum(row[i] * (1 - w) + row[i + 1] * w, 0.0)


@dataclass(frozen=True)
class _Stack:
    """Grids on the same batch x context axes (two or more of each), stacked: :meth:`_Grid.at_one` of
    all of them in one pass, each value the very float its own grid's ``at_one`` gives (the same
    operations in the same order). Cost-aware prices a dozen shapes per phase of its plan; one pass
    instead of a dozen lookups is its plan's largest saving on the CPU engine, where the decisions are
    CPU time on the critical path. The pass runs on Python floats, a cell's values side by side:
    combining a dozen of them so is faster than a dozen numpy calls (~4 us against ~13 us)."""

    batches: list[float]
    contexts: list[float]
    cells: list[list[tuple[float, ...]]]  # [batch][context] -> each grid's value there

    @classmethod
    def of(cls, grids: Sequence[_Grid]) -> _Stack | None:
        """The stack of ``grids``, or None when they do not share axes of at least two points each."""
        first = grids[0]
        if len(first.batches) < 2 or len(first.contexts) < 2 or any(
                not (np.array_equal(g.batches, first.batches) and np.array_equal(g.contexts, first.contexts))
                for g in grids[1:]):
            return None
        rows = [g._value_rows for g in grids]
        cells = [[tuple(r[i][j] for r in rows) for j in range(len(first.contexts))] for i in range(len(first.batches))]
        return cls(first._batch_list, first._context_list, cells)

    def at_one(self, b: float, context: float) -> list[float]:
        bl, cl = self.batches, self.contexts
        i = min(max(bisect_right(bl, b) - 1, 0), len(bl) - 2)
        wb = (b - bl[i]) / (bl[i + 1] - bl[i])
        j = min(max(bisect_right(cl, context) - 1, 0), len(cl) - 2)
        wc = (context - cl[j]) / (cl[j + 1] - cl[j])
        ub, uc = 1 - wb, 1 - wc
        near, far = self.cells[i], self.cells[i + 1]
        return [max((a * ub + c * wb) * uc + (e * ub + g * wb) * wc, 0.0)
                for a, c, e, g in zip(near[j], far[j], near[j + 1], far[j + 1], strict=True)]


def _grid_from(rows: pd.DataFrame, where: str, path: object) -> _Grid:
    batches = np.array(sorted(rows["batch_size"].unique()), dtype=np.float64)
    contexts = np.array(sorted(rows["context"].unique()), dtype=np.float64)
    values = np.full((len(batches), len(contexts)), np.nan)
    for b, c, s in zip(rows["batch_size"], rows["context"], rows["seconds"], strict=True):
        i, j = int(np.searchsorted(batches, b)), int(np.searchsorted(contexts, c))
        if not np.isnan(values[i, j]):
            raise InputError(f"duplicate {where} row at batch {b:g}, context {c:g}", path=path, field="kind")
        values[i, j] = s
    if np.isnan(values).any():
        i, j = np.argwhere(np.isnan(values))[0]
        raise InputError(f"{where} rows must form a full batch x context grid; missing batch {batches[i]:g}, "
                         f"context {contexts[j]:g}", path=path, field="kind")
    return _Grid(batches, contexts, values)


def _number(rec: dict, col: str, path: object, row: int, *, required: bool = True) -> float | None:
    raw = rec.get(col)
    if raw is None or (isinstance(raw, str) and not raw.strip()) or (isinstance(raw, float) and math.isnan(raw)):
        if required:
            raise InputError("missing value", path=path, row=row, field=col)
        return None
    if isinstance(raw, bool):
        raise InputError(f"not a number: {raw!r}", path=path, row=row, field=col)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise InputError(f"not a number: {raw!r}", path=path, row=row, field=col) from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"must be a finite number >= 0, got {raw!r}", path=path, row=row, field=col)
    return value


def _check_rows(df: pd.DataFrame, path: object) -> pd.DataFrame:
    """Validated rows with numeric columns (errors name file, 1-based CSV row and field)."""
    for col in TABLE_COLUMNS:
        if col not in df.columns:
            raise InputError("missing column", path=path, field=col)
    out: dict[str, list] = {c: [] for c in (*TABLE_COLUMNS, *SHAPE_COLUMNS)}
    for i, rec in enumerate(df.to_dict("records"), start=2):
        kind = str(rec.get("kind") or "").strip()
        if kind not in TABLE_KINDS:
            raise InputError(f"unknown kind '{kind}'; known: {', '.join(TABLE_KINDS)}", path=path, row=i,
                             field="kind")
        out["kind"].append(kind)
        for col in ("batch_size", "context", "seconds"):
            out[col].append(_number(rec, col, path, i))
        for col in SHAPE_COLUMNS:
            needed = col in TABLE_KINDS[kind]
            if needed and col not in df.columns:
                raise InputError(f"{kind} rows need a {col} column", path=path, row=i, field=col)
            out[col].append(_number(rec, col, path, i, required=needed) if col in df.columns else None)
        if out["batch_size"][-1] < 1:
            raise InputError("must be >= 1", path=path, row=i, field="batch_size")
    return pd.DataFrame(out)


@dataclass(frozen=True)
class TableCostModel(CostModelBase):
    """Iteration costs interpolated from measured times (see module docstring). Under the ``max`` rule
    it is its own :class:`~tltcore.cost.protocol.LongestContextTimes`; it has no paged-KV batched forms
    (its times are interpolated, not sums over pages), so the simulator prices it call by call."""

    grids: dict[tuple, _Grid]
    context_rule: str = "sum"
    prefill_rule: str = ""  # the target prefill's rule (module docstring); "": the context rule
    metadata: dict[str, str] = field(default_factory=dict)
    source: str = ""
    # per tuple of configs: (the stack of the grids they read, each config's row in it), or None
    _stacks: dict[tuple[SDConfig, ...], tuple[_Stack, list[int]] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.context_rule not in CONTEXT_RULES:
            raise InputError(f"context_rule must be one of {CONTEXT_RULES}, got '{self.context_rule}'",
                             path=self.source or None, field="context_rule")
        if self.prefill_rule and self.prefill_rule not in PREFILL_RULES:
            raise InputError(f"prefill_rule must be one of {PREFILL_RULES}, got '{self.prefill_rule}'",
                             path=self.source or None, field="prefill_rule")

    # ---- reading and writing ------------------------------------------------------------------
    @classmethod
    def from_frame(cls, df: pd.DataFrame, metadata: dict[str, str] | None = None, *,
                   source: str = "") -> TableCostModel:
        meta = {str(k): str(v) for k, v in (metadata or {}).items()}
        path = source or None
        rows = _check_rows(df, path)
        grids: dict[tuple, _Grid] = {}
        for kind, shape_cols in TABLE_KINDS.items():
            part = rows[rows["kind"] == kind]
            if part.empty:
                continue
            keys = [tuple(int(v) for v in k) for k in part[list(shape_cols)].drop_duplicates().itertuples(
                index=False)] if shape_cols else [()]
            for key in keys:
                sel = part
                for col, v in zip(shape_cols, key, strict=True):
                    sel = sel[sel[col] == v]
                label = kind + "".join(f" {c}={v}" for c, v in zip(shape_cols, key, strict=True))
                grids[(kind, *key)] = _grid_from(sel, label, path)
        if ("decode",) not in grids:
            raise InputError("no decode rows", path=path, field="kind")
        return cls(grids, context_rule=meta.get("context_rule", "sum"), prefill_rule=meta.get("prefill_rule", ""),
                   metadata=meta, source=source)

    @classmethod
    def from_file(cls, path: str | Path) -> TableCostModel:
        """Read a table written as CSV or Parquet (Parquet carries the metadata)."""
        path = Path(path)
        if not path.is_file():
            raise InputError("cost table not found" if not path.exists() else "not a file", path=path)
        try:
            if path.suffix.lower() == ".parquet":
                return cls._from_parquet(path)
            with path.open(newline="", encoding="utf-8") as fh:
                df = pd.DataFrame(list(csv.DictReader(fh)))
        except InputError:
            raise
        except (OSError, UnicodeDecodeError, csv.Error, ValueError, ArithmeticError, TypeError) as exc:
            first = reason(exc, 160)
            raise InputError(f"not a readable cost table ({first})", path=path) from None
        if df.empty:
            raise InputError("no rows", path=path)
        return cls.from_frame(df, source=str(path))

    @classmethod
    def _from_parquet(cls, path: Path) -> TableCostModel:
        """A Parquet table read with pyarrow alone: its rows as plain Python values, its tlt metadata
        checked. The ``pandas`` schema metadata is never used: ``to_pandas`` trusts it (index columns,
        dtypes), so a file whose metadata is malformed or names missing columns would crash there with
        a KeyError, and every column the table needs is a plain column anyway."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
            rows = table.to_pylist()
        except (pa.ArrowException, OSError, ValueError) as exc:
            first = reason(exc, 160, collapse=True)
            raise InputError(f"not a readable Parquet cost table ({first})", path=path) from None
        raw = (table.schema.metadata or {}).get(META_KEY)
        try:
            meta = json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"the table's {META_KEY.decode()} metadata is not JSON ({exc})", path=path) from None
        if not isinstance(meta, dict):
            raise InputError("table metadata is not a JSON object", path=path)
        names = list(table.column_names)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise InputError(f"column{'s' if len(twice) > 1 else ''} {', '.join(twice)} appear more than once",
                             path=path, field=twice[0])
        df = pd.DataFrame(rows, columns=names)
        if df.empty:
            raise InputError("no rows", path=path)
        return cls.from_frame(df, meta, source=str(path))

    from_csv = from_file

    def check_matches(self, *, model: str | None = None, device: str | None = None, tp: int | None = None) -> None:
        """Refuse a table measured for another model shape, device or TP size than asked for (keys the
        table does not record are not checked)."""
        for key, want in (("model", model), ("device", device), ("tp", None if tp is None else str(tp))):
            have = self.metadata.get(key)
            if want is not None and have is not None and have != want:
                raise InputError(f"the cost table was measured for {key} {have!r}, not {want!r}",
                                 path=self.source or None, field=key)

    # ---- lookups ---------------------------------------------------------------------------------
    def _grid(self, *key) -> _Grid:
        grid = self.grids.get(key)
        if grid is None:
            what = key[0] + "".join(f" {c}={v}" for c, v in zip(TABLE_KINDS[key[0]], key[1:], strict=True))
            raise InputError(f"the cost table has no {what} rows", path=self.source or None, field="kind")
        return grid

    @property
    def target_prefill_rule(self) -> str:
        """The rule a target prefill pass is looked up by: ``prefill_rule``, else ``context_rule``."""
        return self.prefill_rule or self.context_rule

    def _lookup(self, grid: _Grid, ctx: np.ndarray, rule: str | None = None) -> float:
        """One iteration at per-request contexts ``ctx`` by ``rule`` (the table's context rule if None)."""
        b = ctx.size
        rule = rule or self.context_rule
        if rule == "max":
            return grid.at_one(float(b), float(ctx.max()))
        if rule == "padded_attention":
            return self._padded_attention(grid, b, float(ctx.max()), float(ctx.sum()))
        base = grid.at_one(float(b), 0.0)
        return base + float((grid.at(b, ctx) - base).sum()) / b

    @staticmethod
    def _padded_attention(grid: _Grid, batch: int, longest: float, tokens: float) -> float:
        """A pass of ``batch`` requests, ``tokens`` new tokens in all, the longest ``longest``, by the
        ``padded_attention`` rule (module docstring): the one formula of that rule."""
        b = float(batch)
        return max(grid.at_one(b, longest) - grid.token_slope(b) * (longest - tokens / b), 0.0)

    # ---- by batch size and longest context (the ``max`` rule) -----------------------------------
    def longest_context_times(self) -> TableCostModel | None:
        """This table, whose times read a batch's contexts only through its size and its longest
        context (the ``max`` rule: the native slab engine pads attention to the longest) and a
        prefill pass's also through its tokens in all (``padded_attention``), so that a policy may
        price a batch from those numbers (the ``*_at`` methods) without per-request arrays; None
        when a rule is ``sum``, which reads every context."""
        return self if self.context_rule == "max" and self.target_prefill_rule != "sum" else None

    def decode_time_at(self, batch: int, longest: int) -> float:
        """:meth:`decode_time` of ``batch`` requests whose longest context is ``longest`` (``max`` rule)."""
        return self._grid("decode").at_one(float(batch), float(longest)) if batch > 0 else 0.0

    def sd_times_at(self, batch: int, longest: int, configs: Sequence[SDConfig]) -> list[float]:
        """:meth:`sd_times` of ``batch`` requests whose longest context is ``longest`` (``max`` rule)."""
        if batch <= 0:
            return [0.0 for _ in configs]
        b, top = float(batch), float(longest)
        stacked = self._stack(configs)
        if stacked is not None:
            values = stacked[0].at_one(b, top)
            return [values[k] for k in stacked[1]]
        return self._sd_each(batch, configs, lambda grid: grid.at_one(b, top))

    def prefill_time_at(self, batch: int, longest: int, tokens: int) -> float:
        """:meth:`prefill_time` of a pass of ``batch`` requests with new tokens, at most ``longest``
        of them per request and ``tokens`` in all (``max`` or ``padded_attention`` rule; requests with
        none are not in the pass)."""
        if batch <= 0:
            return 0.0
        grid = self._grid("prefill")
        if self.target_prefill_rule == "padded_attention":
            return self._padded_attention(grid, batch, float(longest), float(tokens))
        return grid.at_one(float(batch), float(longest))

    def drafter_prefill_time_at(self, batch: int, longest: int) -> float:
        """:meth:`drafter_prefill_time` as :meth:`prefill_time_at` reads a pass (``max`` rule)."""
        return self._grid("drafter_prefill").at_one(float(batch), float(longest)) if batch > 0 else 0.0

    # ---- by per-request contexts ------------------------------------------------------------------
    def decode_time(self, context_lens: np.ndarray) -> float:
        ctx = as_lengths(context_lens, "context_lens")
        return self._lookup(self._grid("decode"), ctx) if ctx.size else 0.0

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        ctx = as_lengths(context_lens, "context_lens")
        n = int(n_iters)
        if ctx.size == 0 or n <= 0:
            return 0.0
        grid, b = self._grid("decode"), ctx.size
        steps = np.arange(n, dtype=np.float64)
        if self.context_rule == "max":
            return float(grid.at(b, float(ctx.max()) + steps).sum())
        base = float(grid.at(b, 0.0)[()])
        total = n * base
        for chunk in np.array_split(ctx, max(1, ctx.size * n // 2_000_000 + 1)):  # bounded memory
            total += float((grid.at(b, np.add.outer(chunk.astype(np.float64), steps)) - base).sum()) / b
        return total

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        if not config.enabled:
            return self.decode_time(context_lens)
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0:
            return 0.0
        return self._sd(ctx.size, config, lambda grid: self._lookup(grid, ctx))

    def sd_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> list[float]:
        """:meth:`sd_time` of every config, each the same float as its own call: the contexts are
        checked (and, by the ``max`` rule, reduced) once, and a grid shared by several shapes (a
        draft step, a verify width, plain decoding) is looked up once. About twice as fast for
        cost-aware's dozen shapes, whose decisions are CPU time on the critical path of a CPU engine."""
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0:
            return [0.0 for _ in configs]
        if self.context_rule == "max":
            return self.sd_times_at(ctx.size, int(ctx.max()), configs)  # all this rule reads of the contexts
        return self._sd_each(ctx.size, configs, lambda grid: self._lookup(grid, ctx))

    def _sd_each(self, batch: int, configs: Sequence[SDConfig], read: Callable[[_Grid], float]) -> list[float]:
        """:meth:`_sd` of every config (plain decoding for a disabled one), each grid read through ``read``
        once however many shapes share it (a draft step, a verify width, the decode grid)."""
        seen: dict[int, float] = {}  # by grid identity

        def lookup(grid: _Grid) -> float:
            hit = seen.get(id(grid))
            if hit is None:
                hit = seen[id(grid)] = read(grid)
            return hit

        return [self._sd(batch, c, lookup) if c.enabled else lookup(self._grid("decode")) for c in configs]

    def _stack(self, configs: Sequence[SDConfig]) -> tuple[_Stack, list[int]] | None:
        """The :class:`_Stack` of the grids ``configs`` read and each config's row in it (cached per
        tuple of configs), or None when a config composes its time (no whole ``sd`` rows) or the
        grids do not share axes: :meth:`sd_times` then looks each grid up on its own."""
        key = tuple(configs)
        try:
            return self._stacks[key]
        except KeyError:
            found = self._stacks[key] = self._stack_of(key)
            return found

    def _stack_of(self, key: tuple[SDConfig, ...]) -> tuple[_Stack, list[int]] | None:
        """:meth:`_stack`, uncached."""
        grids: list[_Grid] = []
        rows: list[int] = []
        found: _Stack | None = None
        for c in key:
            grid = self.grids.get(("sd", c.depth, c.topk, c.verify_tokens)) if c.enabled else self._grid("decode")
            if grid is None:
                break
            if not any(grid is g for g in grids):
                grids.append(grid)
            rows.append(next(k for k, g in enumerate(grids) if g is grid))
        else:
            found = _Stack.of(grids) if grids else None
        return None if found is None else (found, rows)

    def _sd(self, batch: int, config: SDConfig, lookup: Callable[[_Grid], float]) -> float:
        """One speculative iteration of ``batch`` (> 0) requests, each grid read through ``lookup`` (at
        the batch's contexts): the table's whole ``sd`` rows for the shape, else its draft steps, its
        verify forward and the per-iteration overhead. The one formula of every SD lookup."""
        whole = self.grids.get(("sd", config.depth, config.topk, config.verify_tokens))
        if whole is not None:
            return lookup(whole)
        total = (config.depth * lookup(self._grid("draft_step", config.topk))
                 + lookup(self._grid("verify", config.verify_tokens)))
        overhead = self.grids.get(("sd_overhead",))
        return total + (float(overhead.at(batch, 0.0)[()]) if overhead is not None else 0.0)

    def _prefill(self, kind: str, new_tokens: np.ndarray) -> float:
        new = as_lengths(new_tokens, "new_tokens")
        new = new[new > 0]
        rule = self.target_prefill_rule if kind == "prefill" else self.context_rule
        return self._lookup(self._grid(kind), new, rule) if new.size else 0.0

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        """One target prefill pass, looked up at the pass's requests and their new tokens by the
        table's :attr:`target_prefill_rule`."""
        return self._prefill("prefill", new_tokens)

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        """From ``drafter_prefill`` rows; a table without them cannot price an elastic switch or a
        drafter catch-up (an error, never free)."""
        return self._prefill("drafter_prefill", new_tokens)


def write_table(df: pd.DataFrame, metadata: dict[str, str], path: str | Path) -> Path:
    """Write a cost table as Parquet with its metadata (atomically)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tltcore.atomic import write_with

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: json.dumps(metadata)})
    return write_with(path, lambda tmp: pq.write_table(table, tmp))
