"""SD spans of finite holds run in chunks (:mod:`tltsim.rollout.fast.held_spans`: expected mode many per
numpy pass, stochastic mode finish to finish with the draws taken at once) and equal the reference bit for
bit: the event log, the finish times, and every view the policy is shown and Outcome it is told, in order.

The policies here keep one shape (the same object) with holds that vary answer by answer, so a chunk
runs spans that end at their hold (rows merged as the reference merges them) and at finishes, and now
and then answer with another shape, ``switch_on``, a hold of one iteration or until an event (each
ends a chunk: another path runs the answer). Trace-free: a synthetic workload of a few prompt groups.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pandas as pd
import pytest
from rollout_fixtures import LinearCost, Work

from tltcore.acceptance import paper_qwen32b_tp4
from tltcore.cost import RooflineCostModel
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import HOLD_UNTIL_EVENT, BatchView, Decision, Outcome, SDConfig
from tltsim.rollout import EngineConfig, simulate_step
from tltsim.rollout.fast import held_spans

CHAIN, TREE, SHORT = SDConfig(4, 1, 4), SDConfig(8, 4, 32), SDConfig(2, 1, 2)


class _Varying:
    """Answers ``CHAIN`` held 2..6 iterations in turn; every 9th answer ``TREE``, every 13th a hold of
    one iteration, every 17th ``SHORT`` held until an event, every 23rd ``switch_on``. Records what it
    is shown and told (``hint``: it asks for the remaining lengths; ``steady``: only ``CHAIN``, held 2..6,
so a worker's spans run chunk after chunk).

    ``SHORT``, a shape no neighbouring answer has: an expected-mode tail
    (:mod:`~tltsim.rollout.fast.expected_tail`) writes its rows as a column block, which does not merge
    its first span with an open row of the same shape and batch as the reference's rows do."""

    def __init__(self, hint: bool, steady: bool) -> None:
        self.name, self.hint, self.steady = "varying", hint, steady
        self.asked = 0
        self.seen: list[BatchView | Outcome] = []

    @property
    def wants_remaining_hint(self) -> bool:
        return self.hint

    def decide(self, view: BatchView) -> Decision:
        self.seen.append(view)
        self.asked += 1
        k = self.asked
        if self.steady:  # only CHAIN with finite holds: chunk after chunk
            return Decision(CHAIN, 2 + k % 5)
        if k % 23 == 0:
            return Decision(CHAIN, 4, switch_on=True)
        if k % 17 == 0:
            return Decision(SHORT, HOLD_UNTIL_EVENT)
        if k % 13 == 0:
            return Decision(CHAIN, 1)
        return Decision(TREE if k % 9 == 0 else CHAIN, 2 + k % 5)

    def observe(self, outcome: Outcome) -> None:
        self.seen.append(outcome)

    def reset(self, step: int) -> None:
        return None


def _work(n: int, seed: int) -> Work:
    rng = np.random.default_rng(seed)
    return Work(0, np.array([f"g{i // 4}" for i in range(n)]), rng.integers(20, 400, n).astype(np.int64),
                rng.integers(30, 900, n).astype(np.int64))


def _run(fast: bool, hint: bool, steady: bool, seed: int, max_batch: int | None, mode: str = "expected",
         cost=None):
    policies = [_Varying(hint, steady) for _ in range(2)]
    engine = EngineConfig(fast=fast, acceptance_mode=mode)
    if max_batch is not None:
        engine = EngineConfig(fast=fast, acceptance_mode=mode, max_batch=max_batch)
    cost = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("h100")) if cost is None else cost
    res = simulate_step(_work(48, seed), policies=policies, cost=cost, accept=paper_qwen32b_tp4(), engine=engine,
                        seed=seed)
    return res, [p.seen for p in policies]


@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("max_batch", [None, 9])
@pytest.mark.parametrize("steady", [False, True])
@pytest.mark.parametrize("hint", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_held_spans_equal_reference(seed, hint, steady, max_batch, mode):
    chunked = held_spans.run_held if mode == "expected" else held_spans.run_held_draws
    with mock.patch.object(held_spans, chunked.__name__, wraps=chunked) as chunks:
        fast, fast_seen = _run(True, hint, steady, seed, max_batch, mode)
    slow, slow_seen = _run(False, hint, steady, seed, max_batch, mode)
    assert chunks.call_count > 0
    pd.testing.assert_frame_equal(fast.events, slow.events, check_exact=True)
    assert np.array_equal(fast.finish_times, slow.finish_times)
    assert fast_seen == slow_seen
    sd = fast.events[(fast.events["kind"] == "decode") & (fast.events["depth"] > 0)]
    assert (sd["iterations"] > 6).any()  # rows of several spans ended at their hold, merged


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stochastic_chunk_that_cannot_finish_a_span_runs_it_as_the_per_span_path(seed):
    """Where a chunk's draws end before its first finish (every third chunk here), its draws go back
    to the stream and the span runs as the per-span path runs it: still the reference's results."""
    real, calls = held_spans._segments, []

    def short(*args):
        calls.append(args)
        return [] if len(calls) % 3 == 0 else real(*args)

    with mock.patch.object(held_spans, "_segments", short):
        fast, fast_seen = _run(True, False, True, seed, None, "stochastic")
    slow, slow_seen = _run(False, False, True, seed, None, "stochastic")
    assert len(calls) >= 3
    pd.testing.assert_frame_equal(fast.events, slow.events, check_exact=True)
    assert np.array_equal(fast.finish_times, slow.finish_times)
    assert fast_seen == slow_seen


@pytest.mark.parametrize("mode", ["expected", "stochastic"])
@pytest.mark.parametrize("seed", [0, 1])
def test_held_spans_without_a_row_pricer_price_call_by_call_as_the_reference(seed, mode):
    """A cost model without batched forms (no row pricer): the chunks price each iteration with its
    ``sd_time``, as the reference does."""
    fast, fast_seen = _run(True, False, True, seed, None, mode, LinearCost())
    slow, slow_seen = _run(False, False, True, seed, None, mode, LinearCost())
    pd.testing.assert_frame_equal(fast.events, slow.events, check_exact=True)
    assert np.array_equal(fast.finish_times, slow.finish_times)
    assert fast_seen == slow_seen
