"""SGLang-EMA prices its depths with the scenario's cost model, as the greedy oracle does, not with a proxy.

A proxy that knows nothing of the model, the GPU or the contexts picks other depths than the cost
model the engine is timed with, which biased every comparison against sglang-ema (issue 22). These
tests pin that the scenario hands sglang-ema its cost model, and that this changes its decisions.
"""

from __future__ import annotations

import numpy as np
import pytest

from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.errors import InputError
from tltcore.policy.base import NO_SD, BatchView, SDConfig
from tltcore.policy.elastic import Elastic
from tltcore.policy.sglang_ema import SglangEma, chain_tokens
from tltsim.scenario import ClusterSection, Scenario, SimInputs, acceptance_model, cost_model, make_policies


def small_inputs() -> SimInputs:
    """The default scenario's models (Qwen2.5-7B, H100, TP 4) on two workers; no workload is needed
    to build policies."""
    s = Scenario(cluster=ClusterSection(gpus=8, tp=4))
    return SimInputs(scenario=s, workloads=(), cost=cost_model(s), accept=acceptance_model(s.acceptance),
                     engine=None, drafter=None)


@pytest.mark.parametrize("spec", ["sglang-ema", "sglang-ema:depths=0,1,3", "elastic+sglang-ema"])
def test_the_scenario_hands_sglang_ema_its_cost_model(spec: str) -> None:
    inputs = small_inputs()
    policies = make_policies(spec, inputs)
    assert len(policies) == inputs.n_workers == 2
    for policy in policies:
        ema = policy.inner if isinstance(policy, Elastic) else policy
        assert isinstance(ema, SglangEma)
        assert ema.cost_model is inputs.cost


def true_throughput(cost: object, rate: float, depth: int, ctx: np.ndarray) -> float:
    """Expected tokens per second of a ``depth`` chain under the scenario's own cost model."""
    time = cost.sd_time(ctx, SDConfig.chain(depth)) if depth else cost.decode_time(ctx)  # type: ignore[attr-defined]
    return chain_tokens(rate, depth) * len(ctx) / time


def test_the_cost_model_changes_its_decision_where_the_proxy_differs() -> None:
    """Batch 8 at 1,000-token contexts, prior acceptance 0.7: the proxy charges a depth-7 chain like a
    compute-bound forward and stops at depth 3; the roofline of a 7B model on an H100 says verifying
    8 tokens per request is almost free here, so depth 7 pays, and sglang-ema now sees that."""
    inputs = small_inputs()
    ctx = np.full(8, 1000, dtype=np.int64)
    view = BatchView(8, tuple(ctx.tolist()))
    priced = make_policies("sglang-ema", inputs)[0]
    proxy = SglangEma()  # what the registry built before: no cost model, the roofline proxy
    assert proxy.decide(view).config == SDConfig.chain(3)
    assert priced.decide(view).config == SDConfig.chain(7)
    best = max(priced.depths, key=lambda d: true_throughput(inputs.cost, 0.7, d, ctx))
    assert best == 7
    assert true_throughput(inputs.cost, 0.7, 7, ctx) > true_throughput(inputs.cost, 0.7, 3, ctx)


class RecordingCost(PerConfigSDTimes):
    """A cost model that records the contexts it is priced at: SD pays only at short contexts."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def decode_time(self, ctx: np.ndarray) -> float:
        self.seen.append(ctx)
        return 1.0

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        self.seen.append(ctx)
        return 1.0 + config.depth * float(ctx.mean()) / 1000.0


def test_it_prices_at_the_batch_s_own_contexts() -> None:
    cost = RecordingCost()
    short = SglangEma(depths=(0, 1, 3), cost_model=cost).decide(BatchView(2, (10, 30))).config
    assert short == SDConfig.chain(3)
    assert all(list(c) == [10, 30] for c in cost.seen)
    long = SglangEma(depths=(0, 1, 3), cost_model=cost).decide(BatchView(2, (5000, 7000))).config
    assert long == NO_SD  # SD off: at long contexts every draft step costs more than it emits


def test_cost_callable_and_cost_model_are_exclusive() -> None:
    with pytest.raises(InputError):
        SglangEma(cost=lambda bs, depth: 1.0, cost_model=RecordingCost())
