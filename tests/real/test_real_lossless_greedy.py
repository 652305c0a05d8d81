"""Greedy speculative decoding is lossless: token-for-token equal to plain decoding.

32 prompts x >= 128 new tokens, continuous batching (the running batch is smaller than the number
of prompts, requests join as others finish), float64 (see tltreal.model.transformer's numerical policy). The
reference is a plain no-SD run of the same engine with a *different* batch composition.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.events import check_event_log  # noqa: E402
from tltcore.policy.base import NO_SD, BatchView, Decision, NoSD, Outcome, SDConfig, Static  # noqa: E402
from tltcore.policy.registry import make_policy  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.engine.requests import RunResult  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.spec_decode import kernels  # noqa: E402
from tltreal.spec_decode.proposers import OracleDrafter, random_drafter  # noqa: E402

from .tiny_models import TINY as CFG  # noqa: E402
from .tiny_models import random_prompts  # noqa: E402

N_PROMPTS = 32


@pytest.fixture(scope="module")
def prompts():
    return random_prompts(N_PROMPTS, 20, CFG.vocab_size)


def run(target, prompts, policy, drafter, batch: int, n_new: int = 128, switch: str = "catch_up") -> RunResult:
    engine = Engine(target, policy, drafter, EngineConfig(max_batch=batch, max_len=20 + n_new + 40, switch=switch))
    for i, p in enumerate(prompts):
        engine.add_request(p, n_new + (i % 5) * 8)
    return engine.run()


@pytest.fixture(scope="module")
def reference(tiny_target, prompts):
    return run(tiny_target, prompts, NoSD(), None, batch=N_PROMPTS)


class FlipFlop:
    """Changes its mind every iteration (off, chain, tree): drafter state must catch up correctly."""

    name = "flip-flop"
    CYCLE = (NO_SD, SDConfig(3, 1, 3), NO_SD, NO_SD, SDConfig(4, 3, 9), SDConfig(2, 2, 4))

    def __init__(self) -> None:
        self.i = 0

    def decide(self, view: BatchView) -> Decision:
        self.i += 1
        return Decision(self.CYCLE[self.i % len(self.CYCLE)])

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        self.i = 0


def test_plain_decoding_is_batch_independent(tiny_target, prompts, reference):
    small = run(tiny_target, prompts, NoSD(), None, batch=3)
    assert small.outputs == reference.outputs
    assert all(len(v) >= 128 for v in reference.outputs.values())


@pytest.mark.parametrize(("case", "policy", "drafter", "batch"), [
    ("oracle-chain", lambda: Static(SDConfig(4, 1, 4)), lambda t: OracleDrafter(t), 8),
    ("random-tree", lambda: Static(SDConfig(4, 2, 6)), lambda t: random_drafter(t, seed=3), 12),
    ("noisy-oracle-tree", lambda: Static(SDConfig(5, 3, 10)), lambda t: OracleDrafter(t, noise=0.3), 16),
    ("elastic-beg-mab", lambda: make_policy("elastic:12:3+beg-mab", seed=0),
     lambda t: OracleDrafter(t, noise=0.3), 16),
    ("elastic-reprefill", lambda: make_policy("elastic:12:3+static:4_2_6", seed=0),
     lambda t: OracleDrafter(t, noise=0.3), 16),
    ("flip-flop", FlipFlop, lambda t: random_drafter(t, seed=5), 6),
])
def test_speculative_greedy_equals_plain(tiny_target, prompts, reference, case, policy, drafter, batch):
    switch = "reprefill" if case == "elastic-reprefill" else "catch_up"
    result = run(tiny_target, prompts, policy(), drafter(tiny_target), batch, switch=switch)
    assert result.outputs == reference.outputs
    sd = result.decode_events[result.decode_events["depth"] > 0]
    assert len(sd) > 0
    if case == "oracle-chain":  # the oracle accepts every draft token (emission stops at response ends)
        assert int(sd["accepted"].sum()) == int(sd["drafted"].sum())
        assert 4.8 < result.mean_accept_length <= 5.0
    if case == "noisy-oracle-tree":  # partial acceptance: the path compaction is exercised
        assert 1.5 < result.mean_accept_length < 6.0
    if case == "elastic-beg-mab":
        assert (result.events["kind"] == "switch").sum() == 1 and (result.events["kind"] == "catch_up").any()
        assert (result.decode_events["depth"] == 0).any()
    if case == "elastic-reprefill":  # TLT's switch: target + drafter re-prefill, still lossless
        assert (result.events["kind"] == "switch_reprefill").sum() == 1


def test_telemetry_follows_event_schema(tiny_target, prompts):
    result = run(tiny_target, prompts[:6], make_policy("elastic:4:2+static:3_2_4", seed=0),
                 random_drafter(tiny_target, seed=3), batch=4, n_new=16)
    ev = result.events
    check_event_log(ev)
    assert set(ev["kind"]) == {"prefill", "decode", "switch", "catch_up", "stage"}
    work = ev[ev["worker"] >= 0]
    assert (ev["source"] == "real").all() and (work["iterations"] == 1).all() and (ev["phase"] == "rollout").all()
    assert (work["t_start"].diff().dropna() >= 0).all() and (ev["t_start"] >= 0).all()
    assert work["tokens"].sum() == result.generated_tokens  # prefill emits each first token
    assert ev.loc[ev["kind"] == "prefill", "tokens"].sum() == 6
    stage = ev[ev["kind"] == "stage"].iloc[0]
    assert stage["worker"] == -1 and stage["t_end"] == pytest.approx(result.wall_s)
    dec = result.decode_events
    sd = dec[dec["depth"] > 0]
    assert (sd["drafted"] == sd["batch_size"] * 4).all()
    assert (sd["tokens"] == sd["accepted"] + sd["batch_size"]).all()
    assert set(sd["sd_config"]) == {"3_2_4"}


def test_triton_path_is_lossless(tiny_target, prompts, reference):
    kernels.set_use_triton(True)
    try:
        result = run(tiny_target, prompts[:3], Static(SDConfig(3, 2, 5)), OracleDrafter(tiny_target, noise=0.3),
                     batch=3, n_new=12)
    finally:
        kernels.set_use_triton(None)
    for rid, out in result.outputs.items():
        assert out == reference.outputs[rid][: len(out)]
    assert result.mean_accept_length > 1.2


def test_eos_stops_requests_identically(tiny_target, prompts, reference):
    eos = reference.outputs[0][40]
    results = []
    cases = [(NoSD(), None, 32), (Static(SDConfig(4, 2, 6)), OracleDrafter(tiny_target, noise=0.3), 5)]
    for policy, drafter, batch in cases:
        engine = Engine(tiny_target, policy, drafter, EngineConfig(max_batch=batch, max_len=200, eos_token_ids=(eos,)))
        for p in prompts[:8]:
            engine.add_request(p, 128)
        results.append(engine.run().outputs)
    assert results[0] == results[1]
    assert results[0][0] == reference.outputs[0][: reference.outputs[0].index(eos) + 1]


def test_sampled_decoding_is_reproducible_per_request(tiny_target, prompts):
    """Per-request generators: the same seeds give the same tokens, whatever the batch composition."""
    from tltreal.model.sampling import SamplingParams

    outs = []
    for batch in (3, 8, 8):
        engine = Engine(tiny_target, Static(SDConfig(3, 2, 5)), OracleDrafter(tiny_target, noise=0.3),
                        EngineConfig(max_batch=batch, max_len=80))
        for i, p in enumerate(prompts[:8]):
            engine.add_request(p, 24, SamplingParams(temperature=0.9, top_p=0.9, seed=i))
        outs.append(engine.run().outputs)
    assert outs[0] == outs[1] == outs[2]
    assert len({tuple(v) for v in outs[0].values()}) == 8


def test_engine_recent_accept_is_the_shared_ema(tiny_target, prompts):
    """The native engine shows policies the same recent-accept estimate as the simulator."""
    from tltcore.policy.recent_accept import RecentAccept

    class Spy(Static):
        def __init__(self) -> None:
            super().__init__(SDConfig(3, 2, 5))
            self.views: list[BatchView] = []
            self.outcomes: list[Outcome] = []

        def decide(self, view: BatchView) -> Decision:
            self.views.append(view)
            return super().decide(view)

        def observe(self, outcome: Outcome) -> None:
            self.outcomes.append(outcome)

    spy = Spy()
    run(tiny_target, prompts[:4], spy, OracleDrafter(tiny_target, noise=0.3), batch=4, n_new=20)
    ema = RecentAccept()
    for view, outcome in zip(spy.views, spy.outcomes, strict=True):
        assert view.recent_accept == ema.value
        ema.update(outcome.accept_length)
        assert sum(outcome.accepted_per_request) == outcome.accepted_tokens
        assert len(outcome.accepted_per_request) == outcome.batch_size


def test_model_clock_makes_bandit_runs_repeatable(tiny_target, prompts):
    """Wall-clock rewards make BEG-MAB runs differ; with the modelled clock the whole event log repeats."""
    from tltcore.cost import RooflineCostModel
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import ModelShape

    shape = ModelShape("tiny", CFG.num_hidden_layers, CFG.hidden_size, CFG.num_attention_heads,
                       CFG.num_key_value_heads, CFG.intermediate_size, CFG.vocab_size)
    costs = RooflineCostModel(shape, get_gpu("h100"))

    def once():
        engine = Engine(tiny_target, make_policy("beg-mab:arms=4_2_6,3_1_3,2_2_3:thresholds=1", seed=0),
                        OracleDrafter(tiny_target, noise=0.3), EngineConfig(max_batch=6, max_len=80, clock="model"),
                        costs=costs)
        for p in prompts[:6]:
            engine.add_request(p, 30)
        return engine.run()

    a, b = once(), once()
    import pandas as pd

    pd.testing.assert_frame_equal(a.events, b.events)
    dec = a.decode_events
    ctx0 = dec.iloc[0]
    assert ctx0["t_end"] - ctx0["t_start"] > 0 and a.wall_s == pytest.approx(a.events["t_end"].max())


def test_accepted_counts_whole_while_emitted_stops_at_the_response_end(tiny_target, prompts):
    """The simulator's words (Outcome): an oracle chain of 6 is accepted whole, but a request with 3
    tokens left emits only those 3, and the event log and recent-accept see the 3."""

    class Spy(Static):
        def __init__(self) -> None:
            super().__init__(SDConfig(6, 1, 6))
            self.outcomes: list[Outcome] = []

        def observe(self, outcome: Outcome) -> None:
            self.outcomes.append(outcome)

    spy = Spy()
    engine = Engine(tiny_target, spy, OracleDrafter(tiny_target), EngineConfig(max_batch=2, max_len=40))
    rid = engine.add_request(prompts[0][:5], 4)  # the prefill's first token leaves 3
    result = engine.run()
    first = next(o for o in spy.outcomes if o.config.enabled)
    assert first.accepted_per_request == (6.0,) and first.emitted_tokens == 3
    assert len(result.outputs[rid]) == 4
    sd = result.decode_events[result.decode_events["depth"] > 0]
    assert int(sd["tokens"].iloc[0]) == 3


def test_bf16_greedy_is_batch_invariant_and_sd_lossless(prompts):
    """In bfloat16 the engine normalises, takes attention softmax and acceptance probabilities in
    float32 (as transformers): greedy output then does not depend on batch shape, and SD equals plain
    decoding. With RMSNorm in bf16 most of these prompts diverge (reports/losslessness)."""
    bf16 = random_model(CFG, seed=1, dtype=torch.bfloat16, std=0.1)
    ref = run(bf16, prompts[:12], NoSD(), None, batch=12, n_new=40)
    assert run(bf16, prompts[:12], NoSD(), None, batch=3, n_new=40).outputs == ref.outputs
    sd = run(bf16, prompts[:12], Static(SDConfig(4, 2, 6)), OracleDrafter(bf16, noise=0.3), batch=5, n_new=40)
    assert sd.outputs == ref.outputs
