"""The target model: a Llama / Mistral / Qwen2 / Qwen3 decoder-only transformer in plain PyTorch
(weights in and out: :mod:`tltreal.model.weights`).

RMSNorm (in float32, as transformers), rotary position embeddings (HF "rotate half" layout; default,
linear or Llama-3.1 frequency scaling), grouped-query attention over a slab KV cache (optionally a
sliding window: Mistral's on every layer, Qwen2/Qwen3's on their sliding layers), Qwen3's per-head q/k
RMSNorm before RoPE, gated MLP with SiLU/GELU/ReLU, tied or untied LM head, the biases each family
has. Every field comes from :mod:`tltcore.model_config`, the one reader of ``config.json``; what the
reader accepts but this network cannot be (experts, latent attention, YaRN, partial rotary, fp8
weights) is refused by :func:`check_buildable` in one line, before anything is allocated. Parameter
names match Hugging Face checkpoints (``model.layers.0.self_attn.q_proj.weight`` ...) so safetensors
load as is, and logits match
``transformers`` (tests/real/test_real_transformers_parity.py).

One forward serves prefill, plain decode, draft-tree expansion and tree verification: every call
gets per-request new tokens ``[B, T]``, their positions, and a ``[B, T, T]`` mask saying which new
tokens each new token may see (causal for prefill, ancestor-only for a tree). Each token always sees
its request's whole committed cache prefix.

Training uses :meth:`Transformer.forward_train` instead: the same layers and weights with no cache
and autograd on, over whole (padded or packed) sequences; it equals a prefill from an empty cache.

Numerical policy: the per-token computation does not depend on the other requests in the batch
except through padding (masked keys contribute exact zeros) and BLAS blocking. In float64 the
resulting differences are ~1e-16 relative, far below any logit margin, so greedy decoding gives the
same tokens whatever the batch composition or number of tokens per forward; that is what the
lossless tests run. In float32 the same code is exact only up to rounding (near-ties can flip).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from tltcore.errors import InputError
from tltcore.model_config import ModelConfig
from tltreal.model.kv_cache import KVCache

#: The families this engine builds (``model_type``); the simulator prices every family the reader reads.
BUILDABLE_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def check_buildable(cfg: ModelConfig) -> None:
    """Refuse, in one line naming the family and the field, a config this engine cannot build: its
    layers are dense grouped-query attention + a gated MLP, full rotary, 16/32/64-bit weights."""
    if cfg.model_type not in BUILDABLE_TYPES:
        what = "mixture-of-experts and latent-attention" if cfg.moe is not None or cfg.mla is not None else "these"
        raise InputError(f"the native engine builds {', '.join(BUILDABLE_TYPES)} models, not {cfg.family} "
                         f"('{cfg.model_type}'); {what} models are priced by the simulator (tlt sim run --model)",
                         field="model_type")
    if cfg.rope_scaling.kind not in ("default", "linear", "llama3"):
        raise InputError(f"the native engine does not build {cfg.rope_scaling.kind} rope scaling ({cfg.family}); "
                         "the simulator prices it", field="rope_scaling")
    if cfg.partial_rotary_factor != 1.0:
        raise InputError(f"the native engine rotates whole heads; partial_rotary_factor {cfg.partial_rotary_factor} "
                         f"({cfg.family}) is priced by the simulator only", field="partial_rotary_factor")
    if cfg.weight_dtype != "bf16":
        raise InputError(f"the native engine loads 16/32/64-bit weights, not {cfg.weight_dtype} ({cfg.family}); "
                         "the simulator prices it", field="quantization_config")


def read_buildable(path: str | Path) -> ModelConfig:
    """The ``config.json`` at ``path`` (or in that folder), refused naming the file when this engine
    cannot build it (:func:`check_buildable`): what ``tlt real`` commands read a target with."""
    from tltcore.model_config import config_json_path

    cfg = ModelConfig.from_json(path)
    try:
        check_buildable(cfg)
    except InputError as exc:
        raise InputError(exc.message, path=config_json_path(path), field=exc.field) from None
    return cfg


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise in at least float32 (bf16/fp16 inputs are upcast, as transformers does: the
        mean of squares loses too much in 8 mantissa bits), scale in the input's dtype.

        float32/float64 (no upcast) take ``nn.functional.rms_norm``: one dispatch instead of eight,
        bit-identical to :meth:`reference` (tests/real/test_fast_paths.py pins it)."""
        if x.dtype in _FUSED_DTYPES and self.weight.dtype == x.dtype:
            return nn.functional.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return self.reference(x)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The transformers formula, op by op."""
        compute = torch.promote_types(x.dtype, torch.float32)
        h = x.to(compute)
        var = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(var + self.eps)).to(x.dtype)


_FUSED_DTYPES = (torch.float32, torch.float64)


@lru_cache(maxsize=64)
def _inv_freq(scaling: object, head_dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """The ``[head_dim]`` frequencies (each pair's twice, "rotate half" layout), float64; derived
    from the config only, so caching them can never go stale."""
    with torch.inference_mode(False):  # an ordinary tensor, whatever mode the first call ran in
        f = torch.tensor(scaling.inverse_frequencies(head_dim, theta), dtype=torch.float64, device=device)
        return torch.cat([f, f])


def rope_tables(positions: torch.Tensor, cfg: ModelConfig, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin ``[B, T, head_dim]`` for integer ``positions`` ``[B, T]`` (computed in float64)."""
    emb = positions.to(torch.float64)[..., None] * _inv_freq(cfg.rope_scaling, cfg.head_dim, cfg.rope_theta,
                                                              positions.device)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[B, T, heads, head_dim]``: ``x * cos + rotate_half(x) * sin``, the reference
    formula (the forwards run :func:`rope_factors` / :func:`apply_rope_factors`, bit-identical)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, :, None] + rotated * sin[:, :, None]


