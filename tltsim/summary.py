"""Step summaries computed from the event log alone.

Everything here reads only the tidy event log (plus the cluster layout), so the same summary works
for simulated and real runs. One row per (policy, step).

GPU idle: an instance that finished early holds its ``tp`` GPUs idle until the step's makespan, so
``gpu_idle_s = sum_i (makespan - finish_i) * tp`` and ``idle_fraction = gpu_idle_s /
(makespan * gpus)``: the share of the step's GPU-seconds spent waiting for stragglers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from tltsim.events import check_event_log


@dataclass(frozen=True)
class StepSummary:
    """What one policy did in one RL step's rollout."""

    policy: str
    step: int
    makespan_s: float
    instance_finish_s: tuple[float, ...]
    gpu_idle_s: float
    idle_fraction: float
    mean_accept_length: float  # tokens per request per SD iteration, bonus included; NaN without SD
    sd_share: float  # share of decode iterations that speculated
    decode_iterations: int
    tokens: int  # response tokens emitted by decode
    tokens_per_s: float
    prefill_s: float  # summed over instances
    reprefill_s: float

    def row(self) -> dict[str, object]:
        """A flat CSV row (finish times joined with ';')."""
        d = asdict(self)
        d["instance_finish_s"] = ";".join(f"{t:.6g}" for t in self.instance_finish_s)
        return d


def instance_finish_times(events: pd.DataFrame, n_instances: int) -> np.ndarray:
    """Each instance's finish time: end of its last non-idle span (0 for an instance with no work)."""
    busy = events[events["kind"] != "idle"]
    finish = np.zeros(n_instances, dtype=np.float64)
    if len(busy):
        last = busy.groupby("instance")["t_end"].max()
        idx = last.index.to_numpy(np.int64)
        if idx.max() >= n_instances:
            raise ValueError(f"event log has instance {idx.max()} but the layout has {n_instances}")
        finish[idx] = last.to_numpy()
    return finish


def summarize_step(events: pd.DataFrame, *, gpus: int, tp: int) -> StepSummary:
    """Summarise one policy's single step. ``events`` must hold exactly one (policy, step)."""
    check_event_log(events)
    keys = events[["policy", "step"]].drop_duplicates()
    if len(keys) != 1:
        raise ValueError(f"summarize_step needs one (policy, step), got {len(keys)}")
    n_instances = gpus // tp
    finish = instance_finish_times(events, n_instances)
    makespan = float(finish.max()) if len(finish) else 0.0
    gpu_idle = float((makespan - finish).sum() * tp)
    dec = events[events["kind"] == "decode"]
    sd = dec[dec["depth"] > 0]
    iters = int(dec["iterations"].sum())
    sd_iters = int(sd["iterations"].sum())
    req_iters = float((sd["iterations"] * sd["batch_size"]).sum())
    tokens = int(dec["tokens"].sum())
    kind_time = (events["t_end"] - events["t_start"]).groupby(events["kind"]).sum()
    return StepSummary(
        policy=str(keys["policy"].iloc[0]), step=int(keys["step"].iloc[0]), makespan_s=makespan,
        instance_finish_s=tuple(float(t) for t in finish), gpu_idle_s=gpu_idle,
        idle_fraction=gpu_idle / (makespan * gpus) if makespan > 0 else 0.0,
        mean_accept_length=float(sd["tokens"].sum()) / req_iters if req_iters else float("nan"),
        sd_share=sd_iters / iters if iters else 0.0, decode_iterations=iters, tokens=tokens,
        tokens_per_s=tokens / makespan if makespan > 0 else 0.0,
        prefill_s=float(kind_time.get("prefill", 0.0)), reprefill_s=float(kind_time.get("reprefill", 0.0)),
    )


def summary_table(events: pd.DataFrame, *, gpus: int, tp: int, baseline: str = "no-sd") -> pd.DataFrame:
    """One row per (policy, step), with ``speedup`` = baseline makespan / makespan of the same step.

    Policies keep the order in which they first appear in ``events``.
    """
    rows = []
    for (_policy, _step), part in events.groupby(["policy", "step"], sort=False):
        rows.append(summarize_step(part.reset_index(drop=True), gpus=gpus, tp=tp).row())
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    base = df[df["policy"] == baseline].set_index("step")["makespan_s"]
    df["speedup"] = [base.get(s, np.nan) / m if m > 0 else np.nan
                     for s, m in zip(df["step"], df["makespan_s"], strict=True)]
    return df
