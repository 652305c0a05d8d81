"""A big target that behaves exactly like a small trained one: speculative decoding that pays on a CPU.

**Why.** The trained targets here (e.g. the 4-layer, hidden-128 arithmetic model of
:mod:`tltreal.rl.pretrain`, ~0.8M parameters) decode a token in about a millisecond, which is the
engine's own per-iteration Python overhead; a trained EAGLE drafter then cannot pay for itself,
whatever its acceptance. Speculative decoding pays when a target forward costs far more than the
drafting and bookkeeping around it, as with a real LLM. :func:`pad_target` builds such a target
(hundreds of millions of parameters) whose outputs *are* the small model's, so the drafter trained
against the small model is the right drafter for it and its measured SD speedup is real.

**How the padded target is built** (:func:`pad_target`), from a small model with ``L`` layers,
hidden size ``H`` and MLP width ``I0``; ``I >= I0`` is the new MLP width (``intermediate_size``) and
``E`` the number of appended layers (``extra_layers``). The config is the small one with
``intermediate_size = I`` and ``num_hidden_layers = L + E`` (nothing else changes: hidden size, heads,
head dimension, RoPE, norms' eps, vocabulary, tying)::

    embed_tokens, lm_head, final norm             copied
    layer i < L:  attention + both norms          copied
                  gate_proj / up_proj [I, H]      rows [0, I0) copied, rows [I0, I) random N(0, std^2)
                  down_proj [H, I]                columns [0, I0) copied, columns [I0, I) ZERO
    layer L+j:    q/k/v_proj (and q/k/v biases)   random N(0, std^2)
                  gate_proj / up_proj [I, H]      random N(0, std^2)
                  o_proj, down_proj (and biases)  ZERO
                  input / post-attention norms    ones

Why the outputs are the small model's: a widened MLP's extra unit ``u`` computes
``act(gate_u . x) * (up_u . x)`` (a finite number: weights are small and x is RMS-normalised) and
then multiplies it by its down_proj column, which is zero, so it adds exactly ``+0.0`` to every
output coordinate; the copied units compute what they computed before. An appended layer computes
full attention and a full MLP on its input, but both results go through an all-zero output
projection (``o_proj``, ``down_proj``), so the layer's residual update is exactly ``+0.0`` and it
hands its input on unchanged. Hence the residual stream, the final hidden state ``h`` (after the
final norm), the logits, and therefore the greedy tokens and sampling distributions are the small
model's -- exactly, up to floating-point summation order in down_proj's longer dot product (the zero
terms are exact, but BLAS may block a K=I sum differently from a K=I0 one: ~1e-16 relative in
float64, ~1e-7 in float32; tests/real/test_padded_target.py pins it). The appended layers' KV caches
are written and read like any other layer's, so every cost a real deep, wide model has (weights
streamed, attention over the cache, per-layer dispatch) is paid.

Why the small model's trained drafter is valid for it: an EAGLE drafter consumes pairs
``(token, h)`` where ``h`` is the target's final hidden state, embeds tokens with the target's
embedding and reads its features out through the target's LM head (:mod:`tltreal.spec_decode.proposers.eagle`).
All three are identical (``h`` as above; embedding and LM head copied), so the drafter sees exactly
the inputs it was trained on and its proposals, hence acceptance, are the same.
:func:`rebind_drafter` copies its weights into a drafter bound to the padded target (the drafter
keeps its own small config: its layer's MLP width is ``I0``, not ``I``).

Size: ``L + E`` layers of ``3 * H * I`` MLP weights plus attention (``H * (2 * q + 2 * kv)``,
tiny at ``H = 128``), plus embedding and LM head. The default of ``benchmarks/sd_pays_cpu.py`` on
the 4-layer, hidden-128, MLP-384 arithmetic model (0.80M parameters) is ``E = 12``,
``I = 32,768``: 16 layers, 202.1M parameters, 0.75 GiB in float32 (:func:`parameter_count`), a
decode step of ~0.15-0.25 s on one core of this machine against ~15 ms of drafting and engine
bookkeeping per SD iteration. (``E = 4``, ``I = 98,304`` gives 302.4M parameters, 1.13 GiB, with
about the same speedups.) Widening the MLP, not the hidden size, is deliberate: the hidden size is
the drafter's input width and the RMSNorm's divisor, so it must stay ``H``; and the drafter stays
small (0.23M parameters), as a real EAGLE head is next to its target.

Why SD pays less at batch 1 than 2 on this CPU: PyTorch's MKL runs a 1-token forward as a
matrix-vector product but 2..24 tokens as a small-M GEMM whose cost is far from linear in the token
count (measured on one core: a 4-token verify costs ~2x a 1-token decode, while at batch 2 an
8-token verify costs only ~1.3-1.6x the 2-token decode). The verify/decode cost ratio, not the
drafter's overhead (~5% of an SD iteration), is what limits the speedup.

:func:`measure_sd_speedup` times our :class:`~tltreal.engine.engine.Engine` greedily without SD and with a
static EAGLE chain, interleaved, and reports medians; it is what an RL driver calls each step to
see whether its current drafter pays on the padded target.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from tltreal.model.transformer import Transformer
from tltreal.spec_decode.proposers.eagle import EagleDrafter

__all__ = ["SDSpeedup", "measure_drafter_speedups", "measure_sd_speedup", "measure_sd_speedups",
           "pad_target", "parameter_count", "rebind_drafter",
           "refresh_padded_target"]


def parameter_count(model: torch.nn.Module) -> int:
    """Distinct parameters (a tied LM head counts once)."""
    return sum(p.numel() for p in model.parameters())


def pad_target(model: Transformer, *, extra_layers: int, intermediate_size: int | None = None, seed: int = 0,
               std: float = 0.02) -> Transformer:
    """A target with ``model``'s outputs and the cost of a much bigger model (module docstring):
    every MLP widened to ``intermediate_size`` (default: unchanged) with zero down_proj columns,
    then ``extra_layers`` decoder layers with random q/k/v/gate/up and zero o_proj/down_proj.

    Deterministic given ``seed`` (the random filler comes from its own generator); same dtype and
    device as ``model``; in eval mode. Costs one pass of random-number generation over the new
    weights (a few seconds for 300M parameters on one core); to follow a small model whose weights
    change (an RL step), build once and call :func:`refresh_padded_target` instead (milliseconds)."""
    cfg = model.cfg
    width = cfg.intermediate_size if intermediate_size is None else intermediate_size
    if extra_layers < 0:
        raise ValueError(f"extra_layers must be >= 0, got {extra_layers}")
    if width < cfg.intermediate_size:
        raise ValueError(f"intermediate_size {width} is below the model's {cfg.intermediate_size}: it can only widen")
    big_cfg = dataclasses.replace(cfg, intermediate_size=width, num_hidden_layers=cfg.num_hidden_layers + extra_layers)
    device, dtype = model.model.embed_tokens.weight.device, model.dtype
    # Built on the meta device, then allocated uninitialised: nn.Linear's own init of hundreds of
    # millions of weights would be thrown away (every tensor is written below).
    with torch.device("meta"):
        big = Transformer(big_cfg)
    big = big.to(dtype).to_empty(device=device)
    if big_cfg.tie_word_embeddings:
        big.lm_head.weight = big.model.embed_tokens.weight
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def fill_random(t: torch.Tensor) -> None:
        t.copy_(torch.randn(t.shape, generator=gen, dtype=dtype) * std)

    with torch.no_grad():
        for i, layer in enumerate(big.model.layers):
            if i < cfg.num_hidden_layers:
                # Widened units: random gate/up rows (they really compute), zero down columns.
                for proj in (layer.mlp.gate_proj, layer.mlp.up_proj):
                    fill_random(proj.weight[cfg.intermediate_size:])
                    if proj.bias is not None:
                        fill_random(proj.bias[cfg.intermediate_size:])
                layer.mlp.down_proj.weight[:, cfg.intermediate_size:].zero_()
                continue
            attn, mlp = layer.self_attn, layer.mlp
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
                fill_random(proj.weight)
                if proj.bias is not None:
                    fill_random(proj.bias)
            for proj in (attn.o_proj, mlp.down_proj):  # the whole residual update of the layer: zero
                proj.weight.zero_()
                if proj.bias is not None:
                    proj.bias.zero_()
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
            if attn.qk_norm:  # to_empty left them uninitialised: a NaN here would survive the zero o_proj
                attn.q_norm.weight.fill_(1.0)
                attn.k_norm.weight.fill_(1.0)
    return refresh_padded_target(big, model).eval()


def refresh_padded_target(padded: Transformer, model: Transformer) -> Transformer:
    """Copy ``model``'s weights into the parts of ``padded`` (built from a model of the same shape
    by :func:`pad_target`) that carry them: embedding, LM head, final norm, and each original
    layer's attention, norms and the first ``I0`` MLP units. The random filler and the zeros are
    left as they are, so ``padded`` again computes ``model``'s outputs. In place; returns ``padded``."""
    small, big = model.cfg, padded.cfg
    same = dataclasses.replace(big, intermediate_size=small.intermediate_size,
                               num_hidden_layers=small.num_hidden_layers)
    if same != small:
        raise ValueError("padded was not built from a model of this shape (pad_target)")
    n = small.intermediate_size
    with torch.no_grad():
        padded.model.embed_tokens.weight.copy_(model.model.embed_tokens.weight)
        if not big.tie_word_embeddings:
            padded.lm_head.weight.copy_(model.lm_head.weight)
        padded.model.norm.weight.copy_(model.model.norm.weight)
        for src, dst in zip(model.model.layers, padded.model.layers, strict=False):
            dst.self_attn.load_state_dict(src.self_attn.state_dict())
            dst.input_layernorm.load_state_dict(src.input_layernorm.state_dict())
            dst.post_attention_layernorm.load_state_dict(src.post_attention_layernorm.state_dict())
            for name in ("gate_proj", "up_proj"):
                s, d = getattr(src.mlp, name), getattr(dst.mlp, name)
                d.weight[:n].copy_(s.weight)
                if s.bias is not None:
                    d.bias[:n].copy_(s.bias)
            dst.mlp.down_proj.weight[:, :n].copy_(src.mlp.down_proj.weight)
            if src.mlp.down_proj.bias is not None:
                dst.mlp.down_proj.bias.copy_(src.mlp.down_proj.bias)
    return padded


