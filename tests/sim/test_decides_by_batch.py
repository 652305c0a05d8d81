"""The batch-size-only hint (:class:`~tltcore.policy.base.DecidesByBatch`): a static shape and vLLM's table
answer ``decision_at(b)`` what ``decide`` answers at batch ``b``, and the expected-mode tails that run them
without views or Outcomes give the reference's event log bit for bit (``tests/sim/test_fast_identical.py``
hides the hint behind its recorder, so the policies run bare here)."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pandas as pd
import pytest

from conftest import needs_shared_traces
from tltcore.policy.base import BatchView, DecidesByBatch, NoSD, SDConfig, Static, decides_by_batch
from tltcore.policy.vllm_table import VllmTable
from tltsim.scenario import prepare, resolve, run_policy

TABLE = VllmTable(((8, SDConfig(8, 4, 32)), (16, SDConfig.chain(7)), (128, SDConfig(8, 4, 32)),
                   (256, SDConfig.chain(7))), above=SDConfig.chain(5))


@pytest.mark.parametrize("policy", [Static(), Static(SDConfig.chain(3)), VllmTable(), TABLE])
def test_decision_at_is_decide_at_that_batch_size(policy) -> None:
    assert isinstance(policy, DecidesByBatch) and decides_by_batch(policy) is policy
    for b in range(1, 600):
        assert policy.decision_at(b) == policy.decide(BatchView(b, (100,) * b, 1.0, 5, 2.5))
    assert decides_by_batch(NoSD()) is None  # it runs plain phases, never a tail


@needs_shared_traces()
@pytest.mark.parametrize("spec", ["static:8_4_32", "vllm-table", "vllm-table:8=8,16=7,128=8,256=7,above=5"])
@pytest.mark.parametrize("name", ["aime_qwen7b_64xh100", "dapo_qwen32b_polytrace"])
def test_tails_of_a_batch_size_policy_equal_the_reference(name, spec) -> None:
    s = resolve(name, [("acceptance.mode", "expected", "test"), ("trace.prompts_per_step", 24, "test")]).scenario
    inputs = prepare(s)
    cls = Static if spec.startswith("static") else VllmTable
    with (mock.patch.object(cls, "decision_at", autospec=True, side_effect=cls.decision_at) as asked,
          mock.patch.object(cls, "decide", autospec=True, side_effect=cls.decide) as decided):
        fast = run_policy(s, spec, inputs)
    slow = run_policy(s, spec, replace(inputs, engine=replace(inputs.engine, fast=False)))
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    through_decide = decided.call_count if cls is VllmTable else 0  # the table's decide asks decision_at
    assert asked.call_count - through_decide > 100  # the tails asked the hint, not decide
