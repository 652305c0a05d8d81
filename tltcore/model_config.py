"""The one reader of Hugging Face ``config.json`` files, for both halves.

The simulator derives its cost shape from it (:meth:`tltcore.model_shape.ModelShape.from_config`) and
the native engine builds its network from it, so a field means the same thing everywhere -- and
the same thing as in ``transformers``, which the engine is tested against.

Families (``model_type``, :data:`FAMILIES`), read as ``transformers`` 5 and vLLM read them:

* dense: ``llama`` (Llama 2/3.x, attention and MLP biases), ``mistral`` (a sliding window over every
  layer), ``qwen2`` (q/k/v biases, sliding-window layers), ``qwen3`` (per-head q/k RMSNorm, no biases);
* mixture of experts: ``qwen2_moe`` and ``qwen3_moe`` (routed experts of ``moe_intermediate_size``,
  Qwen2-MoE's shared expert, ``mlp_only_layers`` / ``decoder_sparse_step`` keep dense layers),
  ``mixtral`` (its ``intermediate_size`` is the expert width), ``glm4_moe`` (GLM-4.5: shared experts,
  first dense layers, QK-norm, partial rotary, an MTP layer);
* multi-head latent attention + experts: ``deepseek_v2`` and ``deepseek_v3`` (``kimi_k2``, Kimi-K2's
  label for the same network, is read as ``deepseek_v3``): low-rank q/kv projections, routed + shared
  experts after ``first_k_dense_replace`` dense layers, ``num_nextn_predict_layers`` MTP modules.

Also read: ``rope_parameters`` (and the older top-level ``rope_theta`` / ``rope_scaling``) with rope
types ``default``, ``linear``, ``llama3`` and ``yarn``; ``hidden_act`` silu, gelu, gelu_new,
gelu_pytorch_tanh, relu; tied embeddings; ``head_dim`` other than hidden / heads; an fp8
``quantization_config`` (``weight_dtype = "fp8"``; every other quantisation method is refused naming
``quantization_config.quant_method``).

Every field of a config is one of three things, and never silently a fourth: *read* (it changes the
network, and it maps onto :class:`ModelConfig`), *inert* (listed in :data:`INERT_FIELDS` or, for MoE
families, :data:`ROUTER_FIELDS`, each with the reason it does not change a forward's cost), or
*refused* with one line naming the key and the file ("is not supported ... (it may change the
network)"). Which families the native engine builds is the engine's business
(:func:`tltreal.model.transformer.check_buildable`); the simulator prices them all.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tltcore.errors import InputError
from tltcore.input_files import check_input

#: ``model_type`` -> the family's name in messages.
FAMILIES: dict[str, str] = {
    "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "qwen2_moe": "Qwen2-MoE",
    "qwen3_moe": "Qwen3-MoE", "mixtral": "Mixtral", "deepseek_v2": "DeepSeek-V2", "deepseek_v3": "DeepSeek-V3",
    "glm4_moe": "GLM-4.5 (glm4_moe)",
}
#: Other labels of a family's network. Kimi-K2's config says ``kimi_k2`` and vLLM runs it as
#: ``DeepseekV3ForCausalLM`` (its ``architectures``): the same fields mean the same network.
TYPE_ALIASES = {"kimi_k2": "deepseek_v3"}
SUPPORTED_TYPES = tuple(FAMILIES)
MOE_TYPES = frozenset({"qwen2_moe", "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3", "glm4_moe"})
MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3"})
ROPE_TYPES = ("default", "linear", "llama3", "yarn")
ACTIVATIONS = ("silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
WEIGHT_DTYPES = ("bf16", "fp8")
MAX_DIM = 1 << 20  # bounds before anything is allocated from these numbers
MAX_LAYERS = 4096
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 24
MAX_EXPERTS = 1 << 16

_NO_FORWARD = "does not change a forward pass"
_TRAINING = "a training-time setting: inference never reads it"
#: Fields that do not change a forward pass, accepted in every family, with why.
INERT_FIELDS: dict[str, str] = {
    **dict.fromkeys((
        "architectures", "transformers_version", "_name_or_path", "name_or_path", "model_name", "tokenizer_class",
        "id2label", "label2id", "problem_type", "finetuning_task", "prefix", "task_specific_params",
        "torchscript", "return_dict", "output_attentions", "output_hidden_states", "use_bfloat16",
    ), "metadata: " + _NO_FORWARD),
    **dict.fromkeys(("bos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "forced_bos_token_id",
                     "forced_eos_token_id"), "a special token id: " + _NO_FORWARD),
    **dict.fromkeys((
        "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
        "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
        "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
        "output_scores", "return_dict_in_generate", "remove_invalid_values", "exponential_decay_length_penalty",
        "suppress_tokens", "begin_suppress_tokens",
    ), "a generation default: the rollout engine's sampling settings decide"),
    **dict.fromkeys(("initializer_range", "attention_dropout", "tf_legacy_loss", "pretraining_tp"), _TRAINING),
    "use_cache": "whether transformers keeps a KV cache: serving engines always do",
    "torch_dtype": "the dtype the weights were saved in: serving engines run 16-bit weights (bf16 assumed) "
                   "unless a quantization_config says fp8",
    "dtype": "transformers 5's name for torch_dtype (bf16 assumed unless a quantization_config says fp8)",
    "auto_map": "remote-code class names: tlt reads the network from the fields themselves",
    **dict.fromkeys(("pruned_heads", "chunk_size_feed_forward", "is_decoder", "is_encoder_decoder",
                     "add_cross_attention", "cross_attention_hidden_size", "tie_encoder_decoder"),
                    "a transformers base-class default that a decoder-only causal LM leaves as is"),
}
_ROUTING = "router detail: decides which experts a token picks, not how many or how large"
#: MoE families only: fields that do not change a forward's cost (the expert count per token and the
#: expert sizes do; which experts win does not, and :mod:`tltcore.cost.moe` prices uniform routing).
ROUTER_FIELDS: dict[str, str] = {
    **dict.fromkeys(("norm_topk_prob", "routed_scaling_factor", "scoring_func", "topk_method"), _ROUTING),
    **dict.fromkeys(("n_group", "topk_group"), "group-limited routing: restricts which experts a token may pick, "
                    "not how many (uniform routing is the cost model's assumption)"),
    **dict.fromkeys(("router_aux_loss_coef", "aux_loss_alpha", "seq_aux", "output_router_logits",
                     "router_jitter_noise"), _TRAINING),
    "ep_size": "a deployment setting of DeepSeek's reference code (expert parallelism is the cluster's choice)",
}
_COMMON = frozenset({
    "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size", "model_type",
    "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
    "tie_word_embeddings", "hidden_act", "max_position_embeddings", "eos_token_id", "text_config",
    "quantization_config", "partial_rotary_factor",
})
_QWEN_SLIDING = ("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")
_QWEN_MOE = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers")
_DEEPSEEK_MOE = ("n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                 "first_k_dense_replace")
_MLA = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "qk_head_dim",
        "rope_interleave")
#: Fields each family reads beyond the common ones (a field of another family is refused: a
#: ``num_experts`` in a Llama config may mean a network tlt would misprice).
FAMILY_FIELDS: dict[str, frozenset[str]] = {
    "llama": frozenset({"attention_bias", "mlp_bias"}),
    "mistral": frozenset({"sliding_window"}),
    "qwen2": frozenset({"attention_bias", "mlp_bias", *_QWEN_SLIDING}),
    "qwen3": frozenset({"attention_bias", *_QWEN_SLIDING}),
    "qwen2_moe": frozenset({"qkv_bias", "shared_expert_intermediate_size", *_QWEN_SLIDING, *_QWEN_MOE}),
    "qwen3_moe": frozenset({"attention_bias", "use_sliding_window", "sliding_window", "max_window_layers",
                            *_QWEN_MOE}),
    "mixtral": frozenset({"sliding_window", "num_local_experts", "num_experts", "num_experts_per_tok"}),
    "deepseek_v2": frozenset({"attention_bias", "mlp_bias", "moe_layer_freq", *_DEEPSEEK_MOE, *_MLA}),
    "deepseek_v3": frozenset({"attention_bias", "mlp_bias", "moe_layer_freq", "num_nextn_predict_layers",
                              "num_mtp_layers", *_DEEPSEEK_MOE, *_MLA}),
    "glm4_moe": frozenset({"attention_bias", "use_qk_norm", "num_nextn_predict_layers", "num_mtp_layers",
                           *_DEEPSEEK_MOE}),
}
HANDLED_FIELDS = frozenset(_COMMON.union(*FAMILY_FIELDS.values()))
#: Keys of an fp8 ``quantization_config`` (block-scaled e4m3, as DeepSeek-V3 and Qwen's -FP8 checkpoints
#: ship): the scales (one float per 128 x 128 block) are negligible next to the weights.
FP8_KEYS = frozenset({"quant_method", "fmt", "activation_scheme", "weight_block_size", "modules_to_not_convert",
                      "ignored_layers"})


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling (``rope_type`` in transformers): none, linear, Llama-3.1's, or YaRN.

    YaRN (Qwen3's long-context setting, DeepSeek's ``rope_scaling``) is read for the cost model, where
    it changes nothing; the native engine refuses it (:func:`tltreal.model.transformer.check_buildable`)."""

    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_max_position_embeddings: int = 8192  # llama3 and yarn
    beta_fast: float | None = None  # yarn only (None: transformers' default)
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None

    def inverse_frequencies(self, head_dim: int, theta: float) -> list[float]:
        """Per-pair rotation frequencies (float64 math, as transformers' formulas)."""
        if self.kind == "yarn":
            raise InputError("yarn rope frequencies are not implemented (the cost model does not need them)",
                             field="rope_scaling")
        base = [1.0 / theta ** (i / head_dim) for i in range(0, head_dim, 2)]
        if self.kind == "linear":
            return [f / self.factor for f in base]
        if self.kind != "llama3":
            return base
        old = self.original_max_position_embeddings
        low_wavelen, high_wavelen = old / self.low_freq_factor, old / self.high_freq_factor
        out = []
        for f in base:
            wavelen = 2 * math.pi / f
            if wavelen < high_wavelen:
                out.append(f)
            elif wavelen > low_wavelen:
                out.append(f / self.factor)
            else:
                smooth = (old / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
                out.append((1 - smooth) * f / self.factor + smooth * f)
        return out


@dataclass(frozen=True)
class MoEConfig:
    """Mixture-of-experts MLPs as a config declares them (HF names in brackets): ``num_experts`` routed
    SwiGLU experts per MoE layer (``num_experts`` / ``num_local_experts`` / ``n_routed_experts``), of
    which each token uses ``experts_per_token`` (``num_experts_per_tok``), each of width
    ``expert_intermediate_size`` (``moe_intermediate_size``; Mixtral: ``intermediate_size``); always-on
    shared experts of total width ``shared_intermediate_size`` (0: none); ``dense_layer_ids``: the
    layers that keep a dense MLP of the model's ``intermediate_size`` instead."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int = 0
    dense_layer_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name, hi in (("num_experts", MAX_EXPERTS), ("experts_per_token", MAX_EXPERTS),
                         ("expert_intermediate_size", MAX_DIM)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
                raise InputError(f"must be an integer in [1, {hi:,}], got {value!r}", field=name)
        if self.experts_per_token > self.num_experts:
            raise InputError(f"{self.experts_per_token} experts per token of only {self.num_experts}",
                             field="num_experts_per_tok")
        if not 0 <= self.shared_intermediate_size <= MAX_DIM * 64:
            raise InputError(f"must be in [0, {MAX_DIM * 64:,}], got {self.shared_intermediate_size}",
                             field="shared_expert_intermediate_size")


@dataclass(frozen=True)
class MLAConfig:
    """DeepSeek's multi-head latent attention (HF names): queries through a rank-``q_lora_rank``
    bottleneck (0: projected directly, DeepSeek-V2-Lite's ``null``), keys and values from one cached
    latent of ``kv_lora_rank`` plus a shared ``qk_rope_head_dim`` rotary part."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            lo = 0 if name == "q_lora_rank" else 1
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= MAX_DIM:
                raise InputError(f"must be an integer in [{lo}, {MAX_DIM:,}], got {value!r}", field=name)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Values cached per token and layer, shared by all heads (and by all GPUs of a TP group: each keeps
        the whole latent)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def projections(self, hidden: int, heads: int) -> tuple[tuple[int, int], ...]:
        """``(in, out)`` of each projection of one layer with ``heads`` query heads: the query's (through the
        rank-``q_lora_rank`` bottleneck, or direct), the KV down-projection to the latent, its up-projection
        to every head's nope key and value, and the output projection. Under tensor parallelism the
        down-projections are whole on every GPU and the others hold ``heads / tp`` heads."""
        q = (((hidden, self.q_lora_rank), (self.q_lora_rank, heads * self.qk_head_dim)) if self.q_lora_rank
             else ((hidden, heads * self.qk_head_dim),))
        return (*q, (hidden, self.latent_dim), (self.kv_lora_rank, heads * (self.qk_nope_head_dim + self.v_head_dim)),
                (heads * self.v_head_dim, hidden))

    def params(self, hidden: int, heads: int) -> int:
        """The :meth:`projections`' weights and the two low-rank RMSNorms."""
        return sum(k * n for k, n in self.projections(hidden, heads)) + self.q_lora_rank + self.kv_lora_rank


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only causal LM, field names as in ``config.json``; ``qkv_bias`` / ``o_bias`` say which
    attention projections carry biases (Llama, Qwen3: all four iff ``attention_bias``; Qwen2: q, k, v;
    GLM-4.5: q, k, v iff ``attention_bias``). ``moe`` / ``mla``: None for a dense MLP / grouped-query
    attention. ``mtp_layers``: the multi-token-prediction modules the checkpoint ships."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    max_position_embeddings: int = 4096
    model_type: str = "llama"
    head_dim_override: int | None = None
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()  # indices of layers that attend within sliding_window only
    eos_token_ids: tuple[int, ...] = ()  # generation stops at any of these (config.json eos_token_id)
    qk_norm: bool = False  # RMSNorm over each q and k head before RoPE (Qwen3, GLM-4.5's use_qk_norm)
    partial_rotary_factor: float = 1.0  # share of each head's dims that RoPE rotates (GLM-4.5: 0.5)
    moe: MoEConfig | None = None
    mla: MLAConfig | None = None
    weight_dtype: str = "bf16"  # the checkpoint's weights: bf16, or fp8 with a quantization_config
    mtp_layers: int = 0  # num_nextn_predict_layers

    def __post_init__(self) -> None:
        for name, hi in (("vocab_size", MAX_VOCAB), ("hidden_size", MAX_DIM), ("intermediate_size", MAX_DIM),
                         ("num_hidden_layers", MAX_LAYERS), ("num_attention_heads", MAX_DIM),
                         ("num_key_value_heads", MAX_DIM), ("max_position_embeddings", MAX_CONTEXT)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
                raise InputError(f"must be an integer in [1, {hi:,}], got {value!r}", field=name)
        if self.model_type not in FAMILIES:
            raise InputError(f"model_type '{self.model_type}' is not one of {', '.join(FAMILIES)}",
                             field="model_type")
        if self.num_attention_heads % self.num_key_value_heads:
            raise InputError(f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_key_value_heads}", field="num_key_value_heads")
        if self.head_dim_override is None and self.hidden_size % self.num_attention_heads:
            raise InputError("hidden_size is not a multiple of num_attention_heads and no head_dim is given",
                             field="hidden_size")
        if self.head_dim_override is not None and not 1 <= self.head_dim_override <= MAX_DIM:
            raise InputError(f"must be in [1, {MAX_DIM:,}], got {self.head_dim_override}", field="head_dim")
        if self.head_dim % 2:
            raise InputError(f"head dimension {self.head_dim} must be even for RoPE", field="head_dim")
        if self.hidden_act not in ACTIVATIONS:
            raise InputError(f"'{self.hidden_act}' is not supported ({', '.join(ACTIVATIONS)})", field="hidden_act")
        for name in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise InputError(f"must be a positive finite number, got {value!r}", field=name)
        if not (math.isfinite(self.partial_rotary_factor) and 0 < self.partial_rotary_factor <= 1):
            raise InputError(f"must be in (0, 1], got {self.partial_rotary_factor}", field="partial_rotary_factor")
        if self.sliding_window is not None and not 1 <= self.sliding_window <= MAX_CONTEXT:
            raise InputError(f"must be in [1, {MAX_CONTEXT:,}], got {self.sliding_window}", field="sliding_window")
        self._check_biases()
        if any(not 0 <= t < self.vocab_size for t in self.eos_token_ids):
            raise InputError(f"token ids must be in [0, {self.vocab_size}), got {list(self.eos_token_ids)}",
                             field="eos_token_id")
        if any(not 0 <= i < self.num_hidden_layers for i in self.sliding_layers):
            raise InputError("names a layer beyond num_hidden_layers", field="layer_types")
        if self.weight_dtype not in WEIGHT_DTYPES:
            raise InputError(f"'{self.weight_dtype}' is not one of {', '.join(WEIGHT_DTYPES)}", field="weight_dtype")
        if isinstance(self.mtp_layers, bool) or not isinstance(self.mtp_layers, int) or not 0 <= self.mtp_layers <= 64:
            raise InputError(f"must be an integer in [0, 64], got {self.mtp_layers!r}",
                             field="num_nextn_predict_layers")
        if self.moe is not None and self.model_type not in MOE_TYPES:
            raise InputError(f"a {self.family} model has no experts", field="model_type")
        if self.moe is not None and any(not 0 <= i < self.num_hidden_layers for i in self.moe.dense_layer_ids):
            raise InputError("names a layer beyond num_hidden_layers", field="mlp_only_layers")
        if (self.mla is not None) != (self.model_type in MLA_TYPES):
            raise InputError(f"a {self.family} model {'has' if self.mla is None else 'has no'} latent attention "
                             "(q_lora_rank, kv_lora_rank, ...)", field="model_type")

    def _check_biases(self) -> None:
        kind = self.model_type
        if kind == "qwen2" and (not self.qkv_bias or self.o_bias or self.mlp_bias):
            raise InputError("a Qwen2 model has q/k/v biases and no o_proj or MLP biases", field="qkv_bias")
        if kind in ("llama", "qwen3", "qwen3_moe") and self.qkv_bias != self.o_bias:
            raise InputError(f"{self.family}'s attention_bias puts biases on q, k, v and o alike", field="o_bias")
        if kind not in ("llama", "deepseek_v2", "deepseek_v3") and self.mlp_bias:
            raise InputError(f"a {self.family} model has no MLP biases", field="mlp_bias")
        if kind in ("mistral", "mixtral") and (self.qkv_bias or self.o_bias):
            raise InputError(f"a {self.family} model has no attention biases", field="qkv_bias")
        if kind in ("qwen2_moe", "glm4_moe") and self.o_bias:
            raise InputError(f"a {self.family} model has no o_proj bias", field="o_bias")
        if kind == "mistral" and self.sliding_layers not in ((), tuple(range(self.num_hidden_layers))):
            raise InputError("Mistral's sliding window covers every layer or none", field="sliding_window")

    @property
    def family(self) -> str:
        """The family's name in messages (``Qwen3-MoE``)."""
        return FAMILIES[self.model_type]

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden_size // self.num_attention_heads

    def window_of(self, layer: int) -> int | None:
        """Keys a query of ``layer`` may look back over (None: the whole context)."""
        return self.sliding_window if layer in self.sliding_layers else None

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, path: object | None = None) -> ModelConfig:
        """Build from a parsed ``config.json``; every problem is one :class:`InputError` naming the field."""
        try:
            return _parse(raw)
        except InputError as exc:
            raise InputError(exc.message, path=path, field=exc.field) from None

    @classmethod
    def from_json(cls, path: str | Path) -> ModelConfig:
        """Read ``config.json`` (or a model folder holding one)."""
        return cls.from_dict(read_config_json(path), path=config_json_path(path))

    def to_hf_dict(self) -> dict[str, Any]:
        """``config.json`` content for this model, as transformers 5 writes it (round-trips). Written
        for the families the native engine builds (llama, mistral, qwen2, qwen3): the engine's
        results and exported models carry it."""
        if self.model_type not in _ARCHITECTURES:
            raise InputError(f"tlt writes config.json for {', '.join(_ARCHITECTURES)} models only, not "
                             f"{self.family}", field="model_type")
        d: dict[str, Any] = {
            "architectures": [_ARCHITECTURES[self.model_type]],
            "model_type": self.model_type, "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "rms_norm_eps": self.rms_norm_eps, "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": self.hidden_act, "max_position_embeddings": self.max_position_embeddings,
            "rope_parameters": _rope_dict(self.rope_theta, self.rope_scaling),
        }
        if self.head_dim_override is not None:
            d["head_dim"] = self.head_dim_override
        if self.eos_token_ids:
            d["eos_token_id"] = self.eos_token_ids[0] if len(self.eos_token_ids) == 1 else list(self.eos_token_ids)
        if self.model_type == "llama":
            d["attention_bias"], d["mlp_bias"] = self.qkv_bias, self.mlp_bias
        elif self.model_type == "mistral":
            d["sliding_window"] = self.sliding_window if self.sliding_layers else None
        else:
            if self.model_type == "qwen3":
                d["attention_bias"] = self.qkv_bias
                d["head_dim"] = self.head_dim  # Qwen3Config's default is 128, not hidden / heads
            d["use_sliding_window"] = self.sliding_window is not None
            d["sliding_window"] = self.sliding_window
            d["layer_types"] = ["sliding_attention" if i in self.sliding_layers else "full_attention"
                                for i in range(self.num_hidden_layers)]
        return d


_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                  "qwen3": "Qwen3ForCausalLM"}


def config_json_path(path: str | Path) -> Path:
    """``path``, or the ``config.json`` inside it when it is a folder."""
    path = Path(path)
    return path / "config.json" if path.is_dir() else path


def read_config_json(path: str | Path) -> dict[str, Any]:
    """The JSON object in a ``config.json`` (or a model folder holding one); one line on anything else."""
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise InputError("is a folder without a config.json; give the config.json file", path=path)
        path = path / "config.json"
    check_input(path, what="a config.json file", missing_ok=True)  # a FIFO or /dev/zero: one line, no hang
    try:
        raw = parse_config_bytes(path.read_bytes())
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or type(exc).__name__}", path=path) from None
    except InputError as exc:
        raise InputError(exc.message, path=path) from None
    return raw


