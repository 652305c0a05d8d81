"""Long-tail rollout strategies (issue 45): each pinned on a small case computed by hand, ``sync``
equal to today's run bit for bit, and ``--strategy``'s bad-input path."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import hang_seconds, needs_shared_traces, require_real_traces
from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.errors import InputError
from tltcore.policy.base import SDConfig
from tltcore.policy.registry import make_policy
from tltsim.rl.phases import PhaseTimes
from tltsim.rl.run import run_preset
from tltsim.rollout import EngineConfig, RolloutRun
from tltsim.rollout.simulation import stop_after_groups
from tltsim.scenario import Scenario, apply_override, compare_policies, prepare
from tltsim.strategy import (
    Async,
    OneStepOff,
    Overprovision,
    Sync,
    TailBatching,
    fully_async,
    one_step_off,
    overprovision,
    parse_strategy,
    sync,
    tail_batching,
)
from tltsim.strategy.run import StrategyRun, batch_rollout, compare_strategy, run_strategy, steps_frame, totals_frame
from tltsim.strategy.timeline import BatchRollout, lag_rows


class UnitCost(PerConfigSDTimes):
    """Every prefill pass and every decode iteration takes 1 s, whatever the batch: a response of L
    tokens admitted at t=0 gets its first token at the prefill (t=1) and its last at t=L."""

    def prefill_time(self, new_tokens, cached_tokens) -> float:
        return 1.0

    def drafter_prefill_time(self, new_tokens, cached_tokens) -> float:
        return 1.0

    def decode_time(self, context_lens) -> float:
        return 1.0

    def decode_span_time(self, context_lens, n_iters: int) -> float:
        return float(n_iters)

    def sd_time(self, context_lens, config: SDConfig) -> float:
        return 1.0


def trainer(reward=1.0, olp=1.0, ref=0.0, actor=2.0, sync_s=1.0):
    """A trainer whose phases cost the same for any batch (T = 4 s of training, W = 1 s of sync)."""
    return lambda prompts, responses: PhaseTimes(reward, olp, ref, actor, sync_s)


def batch(step: int, makespan: float, finish=(), tp: int = 1, responses=(10, 20)) -> BatchRollout:
    n = len(responses)
    return BatchRollout(step, makespan, np.asarray(finish or [makespan], dtype=float), tp, np.arange(n),
                        np.ones(n, dtype=np.int64), np.asarray(responses, dtype=np.int64))


# ---- the rules, on batches written by hand ---------------------------------------------------------
def test_sync_steps_are_rollout_plus_training_plus_sync_with_lag_0() -> None:
    rows = sync.schedule([batch(0, 10.0, (6.0, 10.0)), batch(1, 3.0, (3.0, 3.0))], trainer())
    assert [(r.t_start, r.t_end) for r in rows] == [(0.0, 15.0), (15.0, 23.0)]  # 10+4+1, then 3+4+1
    assert [r.train_s for r in rows] == [4.0, 4.0] and rows[0].weight_sync_s == 1.0
    assert rows[0].gpu_idle_s == 4.0 and rows[1].gpu_idle_s == 0.0  # worker 0 waits 10 - 6 s
    assert rows[0].row()["tokens_per_s"] == 30 / 15 and rows[0].row()["idle_fraction"] == 4.0 / (2 * 15)
    assert all(r.lag.tolist() == [0, 0] for r in rows)


def test_one_step_off_overlaps_the_next_rollout_with_training_and_lags_one_version() -> None:
    # R = 10, 10, 10; T = 4, W = 1: D0=10 S0=10 U0=15; batch 1 generates 11..21: S1=21 U1=26;
    # batch 2 generates 22..32: S2=32 U2=37 (sync would take 3 x 15 = 45)
    rows = one_step_off.schedule([batch(k, 10.0) for k in range(3)], trainer(), trainer_gpus=2)
    assert [(r.t_start, r.t_end) for r in rows] == [(0.0, 15.0), (15.0, 26.0), (26.0, 37.0)]
    assert [r.lag.tolist() for r in rows] == [[0, 0], [1, 1], [1, 1]]
    assert rows[0].gpus == 1 + 2
    # idle, GPU-seconds: the trainer waits for batch 0 (10 x 2); for batch 1 it waits 21 - 15 = 6 (x 2);
    # after the last batch the rollout pool idles through the last training (4 x 1)
    assert [r.gpu_idle_s for r in rows] == [20.0, 12.0, 6 * 2 + 4.0]


def test_one_step_off_is_trainer_bound_when_rollouts_are_short() -> None:
    # R = 10, 2, 2: batch 1 is done at 13 but the trainer is busy until 15: S1=15 U1=20; batch 2
    # generates 16..18, waits for the trainer: S2=20 U2=25; the rollout pool waits 2 s each time
    rows = one_step_off.schedule([batch(0, 10.0), batch(1, 2.0), batch(2, 2.0)], trainer(), trainer_gpus=1)
    assert [r.t_end for r in rows] == [15.0, 20.0, 25.0]
    assert [r.gpu_idle_s for r in rows] == [10.0, 2.0, 2.0 + 4.0]


def test_overprovision_trains_the_first_groups_to_finish_and_cuts_the_rollout_there() -> None:
    # groups 0, 1, 2 finish at 3, 9, 5 (their slowest response); keep N=2: groups 0 and 2, tau = 5
    b = BatchRollout(0, 9.0, np.array([9.0, 5.0]), 2, np.array([0, 0, 1, 1, 2, 2]), np.ones(6, dtype=np.int64),
                     np.array([2, 3, 8, 9, 4, 5]), np.array([2.0, 3.0, 8.0, 9.0, 4.0, 5.0]))
    (row,) = overprovision.schedule([b], [2], trainer(), "overprovision:eta=0.5")
    assert row.rollout_s == 5.0 and row.t_end == 5.0 + 4.0 + 1.0
    assert row.trained_samples == 4 and row.trained_tokens == 2 + 3 + 4 + 5 and row.dropped_samples == 2
    assert row.gpu_idle_s == 0.0  # worker 1 finished at tau, worker 0 was cut off at tau
    assert row.lag.tolist() == [0, 0, 0, 0]


def test_overprovision_breaks_ties_by_launch_order() -> None:
    b = BatchRollout(0, 4.0, np.array([4.0]), 1, np.array([5, 5, 3, 3]), np.ones(4, dtype=np.int64),
                     np.array([4, 4, 4, 4]), np.array([4.0, 4.0, 4.0, 4.0]))
    keep, tau = overprovision.first_groups(b, 1)
    assert keep.tolist() == [True, True, False, False] and tau == 4.0  # group 5 was launched first


def test_launch_adds_ceil_n_eta_copies_of_the_steps_groups() -> None:
    class W:
        step, group_ids = 0, np.array([0, 0, 1, 1, 2, 2])
        prompt_tokens, response_tokens = np.array([5, 5, 6, 6, 7, 7]), np.array([1, 2, 3, 4, 5, 6])

    # 100 x 1.1 is 110.00000000000001 in floating point: still 110 groups
    assert overprovision.launched_groups(100, 0.1) == 110 and overprovision.launched_groups(3, 0.0) == 3
    assert overprovision.launched_groups(3, 0.1) == 4
    one = overprovision.launch(W, 0.1, seed=0)
    assert one.batch_groups == 3 and len(one.group_ids) == 8
    src = one.group_ids[6]
    assert src == 3 and one.group_ids[7] == 3  # a fresh id, both samples of the copied group
    copied = {(5, 1): 0, (6, 3): 1, (7, 5): 2}[(int(one.prompt_tokens[6]), int(one.response_tokens[6]))]
    assert one.response_tokens[7] == W.response_tokens[2 * copied + 1]
    all_ = overprovision.launch(W, 1.0, seed=0)  # eta 1: a copy of every group
    assert sorted(all_.response_tokens[6:].tolist()) == [1, 2, 3, 4, 5, 6]


def test_lag_rows_count_samples_and_tokens_per_lag() -> None:
    rows = one_step_off.schedule([batch(0, 1.0), batch(1, 1.0, responses=(10, 30))], trainer(), 1)
    assert lag_rows(rows[1]) == [{"strategy": "one-step-off", "step": 1, "lag": 1, "samples": 2, "tokens": 40,
                                  "sample_share": 1.0, "token_share": 1.0}]


# ---- the rules on the simulator, with a cost model of 1 s per pass --------------------------------
class Work:
    def __init__(self, step, groups, prompts, responses):
        self.step, self.group_ids = step, np.asarray(groups)
        self.prompt_tokens, self.response_tokens = np.asarray(prompts), np.asarray(responses)


def _simulate(work, track: bool):
    run = RolloutRun([make_policy("no-sd")], cost=UnitCost(), accept=None, engine=EngineConfig(), seed=0,
                     track_requests=track)
    return batch_rollout(work, run.step(work), tp=1)


def test_overprovision_on_the_simulator_keeps_the_first_groups_by_hand() -> None:
    # one worker, every request admitted at t=0: a response of L tokens finishes at t=L
    # groups A [2, 3] -> 3, B [5, 4] -> 5, C [10, 1] -> 10; eta 1 launches a copy of each (A', B', C')
    work = Work(0, [0, 0, 1, 1, 2, 2], [10] * 6, [2, 3, 5, 4, 10, 1])
    whole = _simulate(work, track=False)
    assert whole.makespan == 10.0 and whole.finish is None
    (s_row,) = sync.schedule([whole], trainer())
    assert s_row.t_end == 10.0 + 5.0 and s_row.trained_tokens == 25
    launched = overprovision.launch(work, 1.0, seed=0)
    b = _simulate(launched, track=True)
    assert b.makespan == 10.0
    assert b.finish[:6].tolist() == [2.0, 3.0, 5.0, 4.0, 10.0, 1.0]  # prefill emits the first token (t=1)
    (row,) = overprovision.schedule([b], [launched.batch_groups], trainer(), "overprovision:eta=1")
    # first three groups: A and A' at 3, then B (launched before B') at 5
    assert row.rollout_s == 5.0 and row.t_end == 5.0 + 5.0
    assert row.trained_samples == 6 and row.trained_tokens == 2 + 3 + 2 + 3 + 5 + 4 and row.dropped_samples == 6


def test_tracking_requests_changes_no_number() -> None:
    work = Work(3, [0, 0, 1, 1, 2, 2, 3, 3], [7, 7, 9, 9, 4, 4, 8, 8], [30, 5, 12, 12, 1, 40, 9, 3])
    plain = RolloutRun([make_policy("no-sd")] * 2, cost=UnitCost(), accept=None, seed=1)
    tracked = RolloutRun([make_policy("no-sd")] * 2, cost=UnitCost(), accept=None, seed=1, track_requests=True)
    a, b = plain.step(work), tracked.step(work)
    assert a.t_end == b.t_end and np.array_equal(a.finish_times, b.finish_times)
    assert np.array_equal(a.response_finish, b.response_finish) and len(a.response_index) == 0
    assert sorted(b.response_index.tolist()) == list(range(8))
    assert np.array_equal(np.asarray(work.response_tokens)[b.response_index], b.response_tokens)
    assert plain.events().equals(tracked.events())


# ---- partial rollout: the rollout's stop, resume and fully async, by hand --------------------------
def _tracked() -> RolloutRun:
    return RolloutRun([make_policy("no-sd")], cost=UnitCost(), accept=None, engine=EngineConfig(), seed=0,
                      track_requests=True)


def test_a_stopped_rollout_reports_each_unfinished_responses_tokens() -> None:
    # one worker, everything admitted at t=0: groups A [2, 3] finish at 3, B [5, 4] at 5, C [10, 1] at 10
    work = Work(0, [0, 0, 1, 1, 2, 2], [10] * 6, [2, 3, 5, 4, 10, 1])
    run = _tracked()
    res = run.step(work, stop=stop_after_groups(work.group_ids, 2))
    assert res.t_end == 5.0 and res.stopped_at == 5.0  # at B's finish; C's 10-token response has 5 tokens
    assert sorted(res.response_index.tolist()) == [0, 1, 2, 3, 5]
    assert res.unfinished_index.tolist() == [4] and res.unfinished_generated.tolist() == [5]
    stage = run.events().query("kind == 'stage'")
    assert stage["tokens"].tolist() == [2 + 3 + 5 + 4 + 1 + 5]  # what was generated, not the workload
    # a stop inside a plain span: the span 5 -> 10 is cut to the 2 iterations that end by 7
    res = _tracked().step(work, stop=lambda whole: 7.0)
    assert res.t_end == 7.0 and res.unfinished_generated.tolist() == [7]
    # a stop before the prefill ends: nothing admitted, nothing generated
    res = _tracked().step(work, stop=lambda whole: 0.5)
    assert res.t_end == 0.5 and len(res.response_index) == 0
    assert sorted(res.unfinished_index.tolist()) == list(range(6)) and not res.unfinished_generated.any()
    # no stop (or one past the end) is the plain rollout, event for event
    plain, stopped = _tracked(), _tracked()
    a, b = plain.step(work), stopped.step(work, stop=lambda whole: None)
    assert a.t_end == b.t_end == 10.0 and b.stopped_at is None and plain.events().equals(stopped.events())


def _roll(run: RolloutRun):
    return lambda work, stop: batch_rollout(work, run.step(work, stop=stop), tp=1)


def test_resume_continues_unfinished_responses_under_newer_versions() -> None:
    # eta 1, N = 2 groups: step 0 launches A [2, 3], B [10, 1] and a copy of each; A and A' finish at 3:
    # tau = 3, B and B' carried, their 10-token responses 3 tokens in (prefill at 1, decode at 2, 3).
    # Step 1 (version 1): B, B' re-prefilled (7 tokens left) first, then C [4, 2] and D [3, 6]: C at 4,
    # D at 6 -> tau 6, B's responses 6 tokens more. Step 2 (version 2): B, B' have 1 token left, emitted
    # at their re-prefill (t = 1): tau 1, and they are trained: 3 tokens at lag 2, 6 at lag 1, 1 at lag 0
    # each, the 1-token responses at lag 2 (generated in step 0)
    works = [Work(0, [0, 0, 1, 1], [10] * 4, [2, 3, 10, 1]), Work(1, [0, 0, 1, 1], [10] * 4, [4, 2, 3, 6]),
             Work(2, [0, 0, 1, 1], [10] * 4, [4, 2, 3, 6])]
    rows = overprovision.schedule_resume(works, 1.0, 0, _roll(_tracked()), trainer(), "resume")
    assert [r.rollout_s for r in rows] == [3.0, 6.0, 1.0]
    assert [r.t_end for r in rows] == [3.0 + 5, 3.0 + 5 + 6 + 5, 3.0 + 5 + 6 + 5 + 1 + 5]
    assert [r.trained_tokens for r in rows] == [2 * 5, 4 + 2 + 3 + 6, 2 * 11]
    assert [r.carried_samples for r in rows] == [4, 4, 4] and [r.dropped_samples for r in rows] == [0, 0, 0]
    assert rows[0].lag.tolist() == [0] * 4 and rows[2].lag.tolist() == [2] * 4
    dist = {x["lag"]: (x["samples"], x["tokens"]) for x in lag_rows(rows[2])}
    assert dist == {0: (0, 2), 1: (0, 12), 2: (4, 8)}


def test_async_trains_the_first_groups_and_syncs_mid_rollout() -> None:
    # K = 1, N = 2, T = 4, W = 1, one rollout worker, trainer pool of 1 GPU. Segment 0 (version 0)
    # launches (1 + 0 + 1) x 2 = 4 groups: G0 [2, 3] done at 3, G1 [10, 1] at 10, G2 [4, 2] at 4,
    # G3 [3, 6] at 6. The batch G0 + G2 is ready at 4, the update ends at 8: the rollout stops there
    # (G3 done, G1's 10-token response 8 tokens in), sync to 9. Segment 1 (version 1) launches the last
    # 2 groups (G4, G5); G1 re-prefills its last 2 tokens and is done at 2: batch G3 + G1 ready at 2,
    # update ends at 6 (G4, G5 done by then), sync to 16. Segment 2 has nothing left to generate: batch
    # G4 + G5 (version 1) is ready at once; the update ends at 4, sync to 21.
    works = [Work(0, [0, 0, 1, 1], [10] * 4, [2, 3, 10, 1]), Work(1, [0, 0, 1, 1], [10] * 4, [4, 2, 3, 6]),
             Work(2, [0, 0, 1, 1], [10] * 4, [4, 2, 3, 6])]
    rows = fully_async.schedule(works, 1, _roll(_tracked()), trainer(), 1, "async:staleness=1")
    assert [(r.t_start, r.t_end) for r in rows] == [(0.0, 9.0), (9.0, 16.0), (16.0, 21.0)]
    assert [r.trained_tokens for r in rows] == [2 + 3 + 4 + 2, 10 + 1 + 3 + 6, 4 + 2 + 3 + 6]
    assert [r.lag.tolist() for r in rows] == [[0] * 4, [1] * 4, [1] * 4]
    dist = {x["lag"]: (x["samples"], x["tokens"]) for x in lag_rows(rows[1])}
    assert dist == {0: (0, 2), 1: (4, 18)}  # G1's long response: 8 tokens under version 0, 2 under 1
    # idle: the trainer waits 4, then 2 s for its batch; the rollout pool has nothing to do in segment 2
    assert [r.gpu_idle_s for r in rows] == [4.0, 2.0, 4.0] and rows[0].gpus == 2
    # K = 0: N groups per version, the trainer waits for all: the synchronous step, 10 + 4 + 1 s
    rows = fully_async.schedule(works[:1], 0, _roll(_tracked()), trainer(), 1, "async:staleness=0")
    assert rows[0].t_end == 15.0 and rows[0].gpu_idle_s == 10.0 + 4.0



def test_tail_batching_defers_the_slowest_groups_to_a_long_round() -> None:
    # N = 2 groups of n = 2 per trace step, prompt_ratio 1.5 (3 groups a short round), response_ratio 2 (a copy
    # of each response: A [2, 9] runs as 2, 9, 2, 9 and is complete with its first two at 2). One worker,
    # everything admitted at t=0, a response of L tokens done at t=L; T = 4, W = 1.
    # Round 0 (short): A (2), B [3, 3] (3), C [8, 8] (8): train A, B at tau 3, C deferred; 3 + 5 = 8 s.
    # Round 1 (short): queue 1 < 2, fresh D [1, 2] (1), E [4, 5] (4), F [6, 1] (1): D, F at tau 1, E deferred;
    # 1 + 5 -> 14. Round 2 (long): the queue holds 2: C and E regenerated from scratch, whole: 8 + 5 -> 27.
    # Round 3 (short): the last fresh G [2, 2], H [3, 3], both needed: tau 3 -> 35. sync: 14, 13, 11, 8 = 46.
    works = [Work(0, [0, 0, 1, 1], [10] * 4, [2, 9, 3, 3]), Work(1, [0, 0, 1, 1], [10] * 4, [8, 8, 1, 2]),
             Work(2, [0, 0, 1, 1], [10] * 4, [4, 5, 6, 1]), Work(3, [0, 0, 1, 1], [10] * 4, [2, 2, 3, 3])]
    rows = tail_batching.schedule(works, 1.5, 2.0, 0, _roll(_tracked()), trainer(), "tail-batching")
    assert [r.round for r in rows] == ["short", "short", "long", "short"]
    assert [r.rollout_s for r in rows] == [3.0, 1.0, 8.0, 3.0]
    assert [r.t_end for r in rows] == [8.0, 14.0, 27.0, 35.0]
    assert [r.trained_tokens for r in rows] == [2 + 2 + 3 + 3, 1 + 1 + 1 + 1, 8 + 8 + 4 + 5, 2 + 2 + 3 + 3]
    assert [r.deferred_groups for r in rows] == [1, 1, 0, 0] and [r.queued_groups for r in rows] == [1, 2, 0, 0]
    assert [r.dropped_samples for r in rows] == [8, 8, 0, 4]
    # round 0 generated by tau 3: A's 9-token copies 3 each, B's surplus 3 each, C's four 3 each
    assert [r.discarded_tokens for r in rows] == [6 + 6 + 12, 8, 0, 2 + 2 + 3 + 3]
    assert all(r.lag.tolist() == [0] * 4 for r in rows) and all(r.gpu_idle_s == 0.0 for r in rows)
    totals = totals_frame(steps_frame([StrategyRun("no-sd", pd.DataFrame(), rows)]))
    assert totals[["deferred_groups", "long_rounds", "discarded_tokens"]].iloc[0].tolist() == [2, 1, 24 + 8 + 10]
    plain = steps_frame([StrategyRun("no-sd", pd.DataFrame(), sync.schedule([batch(0, 1.0)], trainer()))])
    assert "round" not in plain.columns and "long_rounds" not in totals_frame(plain).columns


def test_tail_batching_at_the_edge_runs_the_queue_with_the_last_fresh_groups() -> None:
    # N = 2, prompt_ratio 1.5, response_ratio 1: round 0 launches A [2, 9] (9), B [3, 3] (3), C [4, 4] (4):
    # trains B, C at 4 and defers A; round 1 has 1 fresh group (D) and 1 queued: a long round over A, D [1, 1]
    works = [Work(0, [0, 0, 1, 1], [10] * 4, [2, 9, 3, 3]), Work(1, [0, 0, 1, 1], [10] * 4, [4, 4, 1, 1])]
    rows = tail_batching.schedule(works, 1.5, 1.0, 0, _roll(_tracked()), trainer(), "tail-batching")
    assert [r.round for r in rows] == ["short", "long"] and [r.rollout_s for r in rows] == [4.0, 9.0]
    assert [r.trained_tokens for r in rows] == [3 + 3 + 4 + 4, 2 + 9 + 1 + 1]
    assert [r.queued_groups for r in rows] == [1, 0]
    # N = 1, prompt_ratio 3: round 0 launches g0 [5], g1 [1], g2 [2], trains g1 at 1 and queues g0, g2 in
    # launch order; the queue holds N or more twice: long rounds, the oldest first (g0, then g2)
    works = [Work(k, [0], [10], [r]) for k, r in enumerate((5, 1, 2))]
    rows = tail_batching.schedule(works, 3.0, 1.0, 0, _roll(_tracked()), trainer(), "tail-batching")
    assert [r.round for r in rows] == ["short", "long", "long"] and [r.rollout_s for r in rows] == [1.0, 5.0, 2.0]
    assert [r.queued_groups for r in rows] == [2, 1, 0]
    # a tie (g0 [3] with a 7-token prompt, g1 [3] with 9) goes to the group launched first
    seen: list[list[int]] = []

    def noting(prompts, responses):
        seen.append(prompts.tolist())
        return trainer()(prompts, responses)

    works = [Work(0, [0], [7], [3]), Work(1, [0], [9], [3])]
    tail_batching.schedule(works, 2.0, 1.0, 0, _roll(_tracked()), noting, "tail-batching")
    assert seen == [[7], [9]]


# ---- sync is today's run ---------------------------------------------------------------------------
def _scenario(**sets: str) -> Scenario:
    base = {"trace.prompts_per_step": "8", "trace.num_steps": "2", "trace.cap": "4096", "cluster.gpus": "8",
            "cluster.tp": "2", "policies": '["elastic:16+beg-mab"]'}
    s = Scenario()
    for k, v in {**base, **sets}.items():
        s = apply_override(s, k, v)
    return s


@pytest.fixture(scope="module")
def small() -> tuple[Scenario, object]:
    require_real_traces()
    s = _scenario()
    return s, prepare(s)


def test_sync_is_todays_run_bit_for_bit(small) -> None:
    s, inputs = small
    events, summary = compare_policies(s, inputs)
    s_events, s_summary, steps, lags = compare_strategy(s, Sync(), inputs)
    assert s_events.equals(events)
    assert s_summary.drop(columns="strategy").equals(summary) and set(s_summary["strategy"]) == {"sync"}
    merged = steps.merge(summary, on=["policy", "step"])
    assert (merged["rollout_s"] == merged["makespan_s"]).all()
    assert (merged["gpu_idle_s_x"] == merged["gpu_idle_s_y"]).all()
    assert set(lags["lag"]) == {0} and (lags["sample_share"] == 1.0).all()


def test_sync_step_time_is_the_verl_presets(small) -> None:
    s, inputs = small
    verl = run_preset(s, "verl", inputs).steps
    mine = steps_frame([run_strategy(s, "no-sd", inputs, strategy=Sync())])
    # the preset's rollouts run on a clock that includes training: equal up to float rounding
    assert mine["step_s"].to_numpy() == pytest.approx(verl["step_s"].to_numpy(), rel=1e-12)
    assert mine["rollout_s"].to_numpy() == pytest.approx(verl["rollout_s"].to_numpy(), rel=1e-12)


def test_overprovision_eta_0_is_sync_and_one_step_off_is_faster(small) -> None:
    s, inputs = small
    base = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Sync())])
    zero = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Overprovision(0.0))])
    assert zero.drop(columns="strategy").equals(base.drop(columns="strategy"))
    off = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=OneStepOff())])
    assert off["t_end"].iloc[-1] < base["t_end"].iloc[-1] and off["max_lag"].tolist() == [0, 1]
    over = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Overprovision(0.5))])
    assert (over["trained_samples"] == base["trained_samples"]).all() and (over["dropped_samples"] > 0).all()


def test_resume_at_eta_0_and_async_at_staleness_0_keep_syncs_clock(small) -> None:
    s, inputs = small
    base = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Sync())])
    cols = ["t_start", "t_end", "rollout_s", "train_s", "trained_tokens", "gpu_idle_s"]
    zero = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Overprovision(0.0, "resume"))])
    assert (zero[cols].to_numpy() == base[cols].to_numpy()).all()
    off = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Async(0))])
    # the same phases on two pools, added in another order: equal up to rounding
    assert off["t_end"].to_numpy() == pytest.approx(base["t_end"].to_numpy(), rel=1e-12)
    assert off["max_lag"].tolist() == [0, 0]
    resume = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Overprovision(0.5, "resume"))])
    drop = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Overprovision(0.5))])
    assert resume["rollout_s"].iloc[0] == drop["rollout_s"].iloc[0]  # step 0: the same launch, the same stop
    assert (resume["carried_samples"] > 0).all() and resume["max_lag"].tolist() == [0, 1]


def test_tail_batching_at_ratio_1_keeps_syncs_clock(small) -> None:
    s, inputs = small
    base = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=Sync())])
    cols = ["t_start", "t_end", "rollout_s", "train_s", "trained_tokens", "gpu_idle_s"]
    one = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=TailBatching(1.0, 1.0))])
    assert (one[cols].to_numpy() == base[cols].to_numpy()).all() and (one["deferred_groups"] == 0).all()
    # RollPacker's ratios on 2 steps of 8 groups: round 0 launches 10 and defers 2; round 1 is the run's edge,
    # a long round over the 2 deferred and the 6 fresh groups left
    tail = steps_frame([run_strategy(s, "elastic:16+beg-mab", inputs, strategy=TailBatching())])
    assert tail["round"].tolist() == ["short", "long"] and tail["deferred_groups"].tolist() == [2, 0]
    assert (tail["trained_samples"] == base["trained_samples"]).all() and tail["max_lag"].tolist() == [0, 0]


# ---- --strategy ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    ("one-step-of", "did you mean one-step-off"), ("overprovision", "needs eta"), ("overprovision:eta=x", "number"),
    ("overprovision:eta=-1", "0 to 4"), ("sync:k=1", "no parameter 'k'"), ("one-step-off:trainer_gpus=0", "1 to"),
    ("tail-batching:prompt_ratio=0.5", "1 to 5"), ("tail-batching:response_ratio=x", "number"),
    ("tail-batching:eta=1.25", "no parameter 'eta'"), ("overprovision:eta=1,mode=keep", "drop or resume"),
    ("async", "needs staleness"), ("async:staleness=-1", "0 to 64"), ("async:staleness=1.5", "whole number"),
    ("overprovision:", "key=value"), ("overprovision:eta", "key=value"), ("overprovision:eta=1,eta=2", "twice"),
])
def test_bad_strategy_is_one_input_error(text, message) -> None:
    with pytest.raises(InputError, match=message) as err:
        parse_strategy(text)
    assert err.value.path == "--strategy" and "\n" not in str(err.value)


def test_strategy_specs_parse() -> None:
    assert parse_strategy("sync") == Sync()
    assert parse_strategy("one-step-off:trainer_gpus=32") == OneStepOff(32)
    assert parse_strategy(" overprovision:eta=0.25 ").label == "overprovision:eta=0.25"
    assert parse_strategy("overprovision:eta=0.5,mode=resume") == Overprovision(0.5, "resume")
    assert parse_strategy("overprovision:eta=0.5,mode=resume").label == "overprovision:eta=0.5,mode=resume"
    assert parse_strategy("async:staleness=2,trainer_gpus=8") == Async(2, 8)
    assert parse_strategy("tail-batching") == TailBatching(1.25, 1.25) and TailBatching().label == "tail-batching"
    assert parse_strategy("tail-batching:prompt_ratio=1.5").label == "tail-batching:prompt_ratio=1.5"
    assert parse_strategy("tail-batching:response_ratio=1,prompt_ratio=2") == TailBatching(2.0, 1.0)


def test_cli_strategy_errors_stop_before_running(tmp_path) -> None:
    out = tmp_path / "never"
    for args, message in ((["--strategy", "tail"], "unknown strategy"),
                          (["--strategy", "sync", "--seeds", "1", "--preset", "tlt"], "not with --preset"),
                          (["--strategy", "sync", "--seeds", "1", "--for-steps", "100"], "do not price")):
        res = CliRunner().invoke(app_(), ["sim", "run", *args, "--out", str(out)])
        assert isinstance(res.exception, InputError) and message in str(res.exception), res.output
        assert not out.exists()


def test_cli_bad_strategy_is_one_line_exit_2(tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", "from tltcli import main; main()", "sim", "run", "--strategy",
                           "overprovision:eta=9", "--seeds", "1"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=hang_seconds(24))
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "--strategy" in proc.stderr and "eta must be 0 to 4" in proc.stderr
    assert not (tmp_path / "results").exists()


def app_():
    from tltcli import app

    return app


@needs_shared_traces()
def test_cli_one_step_off_writes_the_lag_table(tmp_path) -> None:
    out = tmp_path / "res"
    res = CliRunner().invoke(app_(), ["sim", "run", "--strategy", "one-step-off", "--seeds", "1", "--steps", "2",
                                      "--set", "trace.prompts_per_step=8", "--gpus", "8", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "Whole run under one-step-off" in res.output
    lags = pd.read_csv(out / "lag.csv")
    assert lags.groupby("step")["lag"].max().tolist() == [0, 1]
    steps = pd.read_csv(out / "strategy.csv")
    assert set(steps["policy"]) == {"no-sd", "elastic+beg-mab"} and (steps["gpus"] == 16).all()
    assert set(pd.read_csv(out / "summary.csv")["strategy"]) == {"one-step-off"}


@needs_shared_traces()
def test_cli_tail_batching_reports_its_rounds_at_the_default_seeds(tmp_path) -> None:
    out = tmp_path / "res"
    res = CliRunner().invoke(app_(), ["sim", "run", "--strategy", "tail-batching", "--steps", "2", "--set",
                                      "trace.prompts_per_step=8", "--gpus", "8", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "Whole run under tail-batching" in res.output
    steps = pd.read_csv(out / "strategy.csv")
    assert sorted(set(steps["seed"])) == [0, 1, 2] and set(steps["round"]) == {"short", "long"}
    whole = pd.read_csv(out / "seeds_strategy.csv")
    assert (whole["long_rounds_median"] == 1).all() and (whole["deferred_groups_median"] == 2).all()
    assert set(pd.read_csv(out / "lag.csv")["lag"]) == {0}


@needs_shared_traces()
def test_cli_strategy_runs_at_the_default_three_seeds(tmp_path) -> None:
    out, one = tmp_path / "res", tmp_path / "one"
    args = ["sim", "run", "--strategy", "one-step-off", "--steps", "2", "--set", "trace.prompts_per_step=8",
            "--gpus", "8"]
    res = CliRunner().invoke(app_(), [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "median (min–max) over the seeds" in res.output
    steps, lags = pd.read_csv(out / "strategy.csv"), pd.read_csv(out / "lag.csv")
    assert sorted(set(steps["seed"])) == [0, 1, 2] and sorted(set(lags["seed"])) == [0, 1, 2]
    assert sorted(set(pd.read_csv(out / "summary.csv")["seed"])) == [0, 1, 2]
    whole = pd.read_csv(out / "seeds_strategy.csv").set_index("policy")
    per_seed = steps.groupby(["policy", "seed"])["t_end"].last().unstack()
    for policy in ("no-sd", "elastic+beg-mab"):
        assert whole.at[policy, "total_s_median"] == pytest.approx(per_seed.loc[policy].median(), rel=1e-12)
        assert whole.at[policy, "total_s_min"] == pytest.approx(per_seed.loc[policy].min(), rel=1e-12)
        assert whole.at[policy, "seeds"] == 3
    # seed 1 of the three is `--seed 1 --seeds 1`, row for row
    res = CliRunner().invoke(app_(), [*args, "--seed", "1", "--seeds", "1", "--out", str(one)])
    assert res.exit_code == 0, res.output
    single = pd.read_csv(one / "strategy.csv")
    mine = steps[steps["seed"] == 1].drop(columns="seed").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, single)


@needs_shared_traces()
def test_cli_async_writes_token_lags(tmp_path) -> None:
    out = tmp_path / "res"
    res = CliRunner().invoke(app_(), ["sim", "run", "--strategy", "async:staleness=2", "--seeds", "1", "--steps", "3",
                                      "--set", "trace.prompts_per_step=8", "--gpus", "8", "--out", str(out)])
    assert res.exit_code == 0, res.output
    lags = pd.read_csv(out / "lag.csv")
    assert lags["lag"].max() >= 1 and set(lags["policy"]) == {"no-sd", "elastic+beg-mab"}
    steps = pd.read_csv(out / "strategy.csv")
    assert (steps["gpus"] == 16).all() and "carried_samples" in steps
    per_step = lags.groupby(["policy", "step"])["tokens"].sum()
    assert (per_step.to_numpy() == steps.set_index(["policy", "step"])["trained_tokens"].loc[per_step.index]).all()
