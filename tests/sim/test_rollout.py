"""Rollout simulation: hand-checkable cases with a linear fake cost model, and the real acceptance
models in both modes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rollout_fixtures import Work

from tltcore.acceptance import ChainAcceptance, paper_qwen32b_tp4
from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.drafter.state import DrafterState
from tltcore.events import check_event_log
from tltcore.policy.base import BatchView, Decision, NoSD, Outcome, SDConfig, Static
from tltcore.policy.beg_mab import BucketedEpsilonGreedy
from tltcore.policy.elastic import Elastic
from tltcore.policy.recent_accept import RecentAccept
from tltcore.summary import summarize_step, summary_table
from tltsim.rollout import EngineConfig, RolloutRun, deal, simulate_step

A, B, C, D = 1e-3, 1e-6, 1e-2, 1e-5  # decode: A + B*sum(ctx); target prefill pass: C + D*sum(new)
E, F = 2e-3, 3e-6  # drafter prefill pass: E + F*sum(new)


class LinearCost(PerConfigSDTimes):
    """Iteration time linear in the summed context: every sum is checkable by hand."""

    def prefill_time(self, new_tokens, cached_tokens):
        return C + D * float(np.sum(new_tokens))

    def drafter_prefill_time(self, new_tokens, cached_tokens):
        return E + F * float(np.sum(new_tokens))

    def decode_time(self, context_lens):
        return A + B * float(np.sum(context_lens))

    def decode_span_time(self, context_lens, n_iters):
        s, b = float(np.sum(context_lens)), len(context_lens)
        return n_iters * A + B * (n_iters * s + b * n_iters * (n_iters - 1) / 2)

    def sd_time(self, context_lens, config):
        # drafting: depth cheap steps; verify: a target forward a bit dearer than plain decode
        return 1.5 * self.decode_time(context_lens) + config.depth * 1e-4


def work(prompts, responses, groups=None, step=0) -> Work:
    groups = groups if groups is not None else [f"g{i}" for i in range(len(prompts))]
    return Work(step, np.asarray(groups), np.asarray(prompts, dtype=np.int64),
                np.asarray(responses, dtype=np.int64))


def run(w, policy=NoSD, *, n=1, alpha=0.8, deal_mode="trace", **engine):
    return simulate_step(w, policies=[policy() for _ in range(n)], cost=LinearCost(),
                         accept=ChainAcceptance((alpha,)), engine=EngineConfig(**engine), seed=7, deal_mode=deal_mode)


def worker_rows(res):
    return res.events[res.events.worker >= 0]


def test_no_sd_makespan_is_hand_sum_of_iterations():
    # prompts 2,3,4; responses 1,2,3. One prefill pass (9 tokens) emits every first token (r0 is done);
    # then decode contexts [4,5] -> [6]: sums 9, 6.
    res = run(work([2, 3, 4], [1, 2, 3]))
    expected = (C + 9 * D) + 2 * A + B * (9 + 6)
    assert res.makespan == pytest.approx(expected, rel=1e-12)
    check_event_log(res.events)
    rows = worker_rows(res)
    assert rows["kind"].tolist() == ["prefill", "decode", "decode"]
    assert rows["batch_size"].tolist() == [3, 2, 1]
    assert rows["tokens"].tolist() == [3, 2, 1]  # prefill emits the first token of each request
    assert rows["prefill_tokens"].tolist() == [9, 0, 0]
    stage = res.events[res.events.kind == "stage"].iloc[0]
    assert stage["worker"] == -1 and stage["t_end"] - stage["t_start"] == pytest.approx(expected)


def test_admission_waits_for_a_free_slot():
    # max_batch 2: prefill [2,3] (r0 done at prefill) -> prefill r2 (4 tokens); decode [4,5]; r1 done; decode [6].
    res = run(work([2, 3, 4], [1, 2, 3]), max_batch=2)
    expected = (C + 5 * D) + (C + 4 * D) + (A + 9 * B) + (A + 6 * B)
    assert res.makespan == pytest.approx(expected, rel=1e-12)
    assert worker_rows(res)["kind"].tolist()[:3] == ["prefill", "prefill", "decode"]


def test_kv_reservation_limits_the_batch():
    # Each request reserves prompt + response = 10 tokens; capacity 25 admits two at a time.
    res = run(work([5, 5, 5], [5, 5, 5]), kv_capacity_tokens=25)
    assert res.events.loc[res.events.kind == "prefill", "batch_size"].tolist() == [2, 1]


def test_prefill_budget_chunks_long_prompts():
    res = run(work([10, 3], [2, 2]), prefill_budget=4)
    pre = res.events[res.events.kind == "prefill"].iloc[0]
    assert pre["iterations"] == 4  # 13 tokens in passes of 4: [4], [4], [2,2], [1]
    assert pre["t_end"] - pre["t_start"] == pytest.approx(4 * C + 13 * D)


def _sd_makespan(alpha: float) -> float:
    return run(work([100] * 8, [200] * 8), lambda: Static(SDConfig.chain(4)), alpha=alpha).makespan


def test_sd_with_zero_acceptance_is_slower_and_high_acceptance_faster():
    base = run(work([100] * 8, [200] * 8)).makespan
    assert _sd_makespan(0.0) > base
    assert _sd_makespan(0.9) < base / 2


def test_sd_never_emits_beyond_remaining_tokens():
    res = run(work([10, 10], [4, 8]), lambda: Static(SDConfig.chain(4)), alpha=1.0)
    rows = worker_rows(res)
    assert int(rows["tokens"].sum()) == 12
    dec = rows[rows.kind == "decode"]
    # after prefill 3 and 7 remain; 5-token steps: the first emits 3 + 5, the second the last 2.
    assert dec["iterations"].sum() == 2 and dec["tokens"].tolist() == [8, 2]


def test_elastic_switch_reprefills_live_requests_through_target_and_drafter():
    # 8 short requests (5 tokens) and 2 long (100): batch 10 for 4 iterations, then 2 <= 4.
    w = work([20] * 10, [5] * 8 + [100] * 2)
    res = run(w, lambda: Elastic(Static(SDConfig.chain(4)), threshold=4, consecutive=10), alpha=0.5)
    ev = worker_rows(res)
    check_event_log(res.events)
    small_off = ev[(ev.kind == "decode") & (ev.batch_size == 2) & (ev.depth == 0)]
    assert small_off["iterations"].sum() == 9  # the 10th small-batch iteration is the first SD one
    assert (ev.kind == "switch").sum() == 1
    rp = ev[ev.kind == "switch_reprefill"]
    assert len(rp) == 1
    row = rp.iloc[0]
    # both live requests, each prompt 20 + generated 1 + 4 + 9 = 34 tokens, budget 8192/4 -> one pass
    assert row["batch_size"] == 2 and row["prefill_tokens"] == 68 and row["tokens"] == 0
    assert row["t_end"] - row["t_start"] == pytest.approx((C + 68 * D) + (E + 68 * F))  # target + drafter
    first_sd = ev[(ev.kind == "decode") & (ev.depth > 0)].iloc[0]
    assert first_sd["t_start"] == pytest.approx(row["t_end"])
    assert (ev.loc[ev.t_start >= row["t_end"]].query("kind == 'decode'")["depth"] > 0).all()


def test_catch_up_switch_runs_only_the_drafter_over_what_it_missed():
    w = work([20] * 10, [5] * 8 + [100] * 2)
    res = run(w, lambda: Elastic(Static(SDConfig.chain(4)), threshold=4, consecutive=10), alpha=0.5,
              switch="catch_up")
    ev = worker_rows(res)
    assert not (ev.kind == "switch_reprefill").any()
    cu = ev[ev.kind == "catch_up"]
    assert len(cu) == 1 and cu.iloc[0]["prefill_tokens"] == 68  # its drafter has seen nothing yet
    assert cu.iloc[0]["t_end"] - cu.iloc[0]["t_start"] == pytest.approx(E + 68 * F)


class _Toggle:
    """SD (a 2-token chain) for 3 iterations, plain for ``off``, then SD again, with ``switch_on`` on
    its first decision when ``switch``: a policy that turns SD off and back on while the drafter lags
    only ``off`` tokens, at or under the engine's catch_up_limit of 16."""

    name = "toggle"

    def __init__(self, off: int, switch: bool) -> None:
        self.off, self.switch, self.asked = off, switch, 0

    def decide(self, view: BatchView) -> Decision:
        self.asked += 1
        if 3 < self.asked <= 3 + self.off:
            return Decision(SDConfig())
        return Decision(SDConfig.chain(2), switch_on=self.switch and self.asked == 4 + self.off)

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        return None


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("off", [1, 5, 16])
def test_catch_up_switch_catches_up_a_drafter_that_lags_16_tokens_or_fewer(off, mode, fast):
    """issue 39's mutant: the catch-up switch caught up only drafters lagging more than 16 tokens
    (catch_up_limit) and no test failed. A switch brings every lagging drafter up to date, however
    little it lags: after ``off`` plain iterations, each of the 2 requests' drafters has missed ``off``
    tokens, and the switch's catch-up is one drafter pass over 2 * off tokens (E + F * 2 off, by hand),
    right before the first SD iteration. Without the switch, a lag that small is folded into the next
    SD iteration (no catch-up row): the engine's catch_up_limit."""
    engine = {"switch": "catch_up", "acceptance_mode": mode, "fast": fast}
    for switch in (True, False):
        res = run(work([20, 20], [200, 200]), lambda switch=switch: _Toggle(off, switch), alpha=0.5, **engine)
        ev = worker_rows(res).reset_index(drop=True)
        cu = ev[ev.kind == "catch_up"]
        assert cu.iloc[0]["prefill_tokens"] == 2 * 21  # the first SD iteration: prompt + first token each
        if not switch:
            assert len(cu) == 1 and (ev.kind == "switch").sum() == 0
            continue
        assert len(cu) == 2 and (ev.kind == "switch").sum() == 1
        row = cu.iloc[1]
        assert row["prefill_tokens"] == 2 * off and row["batch_size"] == 2
        assert row["t_end"] - row["t_start"] == pytest.approx(E + F * 2 * off)
        switch_at = ev.index[ev.kind == "switch"][0]
        assert ev.loc[switch_at + 1, "kind"] == "catch_up" and ev.loc[switch_at + 2, "depth"] == 2
        plain = ev.loc[:switch_at].query("kind == 'decode' and depth == 0")
        assert plain["iterations"].sum() == off and plain["t_end"].max() <= ev.loc[switch_at, "t_start"]


