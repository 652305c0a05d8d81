"""The padded target (tltreal.rl.padded_target): a big model with exactly a small model's behaviour.

What must hold: the padded target's logits and hidden states are the small model's (float64, to
rounding of a longer dot product) and its greedy outputs are identical; the added capacity is
really there and really computed (parameter count, non-zero random weights, KV written by appended
layers, a non-zero output projection would change the result); a drafter trained on the small
model, rebound to the padded one, proposes exactly what it proposed before, and SD on the padded
target stays lossless; :func:`measure_sd_speedup` reports consistent fields. No timings are
asserted (speed is measured by benchmarks/sd_pays_cpu.py).
"""

from __future__ import annotations

import dataclasses
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.model_config import ModelConfig  # noqa: E402
from tltcore.policy.base import SDConfig, Static  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.model.transformer import causal_mask  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.rl.drafter_train import DrafterTrainerConfig, engine_acceptance, train_steps  # noqa: E402
from tltreal.rl.padded_target import (  # noqa: E402
    SDSpeedup,
    measure_sd_speedup,
    pad_target,
    parameter_count,
    rebind_drafter,
    refresh_padded_target,
)
from tltreal.spec_decode.proposers.eagle import EagleDrafter, random_drafter  # noqa: E402
from tltreal.spot.sample_buffer import SampleBuffer, target_sample  # noqa: E402

from .drafter_fixtures import progressions  # noqa: E402

SMALL = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=256)
VARIANTS = {
    "llama": SMALL,
    "llama-biases-tied": dataclasses.replace(SMALL, qkv_bias=True, o_bias=True, mlp_bias=True,
                                             tie_word_embeddings=True),
    "qwen2": dataclasses.replace(SMALL, model_type="qwen2", qkv_bias=True),
    "qwen3": dataclasses.replace(SMALL, model_type="qwen3", qk_norm=True),
}
EXTRA, WIDTH = 3, 160


def _prefill(model, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b, n = tokens.shape
    zero = torch.zeros(b, dtype=torch.long)
    return model(tokens, torch.arange(n).expand(b, n), model.new_cache(b, n), torch.arange(b), zero,
                 causal_mask(b, n))


def _greedy(target, prompts, new_tokens, drafter=None, config: SDConfig | None = None):
    engine = Engine(target, Static(config or SDConfig()), drafter,
                    EngineConfig(max_batch=4, max_len=max(map(len, prompts)) + new_tokens + 1, max_verify=8,
                                 max_draft_nodes=16))
    for p in prompts:
        engine.add_request(list(p), new_tokens)
    return engine.run().outputs


@pytest.fixture(scope="module")
def trained():
    """A float64 target that predicts arithmetic progressions and a drafter trained on it (a random
    pair would accept almost nothing, and the acceptance paths would go untested)."""
    from .drafter_fixtures import train_target

    cfg = dataclasses.replace(SMALL, vocab_size=64, hidden_size=64, intermediate_size=96)
    target = train_target(cfg, steps=120, batch=16, length=32, seed=0, lr=3e-3).to(torch.float64)
    buf = SampleBuffer(window_tokens=64)
    for seq in progressions(32, 40, seed=7, vocab=cfg.vocab_size):
        buf.add(target_sample(target, seq))
    drafter = random_drafter(target, seed=1)
    train_steps(drafter, buf, 60, DrafterTrainerConfig(lr=3e-3, samples_per_step=4, window_tokens=64, seed=0))
    prompts = progressions(4, 6, seed=99, vocab=cfg.vocab_size)
    return target, drafter.eval(), prompts


@pytest.fixture()
def small():
    """A fresh float64 :data:`SMALL` (seed 0) for each test: some of them change its weights."""
    return random_model(SMALL, seed=0, dtype=torch.float64)


# ---- same behaviour ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(VARIANTS))
def test_padded_logits_and_hidden_states_are_the_small_models(name):
    small = random_model(VARIANTS[name], seed=0, dtype=torch.float64)
    big = pad_target(small, extra_layers=EXTRA, intermediate_size=WIDTH, seed=3)
    tokens = torch.randint(0, SMALL.vocab_size, (2, 17), generator=torch.Generator().manual_seed(0))
    for got, want in zip(_prefill(big, tokens), _prefill(small, tokens), strict=True):
        assert torch.allclose(got, want, rtol=0, atol=1e-12)
    for got, want in zip(big.forward_train(tokens), small.forward_train(tokens), strict=True):
        assert torch.allclose(got.detach(), want.detach(), rtol=0, atol=1e-12)
    # every weight is written (to_empty leaves memory as it was: a NaN there would survive a zero o_proj)
    for layer in big.model.layers[SMALL.num_hidden_layers:]:
        norms = [m for n, m in layer.named_modules() if n.endswith("norm")]
        assert norms and all(bool((m.weight == 1).all()) for m in norms)


def test_padded_greedy_outputs_are_identical(small):
    big = pad_target(small, extra_layers=EXTRA, intermediate_size=WIDTH)
    prompts = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12], [13]]
    assert _greedy(big, prompts, 12) == _greedy(small, prompts, 12)


