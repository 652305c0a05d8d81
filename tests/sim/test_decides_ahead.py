"""The block path for policies that decide every iteration (``tltsim.rollout.fast.ahead``, the
``DecidesAhead`` hint ``sglang-ema`` offers) gives the reference's event log bit for bit: the EMA and
the choice folded in one call per block, the block cut where the answer changes, the unused draws given
back. ``tests/sim/test_fast_identical.py`` wraps every policy in a recorder that hides the hint, so
this file runs the policies bare and compares the frames (no view comparison here)."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pandas as pd
import pytest

from conftest import needs_shared_traces
from tltcore.policy.base import DecidesAhead
from tltcore.policy.sglang_ema import SglangEma
from tltsim.rollout.fast import ahead
from tltsim.scenario import prepare, resolve, run_policy

# the default; depths that flip often (no hysteresis, a fast EMA); depth 0 among the candidates; one range
POLICIES = ("sglang-ema", "sglang-ema:depths=1,2,4,8:hysteresis=0:smoothing=0.9",
            "sglang-ema:depths=0,1,3,7", "sglang-ema:depths=2,5:ranges=1")


def _frames(spec: str, seed: int, mode: str) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    s = resolve(None, [("policies", (spec,), "test"), ("acceptance.mode", mode, "test"), ("seed", seed, "test"),
                       ("trace.prompts_per_step", 12, "test"), ("trace.cap", 6000, "test"),
                       ("trace.num_steps", 2, "test"), ("cluster.gpus", 8, "test"),
                       ("cluster.tp", 4, "test")]).scenario
    inputs = prepare(s)
    block = ahead.run_expected_block if mode == "expected" else ahead.run_block
    with mock.patch.object(ahead, block.__name__, wraps=block) as blocks:
        fast = run_policy(s, spec, inputs)
    slow = run_policy(s, spec, replace(inputs, engine=replace(inputs.engine, fast=False)))
    return fast, slow, blocks.call_count


def test_sglang_ema_offers_the_block_hint():
    assert isinstance(SglangEma(), DecidesAhead)


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["stochastic", "expected"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spec", POLICIES)
def test_blocks_of_one_iteration_spans_equal_the_reference(spec, seed, mode):
    fast, slow, blocks = _frames(spec, seed, mode)
    assert blocks > 0  # the block path ran
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)


@needs_shared_traces()
@pytest.mark.parametrize("mode", ["stochastic", "expected"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spec", POLICIES)
def test_blocks_of_many_workers_together_equal_the_reference(spec, seed, mode):
    """Eight workers' blocks a round at a time (``AheadBlocks``), both acceptance modes: different
    shapes and batch sizes in one round, blocks cut at different iterations (a draw mapped with
    another worker's shape, a price with another's batch, a padded request counted, or a rewind off
    by one fails it)."""
    s = resolve(None, [("policies", (spec,), "test"), ("acceptance.mode", mode, "test"),
                       ("seed", seed, "test"), ("trace.prompts_per_step", 24, "test"), ("trace.cap", 9000, "test"),
                       ("trace.num_steps", 2, "test"), ("cluster.gpus", 32, "test"),
                       ("cluster.tp", 4, "test")]).scenario
    assert s.n_workers == 8
    inputs = prepare(s)
    with mock.patch.object(ahead.AheadBlocks, "round", autospec=True, side_effect=ahead.AheadBlocks.round) as rounds:
        fast = run_policy(s, spec, inputs)
    slow = run_policy(s, spec, replace(inputs, engine=replace(inputs.engine, fast=False)))
    assert rounds.call_count > 0
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
