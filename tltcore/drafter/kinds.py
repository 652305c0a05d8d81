"""What kind of drafter proposes the draft tokens, and what that means for cost, acceptance and the
engines: the one place that says, per kind, its drafter shape (:func:`drafter_shape`), how its passes
run (:attr:`DrafterKind.passes`), its default acceptance with its published source
(:attr:`DrafterKind.profile`) and its engine names (:attr:`DrafterKind.vllm`, :attr:`DrafterKind.sglang`).

======== ============================================ ============================== ================================
kind     drafts with                                  cost per SD iteration          default acceptance
======== ============================================ ============================== ================================
eagle    TLT's EAGLE-1/2 drafter: one decoder layer   ``depth`` sequential passes of the scenario's preset (the
         of the target's width over [embedding ;      the one-layer drafter          paper's Qwen2.5-32B EAGLE tree,
         target hidden] (2h -> h), embedding and LM                                  ``paper-qwen32b``)
         head shared (:meth:`ModelShape.drafter`)
eagle3   one decoder layer over fused low/mid/high    ``depth`` sequential passes;   a published EAGLE-3 chain
         target features (3h -> h), attention input   its LM head is the draft       (:data:`EAGLE3_PROFILE`)
         [embedding ; fused] (2h), its own LM head    vocabulary's (32,000 rows)
         over a 32,000-token draft vocabulary
mtp      the target's own MTP head (DeepSeek-V3):     ``depth`` sequential passes of DeepSeek-V3's 85-90% second-
         one *target* decoder layer + projection      one target layer (MoE, MLA     token acceptance, decaying
         2h -> h, embedding and LM head shared        and all)                       (:data:`MTP_PROFILE`)
block    a block drafter (DFlash / DSpark): 5 layers  **one** parallel pass over     DSpark's published accept
         of the target's width over 5 fused target    ``depth + 1`` positions per    length, constant per position
         layers (5h -> h), LM head shared             request                        (:data:`BLOCK_PROFILE`)
ngram    n-gram lookup over prompt and siblings       a CPU lookup                   ``drafter.ngram_alpha`` (ours)
suffix   suffix-tree lookup (SuffixDecoding)          a CPU lookup                   vLLM's measured suffix chain
                                                                                     (:data:`SUFFIX_PROFILE`)
draft-   a separate small LM (``drafter.            ``depth`` sequential passes of the scenario's preset
model    draft_model``)                               all its layers and LM head
======== ============================================ ============================== ================================

Costs. A sequential drafter pays one drafter forward per draft step (``depth`` steps of ``topk``
rows per request); a parallel (block) drafter pays one forward over ``depth + 1`` positions per
request (the anchor token and ``depth`` masks; DFlash's 16-token block drafts 15, vLLM's
``num_speculative_tokens = 15``), whose logits give every position's candidates at once
(:class:`~tltcore.cost.roofline.RooflineCostModel` with ``parallel_draft``). Model-free drafters pay
no GPU time (:class:`ModelFreeDraftCost`).

Acceptance. ``eagle`` and ``draft-model`` are priced with the scenario's acceptance preset (default:
the paper's fitted tree), ``ngram`` with its constant ``drafter.ngram_alpha``; the other kinds with
their published profile unless the scenario names another preset. A measured profile
(``acceptance.profile`` / ``--acceptance FILE``, ``acceptance.alphas``;
:mod:`tltcore.acceptance_profile`) replaces any of them. ``drafter.quality`` scales whichever applies
(1 = as published or measured). Published profiles are chains (vLLM and most published numbers draft
chains): under them a draft tree gains nothing over its deepest chain.

``ngram_alpha``'s default, 0.5 (mean accept length 1.9 at 4 draft tokens), is our assumption, not a
published number: model-free drafters in RL report speedups of up to ~2x when responses to the same
prompt repeat across epochs or siblings (SpecRL in veRL, verl-project/verl PR #4535; suffix decoding),
far less on fresh reasoning; set it (or a measured profile) from a measured run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from tltcore.acceptance import ChainAcceptance
from tltcore.acceptance_profile import alphas_from_rates
from tltcore.cost.protocol import CostModelBase
from tltcore.cost.roofline import RooflineCostModel
from tltcore.errors import InputError
from tltcore.model_shape import ModelShape
from tltcore.policy.base import SDConfig

#: How a drafter's passes run: one forward per draft step, one forward for the whole draft, or none (CPU).
Passes = Literal["sequential", "parallel", "none"]


# ---- default acceptance, each with its published source ------------------------------------------------
@dataclass(frozen=True)
class PublishedProfile:
    """A kind's default per-position chain acceptance: the conditional ``alphas``, the publication
    they come from (``source``), how they were derived from it (``how``) and a short ``label`` for
    one-line outputs."""

    alphas: tuple[float, ...]
    source: str
    how: str
    label: str

    def model(self) -> ChainAcceptance:
        return ChainAcceptance(self.alphas)

    @property
    def accept_length(self) -> float:
        """Mean tokens per verify (bonus included) at the profile's own depth."""
        return 1.0 + float(np.cumprod(self.alphas).sum())


