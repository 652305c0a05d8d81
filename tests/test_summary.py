"""The step summaries' one-pass form (:func:`tltcore.summary.step_summaries`) against a readable
reference: one pandas filter per (policy, step), as the summaries were first written. Every field of
every summary must be the same float (compared through ``repr``, so NaN equals NaN)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tltcore.events import BUSY_KINDS, CLUSTER, EventLog
from tltcore.policy.base import NO_SD, SDConfig
from tltcore.summary import StepSummary, step_summaries, summarize_step, summary_table


def reference_summary(events: pd.DataFrame, *, gpus: int, tp: int) -> StepSummary:
    """One (policy, step) summarised with pandas filters (the readable form)."""
    keys = events[["policy", "step"]].drop_duplicates()
    assert len(keys) == 1
    events = events[events["phase"] == "rollout"]
    stage = events[(events["worker"] == CLUSTER) & (events["kind"] == "stage")]
    if len(stage):
        start, end = float(stage["t_start"].min()), float(stage["t_end"].max())
    elif len(events):
        start, end = float(events["t_start"].min()), float(events["t_end"].max())
    else:
        start, end = 0.0, 0.0
    makespan = end - start
    finish = np.zeros(gpus // tp)
    busy = events[events["kind"].isin(BUSY_KINDS) & (events["worker"] >= 0)]
    if len(busy):
        last = busy.groupby("worker")["t_end"].max()
        finish[last.index.to_numpy(np.int64)] = last.to_numpy() - start
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


def random_log(seed: int, n_workers: int = 4) -> pd.DataFrame:
    """Two policies x three steps of random spans (every busy kind, switches, SD and plain decode,
    idle and training rows, a step without a stage row, a worker with no work), durations with many
    digits so that an addition in another order shows."""
    rng = np.random.default_rng(seed)
    frames = []
    for policy in ("no-sd", "cost-aware"):
        log = EventLog(run_id="r", source="sim", policy=policy)
        for step in range(3):
            log.step = step
            t = 100.0 * step
            if step != 1:
                log.span(CLUSTER, "stage", t, t + 90.0)
            for w in range(n_workers - 1):  # the last worker gets nothing
                clock = t + rng.random()
                for _ in range(int(rng.integers(5, 40))):
                    kind = str(rng.choice(["prefill", "decode", "decode", "switch_reprefill", "catch_up", "switch",
                                           "idle"]))
                    dt = float(rng.random() * np.pi)
                    cfg = SDConfig.chain(4) if rng.random() < 0.5 else NO_SD
                    log.span(w, kind, clock, clock + dt, iterations=int(rng.integers(1, 50)),
                             batch=int(rng.integers(1, 64)), config=cfg, tokens=int(rng.integers(0, 500)))
                    clock += dt
                log.span(w, "train", clock, clock + 1.0, phase="drafter_train")
        frames.append(log.frame())
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_pass_summaries_equal_the_per_pair_reference(seed: int) -> None:
    events = random_log(seed)
    got = step_summaries(events, gpus=8, tp=2)
    pairs = events[["policy", "step"]].drop_duplicates()
    want = [reference_summary(events[(events["policy"] == p) & (events["step"] == s)], gpus=8, tp=2)
            for p, s in pairs.itertuples(index=False)]
    assert [repr(x) for x in got] == [repr(x) for x in want]
    assert any(x.switch_reprefill_s > 0 and x.switches > 0 for x in got)
    one = events[(events["policy"] == "cost-aware") & (events["step"] == 1)].reset_index(drop=True)
    assert repr(summarize_step(one, gpus=8, tp=2)) == repr(reference_summary(one, gpus=8, tp=2))
    table = summary_table(events, gpus=8, tp=2)
    assert table["policy"].tolist() == ["no-sd"] * 3 + ["cost-aware"] * 3
    assert table["speedup"].iloc[:3].tolist() == [1.0] * 3


def test_a_log_of_several_pairs_is_not_one_step() -> None:
    with pytest.raises(ValueError, match="one \\(policy, step\\), got 6"):
        summarize_step(random_log(0), gpus=8, tp=2)
    assert step_summaries(random_log(0).iloc[:0], gpus=8, tp=2) == []


def test_a_pair_whose_kinds_come_in_name_order_is_summed_as_pandas_sums_it() -> None:
    """pandas adds a group with ``ufunc.reduceat`` when the rows' kinds come sorted (decode rows, then
    prefill rows) and with Kahan compensation otherwise; eight equal prefill passes add up to different
    last bits under the two, and each pair must get the one its per-pair form gets."""
    d = 0.4976849254291695
    frames = []
    for policy in ("sorted", "mixed"):
        log = EventLog(run_id="r", source="sim", policy=policy)
        if policy == "sorted":  # the log's order is by worker, then time: decode rows, then prefill rows
            log.span(0, "decode", 0.0, d, tokens=1, batch=1)
            for w in range(1, 9):
                log.span(w, "prefill", 0.0, d, tokens=1, batch=1)
        else:  # prefill, decode, prefill, decode, ...
            for w in range(8):
                log.span(w, "prefill", 0.0, d, tokens=1, batch=1)
                log.span(w, "decode", d, 2 * d, tokens=1, batch=1)
        frames.append(log.frame())
    events = pd.concat(frames, ignore_index=True)
    got = step_summaries(events, gpus=9, tp=1)
    want = [reference_summary(events[events["policy"] == p], gpus=9, tp=1) for p in ("sorted", "mixed")]
    assert [x.prefill_s for x in got] == [x.prefill_s for x in want]
    assert got[0].prefill_s != got[1].prefill_s  # the two sums differ here (3.9814794034333554 vs ...56)
