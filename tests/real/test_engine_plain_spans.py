"""The native engine runs a plain decision for its hold while the running batch keeps its size, and
reports the span in one Outcome (the policy contract's spans, as the simulator runs them); it asks
again when the hold is used up or the size changes -- not when a finished request's slot is taken by
a waiting one (churn). SD decisions are asked for every iteration."""

from __future__ import annotations

import os
from itertools import pairwise

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.cost.protocol import PerConfigSDTimes  # noqa: E402
from tltcore.policy.base import NO_SD, BatchView, Decision, Outcome, SDConfig  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.spec_decode.proposers import OracleDrafter  # noqa: E402

from .tiny_models import TINY_V64  # noqa: E402


class Recorder:
    """Plain for ``hold`` iterations per decision, or a chain of 2 (hold 5) once ``sd_from`` iterations ran."""

    name = "recorder"

    def __init__(self, hold: int, sd_from: int | None = None) -> None:
        self.hold, self.sd_from = hold, sd_from
        self.views: list[BatchView] = []
        self.outcomes: list[Outcome] = []

    def decide(self, view: BatchView) -> Decision:
        self.views.append(view)
        if self.sd_from is not None and view.iteration >= self.sd_from:
            return Decision(SDConfig(2, 1, 2), 5)
        return Decision(NO_SD, self.hold)

    def observe(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)

    def reset(self, step: int) -> None:
        return None


@pytest.fixture(scope="module")
def target():
    return random_model(TINY_V64, seed=1, dtype=torch.float64, std=0.1)


def _run(target, policy, lengths=(5, 9, 14), max_batch=2):
    drafter = OracleDrafter(target, noise=0.3)
    engine = Engine(target, policy, drafter, EngineConfig(max_batch=max_batch, max_len=64))
    for i, n in enumerate(lengths):
        engine.add_request([(3 * i + j) % TINY_V64.vocab_size for j in range(4)], n)
    return engine.run()


def test_a_plain_hold_runs_unasked_until_used_up_or_the_batch_changes(target) -> None:
    policy = Recorder(hold=3)
    result = _run(target, policy)
    decode = result.decode_events
    # one Outcome per span; the spans cover every decode iteration once, at the batch they started with
    assert sum(o.iterations for o in policy.outcomes) == len(decode) == decode["iterations"].sum()
    assert len(policy.outcomes) == len(policy.views) < len(decode)
    assert all(1 <= o.iterations <= 3 for o in policy.outcomes)
    assert [o.batch_size for o in policy.outcomes] == [v.batch_size for v in policy.views]
    assert sum(o.emitted_tokens for o in policy.outcomes) == decode["tokens"].sum()
    # each span runs at one batch size (a change of size ends it) and at most its hold
    sizes = decode["batch_size"].tolist()
    start = 0
    for o in policy.outcomes:
        assert set(sizes[start:start + o.iterations]) == {o.batch_size}
        start += o.iterations
    starts = [v.iteration for v in policy.views]
    assert starts[0] == 0 and all(0 < b - a <= 3 for a, b in pairwise(starts))
    short = sum(b - a < 3 for a, b in pairwise(starts))
    assert short <= 4  # only where the batch changed: 3 requests finished, 1 joined later


def test_a_plain_hold_stands_through_churn_and_ends_when_the_size_changes(target) -> None:
    """Two slots, three requests: the first finishes and the third takes its slot (churn: the size stays
    2), so the first span runs on through it; the second request finishing leaves one running, and only
    then is the policy asked again. Outputs are those of asking every iteration."""
    policy, every = Recorder(hold=100), Recorder(hold=1)
    result, reference = _run(target, policy), _run(target, every)
    assert result.outputs == reference.outputs
    assert [v.batch_size for v in policy.views] == [2, 1]
    first, second = policy.outcomes
    # the first request ran 4 decode iterations (its prefill emitted its first token): the span went on
    assert first.batch_size == 2 and first.iterations == 8 and second.iterations == 9
    assert first.emitted_tokens == 2 * first.iterations
    churned = [v for v in every.views if v.batch_size == 2]
    assert len(churned) == 8  # asked every iteration, the same size throughout the churn


def test_hold_one_and_sd_decisions_are_asked_every_iteration_and_outputs_do_not_change(target) -> None:
    every = Recorder(hold=1)
    held = Recorder(hold=4, sd_from=6)
    a, b = _run(target, every), _run(target, held)
    assert a.outputs == b.outputs  # holding changes what is asked, never what is generated
    assert len(every.views) == len(a.decode_events) and all(o.iterations == 1 for o in every.outcomes)
    sd = [o for o in held.outcomes if o.config.enabled]
    assert sd and all(o.iterations == 1 for o in sd)  # SD is asked for and reported per iteration
    assert sum(o.iterations for o in held.outcomes) == len(b.decode_events)


class ContextCosts(PerConfigSDTimes):
    """A modelled clock that records the contexts each decode iteration is priced at."""

    def __init__(self) -> None:
        self.priced: list[list[int]] = []

    def decode_time(self, context_lens) -> float:
        self.priced.append(context_lens.tolist())
        return 1e-3

    def sd_time(self, context_lens, config) -> float:
        self.priced.append(context_lens.tolist())
        return 2e-3

    def prefill_time(self, new_tokens, cached_tokens) -> float:
        return 1e-3

    def drafter_prefill_time(self, new_tokens, cached_tokens) -> float:
        return 1e-4


def test_the_modelled_clock_prices_every_iteration_at_its_own_contexts_held_or_asked(target) -> None:
    def run(hold: int) -> tuple[Recorder, ContextCosts]:
        policy, costs = Recorder(hold=hold), ContextCosts()
        engine = Engine(target, policy, OracleDrafter(target, noise=0.3),
                        EngineConfig(max_batch=2, max_len=64, clock="model"), costs=costs)
        for i, n in enumerate((5, 9, 14)):
            engine.add_request([(3 * i + j) % TINY_V64.vocab_size for j in range(4)], n)
        engine.run()
        return policy, costs

    (every, asked), (_, held) = run(1), run(3)
    assert asked.priced == [list(v.context_lens) for v in every.views]  # what the policy saw, each iteration
    assert held.priced == asked.priced  # held iterations are priced at their own, grown contexts