def test_requests_admitted_while_speculating_get_their_drafter_caught_up():
    # max_batch 1: the second request is prefilled while SD is on; its drafter has seen none of it.
    res = run(work([30, 40], [3, 3]), lambda: Static(SDConfig.chain(2)), alpha=1.0, max_batch=1)
    cu = worker_rows(res).query("kind == 'catch_up'")
    assert cu["prefill_tokens"].tolist() == [31, 41]  # prompt + the first token, each at its first SD step


def test_same_seed_gives_identical_event_logs():
    rng = np.random.default_rng(0)
    w = work(rng.integers(10, 200, 64), rng.integers(1, 500, 64), groups=np.repeat(np.arange(16), 4))

    def once():
        return simulate_step(w, policies=[Elastic(Static(SDConfig(8, 4, 32)), threshold=8) for _ in range(4)],
                             cost=LinearCost(), accept=paper_qwen32b_tp4(),
                             engine=EngineConfig(max_batch=8, acceptance_mode="stochastic"), seed=3).events

    pd.testing.assert_frame_equal(once(), once())


@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("policy", [NoSD, lambda: Elastic(Static(SDConfig.chain(3)), threshold=6),
                                    lambda: Static(SDConfig(4, 2, 6))])
def test_spans_equal_per_iteration_stepping(mode, policy):
    rng = np.random.default_rng(1)
    w = work(rng.integers(10, 300, 40), rng.integers(1, 800, 40), groups=np.repeat(np.arange(10), 4))

    def sim(fast: bool):
        return simulate_step(w, policies=[policy(), policy()], cost=LinearCost(), accept=ChainAcceptance((0.6,)),
                             engine=EngineConfig(max_batch=12, closed_form=fast, coalesce=fast, acceptance_mode=mode),
                             seed=0)

    fast, slow = sim(True), sim(False)
    assert fast.makespan == pytest.approx(slow.makespan, rel=1e-9)
    assert len(fast.events) < len(slow.events)
    for res in (fast, slow):
        emitted = worker_rows(res)["tokens"].sum()
        assert emitted == pytest.approx(w.response_tokens.sum(), abs=len(res.events))  # row rounding