def test_refresh_follows_a_changed_small_model_and_padding_is_deterministic(small):
    big = pad_target(small, extra_layers=EXTRA, intermediate_size=WIDTH, seed=5)
    again = pad_target(small, extra_layers=EXTRA, intermediate_size=WIDTH, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(big.state_dict().values(), again.state_dict().values(), strict=True))
    with torch.no_grad():  # an RL update of the small model
        for p in small.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()),
                                      dtype=p.dtype))
    tokens = torch.arange(1, 13)[None]
    assert not torch.allclose(_prefill(big, tokens)[0], _prefill(small, tokens)[0], rtol=0, atol=1e-6)
    assert refresh_padded_target(big, small) is big
    assert torch.allclose(_prefill(big, tokens)[0], _prefill(small, tokens)[0], rtol=0, atol=1e-12)


def test_padding_only_widens_and_refresh_refuses_another_shape(small):
    with pytest.raises(ValueError, match="only widen"):
        pad_target(small, extra_layers=1, intermediate_size=SMALL.intermediate_size - 1)
    with pytest.raises(ValueError, match="extra_layers"):
        pad_target(small, extra_layers=-1)
    other = random_model(dataclasses.replace(SMALL, hidden_size=64), seed=0, dtype=torch.float64)
    with pytest.raises(ValueError, match="not built from"):
        refresh_padded_target(pad_target(small, extra_layers=1), other)