def _tau_differences(taus: tuple[float, ...]) -> tuple[float, ...]:
    """Per-position acceptance rates from accept lengths measured at 1, 2, ... draft tokens: the k-th
    draft token adds P(position k accepted) to the mean accept length."""
    return tuple(round(b - a, 6) for a, b in zip((1.0, *taus[:-1]), taus, strict=True))


def _geometric(first: float, ratio: float, n: int) -> tuple[float, ...]:
    return tuple(round(first * ratio**i, 4) for i in range(n))


#: EAGLE-3 (vLLM, chain drafts). Source: RedHatAI's EAGLE-3 speculator for Llama-4-Maverick-17B-128E-
#: Instruct (huggingface.co/RedHatAI/Llama4-Maverick-17B-128E-Instruct-speculator.eagle3, README revision
#: a3bc47dd2b18ad27be775ca151068b6d6beed642, "Acceptance lengths", Math Reasoning (gsm8k) row: 1.86, 2.56,
#: 3.08, 3.53, 3.73, 3.91, 4.02 at k = 1..7 draft tokens; vLLM 0.11.0, temperature 0.6). The k-th draft
#: token adds P(position k accepted) to the accept length, so the per-position rates are the differences
#: (0.86, 0.70, 0.52, 0.45, 0.20, 0.18, 0.11) and the alphas their ratios. A general-purpose checkpoint on a
#: benchmark: below the ``eagle`` default, which is TLT's drafter adapted to its own rollouts.
EAGLE3_TAUS = (1.86, 2.56, 3.08, 3.53, 3.73, 3.91, 4.02)
EAGLE3_PROFILE = PublishedProfile(
    tuple(round(a, 4) for a in alphas_from_rates(_tau_differences(EAGLE3_TAUS))),
    "RedHatAI Llama4-Maverick-17B-128E-Instruct-speculator.eagle3 model card (vLLM 0.11.0, gsm8k, accept lengths "
    "1.86-4.02 at 1-7 draft tokens)",
    "per-position rates = differences of the accept lengths at k and k-1 draft tokens; alphas = their ratios",
    "published EAGLE-3 chain, accept length 4.02 at 7 draft tokens (RedHatAI speculator card)")

#: MTP (DeepSeek-V3 style, one MTP module reused for every draft token). Position 1: DeepSeek-V3 Technical
#: Report (arXiv 2412.19437, section 5.4.3): "the acceptance rate of the second token prediction ranges
#: between 85% and 90%" -> 0.875, the midpoint. Deeper positions: nebius/MTP-DeepSeek-V3-0324 model card
#: (huggingface.co/nebius/MTP-DeepSeek-V3-0324): the original DeepSeek-V3 MTP module, "reused
#: autoregressively for later positions", reaches accept length 3.20 at K = 7 (temperature 0, mean of
#: MT-bench, HumanEval, GSM8K). Derived: alphas decay geometrically from 0.875 at the ratio that gives 3.20 at
#: 7 tokens (0.830, solved by bisection).
MTP_FIRST, MTP_RATIO, MTP_TAU7 = 0.875, 0.83, 3.20
MTP_PROFILE = PublishedProfile(
    _geometric(MTP_FIRST, MTP_RATIO, 7),
    "DeepSeek-V3 Technical Report (arXiv 2412.19437, sec. 5.4.3: second-token acceptance 85-90%) and the "
    "nebius/MTP-DeepSeek-V3-0324 model card (original MTP reused autoregressively: accept length 3.20 at 7 tokens)",
    "alpha 1 = 0.875 (the midpoint of 85-90%), later positions decaying by a constant ratio 0.83, solved so that "
    "7 draft tokens give accept length 3.20",
    "published DeepSeek-V3 MTP, 0.875 at position 1, accept length 3.20 at 7 draft tokens")

