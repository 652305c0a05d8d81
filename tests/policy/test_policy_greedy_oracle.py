"""Greedy oracle: with tiny known models it picks no SD when drafts are useless and deep trees when
they pay."""

from __future__ import annotations

import math

import numpy as np

from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.policy.base import NO_SD, BatchView, SDConfig
from tltcore.policy.beg_mab import DEFAULT_ARMS
from tltcore.policy.oracle import GreedyOracle


class ChainAcceptance:
    """Per-position acceptance ``alpha`` along the depth, (1 - a^(d+1)) / (1 - a), of which a tree
    realises the draft part more fully the more nodes it verifies (saturating in verify_tokens)."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha

    def expected_accept_length(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> float:
        if not config.enabled:
            return 1.0
        a = self.alpha
        chain = float(config.depth + 1) if a >= 1 else (1 - a ** (config.depth + 1)) / (1 - a)
        return 1.0 + (chain - 1.0) * (1.0 - math.exp(-config.verify_tokens / 16))


class LinearCost(PerConfigSDTimes):
    """Memory-bound toy: a forward costs 10 ms plus a bit per verified token and per context token."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def decode_time(self, ctx: np.ndarray) -> float:
        self.seen.append(ctx)
        return 0.010 + 1e-8 * float(ctx.sum())

    def sd_time(self, ctx: np.ndarray, config: SDConfig) -> float:
        self.seen.append(ctx)
        return self.decode_time(ctx) + 0.001 * config.depth + 2e-5 * config.verify_tokens * len(ctx)


def test_no_sd_when_drafts_are_never_accepted() -> None:
    oracle = GreedyOracle(ChainAcceptance(0.0), LinearCost())
    assert oracle.decide(BatchView(4, context_lens=(100, 200, 300, 400))).config == NO_SD


def test_deep_config_when_acceptance_is_high() -> None:
    oracle = GreedyOracle(ChainAcceptance(0.95), LinearCost())
    choice = oracle.decide(BatchView(1, context_lens=(1000,))).config
    assert choice.enabled and choice.depth == 8
    # at batch 1 the verify budget is almost free, so the biggest budget wins
    assert choice == DEFAULT_ARMS[0]


def test_verify_cost_pushes_large_batches_to_small_budgets() -> None:
    oracle = GreedyOracle(ChainAcceptance(0.95), LinearCost())
    small = oracle.decide(BatchView(1, context_lens=(1000,))).config
    large = oracle.decide(BatchView(64, context_lens=(1000,) * 64)).config
    assert large.enabled and large.verify_tokens < small.verify_tokens


def test_passes_per_request_int64_contexts() -> None:
    cost = LinearCost()
    GreedyOracle(ChainAcceptance(0.5), cost).decide(BatchView(3, context_lens=(5, 7, 11)))
    assert all(c.dtype == np.int64 and c.tolist() == [5, 7, 11] for c in cost.seen)


def test_missing_contexts_do_not_crash() -> None:
    oracle = GreedyOracle(ChainAcceptance(0.9), LinearCost())
    assert oracle.decide(BatchView(2)).config.enabled
    assert oracle.decide(BatchView(0)).config == NO_SD


def test_with_the_project_models_budget_shrinks_as_the_batch_grows() -> None:
    """Against the roofline cost model and the paper-fitted tree acceptance, the oracle rediscovers
    TLT's rule: the widest verify budget at batch 1, never a wider one as the batch grows."""
    from tltcore.acceptance import get_acceptance
    from tltcore.cost import RooflineCostModel
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model

    cost = RooflineCostModel(get_model("qwen2.5-32b"), get_gpu("h100"), tp=4)
    oracle = GreedyOracle(get_acceptance("paper-qwen32b"), cost)
    budgets = [oracle.decide(BatchView(bs, context_lens=(8000,) * bs)).config.verify_tokens
               for bs in (1, 2, 4, 8, 16, 32, 64)]
    assert budgets[0] == 48
    assert budgets == sorted(budgets, reverse=True) and budgets[-1] < budgets[0]
    useless = GreedyOracle(get_acceptance("chain-0.0"), cost)
    assert useless.decide(BatchView(4, context_lens=(8000,) * 4)).config == NO_SD


def test_reads_the_drafter_it_is_shown_not_a_frozen_copy() -> None:
    """A stale drafter (quality down) makes deep trees worth less: the oracle shrinks or stops
    speculating as soon as the view carries the new drafter state."""
    from tltcore.acceptance import get_acceptance
    from tltcore.cost import RooflineCostModel
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model

    cost = RooflineCostModel(get_model("qwen2.5-32b"), get_gpu("h100"), tp=4)
    oracle = GreedyOracle(get_acceptance("paper-qwen32b"), cost)
    view = BatchView(16, context_lens=(4000,) * 16)
    fresh = oracle.decide(view).config
    stale = oracle.decide(BatchView(16, context_lens=(4000,) * 16, drafter=DrafterState(1, quality=0.3))).config
    assert fresh.enabled and stale == NO_SD
    assert oracle.decide(view).config == fresh  # nothing cached from the stale view
