"""Rollout simulation: hand-checkable cases with a linear fake cost model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from tltsim.events import check_event_log
from tltsim.policy.base import NoSD, SDConfig, Static
from tltsim.policy.elastic import Elastic
from tltsim.rollout import EngineConfig, simulate_step, split_over_instances
from tltsim.summary import summarize_step, summary_table

A, B, C, D = 1e-3, 1e-6, 1e-2, 1e-5  # decode: A + B*sum(ctx); prefill pass: C + D*sum(new)


class LinearCost:
    """Iteration time linear in the summed context: every sum is checkable by hand."""

    def prefill_time(self, new_tokens, cached_tokens):
        return C + D * float(np.sum(new_tokens))

    def decode_time(self, context_lens):
        return A + B * float(np.sum(context_lens))

    def decode_span_time(self, context_lens, n_iters):
        s, b = float(np.sum(context_lens)), len(context_lens)
        return n_iters * A + B * (n_iters * s + b * n_iters * (n_iters - 1) / 2)

    def sd_time(self, context_lens, config):
        # drafting: depth cheap steps; verify: a target forward a bit dearer than plain decode
        return 1.5 * self.decode_time(context_lens) + config.depth * 1e-4


class ChainAccept:
    """Each draft position accepted with probability alpha, independent; bonus token included."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def expected_accept_length(self, config):
        a, k = self.alpha, config.depth
        return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)

    def sample_accept_lengths(self, config, n, rng):
        ok = rng.random((n, config.depth)) < self.alpha
        return 1 + np.cumprod(ok, axis=1).sum(axis=1)


@dataclass(frozen=True)
class Work:
    step: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray


def work(prompts, responses, groups=None) -> Work:
    groups = groups if groups is not None else [f"g{i}" for i in range(len(prompts))]
    return Work(0, np.asarray(groups), np.asarray(prompts, dtype=np.int64),
                np.asarray(responses, dtype=np.int64))


def run(w, policy=NoSD, *, n=1, alpha=0.8, **engine):
    return simulate_step(w, n_instances=n, cost=LinearCost(), accept=ChainAccept(alpha),
                         policy_factory=lambda i: policy(), engine=EngineConfig(**engine), seed=7)


def test_no_sd_makespan_is_hand_sum_of_iterations():
    # prompts 2,3,4; responses 1,2,3. One prefill pass (9 tokens), then decode contexts
    # [2,3,4] -> [4,5] -> [6]: sums 9, 9, 6.
    res = run(work([2, 3, 4], [1, 2, 3]))
    expected = (C + 9 * D) + 3 * A + B * (9 + 9 + 6)
    assert res.makespan == pytest.approx(expected, rel=1e-12)
    check_event_log(res.events)
    assert res.events["kind"].tolist() == ["prefill", "decode", "decode", "decode"]
    assert res.events["batch_size"].tolist() == [3, 3, 2, 1]
    assert int(res.events.loc[res.events.kind == "decode", "tokens"].sum()) == 6


def test_admission_waits_for_a_free_slot():
    # max_batch 2: prefill [2,3]; decode [2,3]; r0 done -> prefill r2 (4 tokens); decode [4,4],
    # r1 done; decode [5], [6].
    res = run(work([2, 3, 4], [1, 2, 3]), max_batch=2)
    expected = (C + 5 * D) + (A + 5 * B) + (C + 4 * D) + (A + 8 * B) + (A + 5 * B) + (A + 6 * B)
    assert res.makespan == pytest.approx(expected, rel=1e-12)
    assert res.events["kind"].tolist()[:4] == ["prefill", "decode", "prefill", "decode"]


def test_kv_reservation_limits_the_batch():
    # Each request reserves prompt + response = 10 tokens; capacity 25 admits two at a time.
    res = run(work([5, 5, 5], [5, 5, 5]), kv_capacity_tokens=25)
    assert res.events.loc[res.events.kind == "prefill", "batch_size"].tolist() == [2, 1]


def test_prefill_budget_chunks_long_prompts():
    res = run(work([10, 3], [1, 1]), prefill_budget=4)
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
    res = run(work([10, 10], [3, 7]), lambda: Static(SDConfig.chain(4)), alpha=1.0)
    dec = res.events[res.events.kind == "decode"]
    assert int(dec["tokens"].sum()) == 10
    # 5-token steps: first iteration emits 3 + 5; second emits the last 2.
    assert dec["iterations"].sum() == 2


