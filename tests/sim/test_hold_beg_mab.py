"""BEG-MAB holds its decision in a one-arm bucket, and the simulator's spans under that hold give
the same event log, row for row and bit for bit, as asking the policy every iteration.

Why pinned: with TLT's default arms every bucket has one arm, so BEG-MAB is a batch-size table;
holding lets the simulator run its SD tail in spans (issue 24) instead of one decision per
iteration. A hold that changed a single simulated number would make the speed-up a different
simulation, so the held run is compared with a run whose policy is forced to hold 1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pytest

from conftest import needs_shared_traces
from tltcore.policy.base import HOLD_UNTIL_EVENT, BatchView, Decision, Outcome, SDConfig
from tltcore.policy.beg_mab import DEFAULT_ARMS, BucketedEpsilonGreedy
from tltcore.policy.elastic import Elastic
from tltsim.rollout import RolloutRun
from tltsim.scenario import prepare, resolve


@dataclass
class HoldOne:
    """``inner``'s decisions with ``hold = 1``: the engine asks again every iteration."""

    inner: BucketedEpsilonGreedy
    name: str = "hold-one"

    def decide(self, view: BatchView) -> Decision:
        return replace(self.inner.decide(view), hold=1)

    def observe(self, outcome: Outcome) -> None:
        self.inner.observe(outcome)

    def reset(self, step: int) -> None:
        self.inner.reset(step)


def test_one_arm_buckets_hold_until_event_without_drawing() -> None:
    policy = BucketedEpsilonGreedy(seed=4)
    state = policy._rng.getstate()
    for bs, arm in {1: DEFAULT_ARMS[0], 3: DEFAULT_ARMS[1], 7: DEFAULT_ARMS[2], 64: DEFAULT_ARMS[3]}.items():
        d = policy.decide(BatchView(bs))
        assert d == Decision(arm, HOLD_UNTIL_EVENT)
        policy.observe(Outcome(arm, bs, emitted_tokens=10 * bs, elapsed_s=0.5, iterations=10))
        assert policy.decide(BatchView(bs)) == d  # tried or not, the only arm
    assert policy._rng.getstate() == state  # no epsilon draw: holding skips nothing random


def test_buckets_with_competing_arms_still_decide_every_iteration() -> None:
    arms = [SDConfig(4, 4, 16), SDConfig(8, 4, 16), SDConfig(8, 4, 8)]
    policy = BucketedEpsilonGreedy(arms=arms, thresholds=[1, 8], seed=0)  # buckets: (4_4_16, 8_4_16), (8_4_8,)
    assert policy.decide(BatchView(4)).hold == 1
    assert policy.decide(BatchView(8)) == Decision(arms[2], HOLD_UNTIL_EVENT)


def _events(s, inputs, policy: str, held: bool) -> pd.DataFrame:
    def make(w: int):
        inner = BucketedEpsilonGreedy(seed=s.seed + w)
        inner = inner if held else HoldOne(inner)
        return Elastic(inner, threshold=8) if policy == "elastic" else inner

    run = RolloutRun([make(w) for w in range(s.n_workers)], cost=inputs.cost, accept=inputs.accept,
                     engine=inputs.engine, seed=s.seed, deal_mode=s.trace.deal, policy_name=policy,
                     drafter=inputs.drafter)
    for w in inputs.workloads:
        run.step(w)
    return run.events()


@needs_shared_traces()
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("policy", ["elastic", "beg-mab"])
@pytest.mark.parametrize("seed", [0, 1])
def test_held_spans_equal_one_decision_per_iteration(seed, policy, mode, fast) -> None:
    s = resolve(None, [("trace.prompts_per_step", 8, "test"), ("trace.cap", 8000, "test"),
                       ("cluster.gpus", 8, "test"), ("cluster.tp", 4, "test"), ("engine.max_batch", 24, "test"),
                       ("trace.num_steps", 2, "test"), ("seed", seed, "test"),
                       ("acceptance.mode", mode, "test")]).scenario
    inputs = prepare(s)
    inputs = replace(inputs, engine=replace(inputs.engine, fast=fast))
    held, single = _events(s, inputs, policy, True), _events(s, inputs, policy, False)
    pd.testing.assert_frame_equal(held, single, check_exact=True)
    sd = held[(held.kind == "decode") & (held.sd_config != "off")]
    assert len(sd) and int(sd.iterations.max()) > 1  # SD spans are there to compare
    buckets = {BucketedEpsilonGreedy().bucket_of(int(b)) for b in np.unique(sd.batch_size)}
    assert len(buckets) >= 3  # several buckets, so holds end where the batch crosses into another