def rope_factors(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and the signed ``sin`` (first half negated) as ``[B, T, 1, head_dim]``, built once per
    forward: then ``rotate_half(x) * sin == x.roll(half) * signed_sin`` exactly (negation is exact)."""
    half = sin.shape[-1] // 2
    return cos[:, :, None], torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)[:, :, None]


def apply_rope_factors(x: torch.Tensor, factors: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """:func:`apply_rope` with :func:`rope_factors`: 4 dispatches instead of 9, the same bits."""
    cos, signed_sin = factors
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin


@dataclass
class AttnBatch:
    """Per-forward attention bookkeeping shared by all layers."""

    slots: torch.Tensor  # [B]
    write_index: torch.Tensor  # [B, T] cache index of each new token
    mask: torch.Tensor  # [B, 1, T, W] True where a query may attend a cached key
    width: int  # W: cache window read by this forward
    cos: torch.Tensor
    sin: torch.Tensor
    windowed: dict[int, torch.Tensor]  # sliding window -> mask further limited to keys within it
    first_slot: int | None = None  # slots == first_slot + arange(B): the cache is read as a view
    rope: tuple[torch.Tensor, torch.Tensor] | None = None  # rope_factors(cos, sin), once per forward
    keep: torch.Tensor | None = None  # [N] flat indices (into B * T) of the tokens computed (None: all)
    keep_slots: torch.Tensor | None = None  # [N] slot and cache index of each kept token
    keep_index: torch.Tensor | None = None

    def mask_for(self, window: int | None) -> torch.Tensor:
        return self.mask if window is None else self.windowed[window]

    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rope is None:
            cos, sin = rope_factors(self.cos, self.sin)
            if self.keep is not None:  # the kept tokens' rows: [N, 1, D]
                cos, sin = cos.flatten(0, 1)[self.keep], sin.flatten(0, 1)[self.keep]
            self.rope = cos, sin
        return self.rope


def slot_run(slots: torch.Tensor) -> int | None:
    """``s`` when ``slots`` is ``s, s + 1, ..., s + B - 1`` (a run of consecutive slots), else None."""
    values = slots.tolist()
    return values[0] if values and values == list(range(values[0], values[0] + len(values))) else None


def make_attn_batch(slots: torch.Tensor, cache_lens: torch.Tensor, new_mask: torch.Tensor,
                    positions: torch.Tensor, cfg: ModelConfig, dtype: torch.dtype) -> AttnBatch:
    """Key mask: the committed prefix ``[0, len)`` in full, then ``new_mask`` ``[B, T, X]`` over the
    X scratch keys ``[len, len + X)``; the T new tokens are written at the last T of those."""
    b, t = positions.shape
    x = new_mask.shape[2]
    offs = torch.arange(x - t, x, device=positions.device)
    write_index = cache_lens[:, None] + offs
    width = int((cache_lens + x).max())
    keys = torch.arange(width, device=positions.device)
    rel = keys[None, :] - cache_lens[:, None]  # [B, W]: index of the key among the scratch keys
    prefix = (rel < 0)[:, None, :].expand(b, t, width)
    in_new = (rel >= 0) & (rel < x)
    gathered = torch.gather(new_mask, 2, rel.clamp(0, x - 1)[:, None, :].expand(b, t, width))
    mask = prefix | (in_new[:, None, :] & gathered)
    cos, sin = rope_tables(positions, cfg, dtype)
    windowed = {}
    if cfg.sliding_window is not None and cfg.sliding_layers:
        # A key's position is its cache index: exact for the committed prefix and for linear new
        # tokens (prefill, decode); tree nodes sit at or after their position, so a tree is exact
        # whenever it is narrower than the window (real windows are thousands of tokens).
        recent = positions[:, :, None] - keys[None, None, :] < cfg.sliding_window
        windowed[cfg.sliding_window] = (mask & recent)[:, None]
    return AttnBatch(slots, write_index, mask[:, None], width, cos, sin, windowed, slot_run(slots))


@dataclass
class TrainBatch:
    """Attention bookkeeping of a cache-free forward (:meth:`Transformer.forward_train`): the keys
    are the T tokens of the forward itself, so the mask is ``[B, 1, T, T]``."""

    mask: torch.Tensor  # [B, 1, T, T] True where query t may attend key s
    cos: torch.Tensor
    sin: torch.Tensor
    windowed: dict[int, torch.Tensor]  # sliding window -> mask further limited to keys within it
    rope: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    def mask_for(self, window: int | None) -> torch.Tensor:
        return self.mask if window is None else self.windowed[window]

    def factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rope is None:
            self.rope = rope_factors(self.cos, self.sin)
        return self.rope


def segment_positions(segment_ids: torch.Tensor) -> torch.Tensor:
    """Position of each token within its run of equal ``segment_ids`` ``[B, T]`` (0 at each run's
    first token): packed sequences each start at position 0, as they would alone."""
    b, t = segment_ids.shape
    offs = torch.arange(t, device=segment_ids.device).expand(b, t)
    starts = torch.ones(b, t, dtype=torch.bool, device=segment_ids.device)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    return offs - torch.cummax(torch.where(starts, offs, torch.zeros_like(offs)), dim=1).values


def make_train_batch(positions: torch.Tensor, segment_ids: torch.Tensor, cfg: ModelConfig,
                     dtype: torch.dtype) -> TrainBatch:
    """Causal attention restricted to keys of the query's own segment; with a sliding window, also
    to keys fewer than ``sliding_window`` positions back (positions, not indices, so packing is
    exact)."""
    t = positions.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=positions.device).tril()
    mask = causal[None] & (segment_ids[:, :, None] == segment_ids[:, None, :])
    cos, sin = rope_tables(positions, cfg, dtype)
    windowed = {}
    if cfg.sliding_window is not None and cfg.sliding_layers:
        recent = positions[:, :, None] - positions[:, None, :] < cfg.sliding_window
        windowed[cfg.sliding_window] = (mask & recent)[:, None]
    return TrainBatch(mask[:, None], cos, sin, windowed)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, window: int | None = None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.window = window
        h = cfg.hidden_size
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=cfg.o_bias)
        if cfg.qk_norm:  # Qwen3: one RMSNorm over head_dim, shared by all heads, before RoPE
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.qk_norm = cfg.qk_norm

    def _qkv(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries and keys (normed if the family does, then rotated) and values, ``[*lead, heads, D]``."""
        lead = x.shape[:-1]
        q = self.q_proj(x).view(*lead, self.heads, self.head_dim)
        k = self.k_proj(x).view(*lead, self.kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        v = self.v_proj(x).view(*lead, self.kv_heads, self.head_dim)
        return apply_rope_factors(q, rope), apply_rope_factors(k, rope), v

    def forward(self, x: torch.Tensor, cache: KVCache, layer: int, ab: AttnBatch) -> torch.Tensor:
        """``x`` is ``[B, T, hidden]``, or ``[N, hidden]`` (the kept tokens only) when ``ab.keep`` is set."""
        q, k, v = self._qkv(x, ab.factors())
        if ab.keep is None:
            cache.write(layer, ab.slots, ab.write_index, k, v)
        else:  # only the kept tokens' keys/values; skipped queries are zeros (finite, and discarded)
            b, t = ab.write_index.shape
            cache.write_tokens(layer, ab.keep_slots, ab.keep_index, k, v)
            q = q.new_zeros(b * t, self.heads, self.head_dim).index_copy_(0, ab.keep, q).view(b, t, self.heads,
                                                                                              self.head_dim)
        keys, values = cache.window(layer, ab.slots, ab.width, first_slot=ab.first_slot)
        out = self._attention(q, keys, values, ab.mask_for(self.window))
        if ab.keep is not None:
            out = out.flatten(0, 1).index_select(0, ab.keep)
        return self.o_proj(out)

    def forward_train(self, x: torch.Tensor, tb: TrainBatch) -> torch.Tensor:
        """The same attention as :meth:`forward` with no cache: keys and values are this forward's
        own tokens (what a prefill from an empty cache reads back), and autograd stays on."""
        q, k, v = self._qkv(x, tb.factors())
        return self._attend(q, k.transpose(1, 2), v.transpose(1, 2), tb.mask_for(self.window))

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Grouped-query attention of ``q`` ``[B, T, heads, D]`` over ``keys``/``values``
        ``[B, kv_heads, S, D]`` where ``mask`` ``[B, 1, T, S]`` allows, then the output projection:
        the one body both the cached and the training forward run.

        float32/float64 use PyTorch's fused attention (``enable_gqa``: no repeated keys/values;
        equal to :func:`attend_reference` up to rounding, tests/real/test_fast_paths.py); bf16/fp16
        keep the reference, whose float32 softmax rounds as transformers' eager attention does."""
        return self.o_proj(self._attention(q, keys, values, mask))

    def _attention(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
                   ) -> torch.Tensor:
        """:meth:`_attend` before the output projection: ``[B, T, heads * D]``."""
        b, t = q.shape[:2]
        if q.dtype in _FUSED_DTYPES:
            out = nn.functional.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask,
                                                             enable_gqa=self.heads != self.kv_heads)
        else:
            out = attend_reference(q.transpose(1, 2), keys, values, mask)
        return out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)