# ---- the added capacity is real --------------------------------------------------------------------
def test_appended_layers_and_widened_units_hold_real_weights_and_really_compute(small):
    big = pad_target(small, extra_layers=EXTRA, intermediate_size=WIDTH)
    h, n0, layers = SMALL.hidden_size, SMALL.intermediate_size, SMALL.num_hidden_layers + EXTRA
    q, kv = SMALL.num_attention_heads * SMALL.head_dim, SMALL.num_key_value_heads * SMALL.head_dim
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * WIDTH + 2 * h
    assert big.cfg.num_hidden_layers == layers and big.cfg.intermediate_size == WIDTH
    assert parameter_count(big) == 2 * SMALL.vocab_size * h + h + layers * per_layer
    for i, layer in enumerate(big.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        assert mlp.gate_proj.weight[n0:].abs().min() > 0 and mlp.up_proj.weight[n0:].abs().min() > 0
        assert torch.count_nonzero(mlp.down_proj.weight[:, n0:]) == 0
        if i >= SMALL.num_hidden_layers:
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
                assert proj.weight.abs().min() > 0
            assert torch.count_nonzero(attn.o_proj.weight) == 0 and torch.count_nonzero(mlp.down_proj.weight) == 0
    # They are in the forward path: their KV is written, and a non-zero output projection would show.
    tokens = torch.arange(1, 9)[None]
    cache = big.new_cache(1, 8)
    zero = torch.zeros(1, dtype=torch.long)
    logits, _ = big(tokens, torch.arange(8)[None], cache, zero, zero, causal_mask(1, 8))
    for layer in range(SMALL.num_hidden_layers, layers):
        assert torch.count_nonzero(cache.k[layer]) > 0 and torch.count_nonzero(cache.v[layer]) > 0
    with torch.no_grad():
        big.model.layers[-1].mlp.down_proj.weight.normal_(0, 0.02, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(_prefill(big, tokens)[0], logits, rtol=0, atol=1e-6)


# ---- the drafter -------------------------------------------------------------------------------------
def test_rebound_drafter_proposes_exactly_what_it_proposed_and_sd_stays_lossless(trained):
    target, drafter, prompts = trained
    big = pad_target(target, extra_layers=2, intermediate_size=4 * target.cfg.intermediate_size)
    rebound = rebind_drafter(drafter, big)
    assert isinstance(rebound, EagleDrafter) and rebound.__dict__["_target"] is big
    assert rebound.cfg == drafter.cfg and drafter.__dict__["_target"] is target  # the original is untouched
    assert parameter_count(rebound) == parameter_count(drafter)
    mine, theirs = rebound.state_dict(), drafter.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)  # bit-equal copy
    # Proposals: the same features in, the same logits out (draft_forward on fresh caches).
    seq = torch.tensor(prompts[0] + prompts[1])[None]
    n = seq.shape[1]
    _, h_small = _prefill(target, seq)
    _, h_big = _prefill(big, seq)
    feats_small = torch.cat([torch.zeros_like(h_small[:, :1]), h_small[:, :-1]], 1)
    feats_big = torch.cat([torch.zeros_like(h_big[:, :1]), h_big[:, :-1]], 1)
    zero = torch.zeros(1, dtype=torch.long)
    want = drafter.draft_forward(seq, feats_small, torch.arange(n)[None], drafter.new_cache(1, n), zero, zero,
                                 causal_mask(1, n))
    got = rebound.draft_forward(seq, feats_big, torch.arange(n)[None], rebound.new_cache(1, n), zero, zero,
                                causal_mask(1, n))
    for g, w in zip(got, want, strict=True):  # rounding only (the padded down_proj sums longer rows)
        assert float((g - w).abs().max()) <= 1e-10 * max(1.0, float(w.abs().max()))
    assert torch.equal(got[0].argmax(-1), want[0].argmax(-1))
    # End to end: the same accepted drafts, and SD output == plain output == the small model's.
    for depth in (3, 5):
        a_small = engine_acceptance(target, drafter, prompts, new_tokens=20, depth=depth)
        a_big = engine_acceptance(big, rebound, prompts, new_tokens=20, depth=depth)
        assert (a_big.accepted, a_big.drafts, a_big.outputs) == (a_small.accepted, a_small.drafts, a_small.outputs)
        assert a_big.accept_length > 1.5  # a trained drafter: acceptance paths exercised
    plain = _greedy(big, prompts, 20)
    assert plain == _greedy(target, prompts, 20)
    for config in (SDConfig(4, 1, 4), SDConfig(3, 2, 5)):
        assert _greedy(big, prompts, 20, rebound, config) == plain


def test_rebind_refuses_a_target_the_drafter_was_not_trained_for(small):
    drafter = random_drafter(small, seed=1)
    with pytest.raises(ValueError, match="embed_tokens"):
        rebind_drafter(drafter, random_model(SMALL, seed=7, dtype=torch.float64))
    with pytest.raises(ValueError, match="hidden_size"):
        rebind_drafter(drafter, random_model(dataclasses.replace(SMALL, hidden_size=64), seed=0, dtype=torch.float64))


def test_measure_sd_speedup_fields_are_consistent(trained):
    target, drafter, prompts = trained
    big = pad_target(target, extra_layers=1, intermediate_size=2 * target.cfg.intermediate_size)
    r = measure_sd_speedup(big, rebind_drafter(drafter, big), prompts[:2], batch=2, new_tokens=10, depth=3,
                           repeats=2)
    assert isinstance(r, SDSpeedup)
    assert (r.batch, r.new_tokens, r.depth, r.repeats, r.tokens) == (2, 10, 3, 2, 20)
    assert r.outputs_identical
    assert r.speedup == pytest.approx(r.sd_tok_s / r.base_tok_s, rel=1e-12)
    assert r.base_tok_s == pytest.approx(r.tokens / r.base_s, rel=1e-12)
    assert r.sd_tok_s == pytest.approx(r.tokens / r.sd_s, rel=1e-12)
    assert 1.0 <= r.accept_length <= 4.0 and r.decode_speedup > 0 and r.threads == torch.get_num_threads()
    with pytest.raises(ValueError):
        measure_sd_speedup(big, drafter, prompts, batch=0, new_tokens=10, depth=3)


def test_interleaved_speedups_pair_each_repeat_with_its_plain_run_and_flag_changed_outputs(monkeypatch):
    """The one timing loop behind measure_sd_speedups and measure_drafter_speedups, on scripted runs:
    every repeat's speedup divides by the plain run just before it, medians are over repeats, and an
    arm whose output differs from the plain run's is flagged (a lossless engine never does that; the
    flag is what would show it did)."""
    import tltreal.rl.padded_target as pt

    walls = iter([2.0, 1.0, 1.0,   # repeat 0: plain, arm a, arm b
                  4.0, 1.0, 2.0])  # repeat 1
    monkeypatch.setattr(pt, "_run", lambda target, drafter, prompts, *, new_tokens, depth, **kw: (
        next(walls), 0.0, 1.0 + depth, {0: [1, 2] if drafter != "b" else [1, 3]}))
    res = pt.measure_drafter_speedups(None, {"a": "a", "b": "b"}, [[1]], batch=1, new_tokens=2, depth=2,
                                      repeats=2, warmup=False)
    assert res["a"].per_repeat == (2.0, 4.0) and res["b"].per_repeat == (2.0, 2.0)
    assert res["a"].speedup == pytest.approx(3.0 / 1.0) and res["b"].speedup == pytest.approx(3.0 / 1.5)
    assert res["a"].outputs_identical and not res["b"].outputs_identical
    assert res["a"].accept_length == 3.0 and res["a"].depth == 2
