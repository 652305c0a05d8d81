"""The event log: one tidy table schema for simulated and real runs.

Every backend (the SimPy simulator, the native engine, later vLLM) emits rows with exactly these
columns, so metrics, figures and the sim-vs-real validator never convert between formats.

A row is one *span* on one rollout instance: a single iteration (``iterations == 1``) or, where the
simulator advanced in closed form, several consecutive iterations with the same batch size and SD
config. Counts (``tokens``, ``drafted``, ``accepted``) are totals over the span and the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

#: column -> pandas dtype. Order is the canonical column order.
EVENT_COLUMNS: dict[str, str] = {
    "source": "string",  # "sim" or "real"
    "policy": "string",  # policy name that produced the run
    "step": "int64",  # RL step
    "instance": "int64",  # rollout instance (a TP group of GPUs)
    "kind": "string",  # one of EVENT_KINDS
    "t_start": "float64",  # seconds since the start of the step's rollout
    "t_end": "float64",
    "iterations": "int64",  # engine iterations covered by the span
    "batch_size": "int64",  # running requests during the span
    "sd_config": "string",  # SDConfig.name: "off" or "depth_topk_verify"
    "depth": "int64",
    "topk": "int64",
    "verify_tokens": "int64",
    "tokens": "int64",  # tokens emitted (decode) or processed (prefill)
    "drafted": "int64",  # draft tokens sent to verification
    "accepted": "int64",  # draft tokens accepted
}

#: What a span is. ``reprefill`` is the elastic switch's re-prefill of live requests; ``idle`` is an
#: instance with nothing to run while the step has not ended; ``train`` is drafter training.
EVENT_KINDS = ("prefill", "decode", "reprefill", "idle", "train", "switch")


def event_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Build an event log from row mappings, with canonical column order and dtypes.

    Missing SD fields default to "off"/0; unknown extra keys are rejected so schemas cannot drift.
    """
    rows = list(rows)
    defaults = {"sd_config": "off", "depth": 0, "topk": 1, "verify_tokens": 0, "tokens": 0,
                "drafted": 0, "accepted": 0, "iterations": 1}
    filled = []
    for r in rows:
        extra = set(r) - set(EVENT_COLUMNS)
        if extra:
            raise ValueError(f"event row has unknown columns {sorted(extra)}")
        filled.append({**defaults, **r})
    df = pd.DataFrame(filled, columns=list(EVENT_COLUMNS))
    return df.astype(EVENT_COLUMNS)


def check_event_log(df: pd.DataFrame) -> None:
    """Raise ValueError unless ``df`` follows the schema exactly (columns, dtypes, kinds, times)."""
    if list(df.columns) != list(EVENT_COLUMNS):
        raise ValueError(f"event log columns {list(df.columns)} != {list(EVENT_COLUMNS)}")
    for col, dtype in EVENT_COLUMNS.items():
        if str(df[col].dtype) != dtype:
            raise ValueError(f"event log column '{col}' has dtype {df[col].dtype}, expected {dtype}")
    bad = set(df["kind"].dropna().unique()) - set(EVENT_KINDS)
    if bad:
        raise ValueError(f"event log has unknown kinds {sorted(bad)}")
    if (df["t_end"] < df["t_start"]).any():
        raise ValueError("event log has spans ending before they start")


def read_event_log(path) -> pd.DataFrame:
    """Load an event log written as Parquet, back in the canonical dtypes (Parquet round-trips
    strings as Arrow-backed types)."""
    df = pd.read_parquet(path)
    return df[list(EVENT_COLUMNS)].astype(EVENT_COLUMNS)