#: Block drafter (DFlash / DSpark). Source: the Dogacel/Qwen3-8B-DSpark model card
#: (huggingface.co/Dogacel/Qwen3-8B-DSpark, "Reference - DeepSeek's fully-trained dspark_qwen3_8b_block7, same
#: harness: acceptance length 3.41"; SPEED-Bench coding, vLLM, temperature 1.0, num_speculative_tokens 7).
#: Only the length is published for that drafter, so the profile is a constant alpha solving
#: (1 - a^8) / (1 - a) = 3.41 (0.7305, by bisection); the same card's per-position rates for its own
#: checkpoint (60.5 / 34.1 / 18.6 / 9.9 / 5.2 / 2.7 / 1.4 %) have near-constant conditional acceptance
#: (0.52-0.61), so a constant alpha is the shape block drafters show.
BLOCK_TAU7 = 3.41
BLOCK_ALPHA = 0.7305
BLOCK_PROFILE = PublishedProfile(
    (BLOCK_ALPHA,),
    "Dogacel/Qwen3-8B-DSpark model card: DeepSeek's dspark_qwen3_8b_block7 accept length 3.41 at 7 draft tokens "
    "(vLLM, SPEED-Bench coding)",
    "constant alpha 0.7305 solving (1 - a^8) / (1 - a) = 3.41; constant because that card's per-position rates "
    "have near-constant conditional acceptance",
    "published DSpark block drafter, accept length 3.41 at 7 draft tokens")

#: Suffix decoding (vLLM ``method = "suffix"``, Arctic Inference). Source: vllm-project/vllm PR #24852
#: (the port of suffix decoding to vLLM), offline MT-bench run with one speculative token: 1,226 of 1,986
#: drafts accepted, "acceptance at token 0: 0.62". Only position 1 is published, so the profile is that
#: constant. Suffix decoding shines on repeated outputs (agentic loops, RL siblings), where this number is
#: low: set a measured profile from your own run.
SUFFIX_ALPHA = 0.62
SUFFIX_PROFILE = PublishedProfile(
    (SUFFIX_ALPHA,),
    "vllm-project/vllm PR #24852 (suffix decoding in vLLM, MT-bench, 1 speculative token: acceptance 0.62)",
    "constant alpha 0.62: only the first position is published",
    "published vLLM suffix decoding on MT-bench, 0.62 per position")


# ---- engine names -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineName:
    """What an engine calls a drafter kind (``name``), or None with ``why`` it cannot run it."""

    name: str | None
    why: str = ""


#: The architecture constants of the drafters built here, each with its source.
#: SpecForge's default draft vocabulary for EAGLE-3 heads (sgl-project/SpecForge configs/*-eagle3.json,
#: e.g. qwen3-32b-eagle3.json: "draft_vocab_size": 32000; also RedHatAI and AngelSlim EAGLE-3 heads).
EAGLE3_DRAFT_VOCAB = 32_000
#: EAGLE-3 fuses three target layers (low, mid, high): its fc is 3h -> h (vLLM llama_eagle3.py, SpecForge).
EAGLE3_FUSED_LAYERS = 3
#: DFlash's drafter for Qwen3-8B: 5 decoder layers of the target's width over 5 fused target layers
#: (sgl-project/SpecForge configs/qwen3-8b-dflash.json and z-lab/Qwen3-8B-DFlash-b16: num_hidden_layers 5,
#: hidden_size 4096 = the target's; DSpark's qwen3-8b config: target_layer_ids of 5 layers).
BLOCK_DRAFT_LAYERS = 5
BLOCK_FUSED_LAYERS = 5


