"""Per-request records of finished requests: output log-probs and the target's hidden states.

What an RL step needs from rollout (old log-probs for GRPO's ratio, hidden states for drafter
training) must be what the target computes for those tokens, whatever the engine did to produce
them. Float64, so "the same" means equal to 1e-9:
- greedy with SD on (n-gram chains, a partially accepted draft tree) vs off: identical tokens,
  log-probs and hidden states;
- every run's records equal a fresh full-sequence target forward's log-softmax / target_probs /
  hidden states at those positions (sampling, top-p, SD, EOS and length cuts included);
- recording is off by default and then costs nothing (no records, no extra forward).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.policy.base import NoSD, SDConfig, SDPolicy, Static  # noqa: E402
from tltcore.policy.registry import make_policy  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.engine.requests import FinishedRequest, RunResult  # noqa: E402
from tltreal.model.sampling import SamplingParams, target_probs  # noqa: E402
from tltreal.model.transformer import Transformer, causal_mask  # noqa: E402
from tltreal.spec_decode.proposers import NgramProposer, OracleDrafter  # noqa: E402

from .tiny_models import TINY as CFG  # noqa: E402
from .tiny_models import random_prompts  # noqa: E402

TOL = 1e-9
RECORD = {"record_logprobs": True, "record_hidden": True}


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    rand = random_prompts(8, 16, CFG.vocab_size)
    return rand + [rand[0]] * 3  # a group, for sibling retrieval


def run(target, prompts, policy: SDPolicy, batch: int, sampling: SamplingParams | None = None, n_new: int = 40,
        eos: tuple[int, ...] = (), switch: str = "catch_up", **kwargs) -> RunResult:
    cfg = EngineConfig(max_batch=batch, max_len=16 + n_new + 24, eos_token_ids=eos, switch=switch, **RECORD)
    engine = Engine(target, policy, config=cfg, **kwargs)
    for i, p in enumerate(prompts):
        params = sampling if sampling is None else SamplingParams(sampling.temperature, sampling.top_p, seed=i)
        engine.add_request(p, n_new + (i % 3) * 4, params)
    return engine.run()


def fresh(target: Transformer, f: FinishedRequest, sampling: SamplingParams | None = None
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A fresh full-sequence forward over prompt + output: raw log-probs and sampling-distribution
    log-probs of the output tokens, and hidden states at every position."""
    tokens = torch.tensor(f.tokens)[None]
    n, start = tokens.shape[1], len(f.prompt)
    logits, hidden = target(tokens, torch.arange(n)[None], target.new_cache(1, n), torch.zeros(1, dtype=torch.long),
                            torch.zeros(1, dtype=torch.long), causal_mask(1, n))
    at = torch.arange(start - 1, n - 1)  # the logits each output token was drawn from
    out = tokens[0, start:]
    raw = logits[0, at].log_softmax(-1)[torch.arange(len(out)), out]
    sampling = sampling or SamplingParams()
    probs = target_probs(logits[0, at][None], torch.tensor([sampling.temperature], dtype=torch.float64),
                         torch.tensor([sampling.top_p], dtype=torch.float64))[0]
    return raw, probs[torch.arange(len(out)), out].log(), hidden[0]


def assert_matches_fresh(target, result: RunResult, sampling: SamplingParams | None = None) -> None:
    for f in result.finished.values():
        assert f.logprobs is not None and f.raw_logprobs is not None and f.hidden is not None
        assert len(f.logprobs) == len(f.raw_logprobs) == len(f.output)
        assert f.hidden.shape == (len(f.prompt) + len(f.output), CFG.hidden_size)
        assert not f.hidden.is_inference()  # an ordinary tensor: a training step may take it as input
        raw, used, hidden = fresh(target, f, sampling)
        torch.testing.assert_close(f.raw_logprobs, raw, rtol=0, atol=TOL)
        torch.testing.assert_close(f.logprobs, used, rtol=0, atol=TOL)
        torch.testing.assert_close(f.hidden, hidden, rtol=0, atol=TOL)


@pytest.fixture(scope="module")
def plain(tiny_target, prompts) -> RunResult:
    return run(tiny_target, prompts, NoSD(), batch=len(prompts))


@pytest.mark.parametrize(("name", "policy", "kwargs", "batch"), [
    ("ngram-chain", lambda: Static(SDConfig(4, 1, 4)), lambda t: {"proposer": NgramProposer()}, 3),
    ("noisy-oracle-tree", lambda: Static(SDConfig(4, 3, 8)), lambda t: {"drafter": OracleDrafter(t, noise=0.3)}, 5),
    ("elastic-reprefill", lambda: make_policy("elastic:6:2+static:4_2_6", seed=0),
     lambda t: {"drafter": OracleDrafter(t, noise=0.3), "switch": "reprefill"}, 11),
])
def test_greedy_records_equal_with_sd_on_and_off(tiny_target, prompts, plain, name, policy, kwargs, batch):
    sd = run(tiny_target, prompts, policy(), batch, **kwargs(tiny_target))
    if name == "elastic-reprefill":
        assert (sd.events["kind"] == "switch_reprefill").sum() == 1
    assert sd.outputs == plain.outputs
    assert (sd.decode_events["accepted"] > 0).any()
    for rid, ref in plain.finished.items():
        got = sd.finished[rid]
        assert got.rid == rid and got.prompt == ref.prompt and got.output == ref.output
        torch.testing.assert_close(got.raw_logprobs, ref.raw_logprobs, rtol=0, atol=TOL)
        assert torch.equal(got.logprobs, torch.zeros(len(got.output), dtype=torch.float64))  # greedy: one-hot
        torch.testing.assert_close(got.hidden, ref.hidden, rtol=0, atol=TOL)