def test_elastic_switches_after_exactly_ten_small_batches_and_charges_reprefill():
    # 8 short requests (5 tokens) and 2 long (100): batch 10 for 5 iterations, then 2 <= 4.
    w = work([20] * 10, [5] * 8 + [100] * 2)
    res = run(w, lambda: Elastic(Static(SDConfig.chain(4)), threshold=4, consecutive=10), alpha=0.5)
    ev = res.events
    check_event_log(ev)
    small_off = ev[(ev.kind == "decode") & (ev.batch_size == 2) & (ev.depth == 0)]
    assert small_off["iterations"].sum() == 9  # the 10th small-batch iteration is the first SD one
    rp = ev[ev.kind == "reprefill"]
    assert len(rp) == 1
    row = rp.iloc[0]
    # both live requests, each prompt 20 + generated 5 + 9 = 34 tokens, budget 8192/4 -> one pass
    assert row["batch_size"] == 2 and row["tokens"] == 68
    assert row["t_end"] - row["t_start"] == pytest.approx(C + 68 * D)
    first_sd = ev[(ev.kind == "decode") & (ev.depth > 0)].iloc[0]
    assert first_sd["t_start"] == pytest.approx(row["t_end"])
    assert (ev.loc[ev.t_start >= row["t_end"]].query("kind == 'decode'")["depth"] > 0).all()


def test_same_seed_gives_identical_event_logs():
    rng = np.random.default_rng(0)
    w = work(rng.integers(10, 200, 64), rng.integers(1, 500, 64), groups=np.repeat(np.arange(16), 4))

    def once():
        return simulate_step(w, n_instances=4, cost=LinearCost(), accept=ChainAccept(0.7),
                             policy_factory=lambda i: Elastic(Static(SDConfig(8, 4, 32)), threshold=8),
                             engine=EngineConfig(max_batch=8, acceptance_mode="stochastic"), seed=3).events

    pd.testing.assert_frame_equal(once(), once())


@pytest.mark.parametrize("mode", ["expected", "stochastic"])
def test_closed_form_equals_per_iteration_stepping(mode):
    rng = np.random.default_rng(1)
    w = work(rng.integers(10, 300, 40), rng.integers(1, 800, 40), groups=np.repeat(np.arange(10), 4))

    def makespan(fast: bool, policy):
        res = simulate_step(w, n_instances=2, cost=LinearCost(), accept=ChainAccept(0.6),
                            policy_factory=policy,
                            engine=EngineConfig(max_batch=12, closed_form=fast, coalesce=fast,
                                                acceptance_mode=mode), seed=0)
        return res

    for policy in (lambda i: NoSD(), lambda i: Elastic(Static(SDConfig.chain(3)), threshold=6)):
        fast, slow = makespan(True, policy), makespan(False, policy)
        assert fast.makespan == pytest.approx(slow.makespan, rel=1e-9)
        assert len(fast.events) < len(slow.events)
        for res in (fast, slow):
            decoded = res.events.loc[res.events.kind == "decode", "tokens"].sum()
            assert decoded == pytest.approx(w.response_tokens.sum(), abs=len(res.events))  # row rounding


def test_groups_are_split_whole_and_in_order():
    groups = np.repeat(["a", "b", "c", "d", "e"], 2)
    parts = split_over_instances(groups, 2)
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
    assert [len(p) for p in split_over_instances(groups, 8)] == [2] * 5 + [0] * 3


def test_idle_fraction_hand_case():
    # two instances, tp 2, 4 GPUs: instance 0 decodes 1 token, instance 1 decodes 3 tokens.
    res = run(work([2, 2], [1, 3]), n=2)
    t0 = C + 2 * D + A + 2 * B
    t1 = C + 2 * D + 3 * A + B * (2 + 3 + 4)
    s = summarize_step(res.events, gpus=4, tp=2)
    assert s.instance_finish_s == pytest.approx((t0, t1))
    assert s.gpu_idle_s == pytest.approx((t1 - t0) * 2)
    assert s.idle_fraction == pytest.approx((t1 - t0) * 2 / (t1 * 4))
    idle = res.events[res.events.kind == "idle"]
    assert idle["instance"].tolist() == [0] and idle.iloc[0]["t_end"] == pytest.approx(t1)


def test_summary_table_speedup_and_accept_length():
    w = work([100] * 8, [200] * 8)
    ev = pd.concat([run(w).events, run(w, lambda: Static(SDConfig.chain(4)), alpha=1.0).events])
    ev["policy"] = ev["policy"].astype("string")
    tab = summary_table(ev, gpus=1, tp=1)
    assert tab["policy"].tolist() == ["no-sd", "static"]
    assert tab["speedup"].iloc[0] == pytest.approx(1.0) and tab["speedup"].iloc[1] > 2
    assert tab["mean_accept_length"].iloc[1] == pytest.approx(5.0)
    assert tab["sd_share"].tolist() == [0.0, 1.0]
