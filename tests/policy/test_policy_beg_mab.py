"""BEG-MAB: bucket table, untried-first, median window, exploration rate, determinism."""

from __future__ import annotations

import pytest

from tltcore.errors import InputError
from tltcore.policy.base import BatchView, Outcome, SDConfig
from tltcore.policy.beg_mab import DEFAULT_ARMS, BucketedEpsilonGreedy, bucket_arms

A48, A32, A16, A8 = DEFAULT_ARMS


def outcome(config: SDConfig, bs: int, throughput: float) -> Outcome:
    """An outcome whose reward (tokens/s) is exactly ``throughput``."""
    return Outcome(config, bs, emitted_tokens=1000, elapsed_s=1000 / throughput)


def test_default_arms_reduce_to_tlt_table() -> None:
    policy = BucketedEpsilonGreedy(seed=3)
    expected = {1: A48, 2: A32, 4: A32, 5: A16, 20: A16, 21: A8, 64: A8, 512: A8}
    for _ in range(200):
        for bs, arm in expected.items():
            config = policy.decide(BatchView(bs)).config
            assert config == arm, (bs, config)
            policy.observe(outcome(config, bs, throughput=100.0 * bs))


def test_bucket_assignment_with_shared_and_missing_budgets() -> None:
    a, b, c = SDConfig(6, 4, 32), SDConfig(8, 4, 32), SDConfig(8, 4, 8)
    assert bucket_arms([a, b, c], 4) == [(a, b), (c,), (c,), (c,)]
    d, e = SDConfig(8, 4, 48), SDConfig(4, 1, 4)
    assert bucket_arms([d, b, c, e, SDConfig(2, 1, 2)], 3) == [(d,), (b,), (c, e, SDConfig(2, 1, 2))]


def shared_bucket_policy(eps: float = 0.1, window: int = 300, seed: int = 0) -> BucketedEpsilonGreedy:
    arms = [SDConfig(4, 4, 16), SDConfig(6, 4, 16), SDConfig(8, 4, 16)]
    return BucketedEpsilonGreedy(arms=arms, thresholds=[1], eps=eps, window=window, seed=seed)


def test_untried_arms_first_in_order() -> None:
    policy = shared_bucket_policy(eps=1.0)
    picks = []
    for _ in range(3):
        arm = policy.decide(BatchView(8)).config
        picks.append(arm)
        policy.observe(outcome(arm, 8, 1.0))
    assert picks == list(policy.arms)


def test_exploration_rate_matches_eps() -> None:
    policy = shared_bucket_policy(eps=0.1, seed=7)
    rewards = dict(zip(policy.arms, (100.0, 300.0, 200.0), strict=True))
    best = policy.arms[1]
    non_best = 0
    n = 10_000
    for i in range(n + 3):
        arm = policy.decide(BatchView(8)).config
        policy.observe(outcome(arm, 8, rewards[arm]))
        if i >= 3 and arm != best:
            non_best += 1
    expected = 0.1 * 2 / 3
    # binomial std at n=10k is ~0.0025; 0.012 is ~5 sigma
    assert abs(non_best / n - expected) < 0.012


def test_median_ignores_one_outlier_unlike_a_mean() -> None:
    policy = shared_bucket_policy(eps=0.0)
    a, b, c = policy.arms
    for arm, reward in ((a, 100.0), (b, 120.0), (c, 50.0)):
        for _ in range(9):
            policy.observe(outcome(arm, 8, reward))
    policy.observe(outcome(a, 8, 10_000.0))  # one outlier: mean of a is ~1090, median stays 100
    assert policy.decide(BatchView(8)).config == b


def test_window_keeps_only_the_last_rewards() -> None:
    policy = shared_bucket_policy(eps=0.0, window=5)
    a, b, c = policy.arms
    for arm in (b, c):
        policy.observe(outcome(arm, 8, 50.0))
    for _ in range(20):
        policy.observe(outcome(a, 8, 10.0))  # a looked bad for a long time...
    for _ in range(5):
        policy.observe(outcome(a, 8, 90.0))  # ...but the last 5 rewards are all good
    assert policy.rewards(8, a) == [90.0] * 5
    assert policy.decide(BatchView(8)).config == a


def test_ignores_foreign_configs_and_zero_time() -> None:
    policy = BucketedEpsilonGreedy()
    policy.observe(outcome(A8, 1, 100.0))  # A8 is not an arm of the batch-1 bucket
    policy.observe(Outcome(A48, 1, emitted_tokens=3, elapsed_s=0.0))
    assert policy.rewards(1, A48) == [] and policy.rewards(1, A8) == []


def decisions(seed: int, n: int = 300) -> list[SDConfig]:
    policy = shared_bucket_policy(eps=0.3, seed=seed)
    rewards = dict(zip(policy.arms, (100.0, 300.0, 200.0), strict=True))
    out = []
    for _ in range(n):
        arm = policy.decide(BatchView(8)).config
        policy.observe(outcome(arm, 8, rewards[arm]))
        out.append(arm)
    return out


def test_same_seed_same_decisions_and_seeds_differ() -> None:
    assert decisions(1) == decisions(1)
    assert decisions(1) != decisions(2)


def test_clear_restarts_and_reset_keeps_learning() -> None:
    policy = shared_bucket_policy(eps=0.3, seed=5)
    first = [policy.decide(BatchView(8)).config for _ in range(3)]
    policy.observe(outcome(first[0], 8, 1.0))
    policy.reset(0)
    assert policy.rewards(8, first[0]) == [1.0]
    policy.clear()
    assert policy.rewards(8, first[0]) == []


@pytest.mark.parametrize("kwargs", [{"eps": 1.5}, {"window": 0}, {"thresholds": [1, 1]},
                                    {"thresholds": []}, {"arms": []}, {"arms": [A8, A8]}])
def test_bad_parameters_are_input_errors(kwargs: dict) -> None:
    with pytest.raises(InputError):
        BucketedEpsilonGreedy(**kwargs)