@dataclass(frozen=True)
class DrafterKind:
    """One drafter kind (module docstring): ``passes`` (how its draft runs), ``profile`` (its published
    default acceptance; None: the scenario's preset, or ``drafter.ngram_alpha`` for ``ngram``), its
    vLLM ``method`` and SGLang ``--speculative-algorithm``, and the static draft shapes ``tlt advise``
    tries with it (``shapes``; ``quick_shape`` for ``--quick``): chains where the kind drafts chains,
    a block size for ``block``."""

    name: str
    drafts: str
    passes: Passes
    profile: PublishedProfile | None
    vllm: EngineName
    sglang: EngineName
    shapes: tuple[str, ...]
    quick_shape: str

    @property
    def model_free(self) -> bool:
        """No weights: no GPU draft cost, no drafter KV, no quality to go stale or be trained."""
        return self.passes == "none"

    @property
    def parallel(self) -> bool:
        return self.passes == "parallel"

    def published(self, preset_named: bool, measured: bool) -> bool:
        """Whether this kind is priced with its published profile (:func:`drafter_acceptance`'s rule):
        it has one, no measured profile replaces it and the scenario names no preset of its own."""
        return self.profile is not None and not preset_named and not measured


_NO_SUFFIX_SGLANG = ("SGLang's --speculative-algorithm has no suffix decoding (its choices: EAGLE, EAGLE3, NEXTN, "
                     "STANDALONE, NGRAM, DFLASH, DSPARK)")

KINDS: dict[str, DrafterKind] = {k.name: k for k in (
    DrafterKind("eagle", "TLT's EAGLE-1/2 drafter: one decoder layer on the target's hidden states", "sequential",
                None, EngineName("eagle"), EngineName("EAGLE"), ("4_1_4", "8_4_32"), "8_4_32"),
    DrafterKind("draft-model", "a separate small LM (drafter.draft_model)", "sequential", None,
                EngineName("draft_model"), EngineName("STANDALONE"), ("4_1_4", "8_4_32"), "8_4_32"),
    DrafterKind("ngram", "n-gram lookup over the prompt and sibling responses", "none", None,
                EngineName("ngram"), EngineName("NGRAM"), ("4_1_4", "8_4_32"), "8_4_32"),
    DrafterKind("eagle3", "an EAGLE-3 head: one layer over fused low/mid/high target features", "sequential",
                EAGLE3_PROFILE, EngineName("eagle3"), EngineName("EAGLE3"), ("4_1_4", "8_4_32"), "8_4_32"),
    DrafterKind("mtp", "the target's own MTP head (one target layer), run once per draft token", "sequential",
                MTP_PROFILE, EngineName("mtp"), EngineName("NEXTN"), ("1_1_1", "3_1_3"), "3_1_3"),
    DrafterKind("block", "a block drafter (DFlash / DSpark): one parallel pass proposes the whole block",
                "parallel", BLOCK_PROFILE, EngineName("dflash"), EngineName("DFLASH"), ("7_1_7", "15_1_15"),
                "15_1_15"),
    DrafterKind("suffix", "suffix-tree lookup over the prompt and earlier outputs (SuffixDecoding)", "none",
                SUFFIX_PROFILE, EngineName("suffix"), EngineName(None, _NO_SUFFIX_SGLANG), ("4_1_4", "8_1_8"),
                "4_1_4"),
)}
#: Every kind, in the order help texts list them (``drafter.kind``; the Literal in
#: :mod:`tltcore.drafter.dynamics` is the same list, tested).
DRAFTER_KINDS: tuple[str, ...] = ("eagle", "eagle3", "mtp", "block", "ngram", "suffix", "draft-model")


def drafter_kind(name: str) -> DrafterKind:
    """The kind called ``name``; an unknown one is refused naming ``drafter.kind``."""
    if name not in KINDS:
        raise InputError(f"must be one of {', '.join(DRAFTER_KINDS)}, got '{name}'", field="drafter.kind")
    return KINDS[name]


