"""Elastic SD: the exact switch point, counter reset, one-way switch, switch flag, spans, re-arming."""

from __future__ import annotations

import pytest

from tltcore.errors import InputError
from tltcore.policy.base import HOLD_UNTIL_EVENT, NO_SD, BatchView, Decision, Outcome, SDConfig, Static
from tltcore.policy.elastic import Elastic

SD = SDConfig(8, 4, 16)


def iterate(policy: Elastic, sizes: list[int]) -> list[Decision]:
    """One decide + observe per iteration, as both engines do when they step one at a time."""
    out = []
    for bs in sizes:
        d = policy.decide(BatchView(bs))
        policy.observe(Outcome(d.config, bs, emitted_tokens=bs, elapsed_s=0.01))
        out.append(d)
    return out


def test_tenth_consecutive_small_batch_is_the_first_sd_iteration() -> None:
    policy = Elastic(Static(SD), threshold=32, consecutive=10)
    steps = iterate(policy, [64, 40] + [32] * 9)
    assert all(d.config == NO_SD and not d.switch_on for d in steps)
    assert not policy.switched_on
    d = policy.decide(BatchView(32))
    assert d.config == SD and d.switch_on and policy.switched_on


def test_a_large_batch_resets_the_count_before_switching() -> None:
    policy = Elastic(Static(SD), threshold=32, consecutive=10)
    steps = iterate(policy, [5] * 9 + [33] + [5] * 9)
    assert all(d.config == NO_SD for d in steps)
    assert policy.decide(BatchView(5)).config == SD


def test_switch_is_one_way_and_flagged_exactly_once() -> None:
    policy = Elastic(Static(SD), threshold=4, consecutive=3)
    steps = iterate(policy, [1, 2, 3, 100, 100, 1, 500])
    assert [d.config for d in steps] == [NO_SD, NO_SD, SD, SD, SD, SD, SD]
    assert [d.switch_on for d in steps] == [False, False, True, False, False, False, False]
    assert policy.switched_on


def test_holds_describe_the_spans_an_engine_may_skip() -> None:
    """Off with a large batch: until an event. Off with a small one: exactly the iterations left
    before the switch. A span of n iterations reported in one Outcome counts as n."""
    policy = Elastic(Static(SD), threshold=8, consecutive=10)
    assert policy.decide(BatchView(9)).hold == HOLD_UNTIL_EVENT
    policy.observe(Outcome(NO_SD, 9, 9 * 50, 1.0, iterations=50))
    first = policy.decide(BatchView(8))
    assert first == Decision(NO_SD, hold=9)
    policy.observe(Outcome(NO_SD, 8, 8 * 9, 1.0, iterations=9))  # the engine ran the whole span
    d = policy.decide(BatchView(8))
    assert d.config == SD and d.switch_on and d.hold == HOLD_UNTIL_EVENT  # Static's hold once on
    span = Elastic(Static(SD), threshold=8, consecutive=10)
    span.decide(BatchView(8))
    span.observe(Outcome(NO_SD, 8, 8 * 4, 1.0, iterations=4))  # a shorter span (an event came first)
    assert span.decide(BatchView(8)) == Decision(NO_SD, hold=5)


def test_reset_rearms_a_new_rollout_step() -> None:
    policy = Elastic(Static(SD), threshold=4, consecutive=2)
    iterate(policy, [1, 1, 1])
    policy.reset(1)
    assert not policy.switched_on
    steps = iterate(policy, [1, 1])
    assert [(d.config, d.switch_on) for d in steps] == [(NO_SD, False), (SD, True)]


class Recorder(Static):
    """A static inner policy that remembers what it was told."""

    def __init__(self, config: SDConfig = SD) -> None:
        super().__init__(config)
        self.seen: list[Outcome] = []
        self.resets: list[int] = []

    def observe(self, outcome: Outcome) -> None:
        self.seen.append(outcome)

    def reset(self, step: int) -> None:
        self.resets.append(step)


def test_inner_sees_only_sd_phase_outcomes_and_is_reset_with_the_step() -> None:
    inner = Recorder()
    policy = Elastic(inner, threshold=8, consecutive=2)
    iterate(policy, [4, 4, 4])
    assert [o.config for o in inner.seen] == [SD, SD]
    policy.reset(7)
    assert inner.resets == [7]


def test_switch_flag_waits_for_the_inner_policys_first_speculating_decision() -> None:
    """An inner policy that declines at the switch point (an oracle, a bandit's 'off' arm) does not
    get a re-prefill charged for nothing: the flag rides on its first decision that speculates."""
    answers = iter([NO_SD, NO_SD, SD, SD])

    class Declines(Recorder):
        def decide(self, view: BatchView) -> Decision:
            return Decision(next(answers))

    policy = Elastic(Declines(), threshold=8, consecutive=1)
    steps = iterate(policy, [4, 4, 4, 4])
    assert [(d.config, d.switch_on) for d in steps] == [(NO_SD, False), (NO_SD, False), (SD, True), (SD, False)]


def test_default_name_and_parameters() -> None:
    policy = Elastic(Static(SD, name="static:8_4_16"))
    assert policy.name == "elastic+static:8_4_16"
    assert (policy.threshold, policy.consecutive) == (32, 10)


@pytest.mark.parametrize(("threshold", "consecutive"), [(0, 10), (32, 0)])
def test_bad_parameters_are_input_errors(threshold: int, consecutive: int) -> None:
    with pytest.raises(InputError):
        Elastic(Static(SD), threshold=threshold, consecutive=consecutive)
