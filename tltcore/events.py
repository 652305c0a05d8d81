"""The event log (v2): one tidy table schema for simulated and real runs, and the one row builder.

Every backend (the SimPy simulator, the native engine, later vLLM) writes rows with exactly these
columns through :class:`EventLog`, so metrics, figures and the sim-vs-real validator never convert
between formats.

A row is one *span* of one worker in one phase of one RL step: a single engine iteration
(``iterations == 1``) or, where a backend advanced several identical iterations at once, their
total. Times are seconds on a **run-level clock** (0 = the start of the run; every step's phases
follow each other on it). Counts (``tokens``, ``prefill_tokens``, ``drafted``, ``accepted``) are
totals over the span and the batch.

Columns that need a word:

* ``run_id`` — identifies one run (the simulator: the results hash; the engine: a hash of its
  settings); ``source`` — ``sim`` or ``real``.
* ``phase`` — which part of the RL step the span belongs to (:data:`PHASES`). Summaries of
  generation read ``phase == "rollout"`` only, so drafter-training or actor-update rows never count
  as busy generation.
* ``worker`` — the rollout worker (a tensor-parallel group); :data:`CLUSTER` (-1) for cluster-wide
  rows (a step's whole rollout window, a reward stage).
* ``kind`` — what the span is (:data:`EVENT_KINDS`): ``prefill`` (new requests; emits each one's
  first token), ``decode``, ``switch`` (an instant marker: the elastic switch turned SD on),
  ``switch_reprefill`` (at the switch, every live request re-prefilled through target and drafter,
  TLT's mechanism), ``catch_up`` (a drafter-only prefill of tokens generated while the drafter was
  not running: the native engine's switch, and any request whose drafter lags), ``idle`` (a worker
  with nothing to run before the step's rollout ends), ``stage`` (a cluster-wide span of a phase),
  ``train`` and ``checkpoint`` (drafter training).
* ``tokens`` — response tokens emitted; ``prefill_tokens`` — tokens run through a prefill-like
  forward (prompts, re-prefilled contexts, caught-up drafter pairs).
* ``drafter_version`` — the drafter the worker held (:class:`~tltcore.drafter.state.DrafterState`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tltcore.policy.base import NO_SD, SDConfig

#: column -> pandas dtype. Order is the canonical column order.
EVENT_COLUMNS: dict[str, str] = {
    "run_id": "string",
    "source": "string",  # "sim" or "real"
    "policy": "string",  # the SD policy spec that produced the run
    "step": "int64",  # RL step
    "phase": "string",  # one of PHASES
    "worker": "int64",  # rollout worker (TP group); CLUSTER for cluster-wide rows
    "kind": "string",  # one of EVENT_KINDS
    "t_start": "float64",  # seconds on the run-level clock
    "t_end": "float64",
    "iterations": "int64",  # engine iterations covered by the span
    "batch_size": "int64",  # running requests during the span
    "sd_config": "string",  # SDConfig.name: "off" or "depth_topk_verify"
    "depth": "int64",
    "topk": "int64",
    "verify_tokens": "int64",
    "tokens": "int64",  # response tokens emitted
    "prefill_tokens": "int64",  # tokens through a prefill-like forward
    "drafted": "int64",  # draft tokens sent to verification
    "accepted": "int64",  # draft tokens accepted
    "drafter_version": "int64",
}

PHASES = ("rollout", "reward", "old_log_prob", "reference", "actor_update", "weight_sync", "drafter_train",
          "checkpoint")
EVENT_KINDS = ("prefill", "decode", "switch", "switch_reprefill", "catch_up", "idle", "stage", "train",
               "checkpoint")
#: Kinds that are a worker generating (what GPU-idle and finish times are measured against).
BUSY_KINDS = ("prefill", "decode", "switch_reprefill", "catch_up")
CLUSTER = -1


class EventLog:
    """Builds an event log row by row: one tuple per row, turned into numpy columns by :meth:`frame`
    (much cheaper than a dict per row, or a list per column).

    Run-level fields are fixed per log; ``step`` and ``drafter_version`` are the current values,
    set by the engine as the run moves on. With ``coalesce`` (the simulator), consecutive decode
    spans of one worker with the same batch size and SD config merge into one row; each worker has
    its own open row, closed by any other span of that worker.
    """

    def __init__(self, *, run_id: str, source: str, policy: str, coalesce: bool = False) -> None:
        self.run_id, self.source, self.policy, self.coalesce = run_id, source, policy, coalesce
        self.step = 0
        self.drafter_version = 0
        #: (worker, kind, t0, t1, iterations, batch, config, tokens, drafted, accepted, phase,
        #: prefill_tokens, step, drafter_version) per closed row
        self.rows: list[tuple[Any, ...]] = []
        self._open: dict[int, list[Any]] = {}

    def decode(self, worker: int, t0: float, t1: float, iterations: int, batch: int, config: SDConfig,
               tokens: float, drafted: int = 0, accepted: float = 0) -> bool:
        """A decode span (the hot path). True when a row was closed."""
        o = self._open.get(worker)
        if o is not None and o[5] == batch and o[6] is config:
            o[3] = t1
            o[4] += iterations
            o[7] += tokens
            o[8] += drafted
            o[9] += accepted
            return False
        closed = self.flush(worker)
        row = [worker, "decode", t0, t1, iterations, batch, config, tokens, drafted, accepted]
        if self.coalesce:
            self._open[worker] = row
            return closed
        self._append(row, "rollout", 0)
        return True

    def span(self, worker: int, kind: str, t0: float, t1: float, *, phase: str = "rollout", iterations: int = 1,
             batch: int = 0, config: SDConfig = NO_SD, tokens: float = 0, prefill_tokens: int = 0,
             drafted: int = 0, accepted: float = 0) -> None:
        """Any other span (closes the worker's open decode row first)."""
        if kind not in EVENT_KINDS or phase not in PHASES:
            raise ValueError(f"unknown event kind/phase {kind!r}/{phase!r}")
        self.flush(worker)
        self._append([worker, kind, t0, t1, iterations, batch, config, tokens, drafted, accepted], phase,
                     prefill_tokens)

    def flush(self, worker: int) -> bool:
        row = self._open.pop(worker, None)
        if row is None:
            return False
        self._append(row, "rollout", 0)
        return True

    def _append(self, row: list[Any], phase: str, prefill_tokens: int) -> None:
        self.rows.append((*row, phase, prefill_tokens, self.step, self.drafter_version))

    def frame(self) -> pd.DataFrame:
        """The rows so far (open rows flushed), sorted by worker and time, canonical dtypes."""
        for worker in list(self._open):
            self.flush(worker)
        n = len(self.rows)
        if n == 0:
            return empty_event_log()
        (worker, kind, t0, t1, iterations, batch, cfgs, tokens, drafted, accepted, phase, prefill, step,
         version) = zip(*self.rows, strict=True)
        configs = list(dict.fromkeys(cfgs))
        code = {c: i for i, c in enumerate(configs)}
        ci = np.fromiter(map(code.__getitem__, cfgs), dtype=np.intp, count=n)

        def ints(values: tuple[Any, ...]) -> np.ndarray:
            return np.fromiter(map(int, values), dtype=np.int64, count=n)

        def rounded(values: tuple[Any, ...]) -> np.ndarray:
            return np.fromiter(map(round, values), dtype=np.int64, count=n)

        def strings(values: Any) -> pd.arrays.StringArray:
            return pd.array(np.asarray(values, dtype=object), dtype="string")

        def const(value: str) -> pd.arrays.StringArray:
            return strings(np.full(n, value, dtype=object))

        names = np.array([c.name for c in configs], dtype=object)
        cols = {
            "run_id": const(self.run_id), "source": const(self.source), "policy": const(self.policy),
            "step": ints(step), "phase": strings(phase), "worker": ints(worker), "kind": strings(kind),
            "t_start": np.fromiter(t0, dtype=np.float64, count=n), "t_end": np.fromiter(t1, dtype=np.float64, count=n),
            "iterations": ints(iterations), "batch_size": ints(batch), "sd_config": strings(names[ci]),
            "depth": np.array([c.depth for c in configs], dtype=np.int64)[ci],
            "topk": np.array([c.topk for c in configs], dtype=np.int64)[ci],
            "verify_tokens": np.array([c.verify_tokens for c in configs], dtype=np.int64)[ci],
            "tokens": rounded(tokens), "prefill_tokens": ints(prefill), "drafted": ints(drafted),
            "accepted": rounded(accepted), "drafter_version": ints(version),
        }
        df = pd.DataFrame(cols, columns=list(EVENT_COLUMNS))
        order = np.lexsort((df["t_end"].to_numpy(), df["t_start"].to_numpy(), df["worker"].to_numpy(),
                            df["step"].to_numpy()))
        return df.take(order).reset_index(drop=True)


def empty_event_log() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_COLUMNS.items()})


