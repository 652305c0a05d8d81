"""Chrome / Perfetto trace JSON of an event log (open it in ui.perfetto.dev or chrome://tracing).

Layout: one *process* per policy, one *thread* (track) per rollout instance, one complete event
(``"ph": "X"``) per event-log span, named ``prefill``, ``reprefill``, ``idle`` or ``decode <sd>``
(``decode off``, ``decode 8_4_32``) so the SD switch and the bandit's arm changes are visible as
colour changes. A counter track per instance shows the running batch size. Times are microseconds,
as the format requires.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from tltsim.events import check_event_log

_US = 1e6


def _span_name(kind: str, sd_config: str) -> str:
    return f"decode {sd_config}" if kind == "decode" else kind


def chrome_trace(events: pd.DataFrame) -> dict[str, Any]:
    """The trace-event JSON object for ``events`` (any number of policies and steps).

    Policies become processes in order of first appearance; steps of one policy share its tracks
    (each step's times start at 0, so multi-step logs should be offset by the caller).
    """
    check_event_log(events)
    out: list[dict[str, Any]] = []
    policies = list(dict.fromkeys(events["policy"].tolist()))
    pid_of = {p: i + 1 for i, p in enumerate(policies)}
    for policy, pid in pid_of.items():
        out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": policy}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        for inst in sorted(events.loc[events["policy"] == policy, "instance"].unique()):
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": int(inst),
                        "args": {"name": f"instance {int(inst)}"}})
    cols = ["policy", "step", "instance", "kind", "t_start", "t_end", "iterations", "batch_size",
            "sd_config", "tokens", "drafted", "accepted"]
    for row in events[cols].itertuples(index=False):
        policy, step, inst, kind, t0, t1, iters, batch, sd, tokens, drafted, accepted = row
        pid, tid = pid_of[policy], int(inst)
        ts = t0 * _US
        out.append({
            "name": _span_name(kind, sd), "cat": kind, "ph": "X", "pid": pid, "tid": tid,
            "ts": ts, "dur": max(0.0, (t1 - t0) * _US),
            "args": {"step": int(step), "iterations": int(iters), "batch_size": int(batch), "sd_config": sd,
                     "tokens": int(tokens), "drafted": int(drafted), "accepted": int(accepted)},
        })
        if kind in ("decode", "idle"):
            out.append({"name": f"batch i{tid}", "ph": "C", "pid": pid, "ts": ts,
                        "args": {"running": int(batch)}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def chrome_trace_json(events: pd.DataFrame) -> str:
    """:func:`chrome_trace` serialised compactly."""
    return json.dumps(chrome_trace(events), separators=(",", ":"))
