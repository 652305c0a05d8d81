"""The simulator's event log: :class:`~tltcore.events.EventLog` plus rows added as numpy column blocks.

A plain phase in closed form (:mod:`tltsim.rollout.fast.plain_phase`) produces hundreds of rows at
once; appending them one tuple at a time, and turning every tuple back into column entries in
:meth:`~tltcore.events.EventLog.frame`, would cost more than computing them. :meth:`SimEventLog.block`
keeps such rows as columns, and :meth:`SimEventLog.frame` builds the table from columns: the tuple
rows are unzipped once, the blocks concatenated in, and string columns are gathers from their few
distinct values. The result equals the base class's frame cell for cell, dtype for dtype and in
the same row order: rows are sorted by step, worker, start and end, ties kept in the order the rows
were closed (a block counts as closed where it was added among the tuple rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tltcore.events import EVENT_COLUMNS, EventLog, empty_event_log
from tltcore.policy.base import NO_SD, SDConfig

_BLOCK_FIELDS = ("worker", "kind", "t0", "t1", "iterations", "batch", "config", "tokens", "drafted", "accepted",
                 "phase", "prefill", "step", "version")


def _arrow_strings() -> bool:
    try:
        from pandas.arrays import ArrowStringArray
    except ImportError:  # pragma: no cover - pandas without pyarrow
        return False
    return isinstance(pd.array(np.array([], dtype=object), dtype="string"), ArrowStringArray)


_ARROW = _arrow_strings()


def _strings(values: list[str], codes: np.ndarray) -> Any:
    """``values[codes]`` as pandas' ``string`` array (a gather from the distinct values)."""
    if _ARROW:
        import pyarrow as pa
        from pandas.arrays import ArrowStringArray

        taken = pa.array(values, type=pa.large_string()).take(pa.array(codes))
        return ArrowStringArray(pa.chunked_array([taken], type=pa.large_string()))
    return pd.array(np.array(values, dtype=object)[codes], dtype="string")