def check_event_log(df: pd.DataFrame) -> None:
    """Raise ValueError unless ``df`` follows the schema exactly (columns, dtypes, kinds, phases,
    times)."""
    if list(df.columns) != list(EVENT_COLUMNS):
        raise ValueError(f"event log columns {list(df.columns)} != {list(EVENT_COLUMNS)}")
    for col, dtype in EVENT_COLUMNS.items():
        if str(df[col].dtype) != dtype:
            raise ValueError(f"event log column '{col}' has dtype {df[col].dtype}, expected {dtype}")
    bad = set(df["kind"].dropna().unique()) - set(EVENT_KINDS)
    if bad:
        raise ValueError(f"event log has unknown kinds {sorted(bad)}")
    bad = set(df["phase"].dropna().unique()) - set(PHASES)
    if bad:
        raise ValueError(f"event log has unknown phases {sorted(bad)}")
    if (df["t_end"] < df["t_start"]).any():
        raise ValueError("event log has spans ending before they start")
    if (df["worker"] < CLUSTER).any():
        raise ValueError(f"event log has workers below {CLUSTER}")


def read_event_log(path) -> pd.DataFrame:
    """Load an event log written as Parquet, back in the canonical dtypes (Parquet round-trips
    strings as Arrow-backed types)."""
    df = pd.read_parquet(path)
    return df[list(EVENT_COLUMNS)].astype(EVENT_COLUMNS)
