"""The engine's fast paths, each pinned to the naive formula it replaces.

- :class:`RMSNorm` (``nn.functional.rms_norm`` for float32/64) vs :meth:`RMSNorm.reference`: bit-equal.
- :func:`apply_rope_factors` (roll + signed sin, built once per forward) vs :func:`apply_rope`: bit-equal.
- fused attention (``scaled_dot_product_attention(enable_gqa=True)``) vs :func:`attend_reference`
  (repeat_interleave + masked softmax): equal to float64 rounding.
- the KV window read as a view of the slab (consecutive slots) vs the gathered copy, through a whole
  forward: the same logits as with the slots permuted (gathered path).
- :func:`greedy_chain_accept` vs :func:`tree_accept_reference` on one-hot (greedy) targets: equal.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tltcore.model_config import ModelConfig  # noqa: E402
from tltreal.model.kv_cache import KVCache  # noqa: E402
from tltreal.model.transformer import (  # noqa: E402
    Attention,
    RMSNorm,
    apply_rope,
    apply_rope_factors,
    attend_reference,
    causal_mask,
    rope_factors,
    rope_tables,
    slot_run,
)
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.spec_decode.verify import greedy_chain_accept, tree_accept_reference  # noqa: E402


def tiny_config(**kw) -> ModelConfig:
    base = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256)
    return ModelConfig(**{**base, **kw})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm_fast_path_is_bit_identical(dtype):
    gen = torch.Generator().manual_seed(0)
    norm = RMSNorm(48, 1e-6).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(48, generator=gen, dtype=torch.float64))
    x = torch.randn(5, 3, 48, generator=gen, dtype=torch.float64).to(dtype) * 3
    assert torch.equal(norm(x), norm.reference(x))


def test_rms_norm_low_precision_keeps_the_upcast_formula():
    norm = RMSNorm(16, 1e-6).to(torch.bfloat16)
    x = torch.randn(2, 16).to(torch.bfloat16)
    assert torch.equal(norm(x), norm.reference(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rope_factors_are_bit_identical_to_rotate_half(dtype):
    cfg = tiny_config()
    gen = torch.Generator().manual_seed(1)
    positions = torch.randint(0, 200, (3, 5), generator=gen)
    cos, sin = rope_tables(positions, cfg, dtype)
    x = torch.randn(3, 5, 4, cfg.head_dim, generator=gen, dtype=torch.float64).to(dtype)
    assert torch.equal(apply_rope_factors(x, rope_factors(cos, sin)), apply_rope(x, cos, sin))


@pytest.mark.parametrize(("heads", "kv_heads", "t", "s"), [(4, 2, 1, 9), (4, 2, 5, 12), (6, 6, 3, 7), (8, 1, 4, 4)])
def test_fused_attention_equals_the_reference(heads, kv_heads, t, s):
    cfg = tiny_config(hidden_size=heads * 16, num_attention_heads=heads, num_key_value_heads=kv_heads)
    attn = Attention(cfg).double()
    gen = torch.Generator().manual_seed(heads * 10 + t)
    b, d = 3, cfg.head_dim
    q = torch.randn(b, t, heads, d, generator=gen, dtype=torch.float64)
    keys = torch.randn(b, kv_heads, s, d, generator=gen, dtype=torch.float64)
    values = torch.randn(b, kv_heads, s, d, generator=gen, dtype=torch.float64)
    mask = torch.rand(b, 1, t, s, generator=gen) < 0.6
    mask[..., -1] = True  # every query sees at least one key
    expected = attend_reference(q.transpose(1, 2), keys, values, mask).transpose(1, 2).reshape(b, t, heads * d)
    with torch.no_grad():
        got = attn._attend(q, keys, values, mask)
        want = attn.o_proj(expected)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)


def test_slot_run_detects_consecutive_slots():
    assert slot_run(torch.tensor([3, 4, 5])) == 3
    assert slot_run(torch.tensor([0])) == 0
    assert slot_run(torch.tensor([0, 2])) is None
    assert slot_run(torch.tensor([1, 0])) is None


def test_kv_window_view_equals_gather():
    gen = torch.Generator().manual_seed(2)
    cache = KVCache(torch.randn(2, 5, 2, 10, 4, generator=gen), torch.randn(2, 5, 2, 10, 4, generator=gen))
    slots = torch.tensor([1, 2, 3])
    for got, want in zip(cache.window(1, slots, 7, first_slot=1), cache.window(1, slots, 7), strict=True):
        assert torch.equal(got, want)


def test_forward_with_consecutive_slots_equals_permuted_slots():
    """The view path (slots 0..B-1) and the gather path (the same requests in other slots, other
    order) give the same logits, prefill and decode, in float64."""
    cfg = tiny_config()
    model = random_model(cfg, seed=3, dtype=torch.float64)
    gen = torch.Generator().manual_seed(4)
    b, t = 3, 6
    tokens = torch.randint(0, cfg.vocab_size, (b, t + 1), generator=gen)
    out = []
    for slots in (torch.tensor([0, 1, 2]), torch.tensor([4, 0, 2])):
        assert (slot_run(slots) is None) == bool(slots[0] == 4)
        cache = model.new_cache(5, 16)
        zeros = torch.zeros(b, dtype=torch.long)
        pos = torch.arange(t).expand(b, t)
        pre, _ = model(tokens[:, :t], pos, cache, slots, zeros, causal_mask(b, t))
        lens = torch.full((b,), t)
        dec, _ = model(tokens[:, t:], lens[:, None], cache, slots, lens, torch.ones(b, 1, 1, dtype=torch.bool))
        out.append((pre, dec))
    for got, want in zip(out[0], out[1], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_greedy_chain_accept_equals_the_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    b, m, vocab = 7, 4, 5  # a small vocabulary: drafts often match, and logits often tie
    counts = torch.randint(0, m + 1, (b,), generator=gen)
    depths = torch.arange(m + 1).expand(b, m + 1)
    parents = torch.where(depths <= counts[:, None], depths - 1, torch.full_like(depths, -1))
    logits = torch.randint(0, 3, (b, m + 1, vocab), generator=gen).double()  # integer logits: ties
    best = logits.argmax(-1)
    tokens = torch.randint(0, vocab, (b, m + 1), generator=gen)
    agree = torch.rand(b, m, generator=gen) < 0.7  # make most drafts the argmax: long accepted runs
    tokens[:, 1:] = torch.where(agree, best[:, :-1], tokens[:, 1:])
    p = torch.zeros_like(logits).scatter_(-1, best[..., None], 1.0)
    q = torch.zeros_like(p).scatter_(-1, tokens[..., None], 1.0)
    u = torch.full((b, m + 1), 0.5, dtype=torch.float64)
    ref = tree_accept_reference(p, q, tokens, parents, u, u[:, 0], m)
    got = greedy_chain_accept(logits, tokens, parents, m)
    for r, g in zip(ref, got, strict=True):
        assert torch.equal(r, g)
    assert int(ref[1].max()) >= 1  # not vacuous


def test_forward_keep_and_logits_at_equal_the_full_forward():
    """Skipping padding (``keep``) and the LM head at one position (``logits_at``) change nothing for
    the tokens computed: a padded prefill then a padded chain verify, against the full forwards."""
    from tltreal.model.transformer import padded_causal_mask

    cfg = tiny_config()
    model = random_model(cfg, seed=5, dtype=torch.float64)
    gen = torch.Generator().manual_seed(6)
    b, t = 3, 7
    lens = torch.tensor([7, 3, 5])
    tokens = torch.randint(0, cfg.vocab_size, (b, t), generator=gen)
    pos = torch.arange(t).expand(b, t)
    real = pos < lens[:, None]
    slots = torch.tensor([2, 0, 1])
    full_cache, fast_cache = model.new_cache(3, 20), model.new_cache(3, 20)
    zeros = torch.zeros(b, dtype=torch.long)
    mask = padded_causal_mask(lens, t)
    logits, hidden = model(tokens, pos, full_cache, slots, zeros, mask)
    fast_logits, fast_hidden = model(tokens, pos, fast_cache, slots, zeros, mask, keep=real, logits_at=lens - 1)
    rows = torch.arange(b)
    torch.testing.assert_close(fast_logits[:, 0], logits[rows, lens - 1], rtol=0, atol=1e-12)
    torch.testing.assert_close(fast_hidden[real], hidden[real], rtol=0, atol=1e-12)
    assert not fast_hidden[~real].any()
    # a chain verify with padded nodes, after the prefill
    counts = torch.tensor([3, 0, 1])
    n1 = 4
    drafts = torch.randint(0, cfg.vocab_size, (b, n1), generator=gen)
    kept = torch.arange(n1)[None, :] <= counts[:, None]
    cmask = padded_causal_mask(counts + 1, n1)
    dpos = lens[:, None] + torch.arange(n1)
    logits, hidden = model(drafts, dpos, full_cache, slots, lens, cmask)
    fast_logits, fast_hidden = model(drafts, dpos, fast_cache, slots, lens, cmask, keep=kept)
    torch.testing.assert_close(fast_logits[kept], logits[kept], rtol=0, atol=1e-12)
    torch.testing.assert_close(fast_hidden[kept], hidden[kept], rtol=0, atol=1e-12)
    assert not fast_logits[~kept].any()


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_engine_skipping_padding_changes_nothing(monkeypatch, temperature):
    """Prefill of prompts of different lengths and n-gram chain verification with padded nodes, with
    the padding skipped (``keep``) from 1 padded token on, and never: the same tokens, log-probs and
    hidden states (float64, greedy and sampled)."""
    from tltcore.policy.base import SDConfig, Static
    from tltreal.engine import engine as engine_mod
    from tltreal.engine import engine_config
    from tltreal.model.sampling import SamplingParams
    from tltreal.spec_decode.proposers import NgramProposer

    cfg = tiny_config(vocab_size=24)  # a small vocabulary: n-gram drafts get accepted
    target = random_model(cfg, seed=7, dtype=torch.float64, std=0.3)
    gen = torch.Generator().manual_seed(8)
    prompts = [torch.randint(0, cfg.vocab_size, (int(n),), generator=gen).tolist() for n in (3, 11, 6, 9, 4, 14)]

    def run(skip: tuple[int, int]):
        monkeypatch.setattr(engine_config, "PADDING_SKIP_MIN", skip)
        eng = engine_mod.Engine(target, Static(SDConfig.chain(4)), proposer=NgramProposer(),
                                config=engine_mod.EngineConfig(max_batch=6, max_len=64, record_logprobs=True,
                                                               record_hidden=True))
        for i, p in enumerate(prompts):
            eng.add_request(p, 20 + 3 * i, SamplingParams(temperature=temperature, seed=i))
        return eng.run()

    calls = []
    forward = engine_mod.Transformer.forward

    def spy(self, *a, keep=None, **k):
        calls.append(keep is not None)
        return forward(self, *a, keep=keep, **k)

    monkeypatch.setattr(engine_mod.Transformer, "forward", spy)
    fast = run((1, 1))
    assert sum(calls) >= 3  # the prefill and some verifications skipped padding
    calls.clear()
    slow = run((10**9, 10**9))
    assert not any(calls)
    assert fast.outputs == slow.outputs
    assert fast.decode_events["accepted"].sum() > 0
    for rid, f in fast.finished.items():
        s = slow.finished[rid]
        torch.testing.assert_close(f.logprobs, s.logprobs, rtol=0, atol=1e-10)
        torch.testing.assert_close(f.raw_logprobs, s.raw_logprobs, rtol=0, atol=1e-10)
        torch.testing.assert_close(f.hidden, s.hidden, rtol=0, atol=1e-10)