def test_dealing_keeps_groups_whole_in_trace_order_or_shuffled():
    groups = np.repeat(["e", "b", "c", "a", "d"], 2)  # first appearance: e, b, c, a, d
    parts = deal(groups, 2, "trace")
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
    assert [len(p) for p in deal(groups, 8, "trace")] == [2] * 5 + [0] * 3
    shuffled = deal(groups, 5, "shuffle", seed=1)
    assert sorted(np.concatenate(shuffled).tolist()) == list(range(10))
    assert all(len(set(groups[p])) == 1 for p in shuffled)  # one whole group per worker
    assert [p.tolist() for p in deal(groups, 5, "shuffle", seed=1)] == [p.tolist() for p in shuffled]
    assert any(deal(groups, 5, "shuffle", seed=s)[0].tolist() != shuffled[0].tolist() for s in range(2, 6))


def test_makespan_does_not_depend_on_group_ids_when_dealing_shuffles():
    """Group ids that sort by length (a year, a difficulty tag) must not pile the tail on one worker:
    relabelling the groups leaves a shuffled deal, and the makespan, unchanged."""
    rng = np.random.default_rng(4)
    lengths = np.sort(rng.lognormal(6.5, 0.9, 64).astype(int) + 1)  # 64 groups, shortest first
    responses = np.repeat(lengths, 4)
    order = rng.permutation(64)
    sorted_ids = np.repeat([f"y{i:03d}" for i in range(64)], 4)  # ids sort exactly like lengths
    random_ids = np.repeat([f"q{order[i]:03d}" for i in range(64)], 4)

    def makespan(ids, mode):
        return run(work(np.full(256, 64), responses, groups=ids), n=8, max_batch=8, deal_mode=mode).makespan

    assert makespan(sorted_ids, "shuffle") == makespan(random_ids, "shuffle")
    # dealt in id order, the 8 longest groups all land on the last worker: a much longer step
    assert makespan(sorted_ids, "trace") > 1.5 * makespan(sorted_ids, "shuffle")


