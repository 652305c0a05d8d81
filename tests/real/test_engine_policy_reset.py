"""The native engine re-arms its SD policy at each step's start.

A worker may keep one policy object across steps (a bandit's windows are worth keeping), and the
elastic switch is one-way within a step. If the engine did not call ``reset(step)`` when a step
starts, a policy reused for step 1 would arrive switched on and speculate from the first, large-batch
iteration, exactly where TLT keeps SD off.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.policy.base import SDConfig, SDPolicy, Static  # noqa: E402
from tltcore.policy.elastic import Elastic  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.engine.requests import RunResult  # noqa: E402
from tltreal.model.transformer import Transformer  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.spec_decode.proposers import NgramProposer  # noqa: E402

from .tiny_models import MICRO  # noqa: E402

CFG = replace(MICRO, num_hidden_layers=1)
THRESHOLD = 2
N_NEW = [4, 4, 4, 4, 4, 24]  # five short responses and one long tail


@pytest.fixture(scope="module")
def target() -> Transformer:
    return random_model(CFG, seed=3, dtype=torch.float64, std=0.1)


def run_step(target: Transformer, policy: SDPolicy, step: int) -> RunResult:
    engine = Engine(target, policy, config=EngineConfig(max_batch=8, max_len=64, step=step),
                    proposer=NgramProposer())
    g = torch.Generator().manual_seed(step)
    for n_new in N_NEW:
        engine.add_request(torch.randint(0, CFG.vocab_size, (6,), generator=g).tolist(), n_new)
    return engine.run()


def test_a_policy_reused_for_the_next_step_starts_it_with_sd_off(target: Transformer) -> None:
    policy = Elastic(Static(SDConfig.chain(3)), threshold=THRESHOLD, consecutive=2)
    for step in range(2):
        ev = run_step(target, policy, step).events
        decode = ev[ev.kind == "decode"]
        large = decode[decode.batch_size > THRESHOLD]
        assert len(large) > 0 and (large.depth == 0).all(), (step, large[["batch_size", "depth"]])
        assert (ev.kind == "switch").sum() == 1, step
        assert (decode[decode.depth > 0].batch_size <= THRESHOLD).all() and (decode.depth > 0).any(), step
        assert (ev.step == step).all()