def rebind_drafter(drafter: EagleDrafter, target: Transformer) -> EagleDrafter:
    """A copy of ``drafter`` (same weights, dtype, device, its own small config) that uses
    ``target``'s embedding and LM head and is fed ``target``'s hidden states: how a drafter trained
    against a small model drafts for :func:`pad_target`'s padded version of it.

    Refused unless ``target`` can feed it what it was trained on: the same hidden size, vocabulary,
    attention shape and RoPE, and -- when the drafter's own target is at hand -- an embedding and LM
    head equal to that target's (a padded target copies them; another model would not)."""
    own = drafter.cfg
    big = target.cfg
    for name in ("hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "rope_theta", "rope_scaling", "rms_norm_eps"):
        if getattr(own, name) != getattr(big, name):
            raise ValueError(f"the drafter's {name} {getattr(own, name)!r} differs from the target's "
                             f"{getattr(big, name)!r}: it cannot draft for this target")
    old = drafter.__dict__.get("_target")
    if old is not None:
        for what in ("model.embed_tokens.weight", "lm_head.weight"):
            a, b = old.get_parameter(what), target.get_parameter(what)
            if a.shape != b.shape or not torch.equal(a.detach().to(b.device, b.dtype), b.detach()):
                raise ValueError(f"the target's {what} differs from the one the drafter was trained with")
    # EagleDrafter reads only ``.cfg`` at construction: give it the drafter's own (small) config, so
    # its layer keeps the width it was trained with, then bind the big target.
    # Cast before loading: load_state_dict would round float64 weights into fresh float32 ones.
    p = drafter.fc.weight
    fresh = EagleDrafter(SimpleNamespace(cfg=own)).to(device=p.device, dtype=p.dtype)  # type: ignore[arg-type]
    fresh.__dict__["_target"] = target
    fresh.load_state_dict(drafter.state_dict())
    return fresh.eval()


@dataclass(frozen=True)
class SDSpeedup:
    """One :func:`measure_sd_speedup`: medians over ``repeats`` rounds of interleaved runs.

    ``base_tok_s`` / ``sd_tok_s``: generated tokens per wall second of a whole engine run (prefill
    included: what a rollout pays) without SD and with a ``depth``-token EAGLE chain; ``speedup`` =
    ``sd_tok_s / base_tok_s``. ``decode_speedup`` compares the decode phases only (run time minus
    the prefill, which SD does not change). ``accept_length``: tokens emitted per request per SD
    iteration (bonus included). ``outputs_identical``: greedy SD output equals greedy plain output
    on every run (bit-identical in float64; float32 may differ at a near-tie)."""

    batch: int
    new_tokens: int
    depth: int
    base_tok_s: float
    sd_tok_s: float
    speedup: float
    decode_speedup: float
    accept_length: float
    outputs_identical: bool
    base_s: float
    sd_s: float
    tokens: int
    repeats: int
    threads: int
    #: the speedup of each repeat (its SD run against the plain run just before it): the spread
    per_repeat: tuple[float, ...] = ()


def _run(target: Transformer, drafter: EagleDrafter | None, prompts: Sequence[Sequence[int]], *, batch: int,
         new_tokens: int, depth: int, eos_token_ids: tuple[int, ...]
         ) -> tuple[float, float, float, dict[int, list[int]]]:
    """One engine run: (wall s, prefill s, accept length, outputs)."""
    from tltcore.policy.base import SDConfig, Static
    from tltreal.engine.engine import Engine
    from tltreal.engine.engine_config import EngineConfig

    config = SDConfig(depth, 1, depth) if drafter is not None else SDConfig()
    longest = max(len(p) for p in prompts)
    engine = Engine(target, Static(config), drafter,
                    EngineConfig(max_batch=batch, max_len=longest + new_tokens + 1, max_verify=max(1, depth),
                                 max_draft_nodes=max(1, depth - 1), eos_token_ids=eos_token_ids))
    for p in prompts:
        engine.add_request(list(p), new_tokens)
    result = engine.run()
    ev = result.events
    pre = ev[ev["kind"] == "prefill"]
    prefill_s = float((pre["t_end"] - pre["t_start"]).sum())
    return result.wall_s, prefill_s, result.mean_accept_length, result.outputs


def _interleaved_speedups(target: Transformer, arms: dict[object, tuple[EagleDrafter, int]],
                          prompts: Sequence[Sequence[int]], *, batch: int, new_tokens: int, repeats: int,
                          warmup: bool, eos_token_ids: tuple[int, ...]) -> dict[object, SDSpeedup]:
    """Each arm (a drafter and the depth of its chain) against shared plain runs: each repeat runs
    plain, then every arm in turn, so every arm is timed under the same load as the plain run it is
    divided by; medians, and each repeat's speedup (``per_repeat``)."""
    kw = {"batch": batch, "eos_token_ids": tuple(eos_token_ids)}
    runs: dict[object, tuple[EagleDrafter | None, int]] = {None: (None, 0), **arms}
    if warmup:  # allocator, caches and lazy initialisation, once per configuration (short runs)
        for drafter, depth in runs.values():
            _run(target, drafter, prompts, new_tokens=min(new_tokens, 4), depth=depth, **kw)
    walls: dict[object, list[float]] = {k: [] for k in runs}
    decodes: dict[object, list[float]] = {k: [] for k in runs}
    accepts: dict[object, list[float]] = {k: [] for k in runs}
    tokens: dict[object, int] = {}
    identical = dict.fromkeys(arms, True)
    for _ in range(repeats):
        base_out: dict[int, list[int]] = {}
        for key, (drafter, depth) in runs.items():
            wall, prefill, accept, out = _run(target, drafter, prompts, new_tokens=new_tokens, depth=depth, **kw)
            walls[key].append(wall)
            decodes[key].append(wall - prefill)
            accepts[key].append(accept)
            tokens[key] = sum(len(v) for v in out.values())
            if key is None:
                base_out = out
            else:
                identical[key] = identical[key] and out == base_out
    base_s, base_dec = statistics.median(walls[None]), statistics.median(decodes[None])
    base_tok_s = tokens[None] / base_s
    result = {}
    for key, (_, depth) in arms.items():
        sd_s, sd_dec = statistics.median(walls[key]), statistics.median(decodes[key])
        per = tuple((tokens[key] / w) / (tokens[None] / b) for w, b in zip(walls[key], walls[None], strict=True))
        result[key] = SDSpeedup(
            batch=batch, new_tokens=new_tokens, depth=depth, base_tok_s=base_tok_s, sd_tok_s=tokens[key] / sd_s,
            speedup=(tokens[key] / sd_s) / base_tok_s,
            decode_speedup=(tokens[key] / sd_dec) / (tokens[None] / base_dec) if sd_dec > 0 and base_dec > 0 else 0.0,
            accept_length=statistics.median(accepts[key]), outputs_identical=identical[key], base_s=base_s,
            sd_s=sd_s, tokens=tokens[key], repeats=repeats, threads=torch.get_num_threads(), per_repeat=per)
    return result


def measure_sd_speedups(target: Transformer, drafter: EagleDrafter, prompts: Sequence[Sequence[int]], *,
                        batch: int, new_tokens: int, depths: Sequence[int], repeats: int = 3, warmup: bool = True,
                        eos_token_ids: tuple[int, ...] = ()) -> list[SDSpeedup]:
    """:func:`measure_sd_speedup` for several chain depths at once, sharing the plain runs: each
    repeat runs plain, then SD at each depth in turn (one :class:`SDSpeedup` per depth, in order)."""
    if batch < 1 or new_tokens < 1 or repeats < 1 or not prompts or not depths or min(depths) < 1:
        raise ValueError("batch, new_tokens, repeats and every depth must be >= 1, and prompts non-empty")
    by_depth = _interleaved_speedups(target, {d: (drafter, d) for d in depths}, prompts, batch=batch,
                                     new_tokens=new_tokens, repeats=repeats, warmup=warmup,
                                     eos_token_ids=eos_token_ids)
    return [by_depth[d] for d in depths]


def measure_sd_speedup(target: Transformer, drafter: EagleDrafter, prompts: Sequence[Sequence[int]], *, batch: int,
                       new_tokens: int, depth: int, repeats: int = 3, warmup: bool = True,
                       eos_token_ids: tuple[int, ...] = ()) -> SDSpeedup:
    """Greedy tokens/s of our engine on ``target`` without SD and with ``drafter`` drafting a static
    ``depth``-token chain (``Static(SDConfig(depth, 1, depth))``), over ``prompts`` (all of them, at
    most ``batch`` at a time: give ``batch`` prompts to measure that batch size).

    Plain and SD runs alternate (``repeats`` pairs, after short unmeasured warm-up runs unless
    ``warmup`` is false), so drift in a shared machine's load hits both alike; medians are
    reported. Deterministic apart from the timings (greedy, static policy). Each request stops at
    ``new_tokens`` or at one of ``eos_token_ids``. Runs under the caller's torch thread setting."""
    return measure_sd_speedups(target, drafter, prompts, batch=batch, new_tokens=new_tokens, depths=(depth,),
                               repeats=repeats, warmup=warmup, eos_token_ids=eos_token_ids)[0]


def measure_drafter_speedups(target: Transformer, drafters: dict[str, EagleDrafter], prompts: Sequence[Sequence[int]],
                             *, batch: int, new_tokens: int, depth: int, repeats: int = 3, warmup: bool = True,
                             eos_token_ids: tuple[int, ...] = ()) -> dict[str, SDSpeedup]:
    """:func:`measure_sd_speedup` for several drafters on the same target and prompts, sharing the
    plain runs: each repeat runs plain, then each drafter's ``depth`` chain in turn, so every drafter
    is timed under the same load as the plain run it is divided by. Each :class:`SDSpeedup` carries
    the per-repeat speedups (``per_repeat``: the spread the medians hide)."""
    if batch < 1 or new_tokens < 1 or repeats < 1 or depth < 1 or not prompts or not drafters:
        raise ValueError("batch, new_tokens, repeats and depth must be >= 1, prompts and drafters non-empty")
    return _interleaved_speedups(target, {name: (d, depth) for name, d in drafters.items()},  # type: ignore[return-value]
                                 prompts, batch=batch, new_tokens=new_tokens, repeats=repeats, warmup=warmup,
                                 eos_token_ids=eos_token_ids)