# ---- drafter shapes -----------------------------------------------------------------------------------
def eagle3_drafter(target: ModelShape) -> ModelShape:
    """An EAGLE-3 head for ``target``: one Llama decoder layer of the target's width, an fc from the three
    fused target layers (3h -> h), q/k/v projections reading [embedding ; fused] (2h, so h more input
    columns than a plain layer: ``q_dim + 2 kv_dim`` more input features of width h, counted with the fc
    as ``input_proj_features``), its own LM head over :data:`EAGLE3_DRAFT_VOCAB` tokens. Built from the
    target's attention and MLP sizes, not by copying the target (its layer is dense whatever the target's is)."""
    h = target.hidden_size
    extra_qkv = target.q_dim + 2 * target.kv_dim  # the h embedding columns q/k/v read beside the fused features
    return ModelShape(name=f"{target.name}-eagle3", num_hidden_layers=1, hidden_size=h,
                      num_attention_heads=target.num_attention_heads,
                      num_key_value_heads=target.num_key_value_heads, intermediate_size=target.intermediate_size,
                      vocab_size=EAGLE3_DRAFT_VOCAB, head_dim=target.head_dim,
                      input_proj_features=EAGLE3_FUSED_LAYERS * h + extra_qkv)


def mtp_drafter(target: ModelShape) -> ModelShape:
    """The target's own MTP module (DeepSeek-V3): one *target* decoder layer and a projection of
    [RMSNorm(hidden) ; RMSNorm(embedding)] (2h -> h), embedding and LM head shared. A copy of the target
    shape (``dataclasses.replace``), so whatever the target's layer is (MoE experts, MLA) carries over."""
    moe = replace(target.moe, dense_layers=0) if target.moe is not None else None  # the MTP block's FFN is MoE
    return replace(target, name=f"{target.name}-mtp", num_hidden_layers=1,
                   input_proj_features=2 * target.hidden_size, moe=moe, mtp_layers=0)


def block_drafter(target: ModelShape) -> ModelShape:
    """A DFlash-style block drafter: :data:`BLOCK_DRAFT_LAYERS` dense decoder layers of the target's
    width, an fc from :data:`BLOCK_FUSED_LAYERS` fused target layers, the target's LM head (full
    vocabulary)."""
    h = target.hidden_size
    return ModelShape(name=f"{target.name}-block", num_hidden_layers=BLOCK_DRAFT_LAYERS, hidden_size=h,
                      num_attention_heads=target.num_attention_heads,
                      num_key_value_heads=target.num_key_value_heads, intermediate_size=target.intermediate_size,
                      vocab_size=target.vocab_size, head_dim=target.head_dim,
                      input_proj_features=BLOCK_FUSED_LAYERS * h)


def drafter_shape(kind: str, target: ModelShape, draft_model: ModelShape | None = None) -> ModelShape | None:
    """The shape whose forward a ``kind`` drafter runs for ``target`` (None: a model-free drafter)."""
    spec = drafter_kind(kind)
    if spec.model_free:
        return None
    if kind == "draft-model":
        if draft_model is None:
            raise InputError("the draft-model drafter needs drafter.draft_model", field="drafter.draft_model")
        return draft_model
    return {"eagle": ModelShape.drafter, "eagle3": eagle3_drafter, "mtp": mtp_drafter,
            "block": block_drafter}[kind](target)


