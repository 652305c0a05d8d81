"""Elastic SD: the exact switch point, counter reset, one-way switch, re-prefill flag, re-arming."""

from __future__ import annotations

import pytest

from tltsim.errors import InputError
from tltsim.policy.base import NO_SD, BatchView, Outcome, SDConfig, Static
from tltsim.policy.elastic import Elastic

SD = SDConfig(8, 4, 16)


def run(policy: Elastic, sizes: list[int]) -> list[tuple[SDConfig, bool]]:
    out = []
    for bs in sizes:
        config = policy.decide(BatchView(bs))
        out.append((config, policy.just_switched))
    return out


def test_tenth_consecutive_small_batch_is_the_first_sd_iteration() -> None:
    policy = Elastic(Static(SD), threshold=32, consecutive=10)
    steps = run(policy, [64, 40] + [32] * 9)
    assert all(config == NO_SD for config, _ in steps)
    assert not policy.switched_on
    config = policy.decide(BatchView(32))
    assert config == SD and policy.switched_on and policy.just_switched


def test_a_large_batch_resets_the_count_before_switching() -> None:
    policy = Elastic(Static(SD), threshold=32, consecutive=10)
    steps = run(policy, [5] * 9 + [33] + [5] * 9)
    assert all(config == NO_SD for config, _ in steps)
    assert policy.decide(BatchView(5)) == SD


def test_switch_is_one_way_and_flagged_exactly_once() -> None:
    policy = Elastic(Static(SD), threshold=4, consecutive=3)
    steps = run(policy, [1, 2, 3, 100, 100, 1, 500])
    assert [c for c, _ in steps] == [NO_SD, NO_SD, SD, SD, SD, SD, SD]
    assert [flag for _, flag in steps] == [False, False, True, False, False, False, False]
    assert policy.switched_on


def test_reset_rearms_a_new_rollout_step() -> None:
    policy = Elastic(Static(SD), threshold=4, consecutive=2)
    run(policy, [1, 1, 1])
    policy.reset()
    assert not policy.switched_on and not policy.just_switched
    steps = run(policy, [1, 1])
    assert steps == [(NO_SD, False), (SD, True)]


class Recorder(Static):
    """A static inner policy that remembers what it was told."""

    def __init__(self) -> None:
        super().__init__(SD)
        self.seen: list[Outcome] = []
        self.resets = 0

    def observe(self, outcome: Outcome) -> None:
        self.seen.append(outcome)

    def reset(self) -> None:
        self.resets += 1


def test_inner_sees_only_sd_phase_outcomes_and_is_reset() -> None:
    inner = Recorder()
    policy = Elastic(inner, threshold=8, consecutive=2)
    for bs in (4, 4, 4):
        config = policy.decide(BatchView(bs))
        policy.observe(Outcome(config, bs, emitted_tokens=bs, elapsed_s=0.01))
    assert [o.config for o in inner.seen] == [SD, SD]
    policy.reset()
    assert inner.resets == 1


def test_default_name_and_flags() -> None:
    policy = Elastic(Static(SD, name="static:8_4_16"))
    assert policy.name == "elastic+static:8_4_16"
    assert policy.per_iteration
    assert (policy.threshold, policy.consecutive) == (32, 10)


@pytest.mark.parametrize(("threshold", "consecutive"), [(0, 10), (32, 0)])
def test_bad_parameters_are_input_errors(threshold: int, consecutive: int) -> None:
    with pytest.raises(InputError):
        Elastic(Static(SD), threshold=threshold, consecutive=consecutive)