def test_plain_records_equal_a_fresh_forward(tiny_target, prompts, plain):
    assert_matches_fresh(tiny_target, plain)


@pytest.mark.parametrize("mode", ["plain", "ngram", "tree"])
def test_sampled_records_equal_a_fresh_forward(tiny_target, prompts, mode):
    """Sampled tokens (temperature + top-p): ``logprobs`` is the log of target_probs, the
    distribution each token was drawn from; finite for every emitted token (lossless sampling never
    emits a token outside the top-p set)."""
    sampling = SamplingParams(temperature=0.8, top_p=0.9)
    policy, kwargs = {"plain": (NoSD(), {}), "ngram": (Static(SDConfig(3, 1, 3)), {"proposer": NgramProposer()}),
                      "tree": (Static(SDConfig(3, 2, 5)), {"drafter": OracleDrafter(tiny_target, noise=0.3)})}[mode]
    result = run(tiny_target, prompts, policy, 4, sampling, **kwargs)
    assert_matches_fresh(tiny_target, result, sampling)
    for f in result.finished.values():
        assert torch.isfinite(f.logprobs).all() and (f.logprobs <= 0).all()
        assert not torch.allclose(f.logprobs, f.raw_logprobs)  # temperature and top-p: not the raw ones


def test_records_stop_where_the_response_stops(tiny_target, prompts, plain):
    """EOS inside an accepted draft and the length cap: records cover exactly what was emitted."""
    eos = plain.outputs[1][10]
    result = run(tiny_target, prompts, Static(SDConfig(5, 1, 5)), 4, eos=(eos,), proposer=NgramProposer())
    assert result.outputs[1] == plain.outputs[1][: plain.outputs[1].index(eos) + 1]
    assert_matches_fresh(tiny_target, result)


def test_one_token_responses_have_records(tiny_target, prompts):
    cfg = EngineConfig(max_batch=4, max_len=40, **RECORD)
    engine = Engine(tiny_target, NoSD(), config=cfg)
    rid = engine.add_request(prompts[0], 1)
    f = engine.run().finished[rid]
    assert len(f.output) == len(f.logprobs) == 1 and f.hidden.shape[0] == len(prompts[0]) + 1


def test_records_are_off_by_default(tiny_target, prompts):
    calls = []
    engine = Engine(tiny_target, NoSD(), config=EngineConfig(max_batch=4, max_len=80))
    for p in prompts[:4]:
        engine.add_request(p, 8)
    original = tiny_target.forward

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    tiny_target.forward = counting
    try:
        result = engine.run()
    finally:
        del tiny_target.forward
    assert all(f.logprobs is None and f.raw_logprobs is None and f.hidden is None for f in result.finished.values())
    assert len(calls) == 1 + 7  # one prefill, 7 decode steps: no extra forward for the last tokens


def test_drafter_pairs_are_tokens_with_the_recorded_previous_hidden(tiny_target, prompts, monkeypatch):
    """Every pair the engine feeds the drafter (catch-up and draft root) is ``(t_j, h_{j-1})``
    (``h_{-1} = 0``) with ``h`` the hidden states it records: the alignment drafter training uses."""
    import tltreal.engine.sd_step as sd_step_module

    fed: list[tuple[int, int, int, torch.Tensor]] = []  # (rid, j, token, feat)
    real_catch_up = sd_step_module.catch_up

    def spy(drafter, cache, slots, draft_lens, tokens, feats, counts):
        for b, slot in enumerate(slots.tolist()):
            rid = engine.request_in_slot(slot).rid
            for i in range(int(counts[b])):
                fed.append((rid, int(draft_lens[b]) + i, int(tokens[b, i]), feats[b, i].clone()))
        return real_catch_up(drafter, cache, slots, draft_lens, tokens, feats, counts)

    monkeypatch.setattr(sd_step_module, "catch_up", spy)
    cfg = EngineConfig(max_batch=4, max_len=80, **RECORD)
    engine = Engine(tiny_target, make_policy("elastic:3:2+static:3_2_4", seed=0), OracleDrafter(tiny_target, noise=0.3),
                    cfg)
    for i, p in enumerate(prompts[:7]):
        engine.add_request(p, 12 + 3 * i)
    result = engine.run()
    assert len(fed) > 100
    for rid, j, token, feat in fed:
        f = result.finished[rid]
        assert token == f.tokens[j]
        expected = f.hidden[j - 1] if j > 0 else torch.zeros_like(feat)
        torch.testing.assert_close(feat, expected, rtol=0, atol=TOL)
