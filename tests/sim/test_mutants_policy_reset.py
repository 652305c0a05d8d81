"""Every rollout step starts with the elastic switch off, in the simulator's multi-step runner.

TLT's elastic switch is one-way *within* a rollout step (switching on re-prefills every live
request), and the policy object of a worker lives for the whole run. So the runner must re-arm it at
each step's start: otherwise step 1 would speculate from its first iteration, at the large batch
sizes where SD costs more than it saves, and the run would never pay (or log) a switch again.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from rollout_fixtures import LinearCost, Work

from tltcore.acceptance import ChainAcceptance
from tltcore.policy.base import SDConfig, Static
from tltcore.policy.elastic import Elastic
from tltsim.rollout import EngineConfig, RolloutRun

THRESHOLD = 4


def step_requests(step: int) -> Work:
    """8 short responses and 2 long ones: batch 10 (> threshold) first, then a tail of 2."""
    return Work(step=step, group_ids=np.array([f"g{i}" for i in range(10)]),
                        prompt_tokens=np.full(10, 20, dtype=np.int64),
                        response_tokens=np.array([5] * 8 + [100] * 2, dtype=np.int64))


def run_steps(n_steps: int, switch: str) -> pd.DataFrame:
    policy = Elastic(Static(SDConfig.chain(4)), threshold=THRESHOLD, consecutive=3)
    runner = RolloutRun([policy], cost=LinearCost(), accept=ChainAcceptance((0.5,)),
                        engine=EngineConfig(switch=switch), deal_mode="trace")
    for step in range(n_steps):
        runner.step(step_requests(step))
    ev = runner.events()
    return ev[ev.worker >= 0]


def test_every_step_starts_without_sd_and_switches_on_once_in_its_tail() -> None:
    for switch in ("reprefill", "catch_up"):
        ev = run_steps(3, switch)
        for step in range(3):
            rows = ev[ev.step == step]
            large = rows[(rows.kind == "decode") & (rows.batch_size > THRESHOLD)]
            assert len(large) > 0 and (large.depth == 0).all(), (switch, step, large[["batch_size", "depth"]])
            assert (rows.kind == "switch").sum() == 1, (switch, step)
            assert (rows[(rows.kind == "decode") & (rows.depth > 0)].batch_size <= THRESHOLD).all()


def test_later_steps_repeat_the_first_steps_schedule() -> None:
    """Identical workloads, identical per-step rows: nothing of step 0's switch leaks into step 1."""
    ev = run_steps(2, "reprefill")
    cols = ["kind", "batch_size", "iterations", "depth", "tokens", "prefill_tokens"]
    first = ev[ev.step == 0][cols].reset_index(drop=True)
    second = ev[ev.step == 1][cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(first, second)