def test_idle_fraction_hand_case():
    # two workers, tp 2, 4 GPUs: worker 0 emits its 1 token at prefill, worker 1 decodes 2 more.
    res = run(work([2, 2], [1, 3]), n=2)
    t0 = C + 2 * D
    t1 = C + 2 * D + 2 * A + B * (3 + 4)
    s = summarize_step(res.events, gpus=4, tp=2)
    assert s.worker_finish_s == pytest.approx((t0, t1))
    assert s.gpu_idle_s == pytest.approx((t1 - t0) * 2)
    assert s.idle_fraction == pytest.approx((t1 - t0) * 2 / (t1 * 4))
    idle = res.events[res.events.kind == "idle"]
    assert idle["worker"].tolist() == [0] and idle.iloc[0]["t_end"] == pytest.approx(t1)


def test_summary_table_speedup_and_accept_length():
    w = work([100] * 8, [200] * 8)
    ev = pd.concat([run(w).events, run(w, lambda: Static(SDConfig.chain(4)), alpha=1.0).events])
    ev["policy"] = ev["policy"].astype("string")
    tab = summary_table(ev, gpus=1, tp=1)
    assert tab["policy"].tolist() == ["no-sd", "static"]
    assert tab["speedup"].iloc[0] == pytest.approx(1.0) and tab["speedup"].iloc[1] > 2
    assert tab["mean_accept_length"].iloc[1] == pytest.approx(5.0, rel=0.02)  # last iteration is short
    assert tab["sd_share"].tolist() == [0.0, 1.0]
    assert tab["tokens"].tolist() == [1600, 1600]


def test_training_rows_never_count_as_generation():
    """A drafter-training row on a released worker, and an actor update after the rollout, are not
    generation: the rollout summary reads the rollout phase only."""
    from tltcore.events import CLUSTER, EventLog

    res = run(work([2, 2], [1, 3]), n=2)
    log = EventLog(run_id="", source="sim", policy="no-sd")
    finish0 = float(res.finish_times[0])
    log.span(0, "train", finish0, res.makespan, phase="drafter_train", batch=4)
    log.span(CLUSTER, "stage", res.makespan, res.makespan + 5.0, phase="actor_update")
    with_train = pd.concat([res.events, log.frame()], ignore_index=True)
    a, b = summarize_step(res.events, gpus=2, tp=1), summarize_step(with_train, gpus=2, tp=1)
    assert pd.Series(a.row()).equals(pd.Series(b.row()))


