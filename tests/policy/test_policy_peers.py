"""Peer baselines: vLLM-style table, SGLang-style EMA, plain epsilon-greedy and UCB1."""

from __future__ import annotations

import pytest

from tltcore.errors import InputError
from tltcore.policy.bandits import UCB1, EpsilonGreedy
from tltcore.policy.base import HOLD_UNTIL_EVENT, NO_SD, BatchView, Outcome, SDConfig
from tltcore.policy.beg_mab import DEFAULT_ARMS
from tltcore.policy.reward_window import RewardWindow
from tltcore.policy.sglang_ema import SglangEma, chain_cost_proxy, chain_tokens, implied_rate
from tltcore.policy.vllm_table import VllmTable


def test_vllm_table_default() -> None:
    table = VllmTable()
    got = {bs: table.decide(BatchView(bs)).config for bs in (1, 4, 5, 16, 17, 32, 33, 1000)}
    c5, c3, c1 = SDConfig.chain(5), SDConfig.chain(3), SDConfig.chain(1)
    assert got == {1: c5, 4: c5, 5: c3, 16: c3, 17: c1, 32: c1, 33: NO_SD, 1000: NO_SD}
    assert table.decide(BatchView(4)).hold == HOLD_UNTIL_EVENT  # batch-size only: holds until an event


def test_vllm_table_rejects_unsorted_rows() -> None:
    with pytest.raises(InputError):
        VllmTable([(16, SDConfig.chain(3)), (4, SDConfig.chain(5))])


def test_chain_formula_and_its_inverse() -> None:
    assert chain_tokens(0.0, 5) == 1.0
    assert chain_tokens(1.0, 5) == 6.0
    assert chain_tokens(0.5, 2) == pytest.approx(1.75)
    for rate in (0.1, 0.5, 0.8, 0.95):
        for depth in (1, 3, 7):
            assert implied_rate(chain_tokens(rate, depth), depth) == pytest.approx(rate, abs=1e-6)


def feed(policy: SglangEma, bs: int, rate: float, n: int) -> SDConfig:
    """Run ``n`` iterations whose accept length is what a chain with per-position ``rate`` gives."""
    config = policy.decide(BatchView(bs)).config
    for _ in range(n):
        config = policy.decide(BatchView(bs)).config
        emitted = round(bs * chain_tokens(rate, config.depth))
        policy.observe(Outcome(config, bs, emitted_tokens=emitted, elapsed_s=0.01))
    return config


def test_sglang_ema_goes_deep_when_acceptance_is_high_and_shallow_when_low() -> None:
    policy = SglangEma()
    assert feed(policy, 4, 0.95, 60).depth == 7
    assert policy.accept_rate(4) == pytest.approx(0.95, abs=0.01)
    assert feed(policy, 4, 0.2, 60).depth == 1


def test_sglang_ema_ranges_are_independent() -> None:
    policy = SglangEma(ranges=(1, 64))
    feed(policy, 4, 0.1, 60)
    assert policy.accept_rate(100) == policy.prior_accept_rate
    assert policy.accept_rate(4) < 0.2


def test_sglang_ema_cost_callable_can_turn_sd_off() -> None:
    policy = SglangEma(depths=(0, 1, 3), cost=lambda bs, depth: 1.0 + 10.0 * depth)
    assert policy.decide(BatchView(8)).config == NO_SD


def test_cost_proxy_is_flat_when_memory_bound_and_linear_when_compute_bound() -> None:
    assert chain_cost_proxy(1, 0) == chain_cost_proxy(128, 0) == 1.0
    assert chain_cost_proxy(1024, 0) == pytest.approx(4.0)
    assert chain_cost_proxy(512, 3) > 4 * chain_cost_proxy(512, 0)


def constant_rewards(policy: EpsilonGreedy | UCB1, rewards: dict[SDConfig, float], n: int) -> list[SDConfig]:
    picks = []
    for _ in range(n):
        arm = policy.decide(BatchView(8)).config
        policy.observe(Outcome(arm, 8, emitted_tokens=1000, elapsed_s=1000 / rewards[arm]))
        picks.append(arm)
    return picks


REWARDS = dict(zip(DEFAULT_ARMS, (100.0, 400.0, 200.0, 150.0), strict=True))


def test_eps_greedy_tries_all_then_exploits() -> None:
    picks = constant_rewards(EpsilonGreedy(eps=0.1, seed=1), REWARDS, 2000)
    assert picks[:4] == list(DEFAULT_ARMS)
    assert picks[4:].count(DEFAULT_ARMS[1]) / len(picks[4:]) == pytest.approx(0.925, abs=0.03)


def test_ucb1_concentrates_on_the_best_arm() -> None:
    picks = constant_rewards(UCB1(), REWARDS, 3000)
    assert picks[:4] == list(DEFAULT_ARMS)
    assert picks[-1000:].count(DEFAULT_ARMS[1]) > 800


def test_reward_window_median_and_eviction() -> None:
    w = RewardWindow(3)
    for r in (5.0, 1.0, 9.0, 7.0):
        w.add(r)
    assert w.values() == [1.0, 9.0, 7.0]
    assert w.median() == 7.0 and w.mean() == pytest.approx(17 / 3)
    w.add(1.0)
    assert w.median() == 7.0 and len(w) == 3
    w2 = RewardWindow(4)
    for r in (4.0, 1.0, 3.0, 2.0):
        w2.add(r)
    assert w2.median() == 2.5


def test_implied_rate_is_the_bisection_on_chain_tokens_float_for_float() -> None:
    """``implied_rate`` inlines ``chain_tokens`` in its bisection: the same floats as bisecting on it."""

    def bisect(accept_length: float, depth: int) -> float:
        if depth <= 0 or accept_length <= 1.0:
            return 0.0
        if accept_length >= depth + 1:
            return 0.999
        lo, hi = 0.0, 0.999
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if chain_tokens(mid, depth) < accept_length:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)

    for depth in range(0, 10):
        for b in (1, 3, 37, 300):
            for tokens in range(b, b * (depth + 2) + 1, max(1, b // 7)):
                assert implied_rate.__wrapped__(tokens / b, depth) == bisect(tokens / b, depth), (tokens, b, depth)