class SimEventLog(EventLog):
    """An :class:`~tltcore.events.EventLog` that also takes rows as column blocks (module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._blocks: list[tuple[int, dict[str, Any]]] = []  # (tuple rows before it, columns)
        self._block_rows = 0

    def continues(self, worker: int, batch: int, config: SDConfig) -> bool:
        """True when a decode span of ``batch`` and ``config`` would extend the worker's open row."""
        o = self._open.get(worker)
        return o is not None and o[5] == batch and o[6] is config

    def block(self, worker: int, kinds: np.ndarray, kind_names: tuple[str, ...], t0: np.ndarray, t1: np.ndarray,
              iterations: np.ndarray, batch: np.ndarray, tokens: np.ndarray, prefill_tokens: np.ndarray,
              config: SDConfig = NO_SD, drafted: np.ndarray | None = None, accepted: np.ndarray | None = None
              ) -> None:
        """Closed rollout rows of one worker, in the order they closed (after any row already closed):
        ``kinds`` indexes ``kind_names``; every row has ``config``; counts are whole numbers (``tokens``
        and ``accepted`` rounded as :meth:`frame` rounds the tuple rows' floats); ``drafted`` and
        ``accepted`` default to none."""
        n = len(t0)
        if n == 0:
            return
        self.flush(worker)
        zeros = np.zeros(n, dtype=np.int64)
        self._blocks.append((len(self.rows), {
            "worker": worker, "kind": (np.asarray(kinds), kind_names), "t0": np.asarray(t0, dtype=np.float64),
            "t1": np.asarray(t1, dtype=np.float64), "iterations": np.asarray(iterations, dtype=np.int64),
            "batch": np.asarray(batch, dtype=np.int64), "config": config,
            "tokens": np.asarray(tokens, dtype=np.int64), "prefill": np.asarray(prefill_tokens, dtype=np.int64),
            "drafted": zeros if drafted is None else np.asarray(drafted, dtype=np.int64),
            "accepted": zeros if accepted is None else np.asarray(accepted, dtype=np.int64),
            "step": self.step, "version": self.drafter_version, "n": n}))
        self._block_rows += n

    def frame(self) -> pd.DataFrame:
        """The rows so far (open rows flushed), sorted by worker and time, canonical dtypes: the
        base class's frame, built from columns."""
        for worker in list(self._open):
            self.flush(worker)
        n_rows = len(self.rows)
        n = n_rows + self._block_rows
        if n == 0:
            return empty_event_log()
        cols: dict[str, list[np.ndarray]] = {f: [] for f in _BLOCK_FIELDS}
        kind_values: dict[str, int] = {}
        phase_values: dict[str, int] = {}
        config_values: dict[SDConfig, int] = {}
        seq = []
        if n_rows:
            (worker, kind, t0, t1, iterations, batch, cfgs, tokens, drafted, accepted, phase, prefill, step,
             version) = zip(*self.rows, strict=True)

            def ints(values: tuple[Any, ...]) -> np.ndarray:
                return np.fromiter(map(int, values), dtype=np.int64, count=n_rows)

            def codes(values: tuple[Any, ...], table: dict[Any, int]) -> np.ndarray:
                for v in dict.fromkeys(values):
                    table.setdefault(v, len(table))
                return np.fromiter(map(table.__getitem__, values), dtype=np.intp, count=n_rows)

            cols["worker"].append(ints(worker))
            cols["kind"].append(codes(kind, kind_values))
            cols["t0"].append(np.fromiter(t0, dtype=np.float64, count=n_rows))
            cols["t1"].append(np.fromiter(t1, dtype=np.float64, count=n_rows))
            cols["iterations"].append(ints(iterations))
            cols["batch"].append(ints(batch))
            cols["config"].append(codes(cfgs, config_values))
            cols["tokens"].append(np.fromiter(map(round, tokens), dtype=np.int64, count=n_rows))
            cols["drafted"].append(ints(drafted))
            cols["accepted"].append(np.fromiter(map(round, accepted), dtype=np.int64, count=n_rows))
            cols["phase"].append(codes(phase, phase_values))
            cols["prefill"].append(ints(prefill))
            cols["step"].append(ints(step))
            cols["version"].append(ints(version))
            seq.append(2 * np.arange(n_rows, dtype=np.int64) + 1)
        # the blocks: their arrays as they are, their per-block values once each, repeated below
        sizes, b_worker, b_config, b_step, b_version, b_pos = [], [], [], [], [], []
        remaps: dict[tuple[str, ...], np.ndarray] = {}
        if self._blocks:
            phase_values.setdefault("rollout", len(phase_values))
        for pos, blk in self._blocks:
            names = blk["kind"][1]
            remap = remaps.get(names)
            if remap is None:
                for v in names:
                    kind_values.setdefault(v, len(kind_values))
                remap = remaps[names] = np.array([kind_values[v] for v in names], dtype=np.intp)
            config_values.setdefault(blk["config"], len(config_values))
            sizes.append(blk["n"])
            b_worker.append(blk["worker"])
            b_config.append(config_values[blk["config"]])
            b_step.append(blk["step"])
            b_version.append(blk["version"])
            b_pos.append(2 * pos)  # after tuple row pos - 1, before tuple row pos
            cols["kind"].append(remap[blk["kind"][0]])
            for f in ("t0", "t1", "iterations", "batch", "tokens", "prefill", "drafted", "accepted"):
                cols[f].append(blk[f])
        if sizes:
            def repeated(values: list[int], dtype: type) -> np.ndarray:
                return np.repeat(np.array(values, dtype=dtype), sizes)

            cols["worker"].append(repeated(b_worker, np.int64))
            cols["config"].append(repeated(b_config, np.intp))
            cols["phase"].append(np.full(self._block_rows, phase_values["rollout"], dtype=np.intp))
            cols["step"].append(repeated(b_step, np.int64))
            cols["version"].append(repeated(b_version, np.int64))
            seq.append(repeated(b_pos, np.int64))

        def joined(f: str) -> np.ndarray:
            v = cols.pop(f)
            return v[0] if len(v) == 1 else np.concatenate(v)

        # sorted by step, worker, start, end, then closing order; one column at a time, so that no
        # second copy of the whole table is alive at once
        keys = {f: joined(f) for f in ("step", "worker", "t0", "t1")}
        order = np.lexsort((np.concatenate(seq) if len(seq) > 1 else seq[0], keys["t1"], keys["t0"], keys["worker"],
                            keys["step"]))
        del seq
        c: dict[str, np.ndarray] = {}
        for f in _BLOCK_FIELDS:
            v = keys.pop(f) if f in keys else joined(f)
            c[f] = v[order]
            del v
        configs = list(config_values)
        ci = c["config"]
        frame = {
            "run_id": _strings([self.run_id], np.zeros(n, dtype=np.intp)),
            "source": _strings([self.source], np.zeros(n, dtype=np.intp)),
            "policy": _strings([self.policy], np.zeros(n, dtype=np.intp)),
            "step": c["step"], "phase": _strings(list(phase_values), c["phase"]), "worker": c["worker"],
            "kind": _strings(list(kind_values), c["kind"]), "t_start": c["t0"], "t_end": c["t1"],
            "iterations": c["iterations"], "batch_size": c["batch"],
            "sd_config": _strings([x.name for x in configs], ci),
            "depth": np.array([x.depth for x in configs], dtype=np.int64)[ci],
            "topk": np.array([x.topk for x in configs], dtype=np.int64)[ci],
            "verify_tokens": np.array([x.verify_tokens for x in configs], dtype=np.int64)[ci],
            "tokens": c["tokens"], "prefill_tokens": c["prefill"], "drafted": c["drafted"],
            "accepted": c["accepted"], "drafter_version": c["version"],
        }
        # the columns as they are (no copy into consolidated blocks: the same cells and dtypes)
        return pd.DataFrame(frame, columns=list(EVENT_COLUMNS))
