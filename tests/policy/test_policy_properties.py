"""Property test: under any sequence of batch sizes and outcomes, every policy returns a valid
SDConfig and never raises; same seed, same decisions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.policy.base import NO_SD, BatchView, Outcome, SDConfig, max_tree_nodes
from tltcore.policy.registry import make_policy

SPECS = ["no-sd", "static:8_4_16", "beg-mab", "eps-greedy", "ucb1", "vllm-table", "sglang-ema",
         "sglang-ema:depths=0,1,3,7", "greedy-oracle", "elastic+beg-mab", "elastic:2:1+greedy-oracle",
         "elastic:4:3+sglang-ema", "beg-mab:arms=8_4_16,6_4_16,4_1_4,off:thresholds=1,3", "cost-aware",
         "cost-aware:switch=catch_up:recheck=3:phases=2", "elastic:2:1+cost-aware"]


class ToyAcceptance:
    def expected_accept_length(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> float:
        return 1.0 + 0.4 * config.depth * (1 - np.exp(-config.verify_tokens / 16))


class ToyCost(PerConfigSDTimes):
    def decode_time(self, ctx: np.ndarray) -> float:
        return 0.01 + 1e-9 * float(ctx.sum())

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        return self.decode_time(ctx) * (1.2 + 0.01 * config.verify_tokens * max(1, len(ctx)) / 32)

    def prefill_time(self, new: np.ndarray, cached: np.ndarray) -> float:
        return 1e-5 * float(np.sum(new))

    def drafter_prefill_time(self, new: np.ndarray, cached: np.ndarray) -> float:
        return 1e-6 * float(np.sum(new))


MODELS = {"accept_model": ToyAcceptance(), "cost_model": ToyCost()}

iteration = st.tuples(
    st.integers(min_value=0, max_value=600),  # batch size
    st.floats(min_value=0.0, max_value=10.0, allow_nan=False),  # accept length (may be nonsense)
    st.floats(min_value=0.0, max_value=5.0, allow_nan=False),  # elapsed seconds (0 = malformed)
    st.integers(min_value=0, max_value=40_000),  # context length
)


def drive(spec: str, seed: int, steps: list[tuple[int, float, float, int]]) -> list[SDConfig]:
    policy = make_policy(spec, seed=seed, **MODELS)
    out = []
    for i, (bs, accept, elapsed, ctx) in enumerate(steps):
        if i == len(steps) // 2:
            policy.reset(0)
        config = policy.decide(BatchView(bs, context_lens=(ctx,) * bs, iteration=i)).config
        assert isinstance(config, SDConfig)
        if config.enabled:
            assert 1 <= config.verify_tokens <= max_tree_nodes(config.depth, config.topk)
        emitted = round(bs * accept) if config.enabled else bs
        policy.observe(Outcome(config, bs, emitted_tokens=emitted, elapsed_s=elapsed))
        out.append(config)
    return out


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(iteration, min_size=1, max_size=60), seed=st.integers(0, 2**31 - 1))
def test_every_policy_survives_any_sequence_and_is_deterministic(steps, seed) -> None:
    for spec in SPECS:
        first = drive(spec, seed, steps)
        assert drive(spec, seed, steps) == first


def test_stochastic_policies_differ_across_seeds() -> None:
    rng = np.random.default_rng(0)
    steps = [(8, float(a), 0.01, 500) for a in rng.uniform(1.0, 6.0, size=400)]
    for spec in ("eps-greedy", "beg-mab:arms=8_4_16,6_4_16,4_4_16:thresholds=1"):
        runs = {tuple(drive(spec, seed, steps)) for seed in range(4)}
        assert len(runs) > 1, spec


def test_no_sd_is_a_valid_bandit_arm() -> None:
    steps = [(1, 3.0, 0.01, 10), (30, 1.0, 0.01, 10)] * 3
    decisions = drive("beg-mab:arms=8_4_8,off:thresholds=1,2", 0, steps)
    # bucket [1,2) gets the larger budget (8), bucket [2,inf) the smallest (0 = off)
    assert decisions == [SDConfig(8, 4, 8), NO_SD] * 3


def test_a_shapes_hash_is_its_fields_hash_and_survives_a_copy() -> None:
    """SDConfig caches its hash (shapes key every cost and acceptance table): it must stay the dataclass
    hash of its fields, equal for equal shapes, through pickling and ``dataclasses.replace``."""
    import dataclasses
    import pickle

    for c in (NO_SD, SDConfig.chain(4), SDConfig(8, 4, 32)):
        assert hash(c) == hash((c.depth, c.topk, c.verify_tokens))
        copied = pickle.loads(pickle.dumps(c))
        assert copied == c and hash(copied) == hash(c)
    wider = dataclasses.replace(SDConfig(8, 4, 32), verify_tokens=16)
    assert hash(wider) == hash(SDConfig(8, 4, 16)) and {wider: 1}[SDConfig(8, 4, 16)] == 1