def attend_reference(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eager grouped-query attention, op by op: ``q`` ``[B, heads, T, D]``, ``keys``/``values``
    ``[B, kv_heads, S, D]`` (query head h reads kv head ``h // (heads / kv_heads)``), ``mask``
    ``[B, 1, T, S]``; returns ``[B, heads, T, D]``."""
    group = q.shape[1] // keys.shape[1]
    keys = keys.repeat_interleave(group, dim=1)
    values = values.repeat_interleave(group, dim=1)
    scores = (q @ keys.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    # Softmax in at least float32, as transformers' eager attention: bf16 would round the weights.
    compute = torch.promote_types(scores.dtype, torch.float32)
    probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1, dtype=compute)
    return probs.to(values.dtype) @ values


ACTIVATIONS = {
    "silu": nn.functional.silu, "swish": nn.functional.silu, "relu": nn.functional.relu,
    "gelu": nn.functional.gelu,
    "gelu_new": lambda x: nn.functional.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: nn.functional.gelu(x, approximate="tanh"),
}


class MLP(nn.Module):
    """Gated MLP: ``down(act(gate(x)) * up(x))``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)
        self.act = ACTIVATIONS[cfg.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, input_norm: bool = True, window: int | None = None) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, window)
        self.mlp = MLP(cfg)
        # EAGLE's drafter layer has no input norm (its input is already a projection of normed states).
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if input_norm else nn.Identity()
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cache: KVCache, layer: int, ab: AttnBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cache, layer, ab)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_train(self, x: torch.Tensor, tb: TrainBatch) -> torch.Tensor:
        """:meth:`forward` without a cache (see :meth:`Attention.forward_train`)."""
        x = x + self.self_attn.forward_train(self.input_layernorm(x), tb)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Body(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, window=cfg.window_of(i)) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Transformer(nn.Module):
    """Llama/Mistral/Qwen2/Qwen3 causal LM. :meth:`forward` returns ``(logits, hidden)``; ``hidden`` is
    the last hidden state after the final norm (what the LM head and an EAGLE drafter consume)."""

    def __init__(self, cfg: ModelConfig) -> None:
        check_buildable(cfg)
        super().__init__()
        self.cfg = cfg
        self.model = _Body(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    def new_cache(self, slots: int, max_len: int) -> KVCache:
        c = self.cfg
        return KVCache.allocate(c.num_hidden_layers, slots, c.num_key_value_heads, max_len, c.head_dim,
                                self.dtype, self.model.embed_tokens.weight.device)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache, slots: torch.Tensor,
                cache_lens: torch.Tensor, new_mask: torch.Tensor, *, keep: torch.Tensor | None = None,
                logits_at: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``tokens`` ``[B, T]`` at ``positions`` after each slot's first ``cache_lens`` entries.

        ``new_mask`` is ``[B, T, X]`` with ``X >= T``: visibility of the scratch keys
        ``[cache_lens, cache_lens + X)``, of which the new tokens are the last T (X > T lets draft-tree
        expansion see earlier tree levels). Keys/values are written there; the caller decides what
        to keep by advancing its committed lengths.

        Optional, for padded batches: ``keep`` ``[B, T]`` (bool) names the tokens whose outputs are
        needed. Only those are computed (the projections and MLPs run on the kept tokens alone) and
        only their keys/values are written; the others' rows of ``logits`` and ``hidden`` are zeros.
        No kept token may see a token that is not kept (padding that nobody attends to).
        ``logits_at`` ``[B]`` returns ``logits`` ``[B, 1, V]`` at that one position of each row only
        (the LM head skips the rest; ``hidden`` stays ``[B, T, H]``). Kept tokens get the same values
        as without either option (up to BLAS blocking: tests/real/test_fast_paths.py).
        """
        ab = make_attn_batch(slots, cache_lens, new_mask, positions, self.cfg, self.dtype)
        b, t = tokens.shape
        if keep is not None and not bool(keep.all()):
            ab.keep = keep.reshape(-1).nonzero().squeeze(1)
            ab.keep_slots = slots[:, None].expand(b, t).reshape(-1)[ab.keep]
            ab.keep_index = ab.write_index.reshape(-1)[ab.keep]
            x = self.model.embed_tokens(tokens.reshape(-1).index_select(0, ab.keep))
        else:
            x = self.model.embed_tokens(tokens)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cache, i, ab)
        hidden = self.model.norm(x)
        if ab.keep is not None:  # back to [B, T, H], zeros where skipped
            hidden = hidden.new_zeros(b * t, hidden.shape[-1]).index_copy_(0, ab.keep, hidden).view(b, t, -1)
        if logits_at is not None:
            return self.lm_head(hidden[torch.arange(b, device=hidden.device), logits_at][:, None]), hidden
        return self.lm_head(hidden), hidden

    def forward_train(self, tokens: torch.Tensor, *, positions: torch.Tensor | None = None,
                      segment_ids: torch.Tensor | None = None,
                      lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Cache-free, gradient-enabled forward of whole sequences ``tokens`` ``[B, T]``: the same
        function as :meth:`forward` prefilling from an empty cache, for training (pre-training,
        policy-gradient log-probs, drafter features) where a KV cache would only cost memory and
        block autograd. Returns ``(logits, hidden)`` ``[B, T, V]`` / ``[B, T, H]``.

        Each token attends causally to earlier tokens of its own segment. Either ``lengths`` ``[B]``
        (row b holds ``lengths[b]`` real tokens then padding; padding sees only padding, real tokens
        never see it) or ``segment_ids`` ``[B, T]`` (packing: several sequences per row, each a
        contiguous run of one id) may be given, not both. ``positions`` ``[B, T]`` defaults to the
        index within each segment, so a packed sequence gets the positions it would have alone.
        """
        b, t = tokens.shape
        device = tokens.device
        if lengths is not None:
            if segment_ids is not None:
                raise InputError("give lengths or segment_ids, not both", field="lengths")
            segment_ids = (torch.arange(t, device=device)[None, :] >= lengths.to(device)[:, None]).long()
        if segment_ids is None:
            segment_ids = torch.zeros(b, t, dtype=torch.long, device=device)
        if tuple(segment_ids.shape) != (b, t) or (positions is not None and tuple(positions.shape) != (b, t)):
            raise InputError(f"segment_ids and positions must have the shape of tokens {(b, t)}", field="segment_ids")
        if positions is None:
            positions = segment_positions(segment_ids)
        tb = make_train_batch(positions, segment_ids, self.cfg, self.dtype)
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer.forward_train(x, tb)
        hidden = self.model.norm(x)
        return self.lm_head(hidden), hidden


def causal_mask(b: int, t: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[B, T, T]`` lower-triangular mask for prefill of T new tokens."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril().expand(b, t, t).contiguous()


def padded_causal_mask(counts: torch.Tensor, t: int) -> torch.Tensor:
    """Causal mask for ``counts[b]`` real tokens padded to ``t``. Padding rows see only themselves
    (so their softmax is finite) and real rows never see padding."""
    offs = torch.arange(t, device=counts.device)
    real = offs[None, :] < counts[:, None]
    causal = torch.ones(t, t, dtype=torch.bool, device=counts.device).tril()
    eye = torch.eye(t, dtype=torch.bool, device=counts.device)
    return (causal[None] & real[:, None, :]) | eye[None]
