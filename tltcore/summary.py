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


#: the kinds whose seconds a summary reports (``prefill_s``, ``switch_reprefill_s``, ``catch_up_s``)
TIMED_KINDS = ("prefill", "switch_reprefill", "catch_up")


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
    are added as the per-pair ``groupby(kind).sum()`` added them (:func:`_kind_seconds`)."""
    check_event_log(events)
    if len(events) == 0:
        return []
    pair = events.groupby(["policy", "step"], sort=False).ngroup().to_numpy()  # -1: a missing key
    n_pairs = int(pair.max()) + 1
    col = {c: events[c].to_numpy() for c in ("step", "worker", "t_start", "t_end", "iterations", "batch_size",
                                               "depth", "tokens")}
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
    # every pair's rows together (in the log's order within a pair), then per-pair reductions at once:
    # minima/maxima and integer sums are exact whatever the grouping
    order = np.argsort(pair, kind="stable")[int(np.count_nonzero(pair < 0)):]
    starts = np.searchsorted(pair[order], np.arange(n_pairs))
    first = order[starts]
    kind_s = _kind_seconds(events, pair, order[work[order]], n_pairs, kind_code, [str(x) for x in kind_names])

    def per_pair(ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        return ufunc.reduceat(values[order], starts)

    t_start, t_end = col["t_start"], col["t_end"]
    win_start = per_pair(np.minimum, np.where(stage, t_start, np.inf))
    win_end = per_pair(np.maximum, np.where(stage, t_end, -np.inf))
    any_start = per_pair(np.minimum, np.where(rollout, t_start, np.inf))
    any_end = per_pair(np.maximum, np.where(rollout, t_end, -np.inf))
    has_stage = per_pair(np.add, stage.astype(np.int64)) > 0
    has_rollout = per_pair(np.add, rollout.astype(np.int64)) > 0
    start = np.where(has_stage, win_start, np.where(has_rollout, any_start, 0.0))
    end = np.where(has_stage, win_end, np.where(has_rollout, any_end, 0.0))
    makespan = end - start
    n_workers = gpus // tp
    last = np.full((n_pairs, n_workers), -np.inf)
    if busy.any():
        w = worker[busy]
        if w.max() >= n_workers:
            raise ValueError(f"event log has worker {w.max()} but the layout has {n_workers}")
        np.maximum.at(last, (pair[busy], w), t_end[busy])  # each worker's last busy end (as groupby max)
    finish = np.where(np.isfinite(last), last - start[:, None], 0.0)

    def int_sum(mask: np.ndarray, values: np.ndarray) -> list[int]:
        return per_pair(np.add, np.where(mask, values, 0)).tolist()

    iters = int_sum(decode, col["iterations"])
    sd_iters = int_sum(sd, col["iterations"])
    req_iters = int_sum(sd, col["iterations"] * col["batch_size"])
    sd_tokens = int_sum(sd, col["tokens"])
    tokens = int_sum(work, col["tokens"])
    switches = int_sum(switch, np.ones(len(events), dtype=np.int64))
    policy = events["policy"].array
    out = []
    for k in range(n_pairs):
        span = float(makespan[k])
        # (makespan - finish).sum() over the pair's own per-worker array, as the per-pair form adds it
        gpu_idle = float((span - finish[k]).sum() * tp)
        req = float(req_iters[k])
        out.append(StepSummary(
            policy=str(policy[first[k]]), step=int(col["step"][first[k]]), makespan_s=span,
            worker_finish_s=tuple(finish[k].tolist()), gpu_idle_s=gpu_idle,
            idle_fraction=gpu_idle / (span * gpus) if span > 0 else 0.0,
            mean_accept_length=float(sd_tokens[k]) / req if req else float("nan"),
            sd_share=sd_iters[k] / iters[k] if iters[k] else 0.0, decode_iterations=iters[k],
            tokens=tokens[k], tokens_per_s=tokens[k] / span if span > 0 else 0.0,
            prefill_s=kind_s.get((k, "prefill"), 0.0),
            switch_reprefill_s=kind_s.get((k, "switch_reprefill"), 0.0),
            catch_up_s=kind_s.get((k, "catch_up"), 0.0),
            switches=switches[k],
        ))
    return out


def _kind_seconds(events: pd.DataFrame, pair: np.ndarray, rows: np.ndarray, n_pairs: int, kind_code: np.ndarray,
                  kind_names: list[str]) -> dict[tuple[int, str], float]:
    """Seconds per (pair, kind of :data:`TIMED_KINDS`) of the workers' rollout rows ``rows`` (grouped by
    pair, in the log's order within a pair), each the float the per-pair ``(t_end - t_start)
    .groupby(kind).sum()`` gives. pandas sums a group with ``ufunc.reduceat``
    when the group ids come sorted (a pair whose rows' kinds appear in name order, e.g. prefill rows
    only) and with Kahan compensation otherwise: a pair of the first kind is summed by that very pandas
    call, every other pair by the compensated sum done for all pairs in lockstep (the same float
    operations per group, in row order)."""
    out: dict[tuple[int, str], float] = {}
    if not len(rows):
        return out
    p = pair[rows]
    rank = np.argsort(np.argsort(np.array(kind_names, dtype=object)))  # a kind's position in name order
    ids = np.where(kind_code[rows] >= 0, rank[np.maximum(kind_code[rows], 0)], -1)  # -1: a missing kind
    falls = (ids[1:] < ids[:-1]) & (p[1:] == p[:-1])
    sorted_ids = np.bincount(p[1:][falls], minlength=n_pairs) == 0
    dur = events["t_end"].to_numpy()[rows] - events["t_start"].to_numpy()[rows]
    present = np.unique(p)
    for k in present[sorted_ids[present]].tolist():
        part = pd.Series(dur[p == k]).groupby(events["kind"].array[rows[p == k]]).sum()
        out.update({(k, str(kind)): float(v) for kind, v in part.items() if kind in TIMED_KINDS})
    timed = np.isin(kind_code[rows], [kind_names.index(x) for x in TIMED_KINDS if x in kind_names])
    timed &= ~sorted_ids[p]
    if timed.any():
        group = p[timed] * len(kind_names) + kind_code[rows][timed]  # rows already in group order within a pair
        order = np.argsort(group, kind="stable")
        g, v = group[order], dur[timed][order]
        keys, starts, counts = np.unique(g, return_index=True, return_counts=True)
        total, comp = np.zeros(len(keys)), np.zeros(len(keys))
        for i in range(int(counts.max())):  # the i-th row of every group that has one, as pandas adds it
            live = np.flatnonzero(counts > i)
            y = v[starts[live] + i] - comp[live]
            t = total[live] + y
            comp[live] = (t - total[live]) - y
            total[live] = t
        for key, value in zip(keys.tolist(), total.tolist(), strict=True):
            out[(key // len(kind_names), kind_names[key % len(kind_names)])] = value
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
