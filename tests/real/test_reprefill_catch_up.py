"""The real engine's re-prefill switch brings the drafter up to date too (tltreal.engine.switch,
``switch="reprefill"``).

TLT's elastic switch, when SD turns on mid-generation, re-prefills every live context through the
target *and the drafter*: the drafter has seen none of the tokens generated while SD was off. The
simulator prices the switch that way, and the real engine must match it for the two to be compared.
What must hold, with SD switched on after 20 plain iterations:

- the output is still exactly the target's greedy output (lossless);
- the switch leaves no drafter work behind: no separate ``catch_up`` forward follows it, and on the
  modelled clock the ``switch_reprefill`` span costs exactly a target prefill plus a drafter prefill
  of every live context (a switch that skipped the drafter would look cheaper than it is, and its
  drafter work would surface later as a ``catch_up`` the simulator does not have);
- acceptance is the same as with the drafter-only ``catch_up`` switch: both leave the drafter
  exactly up to date.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.cost.protocol import PerConfigSDTimes  # noqa: E402
from tltcore.policy.base import NO_SD, BatchView, Decision, NoSD, Outcome, SDConfig  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.engine.requests import RunResult  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.spec_decode.proposers import OracleDrafter  # noqa: E402

from .tiny_models import TINY_V64  # noqa: E402

CFG = TINY_V64
SWITCH_AT = 20  # plain iterations first: every context is then longer than catch_up_limit (16)
CHAIN = SDConfig(3, 1, 3)
TARGET_PER_TOKEN, DRAFTER_PER_TOKEN = 1e-3, 1e-4


class SwitchOnAt:
    """Plain decoding for SWITCH_AT iterations, then SD switched on for good."""

    name = "switch-on-at"

    def decide(self, view: BatchView) -> Decision:
        if view.iteration < SWITCH_AT:
            return Decision(NO_SD)
        return Decision(CHAIN, switch_on=view.iteration == SWITCH_AT)

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        return None


class LinearCosts(PerConfigSDTimes):
    """A modelled clock whose prefill costs are per token, with the target's and drafter's apart."""

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return TARGET_PER_TOKEN * float(np.sum(new_tokens))

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return DRAFTER_PER_TOKEN * float(np.sum(new_tokens))

    def decode_time(self, context_lens: np.ndarray) -> float:
        return 1e-2

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        return 2e-2


@pytest.fixture(scope="module")
def target():
    return random_model(CFG, seed=1, dtype=torch.float64, std=0.1)


PROMPTS = [[(7 * i + j) % CFG.vocab_size for j in range(3 + i % 4)] for i in range(4)]


def run(target, policy, switch: str) -> RunResult:
    # The oracle drafts from its own KV cache of the context: partial acceptance (noise) that a stale
    # cache would change.
    drafter = OracleDrafter(target, noise=0.3) if policy is not None else None
    engine = Engine(target, policy or NoSD(), drafter,
                    EngineConfig(max_batch=4, max_len=80, switch=switch, clock="model"), costs=LinearCosts())
    for p in PROMPTS:
        engine.add_request(p, 40)
    return engine.run()


def test_reprefill_rebuilds_the_drafter_within_the_switch(target) -> None:
    result = run(target, SwitchOnAt(), "reprefill")
    assert result.outputs == run(target, None, "reprefill").outputs  # lossless
    ev = result.events
    (switch,) = ev[ev["kind"] == "switch_reprefill"].itertuples()
    live = switch.prefill_tokens  # every live context's tokens, re-prefilled
    assert switch.batch_size == len(PROMPTS) and live > len(PROMPTS) * 16
    assert switch.t_end - switch.t_start == pytest.approx((TARGET_PER_TOKEN + DRAFTER_PER_TOKEN) * live)
    assert not (ev["kind"] == "catch_up").any()  # nothing was left for the drafter to catch up on


def test_both_switch_modes_leave_the_drafter_equally_up_to_date(target) -> None:
    reprefill, catch_up = run(target, SwitchOnAt(), "reprefill"), run(target, SwitchOnAt(), "catch_up")
    assert reprefill.outputs == catch_up.outputs
    a, b = reprefill.decode_events, catch_up.decode_events
    sd_a, sd_b = a[a["depth"] > 0], b[b["depth"] > 0]
    assert int(sd_a["accepted"].sum()) > 0 and list(sd_a["accepted"]) == list(sd_b["accepted"])


def test_reprefill_packs_whole_requests_into_passes_of_the_switch_budget(target) -> None:
    """Passes hold whole requests up to ``prefill_budget * switch_prefill_fraction`` tokens, packed in
    order: six equal contexts of ~27 tokens under a budget of 60 go two to a pass (3 passes); under a
    budget below one context, one to a pass (6)."""
    prompts = [[(5 * i + j) % CFG.vocab_size for j in range(7)] for i in range(6)]

    def passes(budget: int) -> tuple[int, int]:
        drafter = OracleDrafter(target, noise=0.3)
        cfg = EngineConfig(max_batch=6, max_len=80, switch="reprefill", clock="model", prefill_budget=4 * budget,
                           switch_prefill_fraction=0.25)
        engine = Engine(target, SwitchOnAt(), drafter, cfg, costs=LinearCosts())
        for p in prompts:
            engine.add_request(p, 30)
        ev = engine.run().events
        (switch,) = ev[ev["kind"] == "switch_reprefill"].itertuples()
        return int(switch.iterations), int(switch.prefill_tokens)

    n, live = passes(60)
    assert 6 * 20 < live <= 6 * 30 and 2 * (live // 6 + 1) <= 60 < 3 * (live // 6)  # two contexts fit, three do not
    assert n == 3
    assert passes(10)[0] == 6
