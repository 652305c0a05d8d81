"""Step summaries computed from the event log alone.

Everything here reads only the tidy event log (plus the cluster layout), so the same summary works
for simulated and real runs. One row per (policy, step), from the step's ``rollout``-phase rows only:
drafter-training, actor-update or other phases never count as generation.

The step's rollout window is its cluster-wide ``stage`` row (both engines write one); a worker's
finish time is the end of its last busy span (prefill, decode, switch re-prefill, catch-up),
measured from the window's start. GPU idle: a worker that finished early holds its ``tp`` GPUs idle
until the step's makespan, so ``gpu_idle_s = sum_w (makespan - finish_w) * tp`` and
``idle_fraction = gpu_idle_s / (makespan * gpus)``: the share of the step's GPU-seconds spent
waiting for stragglers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from tltcore.events import BUSY_KINDS, CLUSTER, check_event_log


@dataclass(frozen=True)
class StepSummary:
    """What one policy did in one RL step's rollout."""

    policy: str
    step: int
    makespan_s: float
    worker_finish_s: tuple[float, ...]
    gpu_idle_s: float
    idle_fraction: float
    mean_accept_length: float  # tokens per request per SD iteration, bonus included; NaN without SD
    sd_share: float  # share of decode iterations that speculated
    decode_iterations: int
    tokens: int  # response tokens emitted (prefill's first tokens included)
    tokens_per_s: float
    prefill_s: float  # summed over workers
    switch_reprefill_s: float
    catch_up_s: float
    switches: int  # workers that switched SD on

    def row(self) -> dict[str, object]:
        """A flat CSV row (finish times joined with ';')."""
        d = asdict(self)
        d["worker_finish_s"] = ";".join(f"{t:.6g}" for t in self.worker_finish_s)
        return d


def rollout_window(events: pd.DataFrame) -> tuple[float, float]:
    """(start, end) of one step's rollout: its cluster ``stage`` row, else the span of its rows."""
    stage = events[(events["worker"] == CLUSTER) & (events["kind"] == "stage")]
    if len(stage):
        return float(stage["t_start"].min()), float(stage["t_end"].max())
    if len(events) == 0:
        return 0.0, 0.0
    return float(events["t_start"].min()), float(events["t_end"].max())


def worker_finish_times(events: pd.DataFrame, n_workers: int, start: float) -> np.ndarray:
    """Each worker's finish time after ``start``: end of its last busy span (0 with no work)."""
    busy = events[events["kind"].isin(BUSY_KINDS) & (events["worker"] >= 0)]
    finish = np.zeros(n_workers, dtype=np.float64)
    if len(busy):
        last = busy.groupby("worker")["t_end"].max()
        idx = last.index.to_numpy(np.int64)
        if idx.max() >= n_workers:
            raise ValueError(f"event log has worker {idx.max()} but the layout has {n_workers}")
        finish[idx] = last.to_numpy() - start
    return finish


def summarize_step(events: pd.DataFrame, *, gpus: int, tp: int) -> StepSummary:
    """Summarise one policy's single step. ``events`` must hold exactly one (policy, step)."""
    check_event_log(events)
    keys = events[["policy", "step"]].drop_duplicates()
    if len(keys) != 1:
        raise ValueError(f"summarize_step needs one (policy, step), got {len(keys)}")
    events = events[events["phase"] == "rollout"]
    start, end = rollout_window(events)
    makespan = end - start
    finish = worker_finish_times(events, gpus // tp, start)
    gpu_idle = float((makespan - finish).sum() * tp)
    work = events[events["worker"] >= 0]
    dec = work[work["kind"] == "decode"]
    sd = dec[dec["depth"] > 0]
    iters = int(dec["iterations"].sum())
    req_iters = float((sd["iterations"] * sd["batch_size"]).sum())
    tokens = int(work["tokens"].sum())
    kind_time = (work["t_end"] - work["t_start"]).groupby(work["kind"]).sum()
    return StepSummary(
        policy=str(keys["policy"].iloc[0]), step=int(keys["step"].iloc[0]), makespan_s=makespan,
        worker_finish_s=tuple(float(t) for t in finish), gpu_idle_s=gpu_idle,
        idle_fraction=gpu_idle / (makespan * gpus) if makespan > 0 else 0.0,
        mean_accept_length=float(sd["tokens"].sum()) / req_iters if req_iters else float("nan"),
        sd_share=int(sd["iterations"].sum()) / iters if iters else 0.0, decode_iterations=iters, tokens=tokens,
        tokens_per_s=tokens / makespan if makespan > 0 else 0.0,
        prefill_s=float(kind_time.get("prefill", 0.0)),
        switch_reprefill_s=float(kind_time.get("switch_reprefill", 0.0)),
        catch_up_s=float(kind_time.get("catch_up", 0.0)),
        switches=int((work["kind"] == "switch").sum()),
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


def run_totals(summary: pd.DataFrame, *, gpus: int, baseline: str = "no-sd") -> pd.DataFrame:
    """Whole-run totals per policy from a per-step summary: rollout seconds summed over steps, the
    speedup of that total over the baseline's, GPU idle share of all rollout GPU-seconds, and the
    accept length over all SD iterations (weighted by iterations). Policies keep their order."""
    rows = []
    for policy, part in summary.groupby("policy", sort=False):
        rollout = float(part["makespan_s"].sum())
        idle = float(part["gpu_idle_s"].sum())
        weights = part["decode_iterations"] * part["sd_share"]
        accept = float((part["mean_accept_length"] * weights).sum() / weights.sum()) if weights.sum() > 0 \
            else float("nan")
        rows.append({"policy": policy, "steps": len(part), "rollout_s": rollout, "gpu_idle_s": idle,
                     "idle_fraction": idle / (rollout * gpus) if rollout > 0 else 0.0, "mean_accept_length": accept})
    out = pd.DataFrame(rows)
    base = out.loc[out["policy"] == baseline, "rollout_s"]
    out["speedup"] = float(base.iloc[0]) / out["rollout_s"] if len(base) else np.nan
    return out
