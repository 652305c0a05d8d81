"""Chrome / Perfetto trace JSON of an event log (open it in ui.perfetto.dev or chrome://tracing).

Layout: one *process* per policy, one *thread* (track) per rollout worker plus a ``cluster`` track
for cluster-wide rows, one complete event (``"ph": "X"``) per event-log span, named by its kind
(``prefill``, ``switch_reprefill``, ``catch_up``, ``idle``, ``stage rollout``) or ``decode <sd>``
(``decode off``, ``decode 8_4_32``) so the SD switch and the bandit's arm changes are visible as
colour changes. A counter track per worker shows the running batch size. Times are microseconds on
the run-level clock, as the format requires.

Size: about 250 bytes per row (a 500k-response run writes millions of rows), so callers decide with
:func:`estimated_bytes` whether to write it (``tlt sim run --perfetto auto|on|off``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from tltcore.events import CLUSTER, check_event_log

_US = 1e6


BYTES_PER_ROW = 250  # measured on `tlt sim run` outputs: JSON of one span + its counter sample


def estimated_bytes(events: pd.DataFrame) -> int:
    """Rough size of :func:`chrome_trace_json` for ``events`` (without building it)."""
    return BYTES_PER_ROW * len(events)


def _span_name(kind: str, sd_config: str, phase: str) -> str:
    if kind == "decode":
        return f"decode {sd_config}"
    return f"stage {phase}" if kind == "stage" else kind


def chrome_trace(events: pd.DataFrame) -> dict[str, Any]:
    """The trace-event JSON object for ``events`` (any number of policies and steps).

    Policies become processes in order of first appearance; the steps of one policy follow each
    other on its tracks (the event log's clock is run-level).
    """
    check_event_log(events)
    out: list[dict[str, Any]] = []
    policies = list(dict.fromkeys(events["policy"].tolist()))
    pid_of = {p: i + 1 for i, p in enumerate(policies)}
    for policy, pid in pid_of.items():
        out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": policy}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        for worker in sorted(events.loc[events["policy"] == policy, "worker"].unique()):
            name = "cluster" if worker == CLUSTER else f"worker {int(worker)}"
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": int(worker), "args": {"name": name}})
    cols = ["policy", "step", "phase", "worker", "kind", "t_start", "t_end", "iterations", "batch_size",
            "sd_config", "tokens", "prefill_tokens", "drafted", "accepted", "drafter_version"]
    for row in events[cols].itertuples(index=False):
        policy, step, phase, worker, kind, t0, t1, iters, batch, sd, tokens, prefilled, drafted, accepted, ver = row
        pid, tid = pid_of[policy], int(worker)
        ts = t0 * _US
        out.append({
            "name": _span_name(kind, sd, phase), "cat": kind, "ph": "X", "pid": pid, "tid": tid,
            "ts": ts, "dur": max(0.0, (t1 - t0) * _US),
            "args": {"step": int(step), "phase": phase, "iterations": int(iters), "batch_size": int(batch),
                     "sd_config": sd, "tokens": int(tokens), "prefill_tokens": int(prefilled),
                     "drafted": int(drafted), "accepted": int(accepted), "drafter_version": int(ver)},
        })
        if kind in ("decode", "idle"):
            out.append({"name": f"batch w{tid}", "ph": "C", "pid": pid, "ts": ts,
                        "args": {"running": int(batch)}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def chrome_trace_json(events: pd.DataFrame) -> str:
    """:func:`chrome_trace` serialised compactly: the same bytes ``json.dumps(chrome_trace(events),
    separators=(",", ":"))`` writes, built row by row from the columns as text (a dict per row
    and the encoder walking it cost most of the time of writing a single-step run's results).
    Strings go through ``json.dumps`` (escaping as it does), numbers as the encoder writes them
    (``repr``); a log with non-finite times takes the encoder itself."""
    check_event_log(events)
    n = len(events)
    t0s, t1s = events["t_start"].to_numpy(), events["t_end"].to_numpy()
    if n == 0 or not (np.isfinite(t0s).all() and np.isfinite(t1s).all()):
        return json.dumps(chrome_trace(events), separators=(",", ":"))
    dumps = json.dumps
    text: dict[str, str] = {}

    def esc(s: str) -> str:
        e = text.get(s)
        if e is None:
            e = text[s] = dumps(s)
        return e

    sep = (",", ":")
    policies = list(dict.fromkeys(events["policy"].tolist()))
    pid_of = {p: i + 1 for i, p in enumerate(policies)}
    parts: list[str] = []
    for policy, pid in pid_of.items():
        parts.append(dumps({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": policy}}, separators=sep))
        parts.append(dumps({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}},
                           separators=sep))
        for worker in sorted(events.loc[events["policy"] == policy, "worker"].unique()):
            name = "cluster" if worker == CLUSTER else f"worker {int(worker)}"
            parts.append(dumps({"name": "thread_name", "ph": "M", "pid": pid, "tid": int(worker),
                                "args": {"name": name}}, separators=sep))
    cols = [events[c].tolist() for c in ("policy", "step", "phase", "worker", "kind", "t_start", "t_end",
                                          "iterations", "batch_size", "sd_config", "tokens", "prefill_tokens",
                                          "drafted", "accepted", "drafter_version")]
    counter = ("decode", "idle")
    for policy, step, phase, worker, kind, t0, t1, iters, batch, sd, tokens, prefilled, drafted, accepted, ver \
            in zip(*cols, strict=True):
        pid, tid = pid_of[policy], int(worker)
        ts = t0 * _US
        dur = max(0.0, (t1 - t0) * _US)
        parts.append(
            f'{{"name":{esc(_span_name(kind, sd, phase))},"cat":{esc(kind)},"ph":"X","pid":{pid},"tid":{tid},'
            f'"ts":{ts!r},"dur":{dur!r},"args":{{"step":{int(step)},"phase":{esc(phase)},'
            f'"iterations":{int(iters)},"batch_size":{int(batch)},"sd_config":{esc(sd)},"tokens":{int(tokens)},'
            f'"prefill_tokens":{int(prefilled)},"drafted":{int(drafted)},"accepted":{int(accepted)},'
            f'"drafter_version":{int(ver)}}}}}')
        if kind in counter:
            parts.append(f'{{"name":{esc(f"batch w{tid}")},"ph":"C","pid":{pid},"ts":{ts!r},'
                         f'"args":{{"running":{int(batch)}}}}}')
    return '{"traceEvents":[' + ",".join(parts) + '],"displayTimeUnit":"ms"}'
