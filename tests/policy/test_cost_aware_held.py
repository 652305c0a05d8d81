"""cost-aware's held-spans hint (:class:`~tltcore.policy.base.HoldsAhead`): ``held_ahead`` leaves the
policy exactly as the rounds ``observe, decide, observe, ...`` would, up to where it stops, and stops no
later than the first answer that is not the held shape with its recheck hold; the stacked acceptance
estimates and the prices from paged-KV sums are the rounds' floats; a whole simulation with the hint
(expected and stochastic acceptance) is the reference's, event for event and view for view."""

from __future__ import annotations

import copy
from dataclasses import replace
from unittest import mock

import numpy as np
import pandas as pd
import pytest

from conftest import needs_shared_traces
from tltcore.acceptance import paper_qwen32b_tp4
from tltcore.cost import RooflineCostModel
from tltcore.drafter.kinds import ModelFreeDraftCost
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import BatchView, HoldsAhead, Outcome, SDConfig, holds_ahead
from tltcore.policy.cost_aware import DEFAULT_CANDIDATES, CostAware
from tltcore.policy.spec import as_spec
from tltsim.scenario import prepare, resolve, run_policy

COST = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("H100"), tp=4)


def _sums(cost, ctx: np.ndarray) -> tuple[int, int, int]:
    bs = cost.kv_block_size
    return len(ctx), int(((ctx + bs - 1) // bs * bs).sum()), int(ctx.sum())


def _spans(rng: np.random.Generator, ctx: np.ndarray, h: int, k: int, config: SDConfig, rate: float):
    """``k`` spans from requests of contexts ``ctx``: each ends at a finish (one request leaves, ``n <= h``
    iterations) or at its hold (``n = h``, the batch kept); the views at every span's start after the
    first, the Outcomes each span reports (``rate`` accepted draft tokens per request-iteration, give or
    take 5%)."""
    views, outcomes = [], []
    for j in range(k):
        finishing = len(ctx) > 1 and rng.random() < 0.7
        n = int(rng.integers(1, h + 1)) if finishing else h
        b = len(ctx)
        each = rate * n * float(rng.uniform(0.95, 1.05))
        emitted = round(b * n * (1 + each / n))
        outcomes.append(Outcome(config, b, emitted, 1e-3 * n, config.verify_tokens * b * n, round(each * b), 0.0, 0,
                                n, (each,) * b))
        ctx = ctx + int(n * 2.5)
        if finishing:
            ctx = np.delete(ctx, int(rng.integers(0, len(ctx))))
        if j + 1 < k:
            views.append(BatchView(len(ctx), tuple(ctx.tolist())))
    return views, outcomes


def _state(policy: CostAware) -> dict:
    """Everything a decision reads, the acceptance statistics included."""
    skip = {"cost_model", "accept_model", "_pricing", "_estimate", "_at", "candidates"}
    state = {k: v for k, v in vars(policy).items() if k not in skip}
    est = policy._estimate
    state["gram"], state["moment"] = est._gram.tolist(), est._moment.tolist()
    state["observed"], state["fresh"] = est._observed, est._scales is None and est._accepts is None
    return state


def _on(cost, seed: int, b: int, rate: float, **kw) -> tuple[CostAware, SDConfig, np.ndarray]:
    """A policy switched on at a step's first decision that has then seen a few dozen spans of ``b``
    requests accept ``rate`` draft tokens per request-iteration, the shape it answers now and the
    contexts it saw last."""
    policy = CostAware(cost, paper_qwen32b_tp4(), **kw)
    rng = np.random.default_rng(seed)
    ctx = rng.integers(200, 6000, b)
    d = policy.decide(BatchView(b, tuple(ctx.tolist())))
    for _ in range(40):
        n = d.hold if d.hold < 1 << 20 else 1
        policy.observe(Outcome(d.config, b, round(b * n * (1 + rate)), 1e-3 * n, d.config.verify_tokens * b * n,
                               round(rate * n * b), 0.0, 0, n, (rate * n,) * b))
        ctx = ctx + n
        d = policy.decide(BatchView(b, tuple(ctx.tolist())))
    assert d.config.enabled and policy.held_hold() is not None
    return policy, d.config, ctx.astype(np.int64)


@pytest.mark.parametrize("cost", [COST, ModelFreeDraftCost(COST)], ids=["roofline", "model-free"])
@pytest.mark.parametrize("recheck", [4, 32])
@pytest.mark.parametrize("seed", range(8))
def test_held_ahead_is_the_rounds_up_to_where_it_stops(seed, recheck, cost) -> None:
    rng = np.random.default_rng(100 + seed)
    taken = stopped = exact = 0
    for case in range(6):
        rate = float(rng.uniform(3.0, 4.5))  # where SD keeps paying
        policy, config, ctx = _on(cost, seed * 10 + case, int(rng.integers(8, 40)), rate, recheck=recheck)
        if case % 2:  # as if renting a losing SD until now: the first evaluation that stays on clears the loss
            policy._loss = float(rng.uniform(1e-4, 1e-3))
        assert isinstance(policy, HoldsAhead) and holds_ahead(policy) is policy and policy.held_cost() is cost
        h = policy.held_hold()
        views, outcomes = _spans(rng, ctx, h, int(rng.integers(1, 24)), config, rate)
        views = [v for v in views if v.batch_size > 0]
        outcomes = outcomes[:len(views) + 1]
        # the rounds, with the state before each decide
        rounds = copy.deepcopy(policy)
        rounds.observe(outcomes[0])
        before, stop = [], len(outcomes)
        for j in range(1, len(outcomes)):
            before.append(copy.deepcopy(rounds))
            d = rounds.decide(views[j - 1])
            if not (d.config is rounds._choice and d.config == config and d.hold == h and not d.switch_on):
                stop = j
                break
            rounds.observe(outcomes[j])
        sums = np.array([_sums(cost, np.asarray(v.context_lens, dtype=np.int64)) for v in views[:len(outcomes) - 1]],
                        dtype=np.int64).reshape(-1, 3)
        held = copy.deepcopy(policy)
        m = held.held_ahead(held.candidates[policy.candidates.index(config)], outcomes, sums[:, 0], sums[:, 1],
                            sums[:, 2])
        assert 1 <= m <= stop
        want = rounds if m == len(outcomes) else before[m - 1]
        assert _state(held) == _state(want)
        taken += m
        stopped += m < len(outcomes)
        exact += m == stop
    assert taken > 12 and exact >= 4  # more than the first span, and mostly as far as the rounds went


def test_the_stacked_estimates_are_the_rounds_floats() -> None:
    policy, config, _ = _on(COST, 3, 12, 3.5)
    rng = np.random.default_rng(4)
    reqs = rng.integers(1, 400, 30).astype(np.int64)
    accepted = rng.uniform(0, 900, 30)
    ahead, grams, moments = policy._estimate.observations_ahead(config, reqs, accepted)
    est = copy.deepcopy(policy._estimate)
    for j in range(31):
        assert ahead[j].tolist() == list(est.accept_lengths())
        if j < 30:
            est.observe(config, int(reqs[j]), float(accepted[j]))
            assert grams[j].tolist() == est._gram.tolist() and moments[j].tolist() == est._moment.tolist()


@pytest.mark.parametrize("cost", [COST, ModelFreeDraftCost(COST)], ids=["roofline", "model-free"])
def test_prices_from_sums_are_the_iteration_times(cost) -> None:
    rng = np.random.default_rng(5)
    rows = [rng.integers(1, 9000, int(rng.integers(1, 300))).astype(np.int64) for _ in range(40)]
    sums = np.array([_sums(cost, r) for r in rows], dtype=np.int64)
    sd = cost.paged_kv_times().sd_many_from_sums(sums[:, 1], sums[:, 2], sums[:, 0], DEFAULT_CANDIDATES)
    plain = cost.paged_kv_times().decode_times_from_sums(sums[:, 1], sums[:, 2], sums[:, 0])
    for j, r in enumerate(rows):
        times, decode = cost.iteration_times(r, DEFAULT_CANDIDATES)
        assert sd[j].tolist() == times and plain[j] == decode


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize(("name", "spec"), [("aime_qwen7b_64xh100", "cost-aware"),
                                            ("aime_qwen7b_64xh100", "cost-aware:recheck=5:switch=catch_up"),
                                            ("dapo_qwen32b_polytrace", "cost-aware")])
def test_a_simulation_with_the_hint_is_the_reference(name, spec, mode) -> None:
    s = resolve(name, [("acceptance.mode", mode, "test"), ("trace.prompts_per_step", 24, "test")]).scenario
    inputs = prepare(s)
    calls = []
    real_ahead, real_decide = CostAware.held_ahead, CostAware.decide

    def counted(self, config, outcomes, *rest):
        m = real_ahead(self, config, outcomes, *rest)
        calls.append((m, len(outcomes)))
        return m

    def run(inputs, views: dict) -> pd.DataFrame:
        def recorded(self, view):  # every view each policy is shown, by policy in the order they were built
            views.setdefault(id(self), []).append(view)
            return real_decide(self, view)

        with mock.patch.object(CostAware, "held_ahead", counted), mock.patch.object(CostAware, "decide", recorded):
            return run_policy(s, spec, inputs)

    fast_views: dict = {}
    slow_views: dict = {}
    fast = run(inputs, fast_views)
    slow = run(replace(inputs, engine=replace(inputs.engine, fast=False)), slow_views)
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert sum(m for m, _ in calls) > 2 * len(calls)  # many spans per call
    assert any(m < k for m, k in calls)  # and it stopped where the answer changed
    # the views the policy was still shown are the reference's, field for field (the recent-accept estimate
    # and the clock after spans taken by the hint included), in order
    assert len(fast_views) == len(slow_views)
    for got, want in zip(fast_views.values(), slow_views.values(), strict=True):
        it = iter(want)
        assert all(any(view == w for w in it) for view in got)
        assert len(got) < len(want)


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
def test_responses_finish_when_and_as_the_reference_has_them(mode) -> None:
    """What the event log does not show: each response's finish time and length (the spot trainer's
    data coverage reads them), in finishing order, are the reference's with the hint."""
    from tltsim.rollout import RolloutRun
    from tltsim.scenario.build import make_policies

    s = resolve("aime_qwen7b_64xh100", [("acceptance.mode", mode, "test"),
                                        ("trace.prompts_per_step", 24, "test")]).scenario
    inputs = prepare(s)

    def finished(fast: bool) -> tuple[np.ndarray, np.ndarray]:
        engine = replace(inputs.engine, fast=fast)
        run = RolloutRun(make_policies(as_spec("cost-aware"), replace(inputs, engine=engine)), cost=inputs.cost,
                         accept=inputs.accept, engine=engine, seed=s.seed, deal_mode=s.trace.deal)
        res = run.step(inputs.workloads[0])
        return res.response_finish, res.response_tokens

    (t_fast, n_fast), (t_slow, n_slow) = finished(True), finished(False)
    assert len(t_fast) == sum(len(w.response_tokens) for w in inputs.workloads[:1])
    assert t_fast.tolist() == t_slow.tolist() and n_fast.tolist() == n_slow.tolist()
