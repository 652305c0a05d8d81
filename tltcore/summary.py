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


def summarize_step(events: pd.DataFrame, *, gpus: int, tp: int) -> StepSummary:
    """Summarise one policy's single step. ``events`` must hold exactly one (policy, step)."""
    out = step_summaries(events, gpus=gpus, tp=tp)
    if len(out) != 1:
        raise ValueError(f"summarize_step needs one (policy, step), got {len(out)}")
    return out[0]


def step_summaries(events: pd.DataFrame, *, gpus: int, tp: int) -> list[StepSummary]:
    """One :class:`StepSummary` per (policy, step) of ``events``, in the order the pairs first appear.

    Why one pass: the summaries of ``tlt advise`` and ``tlt sim run`` filtered a pandas frame a dozen
    times per (policy, step), which cost more than simulating a short step. Here the log's columns are
    read once as numpy arrays and each pair's rows are index arrays into them; every number is the
    one the per-pair filters gave: integer sums are exact, the per-worker finish times are maxima, the
    idle sum is ``(makespan - finish).sum()`` over the same per-worker array, and the per-kind seconds
    are one pandas group sum over (pair, kind), which adds each group's rows in the log's order as
    the per-pair ``groupby(kind).sum()`` did (pandas' compensated group sum)."""
    check_event_log(events)
    if len(events) == 0:
        return []
    pair = events.groupby(["policy", "step"], sort=False).ngroup().to_numpy()  # -1: a missing key
    n_pairs = int(pair.max()) + 1
    col = {c: events[c].to_numpy() for c in ("step", "worker", "t_start", "t_end", "iterations", "batch_size",
                                               "depth", "tokens")}
    policies = events["policy"].to_numpy()
    kind_code, kind_names = pd.factorize(events["kind"])
    code_of = {str(name): i for i, name in enumerate(kind_names)}

    def kind_is(*wanted: str) -> np.ndarray:
        return np.isin(kind_code, [code_of[k] for k in wanted if k in code_of])

    rollout = (events["phase"] == "rollout").to_numpy(dtype=bool, na_value=False)
    worker = col["worker"]
    work = rollout & (worker >= 0)
    stage = rollout & kind_is("stage") & (worker == CLUSTER)
    busy = work & kind_is(*BUSY_KINDS)
    decode = work & kind_is("decode")
    sd = decode & (col["depth"] > 0)
    switch = work & kind_is("switch")
    # seconds per (pair, kind) of the workers' rollout rows, summed as groupby(kind).sum() sums them
    kind_s: dict[tuple[int, str], float] = {}
    if work.any():
        span = pd.Series(col["t_end"][work] - col["t_start"][work])
        sums = span.groupby([pair[work], events["kind"].to_numpy()[work]], sort=False).sum()
        kind_s = {(int(k), str(kind)): float(v) for (k, kind), v in sums.items()}
    order = np.argsort(pair, kind="stable")
    bounds = np.searchsorted(pair[order], np.arange(n_pairs + 1))
    n_workers = gpus // tp
    out = []
    for k in range(n_pairs):
        rows = order[bounds[k]:bounds[k + 1]]  # the pair's rows, in the log's order
        mine = rows[rollout[rows]]
        t0, t1 = col["t_start"][mine], col["t_end"][mine]
        win = stage[mine]
        if win.any():
            start, end = float(t0[win].min()), float(t1[win].max())
        elif len(mine):
            start, end = float(t0.min()), float(t1.max())
        else:
            start, end = 0.0, 0.0
        makespan = end - start
        finish = np.zeros(n_workers, dtype=np.float64)
        b = rows[busy[rows]]
        if len(b):
            w = worker[b]
            if w.max() >= n_workers:
                raise ValueError(f"event log has worker {w.max()} but the layout has {n_workers}")
            last = np.full(n_workers, -np.inf)
            np.maximum.at(last, w, col["t_end"][b])  # each worker's last busy end (as groupby max)
            seen = np.zeros(n_workers, dtype=bool)
            seen[w] = True
            finish = np.where(seen, last - start, 0.0)
        gpu_idle = float((makespan - finish).sum() * tp)
        d, x = rows[decode[rows]], rows[sd[rows]]
        iters = int(np.add.reduce(col["iterations"][d]))
        req_iters = float(np.add.reduce(col["iterations"][x] * col["batch_size"][x]))
        tokens = int(np.add.reduce(col["tokens"][rows[work[rows]]]))
        out.append(StepSummary(
            policy=str(policies[rows[0]]), step=int(col["step"][rows[0]]), makespan_s=makespan,
            worker_finish_s=tuple(float(t) for t in finish), gpu_idle_s=gpu_idle,
            idle_fraction=gpu_idle / (makespan * gpus) if makespan > 0 else 0.0,
            mean_accept_length=float(np.add.reduce(col["tokens"][x])) / req_iters if req_iters else float("nan"),
            sd_share=int(np.add.reduce(col["iterations"][x])) / iters if iters else 0.0, decode_iterations=iters,
            tokens=tokens, tokens_per_s=tokens / makespan if makespan > 0 else 0.0,
            prefill_s=kind_s.get((k, "prefill"), 0.0),
            switch_reprefill_s=kind_s.get((k, "switch_reprefill"), 0.0),
            catch_up_s=kind_s.get((k, "catch_up"), 0.0),
            switches=int(np.count_nonzero(switch[rows])),
        ))
    return out


def summary_table(events: pd.DataFrame, *, gpus: int, tp: int, baseline: str = "no-sd") -> pd.DataFrame:
    """One row per (policy, step), with ``speedup`` = baseline makespan / makespan of the same step.

    Policies keep the order in which they first appear in ``events``.
    """
    df = pd.DataFrame([x.row() for x in step_summaries(events, gpus=gpus, tp=tp)])
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