def parse_config_bytes(data: bytes) -> dict[str, Any]:
    """The JSON object in ``data`` (UTF-8, a BOM allowed); one line on anything else."""
    try:
        raw = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text (a binary file?)") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # >4300-digit integers, absurd nesting
        raise InputError(f"not valid JSON ({type(exc).__name__})") from None
    if not isinstance(raw, dict):
        raise InputError("expected a JSON object")
    return raw


def _rope_dict(theta: float, s: RopeScaling) -> dict[str, Any]:
    d: dict[str, Any] = {"rope_type": s.kind, "rope_theta": theta}
    if s.kind in ("linear", "llama3"):
        d["factor"] = s.factor
    if s.kind == "llama3":
        d.update(low_freq_factor=s.low_freq_factor, high_freq_factor=s.high_freq_factor,
                 original_max_position_embeddings=s.original_max_position_embeddings)
    return d


def _int(raw: dict[str, Any], name: str, default: int | None = None) -> int:
    if name not in raw or raw[name] is None:
        if default is None:
            raise InputError("missing required field", field=name)
        return default
    value = raw[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"expected an integer, got {value!r}", field=name)
    return value


def _float(raw: dict[str, Any], name: str, default: float) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"expected a number, got {value!r}", field=name)
    return float(value)


def _bool(raw: dict[str, Any], name: str, default: bool) -> bool:
    value = raw.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InputError(f"expected true or false, got {value!r}", field=name)
    return value