# ---- model-free drafters -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelFreeDraftCost(CostModelBase):
    """A roofline cost model whose drafts cost no GPU time: an SD iteration is one target verify
    forward, the SD bookkeeping and a CPU lookup. The drafter keeps no KV, so catching it up is
    free. Everything without SD is the base model's. Its batched forms
    (:class:`~tltcore.cost.protocol.PagedKVTimes`) are the base's, the SD ones over the base's
    batched verify forward, wherever the base has them."""

    base: RooflineCostModel
    lookup_s: float = 5e-5

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return self.base.prefill_time(new_tokens, cached_tokens)

    def decode_time(self, context_lens: np.ndarray) -> float:
        return self.base.decode_time(context_lens)

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        return self.base.decode_span_time(context_lens, n_iters)

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return 0.0

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        if not config.enabled:
            return self.base.decode_time(context_lens)
        if len(context_lens) == 0:
            return 0.0
        b = self.base
        return (b.verify_time(context_lens, config.verify_tokens) + b.sd_overhead_s + b.iteration_overhead_s
                + self.lookup_s)

    # ---- batched forms (PagedKVTimes) -------------------------------------------------------------
    def paged_kv_times(self) -> ModelFreeDraftCost | None:
        """This model where its base roofline gives batched forms, else None."""
        return self if self.base.paged_kv_times() is not None else None

    @property
    def kv_block_size(self) -> int:
        return self.base.kv_block_size

    @property
    def memory_bound_decode(self) -> bool:
        return self.base.memory_bound_decode

    def decode_times_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray) -> list[float]:
        """Plain decode is the base's."""
        return self.base.decode_times_from_sums(paged, ctx_sum, batch)

    def sd_many_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray,
                          configs: tuple[SDConfig, ...]) -> np.ndarray:
        """:meth:`sd_times_from_sums` of every config, one column each."""
        return np.stack([self.sd_times_from_sums(paged, ctx_sum, batch, c) for c in configs], axis=1)

    def sd_times_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray,
                           config: SDConfig) -> np.ndarray:
        """:meth:`sd_time` of iterations given by their paged KV sums, context sums and batch sizes: the
        base's batched verify forward, then the same three additions in :meth:`sd_time`'s order."""
        b = self.base
        out = b.verify_times_from_sums(paged, ctx_sum, batch, config.verify_tokens)
        out += b.sd_overhead_s
        out += b.iteration_overhead_s
        out += self.lookup_s
        return out

    def sd_rows_times(self, ctx_rows: np.ndarray, config: SDConfig, ctx_sum: np.ndarray | None = None
                      ) -> list[float]:
        """:meth:`sd_time` of every row (iterations x requests) through :meth:`sd_times_from_sums`, or
        one call per row where the base has no batched forms."""
        if self.base.paged_kv_times() is None:
            return super().sd_rows_times(ctx_rows, config, ctx_sum)
        k, b = ctx_rows.shape
        bs = self.base.kv_block_size
        paged = np.add.reduce(-(-ctx_rows // bs), axis=1) * bs
        if ctx_sum is None:
            ctx_sum = np.add.reduce(ctx_rows, axis=1)
        return self.sd_times_from_sums(paged, ctx_sum, np.full(k, b, dtype=np.int64), config).tolist()

    def prefill_passes_time(self, new: np.ndarray, cached: np.ndarray, budget: int, target: bool,
                            drafter: bool) -> tuple[float, int]:
        """The base's chunked prefill; the drafter's passes are free (they would add 0.0 each, which
        leaves a non-negative total as it is)."""
        return self.base.prefill_passes_time(new, cached, budget, target, False)

    def decode_span_time_of(self, ctx: np.ndarray, n: int) -> float:
        return self.base.decode_span_time_of(ctx, n)

    def decode_spans_time(self, n: np.ndarray, b: np.ndarray, ctx_sum: np.ndarray, hist: np.ndarray,
                          start: np.ndarray) -> np.ndarray:
        return self.base.decode_spans_time(n, b, ctx_sum, hist, start)


def ngram_acceptance(alpha: float) -> ChainAcceptance:
    """The n-gram drafter's constant-alpha chain acceptance."""
    if not 0 <= alpha <= 1:
        raise InputError(f"must be in [0, 1], got {alpha}", field="drafter.ngram_alpha")
    return ChainAcceptance((alpha,))


def drafter_acceptance(kind: str, ngram_alpha: float, preset_acceptance, *, preset_named: bool, measured=None):
    """The acceptance a drafter of ``kind`` is priced with, the one place that decides it: a measured
    profile (``measured``: :class:`~tltcore.acceptance.ChainAcceptance`, any kind) first; else the
    model-free ``ngram`` drafter its constant-alpha chain (:func:`ngram_acceptance`); else the
    scenario's acceptance model ``preset_acceptance`` for a kind without a published profile (``eagle``,
    ``draft-model``: the paper-fitted EAGLE tree by default) or when the scenario names a preset of its
    own (``preset_named``); else the kind's published profile. Pricing an n-gram drafter with the EAGLE
    tree's acceptance at no draft cost made it look better than EAGLE."""
    spec = drafter_kind(kind)
    if measured is not None:
        return measured
    if kind == "ngram":
        return ngram_acceptance(ngram_alpha)
    if spec.profile is None or preset_named:
        return preset_acceptance
    return spec.profile.model()