@pytest.mark.parametrize("model", [paper_qwen32b_tp4(), ChainAcceptance((0.7,))])
def test_stochastic_mode_with_real_models_emits_the_models_accept_length(model):
    """The stochastic path end to end (the README's headline tables use it): the mean accept length
    the simulation reports is the acceptance model's expectation, bonus token included."""
    config = SDConfig(6, 4, 16)
    w = work([50] * 32, [5000] * 32)
    res = simulate_step(w, policies=[Static(config)], cost=LinearCost(), accept=model,
                        engine=EngineConfig(acceptance_mode="stochastic"), seed=5)
    s = summarize_step(res.events, gpus=1, tp=1)
    expected = model.expected_accept_length(config)
    assert s.mean_accept_length == pytest.approx(expected, rel=0.01)
    stale = DrafterState(1, quality=0.6)
    res = simulate_step(w, policies=[Static(config)], cost=LinearCost(), accept=model,
                        engine=EngineConfig(acceptance_mode="stochastic"), seed=5, drafter=stale)
    assert summarize_step(res.events, gpus=1, tp=1).mean_accept_length == pytest.approx(
        model.expected_accept_length(config, stale), rel=0.01)
    assert set(res.events["drafter_version"]) == {1}


class Recorder(Static):
    """Static SD that remembers every view and outcome."""

    def __init__(self) -> None:
        super().__init__(SDConfig(4, 2, 6))
        self.views: list[BatchView] = []
        self.outcomes: list[Outcome] = []

    def decide(self, view: BatchView) -> Decision:
        self.views.append(view)
        return Decision(self.config)  # one iteration at a time

    def observe(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


def test_accepted_counts_whole_while_emitted_stops_at_the_response_end():
    """Same words as the engine (Outcome): accepted = what verification accepted, emitted = what
    reached the outputs. With full acceptance and 3 / 7 tokens left, a 4-chain accepts 4 + 4 drafts
    while 3 + 5 tokens are emitted."""
    policy = Recorder()
    simulate_step(work([10, 10], [4, 8]), policies=[policy], cost=LinearCost(), accept=ChainAcceptance((1.0,)),
                  engine=EngineConfig(), seed=7, deal_mode="trace")
    first = next(o for o in policy.outcomes if o.config.enabled)
    assert first.accepted_per_request == (4.0, 4.0) and first.emitted_tokens == 8


def test_policies_see_recent_accept_and_per_request_accepted_counts():
    policy = Recorder()
    simulate_step(work([10] * 3, [40, 60, 80]), policies=[policy], cost=LinearCost(), accept=paper_qwen32b_tp4(),
                  engine=EngineConfig(acceptance_mode="stochastic"), seed=2)
    ema = RecentAccept()
    for view, outcome in zip(policy.views, policy.outcomes, strict=True):
        assert view.recent_accept == ema.value  # what the engine showed = the shared EMA of what it observed
        ema.update(outcome.accept_length)
        assert len(outcome.accepted_per_request) == outcome.batch_size
        assert sum(outcome.accepted_per_request) == outcome.accepted_tokens
        assert outcome.emitted_tokens <= outcome.batch_size + outcome.accepted_tokens
    assert policy.views[0].recent_accept is None and policy.views[-1].recent_accept is not None


def test_beg_mab_keeps_and_uses_its_reward_windows_over_five_steps():
    """One policy object per worker lives for the run: reset(step) re-arms nothing BEG-MAB learned, so
    later steps skip the untried-arm exploration and their windows keep growing."""
    policy = BucketedEpsilonGreedy(seed=0)
    runner = RolloutRun([policy], cost=LinearCost(), accept=paper_qwen32b_tp4(),
                        engine=EngineConfig(acceptance_mode="stochastic", max_batch=64))
    rng = np.random.default_rng(0)
    sizes = []
    for step in range(5):
        runner.step(work(np.full(40, 30), rng.integers(20, 400, 40), step=step))
        sizes.append(sum(len(policy.rewards(bs, arm)) for bs in (1, 2, 5, 21) for arm in policy.arms))
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    ev = runner.events()
    assert sorted(ev["step"].unique()) == [0, 1, 2, 3, 4]
    stages = ev[ev.kind == "stage"].sort_values("step")
    assert np.allclose(stages["t_start"].to_numpy()[1:], stages["t_end"].to_numpy()[:-1])  # run-level clock
    fresh = BucketedEpsilonGreedy(seed=0)
    last = work(np.full(40, 30), rng.integers(20, 400, 40), step=5)
    tried_first = [runner.policies[0].decide(BatchView(1)).config for _ in range(4)]
    untried_first = [fresh.decide(BatchView(1)).config for _ in range(1)]
    assert untried_first == [fresh.buckets[0][0]]  # a fresh tuner explores...
    assert len(set(tried_first)) <= 2  # ...the carried-over one exploits its window (eps = 0.1)
    runner.step(last)
