"""cost-aware: switches SD on wherever the gain over the live requests' remaining work pays for the
switch (any batch size), turns it off when admissions make it a loss, picks shapes by predicted
throughput from an acceptance it learns online, and keeps the hold contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rollout_fixtures import LinearCost, Work

from conftest import needs_shared_traces
from tltcore.acceptance import ChainAcceptance, get_acceptance, paper_qwen32b_tp4
from tltcore.cost import RooflineCostModel
from tltcore.cost.protocol import CostModelBase, PerConfigSDTimes
from tltcore.errors import InputError
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import NO_SD, BatchView, Decision, Outcome, SDConfig
from tltcore.policy.cost_aware import CostAware
from tltcore.policy.cost_aware_plan import Drain
from tltcore.policy.registry import make_policy
from tltsim.rollout import EngineConfig, simulate_step

QWEN7B_H100 = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("H100"), tp=4)
CPU_TABLE = Path(__file__).resolve().parents[2] / "reports" / "validation" / "cpu" / "cost_table.parquet"


def _sim(spec: str, work: Work, accept, *, cost=QWEN7B_H100, **engine):
    policy = make_policy(spec, accept_model=accept, cost_model=cost)
    return simulate_step(work, policies=[policy], cost=cost, accept=accept, engine=EngineConfig(**engine), seed=0)


def _capped(n: int, length: int) -> Work:
    """``n`` responses that all run to the cap: the batch never falls below ``n`` until the end."""
    return Work(0, np.arange(n), np.full(n, 200, dtype=np.int64), np.full(n, length, dtype=np.int64))


def test_switches_on_above_the_elastic_threshold_where_sd_pays() -> None:
    """The issue's failure: 48 capped responses keep the batch above TLT's threshold of 32, so its
    elastic switch never fires (exactly no-SD); cost-aware switches at batch 48 and gains > 20%."""
    work, accept = _capped(48, 3000), paper_qwen32b_tp4()
    plain = _sim("no-sd", work, accept).makespan
    assert _sim("elastic+beg-mab", work, accept).makespan == plain
    ours = _sim("cost-aware", work, accept)
    assert ours.makespan < 0.8 * plain
    decode = ours.events.query("kind == 'decode'")
    assert (decode["sd_config"] != "off").any() and decode["batch_size"].max() == 48


def test_never_speculates_when_drafts_are_useless() -> None:
    work, useless = _capped(16, 1500), get_acceptance("chain-0.0")
    ours = _sim("cost-aware", work, useless)
    # the same iterations; only the plain spans are cut elsewhere (cost-aware's backed-off rechecks hold
    # longer), so the closed-form span sums may differ in the last bit
    assert ours.makespan == pytest.approx(_sim("no-sd", work, useless).makespan, rel=1e-12)
    assert set(ours.events.query("kind == 'decode'")["sd_config"]) == {"off"}


class BatchCost(PerConfigSDTimes):
    """SD pays 30% below ``loss_at`` requests and loses 2x from there on; prefills cost
    ``prefill_s`` per token (the switch's price)."""

    def __init__(self, prefill_s: float = 1e-3, loss_at: int = 100) -> None:
        self.prefill_s, self.loss_at = prefill_s, loss_at

    def decode_time(self, ctx: np.ndarray) -> float:
        return 0.01

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        return 0.01 * (1 + config.depth) / (1.3 if len(ctx) < self.loss_at else 0.5)

    def prefill_time(self, new: np.ndarray, cached: np.ndarray) -> float:
        return self.prefill_s * float(np.sum(new))

    def drafter_prefill_time(self, new: np.ndarray, cached: np.ndarray) -> float:
        return 0.1 * self.prefill_s * float(np.sum(new))


class ContextCost(BatchCost):
    """SD pays 30% once contexts reach 600 tokens and loses 2x before, at any batch size."""

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        return 0.01 * (1 + config.depth) / (1.3 if float(np.mean(ctx)) >= 600 else 0.5)


PERFECT_CHAIN = (SDConfig.chain(2),)  # accepts everything: 3 tokens per iteration, cost 3x / 1.3


def _policy(cost: BatchCost, **kw) -> CostAware:
    return CostAware(cost, ChainAcceptance((1.0,)), candidates=PERFECT_CHAIN, **kw)


def _view(b: int, ctx: int, remaining: int | None = None) -> BatchView:
    return BatchView(b, (ctx,) * b, remaining_hint=() if remaining is None else (float(remaining),) * b)


def _plain(policy: CostAware, view: BatchView, n: int = 1) -> None:
    for _ in range(n):
        assert policy.decide(view).config == NO_SD
        policy.observe(Outcome(NO_SD, view.batch_size, view.batch_size, 0.01))


def _sd(policy: CostAware, view: BatchView) -> Decision:
    d = policy.decide(view)
    if d.config.enabled:
        b = view.batch_size
        policy.observe(Outcome(d.config, b, 3 * b, 0.02, 2 * b, 2 * b, accepted_per_request=(2.0,) * b))
    return d


def test_first_decision_of_a_step_switches_on_without_a_reprefill() -> None:
    """At a step's first decision the engine's drafter catch-up prefills the new prompts anyway: no
    switch_on (which would re-prefill the target too), and again after reset."""
    policy = _policy(BatchCost())
    for step in (0, 1):
        policy.reset(step)
        d = policy.decide(_view(8, 300))
        assert d.config == SDConfig.chain(2) and not d.switch_on


def test_first_decision_rents_sd_that_loses_now_until_the_loss_pays_for_a_switch_back() -> None:
    """Batch 200 makes SD lose 0.03 s per iteration, but a lone request gains: the tail will want SD
    and a later switch re-prefills, so it starts on and stays until the loss (0.03 s per SD
    iteration) reaches the re-prefill of 200 x 300 tokens (0.066 s): three iterations."""
    policy = _policy(BatchCost(prefill_s=1e-6), recheck=1)
    view = _view(200, 300)
    configs = [_sd(policy, view).config for _ in range(5)]
    assert configs == [SDConfig.chain(2)] * 3 + [NO_SD] * 2
    useless = CostAware(BatchCost(prefill_s=1e-6), ChainAcceptance((0.0,)), candidates=PERFECT_CHAIN)
    assert useless.decide(view).config == NO_SD  # drafts that never pay: nothing to rent


def test_the_rent_is_checked_where_its_budget_runs_out_not_a_recheck_window_later() -> None:
    """The same rent with the default recheck (32): the first decision holds SD for exactly the three
    iterations the budget buys (0.066 s / 0.03 s per iteration, rounded up), then it is off. A policy
    that held the recheck window lost ~10% of a CPU validation step (32 losing SD iterations)."""
    policy = _policy(BatchCost(prefill_s=1e-6))
    view = _view(200, 300)
    first = policy.decide(view)
    assert first.config == SDConfig.chain(2) and first.hold == 3
    policy.observe(Outcome(first.config, 200, 1800, 0.06, 1200, 1200, iterations=3, accepted_per_request=(6.0,) * 200))
    assert policy.decide(view).config == NO_SD


def test_no_rent_when_switching_back_costs_less_than_one_losing_iteration() -> None:
    """With a switch back that is nearly free (the native engine's catch-up of 300-token prompts, priced
    at a millionth of the re-prefill) renting cannot pay: the first decision follows the plan and stays
    off, where SD loses now. On the CPU validation this rent cost 2 SD iterations and a drafter catch-up
    per step for nothing. A budget just above one iteration's loss rents again."""
    view = _view(200, 300)
    assert _policy(BatchCost(prefill_s=1e-12), switch="catch_up").decide(view).config == NO_SD
    assert _policy(BatchCost(prefill_s=1e-12)).decide(view).config == NO_SD  # re-prefill of ~nothing: same
    assert _policy(BatchCost(prefill_s=1e-6)).decide(view).config == SDConfig.chain(2)  # 0.066 s > 0.03 s


def test_no_rent_where_a_later_switch_costs_what_switching_on_now_does() -> None:
    """The rent insures against the *extra* price of switching on after plain iterations. A catch-up
    prefills the drafter over the same prompts now or later (here 6 s, far above one iteration's 0.03 s
    loss), so it insures nothing and the first decision stays off; a re-prefill adds the target's
    prefill and rents; ``in_step`` never lags. The CPU validation's first decision had rented 2 SD
    iterations at batch 32 (0.019 s per step) against its catch-up's full price."""
    view = _view(200, 300)
    assert _policy(BatchCost(prefill_s=1e-3), switch="catch_up").decide(view).config == NO_SD
    assert _policy(BatchCost(prefill_s=1e-3), switch="in_step").decide(view).config == NO_SD
    assert _policy(BatchCost(prefill_s=1e-3), switch="reprefill").decide(view).config == SDConfig.chain(2)


class LongContextCost(BatchCost):
    """As :class:`BatchCost`, but a large batch's SD pays 3x once its contexts reach 1,000 tokens (KV
    reads dominate)."""

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        if len(ctx) >= self.loss_at and float(np.mean(ctx)) >= 1000:
            return 0.01 * (1 + config.depth) / 3.0
        return super().sd_time(ctx, config)


def test_the_rent_insures_only_what_the_whole_batch_running_to_the_cap_would_repay() -> None:
    """A rent saves a later re-prefill of the live contexts, which is dear only while the batch is
    large. At batch 200 SD loses now and pays for a lone request. With a response cap of 5,000 the
    whole batch would reach 1,000-token contexts, where SD pays at any batch size and switching on
    then would re-prefill 200 long contexts: the policy starts on and rents. With a cap of 600 no
    context can get there, SD pays only once the batch has drained (a cheap switch), and it starts
    off; on DeepCoder 7B 16xH20 that rent had lasted the whole step (+9% over no SD). Without a known
    cap it rents, as before."""
    view = _view(200, 300)
    rented = SDConfig.chain(2)
    assert _policy(LongContextCost(prefill_s=1e-3), response_cap=5000).decide(view).config == rented
    assert _policy(LongContextCost(prefill_s=1e-3), response_cap=600).decide(view).config == NO_SD
    assert _policy(LongContextCost(prefill_s=1e-3)).decide(view).config == rented
    assert _policy(BatchCost(prefill_s=1e-3), response_cap=10**6).decide(view).config == NO_SD  # never at b=200
    assert make_policy("cost-aware", cost_model=BatchCost(), response_cap=700).response_cap == 700
    with pytest.raises(Exception, match="response_cap"):
        _policy(BatchCost(), response_cap=0)


def _earn_a_switch(cap: int | None, *, join: bool = False) -> Decision:
    """Contexts too short for SD at the first decision (it starts off), then 2 requests at contexts where
    SD pays 30%: the re-prefill (0.77 s) is earned after ~335 plain iterations. ``join``: a third request
    joins once."""
    policy = _policy(ContextCost(prefill_s=5e-4), response_cap=cap)
    _plain(policy, _view(2, 300))
    if join:
        _plain(policy, _view(3, 700))
    d = policy.decide(_view(2, 700))
    for _ in range(400):
        if d.config.enabled:
            return d
        policy.observe(Outcome(NO_SD, 2, 2, 0.01))
        d = policy.decide(_view(2, 700))
    return d


def test_the_cap_bounds_the_predicted_remaining_work_while_no_request_joined() -> None:
    """A switch earned near the response cap buys SD for the few tokens the cap leaves: with a cap of
    400, after ~350 plain iterations every request (all started at the first decision) has at most
    ~50 tokens left, which cannot repay the re-prefill, so it stays off. Without a cap the doubling
    predictor expects 700 more tokens and switches on, as it does with a far cap, or when a request has
    joined since (its own count is unknown, so the cap says nothing about it). On Search-R1 (3k cap)
    32B 64xH20 such a switch at batch 2, 62 tokens before the cap, was the one run slower than no SD."""
    assert _earn_a_switch(None).switch_on
    assert not _earn_a_switch(400).config.enabled
    assert _earn_a_switch(5000).switch_on
    assert _earn_a_switch(400, join=True).switch_on


class _PlansWhenIdle(CostAware):
    """Reference: at every idle evaluation (off after plain iterations, no switch earned) also prices the
    plan the policy skips and records whether the switch rule -- a rent (none after plain iterations) or a
    plan that switches on now with the switch earned -- would have turned SD on; and counts the plans the
    policy itself priced at idle evaluations."""

    idle_plans: list[bool]
    plans_when_idle = 0
    _plans = 0

    def _plan(self, *args):
        self._plans += 1
        return super()._plan(*args)

    def _evaluate(self, view: BatchView) -> None:
        before = self._plans
        super()._evaluate(view)
        if self._idle:
            self.plans_when_idle += self._plans - before
            ctx = self._contexts(view)
            off_now, on_now = self._plan(ctx, self._remaining(view, ctx), self._accept_lengths())
            self.idle_plans.append(on_now < off_now and self._earned(False, ctx))


def test_a_policy_off_with_no_switch_earned_skips_the_plan_and_decides_the_same() -> None:
    """Off after plain iterations and no switch earned, no plan can turn SD on, so the policy does not
    price one (a re-plan is ~100 cost lookups, a CPU engine iteration's worth): at every such evaluation
    the full rule, plan priced, would have stayed off too, and the switch is still earned later."""
    policy = _PlansWhenIdle(ContextCost(prefill_s=1e-7))
    policy.idle_plans = []
    names = []
    for ctx in range(100, 1400, 20):  # contexts grow past where SD pays: the switch is earned late
        d = _sd(policy, _view(16, ctx)) if policy._on else policy.decide(_view(16, ctx))
        if not d.config.enabled:
            policy.observe(Outcome(NO_SD, 16, 16, 0.01))
        names.append(d.config.name)
    assert "off" in names and names[-1] != "off"
    assert policy.idle_plans and not any(policy.idle_plans)  # skipped plans, none of which would switch on
    assert policy.plans_when_idle == 0


def _counting(policy: CostAware) -> list[int]:
    """The batch sizes at which ``policy`` evaluates from now on."""
    priced: list[int] = []
    evaluate = policy._evaluate

    def counted(view: BatchView) -> None:
        priced.append(view.batch_size)
        evaluate(view)

    policy._evaluate = counted  # type: ignore[method-assign]
    return priced


def test_an_idle_policy_prices_a_shrinking_batch_once_per_recheck_and_a_growing_one_at_once() -> None:
    """Off with no switch earned (idle), a request finishing changes only the priced forgone saving,
    so the policy waits for the recheck instead of pricing a dozen shapes per finished request (on the
    CPU engine that was 1-1.5% of a step); an admission past the priced size makes SD dearer and is
    priced at once. Before the step's first plain iteration nothing is idle: every change is priced.
    SD pays here at every size (no back-off), but switching is dear: the regret grows slowly."""
    policy = _policy(BatchCost(prefill_s=1e-1, loss_at=10_000), switch="catch_up", recheck=8)
    priced = _counting(policy)
    _plain(policy, _view(300, 30))
    policy.observe(Outcome(NO_SD, 300, 300, 0.01))  # plain ran: idle from the next evaluation on
    for b in range(299, 280, -1):  # a request finishes every iteration
        _plain(policy, _view(b, 30))
    assert priced == [300, 299, 291, 283]  # the first decision, the first idle one, then every 8
    assert policy._saving > 0 and policy._idle
    _plain(policy, _view(284, 30))  # admissions: past the 283 last priced
    assert priced == [300, 299, 291, 283, 284]


def test_an_idle_policy_where_sd_loses_backs_its_rechecks_off() -> None:
    """Idle and SD losing outright (nothing forgone, so the regret cannot grow): the rechecks back off
    to 2, 4, then 8 x recheck iterations; the first evaluation that prices a saving ends the back-off."""
    policy = _policy(BatchCost(prefill_s=1e-3, loss_at=100), switch="catch_up", recheck=4)
    priced = _counting(policy)
    for b in range(300, 150, -1):
        _plain(policy, _view(b, 300))
    assert priced == [300, 299, 291, 275, 243, 211, 179]  # +8, +16, +32, then +32 (8 x recheck)
    for b in range(150, 75, -1):  # SD pays below 100 requests: found at the next recheck, then every 4
        _plain(policy, _view(b, 300))
    assert priced[7:] == [147, 115, 83, 79]
    assert policy._saving > 0


@pytest.mark.parametrize(("switch", "prefill_s", "switches"), [
    # 700 tokens left each: 7.0 s plain, 5.4 s with SD
    ("reprefill", 1e-4, True),   # re-prefilling 8 x 700 tokens (target + drafter) costs 0.6 s < 1.6 s saved
    ("reprefill", 1e-3, False),  # ten times dearer (6.2 s): it does not pay
    ("in_step", 1e-3, True),     # the drafter never lags: switching is free
])
def test_mid_step_switch_weighs_its_cost_and_sets_switch_on(switch: str, prefill_s: float, switches: bool) -> None:
    policy = _policy(BatchCost(prefill_s), switch=switch, lengths="known")
    _plain(policy, _view(200, 500, remaining=2), 3)  # a large batch about to end: it stays off
    d = policy.decide(_view(8, 700, remaining=700))  # the batch shrank; SD pays 30% per iteration
    assert d.config.enabled == switches
    assert d.switch_on == switches  # plain iterations ran: the engine must bring the drafter up to date
    if switches:
        policy.observe(Outcome(d.config, 8, 24, 0.1, 16, 16, iterations=1))
        assert not policy.decide(_view(7, 701, remaining=699)).switch_on  # once


def test_without_known_lengths_a_mid_step_switch_is_earned() -> None:
    """Ski rental: contexts short at the step's start (SD loses even alone, so it starts off), then
    long enough that SD pays 0.0023 s per plain iteration; the plan wants SD at once, but the switch
    (8 x 700 tokens, 0.062 s) waits until the plain iterations since have forgone that much: 27.
    Known lengths switch at once."""
    cost = ContextCost(prefill_s=1e-5)
    waited = {}
    for lengths in ("predicted", "known"):
        policy = _policy(cost, recheck=1, lengths=lengths)
        _plain(policy, _view(8, 300, remaining=300), 1)
        n = 0
        while not (d := policy.decide(_view(8, 700, remaining=700))).config.enabled and n < 100:
            policy.observe(Outcome(NO_SD, 8, 8, 0.01))
            n += 1
        assert d.switch_on
        waited[lengths] = n
    assert waited == {"predicted": 27, "known": 0}


def test_turns_off_when_admissions_make_sd_a_loss() -> None:
    policy = _policy(BatchCost(prefill_s=1e-4), lengths="known")
    assert _sd(policy, _view(8, 300, remaining=600)).config.enabled
    assert policy.decide(_view(200, 300, remaining=300)).config == NO_SD  # admissions: SD now loses 2x
    policy.observe(Outcome(NO_SD, 200, 200, 0.01))
    assert policy.decide(_view(8, 900, remaining=900)).switch_on  # back on later: it pays the switch again


def test_learns_per_position_acceptance_online_and_shares_it_across_batch_sizes() -> None:
    """Prior: every position accepted with 0.9; truth: 0.5. Outcomes of chains 1..8 at batch 64
    teach the per-position scales; the prediction for every chain moves to the truth, and the
    choice at batch 1 (never observed) moves from the longest chain to a shorter one."""
    prior, truth = ChainAcceptance((0.9,)), ChainAcceptance((0.5,))
    cost = LinearCost()
    chains = tuple(SDConfig.chain(k) for k in range(1, 9))
    policy = CostAware(cost, prior, candidates=chains)
    before = policy.decide(BatchView(1, (1000,))).config
    assert before == SDConfig.chain(8)
    for _ in range(100):
        for c in chains:
            acc = 64 * (truth.expected_accept_length(c) - 1)
            policy.observe(Outcome(c, 64, round(64 + acc), 0.05, c.depth * 64, round(acc),
                                   accepted_per_request=(acc / 64,) * 64))
    for c in chains:
        assert policy.accept_length(c) == pytest.approx(truth.expected_accept_length(c), rel=0.02)
    policy.reset(1)
    after = policy.decide(BatchView(1, (1000,))).config
    assert after.depth < before.depth


class Growing(PerConfigSDTimes):
    """The best chain shortens as contexts grow, so when the policy re-evaluates matters."""

    def decode_time(self, ctx):
        return 0.01

    def sd_time(self, ctx, config):
        return 0.01 * (1 + 0.02 * config.depth * (1 + float(np.mean(ctx)) / 50))

    def prefill_time(self, new, cached):
        return 1e-4 * float(np.sum(new))

    def drafter_prefill_time(self, new, cached):
        return 1e-5 * float(np.sum(new))


SPAN_CASES = {
    # learning and the shape choice: on throughout, the best chain shortening as contexts grow
    "shapes": (lambda: CostAware(Growing(), ChainAcceptance((0.8,)),
                                 candidates=tuple(SDConfig.chain(k) for k in range(1, 9)), recheck=7), 100),
    # the earned switch: off at 300-token contexts, SD paying from 600 on, the forgone saving adding up
    "earned": (lambda: _policy(ContextCost(prefill_s=1e-5), recheck=7), 300),
}


@pytest.mark.parametrize("case", sorted(SPAN_CASES))
def test_a_span_leaves_the_state_of_single_rounds(case: str) -> None:
    """The hold contract: running each decision for its whole hold and reporting one Outcome per
    span gives the same per-iteration configs and the same state as one round per iteration."""
    make, start = SPAN_CASES[case]

    def run(spans: bool) -> tuple[list[SDConfig], dict]:
        policy = make()
        configs: list[SDConfig] = []
        ctx = start
        while len(configs) < 400:
            b = 6 - sum(len(configs) >= e for e in (50, 120))  # a request finishes at iterations 50 and 120
            d: Decision = policy.decide(BatchView(b, (ctx,) * b))
            upto = next(e for e in (50, 120, 400) if e > len(configs))
            n = min(d.hold, upto - len(configs)) if spans else 1
            configs += [d.config] * n
            ctx += n
            acc = b * n if d.config.enabled else 0  # one draft token accepted per request and iteration
            policy.observe(Outcome(d.config, b, b * n + acc, 0.01 * n, d.config.depth * b * n, acc, iterations=n,
                                   accepted_per_request=(acc / b,) * b if acc else ()))
        state = {k: v for k, v in vars(policy).items() if k.startswith("_") and isinstance(v, (bool, int, float))}
        return configs, {**state, "scales": policy.scales().tolist()}

    (spans, s1), (single, s2) = run(True), run(False)
    assert len(set(single)) > 1  # the choice does change along the way
    assert spans == single
    assert s1.keys() == s2.keys() and all(s1[k] == pytest.approx(s2[k], rel=1e-12) for k in s1)


def test_known_lengths_reach_only_a_policy_that_asks() -> None:
    seen: dict[str, list[tuple[float, ...]]] = {}

    class Spy:
        def __init__(self, name: str, wants: bool) -> None:
            self.name, self.wants_remaining_hint = name, wants
            seen[name] = []

        def decide(self, view):
            seen[self.name].append(view.remaining_hint)
            return Decision(NO_SD)

        def observe(self, outcome):
            return None

        def reset(self, step):
            return None

    work = Work(0, np.arange(3), np.array([10, 20, 30]), np.array([5, 9, 12]))
    for name, wants in (("asks", True), ("silent", False)):
        simulate_step(work, policies=[Spy(name, wants)], cost=LinearCost(), accept=None, engine=EngineConfig(), seed=0,
                      deal_mode="trace")
    assert seen["asks"][0] == (4.0, 8.0, 11.0)  # responses minus the token prefill emitted
    assert seen["asks"][-1] == (1.0,)
    assert all(h == () for h in seen["silent"])


def test_elastic_passes_the_known_lengths_through_to_its_inner_policy() -> None:
    """``elastic:2:1+cost-aware:lengths=known`` must see what the bare policy sees once switched on: the
    switch wrapper asks for the hint on its inner policy's behalf (and only then)."""
    from tltcore.policy.elastic import Elastic

    seen: list[tuple[float, ...]] = []

    class Spy:
        name, wants_remaining_hint = "spy", True

        def decide(self, view):
            seen.append(view.remaining_hint)
            return Decision(NO_SD)

        def observe(self, outcome):
            return None

        def reset(self, step):
            return None

    assert make_policy("elastic:8+cost-aware:lengths=known", cost_model=LinearCost()).wants_remaining_hint
    assert not make_policy("elastic:8+cost-aware", cost_model=LinearCost()).wants_remaining_hint
    assert not make_policy("elastic:8+beg-mab").wants_remaining_hint
    work = Work(0, np.arange(3), np.array([10, 20, 30]), np.array([5, 9, 12]))
    simulate_step(work, policies=[Elastic(Spy(), threshold=2, consecutive=1)], cost=LinearCost(), accept=None,
                  engine=EngineConfig(), seed=0, deal_mode="trace")
    assert seen and all(len(h) == len(seen[0]) for h in seen[:1]) and seen[-1] == (1.0,)


@needs_shared_traces()  # it loads a bundled scenario, whose trace lives in ../shared
def test_the_engines_switch_mode_is_the_default_a_spec_may_override() -> None:
    """The policy prices the switch the engine does: ``make_policy(..., switch=)`` (the simulator passes
    ``engine.switch``) sets cost-aware's default; ``switch=`` in the spec wins."""
    from tltsim.scenario import load_scenario, make_policies, prepare
    from tltsim.scenario.resolve import with_values

    assert make_policy("cost-aware", cost_model=LinearCost()).switch == "reprefill"
    assert make_policy("cost-aware", cost_model=LinearCost(), switch="catch_up").switch == "catch_up"
    assert make_policy("elastic+cost-aware", cost_model=LinearCost(), switch="in_step").inner.switch == "in_step"
    assert make_policy("cost-aware:switch=reprefill", cost_model=LinearCost(), switch="catch_up").switch == "reprefill"
    s = load_scenario("aime_qwen7b_64xh100")
    policies = make_policies("cost-aware", prepare(with_values(s, {"engine.switch": "catch_up"})))
    assert {p.switch for p in policies} == {"catch_up"}


def test_known_lengths_change_the_plan() -> None:
    """256 responses of 50 tokens at batch 256, where SD loses: with the trace's lengths the policy
    sees the step end before SD could pay and stays off; the predictor cannot, and rents SD."""
    work, accept = _capped(256, 50), paper_qwen32b_tp4()
    known = _sim("cost-aware:lengths=known", work, accept).events.query("kind == 'decode'")
    predicted = _sim("cost-aware", work, accept).events.query("kind == 'decode'")
    assert known["sd_config"].iloc[0] == "off"
    assert predicted["sd_config"].iloc[0] != "off"


def test_the_length_predictor_learns_across_steps() -> None:
    """SD pays only past 600-token contexts. Step 0 has only the doubling predictor (200-token
    prompts: as many again) and starts off; from step 1 on the earlier steps' mean length (3,000
    tokens, counted from what the policy saw) makes it speculate from the start."""
    from rollout_fixtures import LinearCost as Fixture

    from tltsim.rollout import RolloutRun

    class Cost(ContextCost, Fixture):
        def decode_time(self, ctx):
            return 0.01

        def decode_span_time(self, ctx, n):
            return 0.01 * n

    accept = ChainAcceptance((1.0,))
    policy = CostAware(Cost(prefill_s=1e-5), accept, candidates=PERFECT_CHAIN)
    run = RolloutRun([policy], cost=Cost(prefill_s=1e-5), accept=accept, engine=EngineConfig(max_batch=512))
    work = _capped(32, 3000)
    for step in (0, 1):
        run.step(Work(step, work.group_ids, work.prompt_tokens, work.response_tokens))
    decode = run.events().query("kind == 'decode'")
    first = decode.groupby("step")["sd_config"].first()
    assert first[0] == "off" and first[1] != "off"
    assert policy.mean_len == pytest.approx(3000, rel=0.01)


def test_spec_options_reach_the_policy_and_bad_ones_are_one_error() -> None:
    from tltcore.errors import InputError

    p = make_policy("cost-aware:switch=catch_up:lengths=known:recheck=4:phases=3:arms=4_1_4,8_4_16:memory=1",
                    cost_model=LinearCost())
    assert isinstance(p, CostAware) and p.wants_remaining_hint
    assert (p.switch, p.recheck, p.phases, p.memory) == ("catch_up", 4, 3, 1.0)
    assert p.candidates == (SDConfig(4, 1, 4), SDConfig(8, 4, 16))
    for bad in ("cost-aware:switch=never", "cost-aware:lengths=psychic", "cost-aware:recheck=0", "cost-aware:arms=off",
                "cost-aware:memory=2", "cost-aware:foo=1"):
        with pytest.raises(InputError, match="cost-aware"):
            make_policy(bad, cost_model=LinearCost())


@pytest.mark.parametrize("spec", ["cost-aware", "cost-aware:lengths=known:recheck=5"])
def test_engine_spans_equal_per_iteration_stepping(spec: str) -> None:
    """The hold contract end to end: the simulator running cost-aware's holds as spans gives the
    makespan of stepping one iteration per decision."""
    rng = np.random.default_rng(3)
    n = 96
    work = Work(0, np.repeat(np.arange(24), 4), rng.integers(50, 400, n),
                np.minimum(rng.lognormal(6.5, 1.0, n).astype(np.int64) + 1, 3000))
    accept = paper_qwen32b_tp4()

    def sim(spans: bool) -> float:
        policies = [make_policy(spec, accept_model=accept, cost_model=QWEN7B_H100) for _ in range(2)]
        engine = EngineConfig(max_batch=40, closed_form=spans, coalesce=spans)
        return simulate_step(work, policies=policies, cost=QWEN7B_H100, accept=accept, engine=engine, seed=1).makespan

    assert sim(True) == pytest.approx(sim(False), rel=1e-9)


def test_the_prior_is_the_acceptance_models_reach_or_its_mean_spread_evenly() -> None:
    """A positional acceptance model (the simulator's presets) gives the prior per position; a model
    with only an expected accept length has it spread evenly over the positions; none: ``prior**i``."""

    class MeanOnly:  # an acceptance model with no per-position reach
        def expected_accept_length(self, config: SDConfig, drafter: object = None) -> float:
            return 3.0

    chain4, tree = SDConfig.chain(4), SDConfig(6, 4, 16)
    positional = paper_qwen32b_tp4()
    ours = CostAware(QWEN7B_H100, positional, candidates=(chain4, tree))
    for c in (chain4, tree):
        assert np.array_equal(ours.prior_reach(c)[: c.depth], positional.reach(c))
    assert ours.accept_length(tree) == pytest.approx(positional.expected_accept_length(tree))
    even = CostAware(QWEN7B_H100, MeanOnly(), candidates=(chain4, tree)).prior_reach(chain4)
    assert np.allclose(even[: chain4.depth], 2.0 / chain4.depth) and not even[chain4.depth:].any()
    bare = CostAware(QWEN7B_H100, None, candidates=(chain4,), prior=0.5).prior_reach(chain4)
    assert np.allclose(bare, 0.5 ** np.arange(1, 5))


class _CountingCost(CostModelBase):
    """Delegates to ``inner`` and counts the shape pricings (``sd_times`` calls) a policy makes."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, 0

    def decode_time(self, ctx: np.ndarray) -> float:
        return self.inner.decode_time(ctx)

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        return self.inner.sd_time(ctx, config)

    def sd_times(self, ctx: np.ndarray, configs) -> list[float]:
        self.calls += 1
        return self.inner.sd_times(ctx, configs)

    def prefill_time(self, new: np.ndarray, cached: np.ndarray) -> float:
        return self.inner.prefill_time(new, cached)

    def drafter_prefill_time(self, new: np.ndarray, cached: np.ndarray) -> float:
        return self.inner.drafter_prefill_time(new, cached)


def _full_plan(policy: CostAware, ctx, remaining, acc, edges=None) -> tuple[float, float]:
    """The reference plan: every phase priced, then the dynamic program (no shortcut)."""
    drain = policy._drain(ctx, remaining, acc, edges)
    if drain is None:
        return 0.0, 0.0
    for k in range(drain.n):
        drain.price(k)
    return drain.totals(policy._on)


class _FullPlans(CostAware):
    """Cost-aware planning with every phase priced (the reference the shortcut is pinned to)."""

    def _plan(self, ctx, remaining, acc, edges=None) -> tuple[float, float]:
        return _full_plan(self, ctx, remaining, acc, edges)


@pytest.mark.parametrize("switch", ["reprefill", "catch_up"])
@pytest.mark.parametrize("gpu", ["H100", "H20"])
def test_a_plan_whose_first_phase_shows_switching_now_dominated_stops_there_and_decides_the_same(
        switch: str, gpu: str) -> None:
    """Off, waiting a phase and then doing what switching now would do costs plain[0] + switch[1] +
    the rest, switching now switch[0] + sd[0] + the same rest: where waiting is no dearer the plan stops
    after its first phase. Whole steps (long and short, capped and mixed responses, where SD pays and
    where it loses) run event for event as with every phase priced; the shortcut fires where SD loses
    at the full batch and the switch is a cheap catch-up (the native engine's case on the CPU)."""
    cost = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu(gpu), tp=1)
    rng = np.random.default_rng(3)
    mixed = Work(0, np.arange(96), rng.integers(100, 2000, 96), rng.lognormal(6.5, 1.2, 96).astype(np.int64) + 1)
    works = [_capped(48, 3000), _capped(200, 400), mixed]
    pricings = {}
    for skip in (True, False):
        runs, calls = [], 0
        for work in works:
            counted = _CountingCost(cost)
            policy = (CostAware if skip else _FullPlans)(counted, paper_qwen32b_tp4(), switch=switch)
            res = simulate_step(work, policies=[policy], cost=cost, accept=paper_qwen32b_tp4(),
                                engine=EngineConfig(switch=switch, max_batch=64), seed=0)
            runs.append(res.events)
            calls += counted.calls
        pricings[skip] = (runs, calls)
    for fast, full in zip(pricings[True][0], pricings[False][0], strict=True):
        assert fast.equals(full)
    if (gpu, switch) == ("H20", "catch_up"):  # SD loses at the full batch and a later switch costs little
        assert pricings[True][1] < pricings[False][1]  # it fired: fewer shapes priced
    else:  # a later re-prefill dwarfs the first phase's loss, or SD pays now: every phase is needed
        assert pricings[True][1] == pricings[False][1]


@pytest.mark.parametrize("switch", ["reprefill", "catch_up"])
def test_the_shortcut_plan_orders_on_and_off_as_the_full_plan_does(switch: str) -> None:
    """Random batches (contexts around where SD starts to pay, remaining lengths spread, before and
    after plain iterations, switches cheap and dear): whether switching on now beats staying off is
    the same with the dominated-plan shortcut as with every phase priced, and the shortcut is taken."""
    rng = np.random.default_rng(5)
    taken = 0
    for trial in range(300):
        counted = _CountingCost(ContextCost(prefill_s=float(10 ** rng.uniform(-8, -4))))
        policy = CostAware(counted, ChainAcceptance((1.0,)), candidates=PERFECT_CHAIN, switch=switch)
        policy._ran_plain = bool(trial % 2)
        b = int(rng.integers(1, 64))
        ctx = rng.integers(200, 900, b).astype(np.int64)
        remaining = rng.lognormal(5.5, 1.0, b)
        acc = policy._accept_lengths()
        orders = []
        for skip in (False, True):
            before = counted.calls
            off, on = policy._plan(ctx, remaining, acc) if skip else _full_plan(policy, ctx, remaining, acc)
            orders.append((on < off, off <= on))
            taken += skip and counted.calls - before == 1
        assert orders[0] == orders[1], trial
    assert taken > 30


def test_the_prior_accept_lengths_are_shared_per_prior_and_equal_a_policys_own() -> None:
    """Before any SD outcome a policy's accept lengths are the prior's: computed once per (acceptance
    model, candidates, prior) and shared, each the very float a policy derives alone; different priors
    or candidates never share, and a policy that has seen an SD outcome derives its own."""
    chain4, tree = SDConfig.chain(4), SDConfig(6, 4, 16)
    model = paper_qwen32b_tp4()

    def own(policy: CostAware) -> tuple[float, ...]:
        return tuple(policy.accept_length(c) for c in policy.candidates)

    first = CostAware(QWEN7B_H100, model, candidates=(chain4, tree))
    again = CostAware(QWEN7B_H100, paper_qwen32b_tp4(), candidates=(chain4, tree))  # an equal model
    assert first._accept_lengths() == own(first)
    assert again._accept_lengths() is first._accept_lengths()
    fewer = CostAware(QWEN7B_H100, model, candidates=(chain4,))
    assert fewer._accept_lengths() == own(fewer) == first._accept_lengths()[:1]  # a memo entry of its own
    weaker = CostAware(QWEN7B_H100, ChainAcceptance((0.5,)), candidates=(chain4, tree))
    assert weaker._accept_lengths() == own(weaker) and weaker._accept_lengths()[0] < first._accept_lengths()[0]
    bare = [CostAware(QWEN7B_H100, None, candidates=(chain4,), prior=p)._accept_lengths() for p in (0.3, 0.8)]
    assert bare[0] != bare[1]
    first.observe(Outcome(config=chain4, batch_size=8, emitted_tokens=8, elapsed_s=0.01, accepted_tokens=0))
    learnt = first._accept_lengths()
    assert learnt == own(first) and learnt[0] < again._accept_lengths()[0]  # it saw nothing accepted
    first.reset(1)
    assert first._accept_lengths() == own(first) != again._accept_lengths()  # the decayed statistics remain


def test_a_model_without_reach_derives_its_prior_per_policy() -> None:
    """Only models whose reach is a function of their value share the prior's accept lengths: a policy
    built on a model without one (which may change between policies) derives them itself."""

    class Mutable:
        mean = 3.0

        def expected_accept_length(self, config: SDConfig, drafter: object = None) -> float:
            return self.mean

    model = Mutable()
    first = CostAware(QWEN7B_H100, model, candidates=(SDConfig.chain(4),))._accept_lengths()
    model.mean = 2.0
    second = CostAware(QWEN7B_H100, model, candidates=(SDConfig.chain(4),))._accept_lengths()
    assert second[0] < first[0]


def test_waiting_a_phase_dominates_only_when_strictly_no_dearer() -> None:
    """The plan's shortcut: waiting (plain[0] + switch[1]) must undercut switching now (switch[0] + sd[0])
    by more than a relative hair, so float noise never decides a tie."""
    def drain(wait: float) -> Drain:
        d = Drain([0.0, 1.0, 2.0], 2.0, [1.0], lambda k, lo: 0.0, lambda mid: ([1.0], 1.0))
        d.plain[0], d.switch[1], d.switch[0], d.sd[0] = wait, 0.0, 0.5, 0.5
        return d

    assert drain(1.0 - 1e-6).waiting_dominates() == (1.0 - 1e-6, 1.0)
    assert drain(1.0).waiting_dominates() is None
    assert drain(1.0 + 1e-6).waiting_dominates() is None


@pytest.mark.parametrize("cost", ["roofline", "table"])
def test_a_catch_up_that_never_ran_costs_what_switching_on_now_does(cost: str) -> None:
    """The rent's premium under ``catch_up`` before the drafter ever ran this step is 0 without pricing
    (both prefill the drafter over the whole contexts): the same as the two switch prices' difference."""
    from tltcore.cost import TableCostModel

    model = QWEN7B_H100 if cost == "roofline" else TableCostModel.from_file(CPU_TABLE)
    policy = CostAware(model, paper_qwen32b_tp4(), switch="catch_up")
    rng = np.random.default_rng(1)
    for _ in range(20):
        ctx = rng.integers(1, 4000, int(rng.integers(1, 64))).astype(np.int64)
        full = policy._switch_cost(ctx, 0.0, False) - policy._switch_cost(ctx, 0.0, True)
        assert policy._switch_premium(ctx) == full == 0.0


@pytest.mark.parametrize("phases", [1, 2, 3, 8, 13])
def test_the_plans_phase_edges_are_numpys_quantiles_bit_for_bit(phases: int) -> None:
    """The plan's phase edges are computed in Python (np.quantile was half of a plan's time): each edge
    is the very float ``np.unique(np.concatenate(([0], q[q > 0])))`` of numpy's quantiles gives, over
    sizes from 1 to 300, ties, zeros, integers and spreads from a few tokens to millions."""
    from tltcore.policy.cost_aware import phase_edges

    rng = np.random.default_rng(11)
    levels = np.linspace(0.0, 1.0, phases + 1)[1:]
    draws = [np.zeros(5), np.full(7, 3.0), np.array([0.0, 0.0, 5.0]), np.array([2.5])]
    for _ in range(400):
        n = int(rng.integers(1, 300))
        kind = rng.integers(0, 4)
        if kind == 0:
            x = rng.lognormal(rng.uniform(0, 12), rng.uniform(0.1, 2.5), n)
        elif kind == 1:
            x = rng.integers(0, 40, n).astype(float)  # many ties
        elif kind == 2:
            x = np.maximum(rng.normal(100, 300, n), 0.0)  # many zeros
        else:
            x = rng.uniform(0, 1e6, n) * rng.uniform(0, 1, n) ** 3
        draws.append(x)
    for x in draws:
        q = np.quantile(x, levels)
        want = np.unique(np.concatenate(([0.0], q[q > 0])))
        got = phase_edges(x, levels.tolist())
        assert len(got) == len(want) and all(a == b for a, b in zip(got, want.tolist(), strict=True)), x


def _longest_table(composed: bool, prefill_rule: str | None = None):
    """A ``max``-rule table on which SD pays at small batches and loses at large ones, whole SD rows for
    every default candidate (one stacked lookup) or, ``composed``, draft-step and verify rows instead;
    with a ``prefill_rule``, prefill rows convex in the prompt (attention), so that the rule matters."""
    from tltcore.cost.table import TableCostModel, table_frame
    from tltcore.policy.cost_aware import DEFAULT_CANDIDATES

    rows = []
    for b in (1, 2, 4, 8, 16, 32, 64):
        for c in (0, 64, 256, 1024, 4096):
            plain = 2e-3 + 2e-5 * b + 1e-7 * b * c
            rows.append({"kind": "decode", "batch_size": b, "context": c, "seconds": plain})
            attention = 0.0 if prefill_rule is None else 1e-10 * b * c * c
            rows.append({"kind": "prefill", "batch_size": b, "context": c, "seconds": 1e-3 + 2e-7 * b * c + attention})
            rows.append({"kind": "drafter_prefill", "batch_size": b, "context": c, "seconds": 2e-4 + 4e-8 * b * c})
            if composed:
                rows += [{"kind": "draft_step", "batch_size": b, "context": c, "seconds": 0.1 * plain * k, "topk": k}
                         for k in sorted({s.topk for s in DEFAULT_CANDIDATES})]
                rows += [{"kind": "verify", "batch_size": b, "context": c, "seconds": plain + 1.5e-4 * v * b,
                          "verify_tokens": v} for v in sorted({s.verify_tokens for s in DEFAULT_CANDIDATES})]
            else:
                rows += [{"kind": "sd", "batch_size": b, "context": c, "depth": s.depth, "topk": s.topk,
                          "verify_tokens": s.verify_tokens,
                          "seconds": plain * (1 + 0.08 * s.depth) + 1.5e-4 * s.verify_tokens * b}
                         for s in DEFAULT_CANDIDATES]
        if composed:
            rows.append({"kind": "sd_overhead", "batch_size": b, "context": 0, "seconds": 1e-4})
    meta = {"context_rule": "max"} | ({} if prefill_rule is None else {"prefill_rule": prefill_rule})
    return TableCostModel.from_frame(table_frame(rows), meta)


class _PerRequest(CostModelBase):
    """A table without its (batch, longest) readings: cost-aware then prices it from per-request arrays."""

    def __init__(self, table) -> None:
        self.table = table

    def decode_time(self, ctx: np.ndarray) -> float:
        return self.table.decode_time(ctx)

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        return self.table.sd_time(ctx, config)

    def sd_times(self, ctx: np.ndarray, configs) -> list[float]:
        return self.table.sd_times(ctx, configs)

    def prefill_time(self, new: np.ndarray, cached: np.ndarray) -> float:
        return self.table.prefill_time(new, cached)

    def drafter_prefill_time(self, new: np.ndarray, cached: np.ndarray) -> float:
        return self.table.drafter_prefill_time(new, cached)


@pytest.mark.parametrize(("composed", "prefill_rule"), [(False, None), (True, None), (False, "padded_attention")])
@pytest.mark.parametrize("switch", ["reprefill", "catch_up", "in_step"])
def test_a_batch_priced_from_its_size_and_longest_context_decides_as_per_request_arrays(
        composed: bool, prefill_rule: str | None, switch: str) -> None:
    """On a ``max``-rule table cost-aware prices a batch from its size and longest context, on Python
    ints; with the same table read from per-request numpy arrays (the path every other cost model takes)
    whole simulated steps run event for event alike -- switching on and off, with predicted and known
    lengths, a response cap, and a second step whose mean length floors the prediction; so too with
    the ``padded_attention`` prefill rule, which also reads a prefill pass's tokens in all."""
    table = _longest_table(composed, prefill_rule)
    assert table.longest_context_times() is table
    rng = np.random.default_rng(17)
    mixed = Work(0, np.arange(48), rng.integers(20, 900, 48), rng.lognormal(5.5, 1.3, 48).astype(np.int64) + 1)
    works = [_capped(40, 600), mixed]
    switched = 0
    for lengths, cap in (("predicted", None), ("predicted", 700), ("known", None)):
        for work in works:
            runs = []
            for cost in (table, _PerRequest(table)):
                policy = CostAware(cost, paper_qwen32b_tp4(), switch=switch, lengths=lengths, response_cap=cap)
                assert (policy._at is None) == (cost is not table)
                steps = []
                for _ in range(2):
                    res = simulate_step(work, policies=[policy], cost=table, accept=paper_qwen32b_tp4(),
                                        engine=EngineConfig(switch=switch, max_batch=32), seed=0)
                    steps.append(res.events)
                runs.append(steps)
            for fast, slow in zip(*runs, strict=True):
                assert fast.equals(slow)
            decode = runs[0][0].query("kind == 'decode'")
            switched += (decode["sd_config"] != "off").any() and (decode["sd_config"] == "off").any()
    assert switched  # some runs turned SD on mid-step: the plan and the switch prices were exercised


def test_the_longest_context_prices_are_the_per_request_ones() -> None:
    """Each price cost-aware takes from a batch's size and longest context -- an iteration, a plan, a
    switch in every mode and state, the drain predicted -- is the very float per-request arrays give."""
    table = _longest_table(False)
    rng = np.random.default_rng(23)
    for trial in range(300):
        switch = ("reprefill", "catch_up", "in_step")[trial % 3]
        kw = {"switch": switch, "response_cap": int(rng.integers(50, 3000)) if trial % 2 else None}
        fast = CostAware(table, paper_qwen32b_tp4(), **kw)
        slow = CostAware(_PerRequest(table), paper_qwen32b_tp4(), **kw)
        progress, off_at = float(rng.integers(0, 400)), float(rng.integers(0, 200))
        mean_len = None if trial % 3 else float(rng.integers(10, 2000))
        for p in (fast, slow):
            p._ran_plain, p._was_on, p._on = bool(trial % 4 > 1), bool(trial % 5 > 2), bool(trial % 7 > 4)
            p._progress, p._off_at, p.mean_len = progress, min(off_at, progress), mean_len
        b = int(rng.integers(1, 80))
        ctx = tuple(int(c) for c in rng.integers(0 if trial % 6 == 0 else 1, 5000, b))
        view = BatchView(b, ctx, remaining_hint=tuple(float(r) for r in rng.lognormal(5, 1.5, b)))
        acc = fast._accept_lengths()
        c_fast, c_slow = fast._contexts(view), slow._contexts(view)
        assert isinstance(c_fast, tuple) and isinstance(c_slow, np.ndarray)
        assert fast._times(c_fast) == slow._times(c_slow)
        for progress, fresh in ((fast._progress, False), (fast._progress + 37.5, False), (0.0, True)):
            assert fast._switch_cost(c_fast, progress, fresh) == slow._switch_cost(c_slow, progress, fresh)
        r_fast, r_slow = fast._remaining(view, c_fast), slow._remaining(view, c_slow)
        assert list(r_fast) == r_slow.tolist()
        assert fast._plan(c_fast, r_fast, acc) == slow._plan(c_slow, r_slow, acc)
        assert fast._pays_alone(c_fast, acc) == slow._pays_alone(c_slow, acc)
        assert fast._full_batch_pays(c_fast, acc) == slow._full_batch_pays(c_slow, acc)
    with pytest.raises(InputError, match="non-negative"):
        CostAware(table, paper_qwen32b_tp4()).decide(BatchView(2, (5, -1)))


def test_learnt_accept_lengths_are_each_candidates_own_float() -> None:
    """After every SD outcome the estimate re-derives all candidates' accept lengths in one stacked
    product (``AcceptanceEstimate.accept_lengths``): each must be the very float ``accept_length`` of that
    candidate gives (its own ``reach @ scales``), through outcomes of every shape and decays."""
    from tltcore.policy.cost_aware import DEFAULT_CANDIDATES
    from tltcore.policy.cost_aware_prior import AcceptanceEstimate

    rng = np.random.default_rng(7)
    clamped = 0
    for model in (paper_qwen32b_tp4(), ChainAcceptance((0.8, 0.6)), None):
        for cands in ((*DEFAULT_CANDIDATES, NO_SD), DEFAULT_CANDIDATES, (SDConfig.chain(2), NO_SD, SDConfig.chain(6))):
            live = [c for c in cands if c.enabled]
            est = AcceptanceEstimate(model, cands, 0.7, 256.0)
            for i in range(300):
                c = live[int(rng.integers(len(live)))]
                n = int(rng.integers(1, 400))
                # outcomes past the shape's depth or of nothing accepted drive some estimates to the clamps
                est.observe(c, n, float(rng.uniform(0.0, 1.5 * c.depth)) * n if i % 50 < 40 else 0.0)
                if i % 70 == 69:
                    est.decay(0.5)
                got = est.accept_lengths()
                assert got == tuple(est.accept_length(x) for x in cands), i
                clamped += sum(a in (1.0, 1.0 + x.depth) for a, x in zip(got, cands, strict=True) if x.enabled)
    # a first position always accepted and a deep chain never: later positions' scales turn negative, and
    # some trees' sums with them (clamped at no draft token accepted)
    est = AcceptanceEstimate(paper_qwen32b_tp4(), DEFAULT_CANDIDATES, 0.7, 256.0)
    for _ in range(50):
        est.observe(SDConfig.chain(1), 1000, 1000.0)
        est.observe(SDConfig.chain(8), 1000, 0.0)
    assert est.accept_lengths() == tuple(est.accept_length(x) for x in DEFAULT_CANDIDATES)
    assert min(float(est.prior_reach(c) @ est.scales()) for c in DEFAULT_CANDIDATES) < 0.0
    assert clamped > 0  # the depth clamp was exercised


def test_both_pricings_read_a_prefill_pass_as_the_same_float() -> None:
    """A target prefill pass of mixed prompts (some with nothing to prefill) priced from Python ints
    through the batch's size, longest and tokens in all is the per-request array reading to the bit,
    under either prefill rule a ``max`` table can read so."""
    from tltcore.policy.cost_aware import DEFAULT_CANDIDATES
    from tltcore.policy.cost_aware_pricing import LongestContextPricing, PerRequestPricing

    rng = np.random.default_rng(3)
    for rule in (None, "padded_attention"):
        table = _longest_table(False, rule)
        fast = LongestContextPricing(table, tuple(DEFAULT_CANDIDATES))
        slow = PerRequestPricing(table, tuple(DEFAULT_CANDIDATES))
        for b in (1, 3, 17, 40):
            new = [int(x) for x in rng.integers(0, 5000, b)]
            arr = np.asarray(new, dtype=np.int64)
            assert fast.prefill(new, None) == slow.prefill(arr, None) == table.prefill_time(arr, np.zeros_like(arr))
            assert fast.drafter_prefill(new, None) == slow.drafter_prefill(arr, None)