def _optional_float(params: dict[str, Any], name: str, where: str) -> float | None:
    if params.get(name) is None:
        return None
    value = _float(params, name, math.nan)
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"must be a positive number, got {params[name]!r}", field=f"{where}.{name}")
    return value


_ROPE_KEYS = {
    "default": {"rope_type", "type", "rope_theta", "partial_rotary_factor"},
    "linear": {"rope_type", "type", "rope_theta", "factor", "partial_rotary_factor"},
    "llama3": {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings", "partial_rotary_factor"},
    "yarn": {"rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate", "partial_rotary_factor"},
}


def _rope(raw: dict[str, Any], context: int) -> tuple[float, RopeScaling, float | None]:
    """transformers 5's ``rope_parameters``, or the older top-level ``rope_theta`` + ``rope_scaling``:
    the base, the scaling, and a ``partial_rotary_factor`` given inside (transformers 5 moves it there)."""
    params = raw.get("rope_parameters")
    where = "rope_parameters"
    if params is None:
        params = dict(raw.get("rope_scaling") or {})
        where = "rope_scaling"
        if "rope_theta" in raw:
            params.setdefault("rope_theta", raw["rope_theta"])
    if not isinstance(params, dict):
        raise InputError(f"expected an object, got {params!r}", field=where)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise InputError(f"rope type '{kind}' is not supported ({', '.join(ROPE_TYPES)})", field=f"{where}.rope_type")
    for key in params:
        if key not in _ROPE_KEYS[kind]:
            raise InputError("is not supported (it would change the rotary embedding)", field=f"{where}.{key}")
    theta = _float(params, "rope_theta", 10000.0)
    partial = _optional_float(params, "partial_rotary_factor", where)
    if kind == "default":
        return theta, RopeScaling(), partial
    factor = _float(params, "factor", math.nan)
    if not (math.isfinite(factor) and factor > 0):
        raise InputError(f"must be a positive number, got {params.get('factor')!r}", field=f"{where}.factor")
    if kind == "linear":
        return theta, RopeScaling("linear", factor), partial
    if kind == "yarn":
        old = _int(params, "original_max_position_embeddings", context)
        if old < 1:
            raise InputError(f"must be positive, got {old}", field=f"{where}.original_max_position_embeddings")
        extra = {name: _optional_float(params, name, where)
                 for name in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor")}
        return theta, RopeScaling("yarn", factor, original_max_position_embeddings=old, **extra), partial
    low, high = _float(params, "low_freq_factor", math.nan), _float(params, "high_freq_factor", math.nan)
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
        raise InputError(f"llama3 rope needs 0 < low_freq_factor < high_freq_factor, got {low}, {high}",
                         field=f"{where}.low_freq_factor")
    old = _int(params, "original_max_position_embeddings")
    if old < 1:
        raise InputError(f"must be positive, got {old}", field=f"{where}.original_max_position_embeddings")
    return theta, RopeScaling("llama3", factor, low, high, old), partial


def _layer_list(raw: dict[str, Any], name: str, layers: int) -> tuple[int, ...]:
    value = raw.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise InputError(f"expected a list of layer indices, got {value!r}", field=name)
    if any(not 0 <= v < layers for v in value):
        raise InputError(f"layer indices must be in [0, {layers}), got {value}", field=name)
    return tuple(sorted(set(value)))


def _sliding(raw: dict[str, Any], model_type: str, layers: int) -> tuple[int | None, tuple[int, ...]]:
    """Which layers attend within a sliding window, as each family's transformers code decides."""
    if model_type in ("mistral", "mixtral"):  # one window over every layer, when given
        window = raw.get("sliding_window")
        if window is None:
            return None, ()
        if isinstance(window, bool) or not isinstance(window, int):
            raise InputError(f"expected an integer, got {window!r}", field="sliding_window")
        return window, tuple(range(layers))
    if model_type not in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        return None, ()
    use = _bool(raw, "use_sliding_window", False)
    window = raw.get("sliding_window") if use else None
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise InputError(f"expected an integer, got {window!r}", field="sliding_window")
    types = raw.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or any(
                t not in ("full_attention", "sliding_attention") for t in types):
            raise InputError(f"expected {layers} entries of full_attention / sliding_attention", field="layer_types")
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    elif model_type == "qwen3_moe":
        sliding = tuple(range(layers))  # transformers' Qwen3-MoE: every layer, when use_sliding_window
    elif model_type == "qwen2_moe":
        first = _int(raw, "max_window_layers", 28)  # transformers' rule: every other layer below it
        sliding = tuple(i for i in range(layers) if (i + 1) % 2 and i < first)
    else:
        first = _int(raw, "max_window_layers", 28)
        sliding = tuple(range(first, layers))
    if window is None:
        return None, ()  # transformers: no window unless use_sliding_window
    return window, sliding


def _eos(raw: dict[str, Any]) -> tuple[int, ...]:
    value = raw.get("eos_token_id")
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if any(isinstance(v, bool) or not isinstance(v, int) for v in items):
        raise InputError(f"expected a token id or a list of them, got {value!r}", field="eos_token_id")
    return tuple(items)


def _weight_dtype(raw: dict[str, Any]) -> str:
    """``fp8`` for a block-scaled fp8 checkpoint; every other quantisation is refused (it would change
    the weights' bytes in a way tlt does not price)."""
    q = raw.get("quantization_config")
    if q is None:
        return "bf16"
    if not isinstance(q, dict):
        raise InputError(f"expected an object, got {q!r}", field="quantization_config")
    method = q.get("quant_method")
    if method != "fp8":
        raise InputError(f"'{method}' is not supported: tlt prices bf16 weights and fp8 ones (quant_method "
                         "'fp8'); it may change the network", field="quantization_config.quant_method")
    for key in q:
        if key not in FP8_KEYS:
            raise InputError("is not supported (it may change the network)", field=f"quantization_config.{key}")
    if q.get("fmt", "e4m3") != "e4m3":
        raise InputError(f"'{q['fmt']}' is not supported (e4m3)", field="quantization_config.fmt")
    return "fp8"


def _moe(raw: dict[str, Any], model_type: str, layers: int, intermediate: int) -> MoEConfig | None:
    """The experts, and which layers keep a dense MLP, as transformers and vLLM build each family."""
    if model_type in ("qwen2_moe", "qwen3_moe"):
        experts = _int(raw, "num_experts")
        if experts == 0:
            return None  # transformers: no MoE layer at all
        step = _int(raw, "decoder_sparse_step", 1)
        if step < 1:
            raise InputError(f"must be a positive integer, got {step}", field="decoder_sparse_step")
        only = set(_layer_list(raw, "mlp_only_layers", layers))
        dense = tuple(i for i in range(layers) if i in only or (i + 1) % step)
        shared = _int(raw, "shared_expert_intermediate_size") if model_type == "qwen2_moe" else 0
        return MoEConfig(experts, _int(raw, "num_experts_per_tok"), _int(raw, "moe_intermediate_size"),
                         shared, dense)
    if model_type == "mixtral":
        if "num_local_experts" in raw and "num_experts" in raw and raw["num_local_experts"] != raw["num_experts"]:
            raise InputError("num_experts and num_local_experts differ", field="num_experts")
        experts = _int(raw, "num_local_experts" if "num_local_experts" in raw else "num_experts")
        return MoEConfig(experts, _int(raw, "num_experts_per_tok"), intermediate)
    # DeepSeek-V2/V3 and GLM-4.5: MoE after the first k layers (vLLM also skips layers off moe_layer_freq)
    if raw.get("n_routed_experts") is None and model_type != "glm4_moe":
        return None  # DeepSeek's code: no routed experts, every layer dense
    first = _int(raw, "first_k_dense_replace", 0)
    freq = _int(raw, "moe_layer_freq", 1)
    if not 0 <= first <= layers:
        raise InputError(f"must be in [0, {layers}], got {first}", field="first_k_dense_replace")
    if freq < 1:
        raise InputError(f"must be a positive integer, got {freq}", field="moe_layer_freq")
    width = _int(raw, "moe_intermediate_size")
    shared = _int(raw, "n_shared_experts", 0)
    if shared < 0:
        raise InputError(f"must be >= 0, got {shared}", field="n_shared_experts")
    dense = tuple(i for i in range(layers) if i < first or i % freq)
    return MoEConfig(_int(raw, "n_routed_experts"), _int(raw, "num_experts_per_tok"), width, shared * width, dense)


def _mla(raw: dict[str, Any]) -> MLAConfig:
    for name in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if name not in raw:
            raise InputError("missing required field (a DeepSeek model's latent attention needs it)", field=name)
    q = raw["q_lora_rank"]
    mla = MLAConfig(0 if q is None else _int(raw, "q_lora_rank"), _int(raw, "kv_lora_rank"),
                    _int(raw, "qk_nope_head_dim"), _int(raw, "qk_rope_head_dim"), _int(raw, "v_head_dim"))
    if raw.get("qk_head_dim") not in (None, mla.qk_head_dim):
        raise InputError(f"must be qk_nope_head_dim + qk_rope_head_dim = {mla.qk_head_dim}, got "
                         f"{raw['qk_head_dim']!r}", field="qk_head_dim")
    # transformers 5 writes head_dim = qk_rope_head_dim for these models; anything else is another network
    if raw.get("head_dim") not in (None, mla.qk_rope_head_dim, mla.qk_head_dim):
        raise InputError(f"a latent-attention model's head_dim is qk_rope_head_dim ({mla.qk_rope_head_dim}), got "
                         f"{raw['head_dim']!r}", field="head_dim")
    if raw.get("rope_interleave") not in (None, True, False):
        raise InputError(f"expected true or false, got {raw['rope_interleave']!r}", field="rope_interleave")
    return mla


def _mtp(raw: dict[str, Any]) -> int:
    old, new = raw.get("num_nextn_predict_layers"), raw.get("num_mtp_layers")
    if old is not None and new is not None and old != new:
        raise InputError(f"num_nextn_predict_layers {old} and num_mtp_layers {new} differ", field="num_mtp_layers")
    name = "num_mtp_layers" if old is None else "num_nextn_predict_layers"
    value = _int(raw, name, 0)
    if not 0 <= value <= 64:
        raise InputError(f"must be in [0, 64], got {value}", field=name)
    return value


def _check_keys(raw: dict[str, Any], model_type: str) -> None:
    known = _COMMON | FAMILY_FIELDS[model_type]
    router = model_type in MOE_TYPES
    for key in raw:
        if key in known or key in INERT_FIELDS or (router and key in ROUTER_FIELDS):
            continue
        raise InputError(f"is not supported by tlt's {FAMILIES[model_type]} reader (it may change the network); "
                         "remove it only if it does not", field=key)


def _parse(raw: dict[str, Any]) -> ModelConfig:
    if "text_config" in raw and "num_hidden_layers" not in raw:
        inner = raw["text_config"]  # multimodal wrappers keep the language model's shape here
        if not isinstance(inner, dict):
            raise InputError("expected an object", field="text_config")
        try:
            return _parse_body(inner)
        except InputError as exc:
            raise InputError(exc.message, field=f"text_config.{exc.field}" if exc.field else "text_config") from None
    return _parse_body(raw)


def _parse_body(raw: dict[str, Any]) -> ModelConfig:
    label = raw.get("model_type", "llama")
    if not isinstance(label, str) or TYPE_ALIASES.get(label, label) not in FAMILIES:
        raise InputError(f"'{label}' is not one of {', '.join([*FAMILIES, *TYPE_ALIASES])}", field="model_type")
    model_type = TYPE_ALIASES.get(label, label)
    _check_keys(raw, model_type)
    shape = {name: _int(raw, name) for name in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                 "intermediate_size", "vocab_size")}
    for name, value in shape.items():
        if value < 1:
            raise InputError(f"must be a positive integer, got {value}", field=name)
    heads, layers = shape["num_attention_heads"], shape["num_hidden_layers"]
    mla = _mla(raw) if model_type in MLA_TYPES else None
    head_dim = raw.get("head_dim")
    if mla is not None:
        head_dim = mla.qk_head_dim  # the q.k width of a head; MLA caches no per-head keys
    elif head_dim is not None:
        head_dim = _int(raw, "head_dim")
        if model_type != "qwen3" and head_dim * heads == shape["hidden_size"]:
            head_dim = None  # the default, written out (transformers 5 writes it for Llama): same model
    elif model_type == "qwen3":
        head_dim = 128  # Qwen3Config's default head_dim, not hidden / heads
    max_context = _int(raw, "max_position_embeddings", _DEFAULT_CONTEXT.get(model_type, 2048))
    theta, scaling, partial_in_rope = _rope(raw, max_context)
    partial = _partial_rotary(raw, model_type, partial_in_rope)
    qkv_bias, o_bias, mlp_bias = _biases(raw, model_type)
    window, sliding = _sliding(raw, model_type, layers)
    act = raw.get("hidden_act", "silu")
    if not isinstance(act, str):
        raise InputError(f"expected a name, got {act!r}", field="hidden_act")
    qk_norm = model_type in ("qwen3", "qwen3_moe") or (model_type == "glm4_moe" and _bool(raw, "use_qk_norm", False))
    mtp = _mtp(raw) if model_type in ("deepseek_v3", "glm4_moe") else 0
    return ModelConfig(
        **shape, num_key_value_heads=_int(raw, "num_key_value_heads", heads),
        rms_norm_eps=_float(raw, "rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
        tie_word_embeddings=_bool(raw, "tie_word_embeddings", False), qkv_bias=qkv_bias, o_bias=o_bias,
        mlp_bias=mlp_bias, hidden_act=act, max_position_embeddings=max_context,
        model_type=model_type, head_dim_override=head_dim, sliding_window=window, sliding_layers=sliding,
        eos_token_ids=_eos(raw), qk_norm=qk_norm, partial_rotary_factor=partial,
        moe=_moe(raw, model_type, layers, shape["intermediate_size"]) if model_type in MOE_TYPES else None,
        mla=mla, weight_dtype=_weight_dtype(raw), mtp_layers=mtp)


#: transformers' default max_position_embeddings per family, where a config leaves it out.
_DEFAULT_CONTEXT = {"qwen2": 32768, "qwen3": 32768, "qwen2_moe": 32768, "qwen3_moe": 32768, "mistral": 131072,
                    "mixtral": 131072, "glm4_moe": 131072, "deepseek_v3": 4096}


def _partial_rotary(raw: dict[str, Any], model_type: str, in_rope: float | None) -> float:
    """GLM-4.5 rotates half of each head (transformers' default 0.5); every other family all of it."""
    top = raw.get("partial_rotary_factor")
    if top is not None:
        top = _float(raw, "partial_rotary_factor", 1.0)
    if top is not None and in_rope is not None and top != in_rope:
        raise InputError(f"{top} differs from rope_parameters.partial_rotary_factor {in_rope}",
                         field="partial_rotary_factor")
    value = top if top is not None else in_rope
    if model_type == "glm4_moe":
        return 0.5 if value is None else value
    if value not in (None, 1, 1.0):
        raise InputError(f"partial rotary embeddings are not part of a {FAMILIES[model_type]} model",
                         field="partial_rotary_factor")
    return 1.0


def _biases(raw: dict[str, Any], model_type: str) -> tuple[bool, bool, bool]:
    """(q/k/v, o_proj, MLP) biases, as each family's transformers code places them."""
    if model_type == "qwen2":
        if raw.get("attention_bias") not in (None, True):
            raise InputError("Qwen2's q/k/v biases are always on", field="attention_bias")
        if raw.get("mlp_bias") not in (None, False):
            raise InputError("Qwen2 has no MLP biases", field="mlp_bias")
        return True, False, False
    if model_type == "qwen2_moe":
        return _bool(raw, "qkv_bias", True), False, False
    if model_type in ("mistral", "mixtral"):
        return False, False, False
    if model_type == "glm4_moe":
        return _bool(raw, "attention_bias", False), False, False
    attention = _bool(raw, "attention_bias", False)
    mlp = _bool(raw, "mlp_bias", False) if model_type in ("llama", "deepseek_v2", "deepseek_v3") else False
    if model_type in MLA_TYPES and (attention or mlp):
        raise InputError(f"biases on a {FAMILIES[model_type]} model's projections are not supported (it may change "
                         "the network)", field="attention_bias" if attention else "mlp_bias")
    return attention, attention, mlp
