"""Model shapes: the handful of HF ``config.json`` numbers that decide inference cost.

A :class:`ModelShape` is built from a ``config.json`` (:mod:`tltcore.model_config` reads every family it
supports) or a preset holding the public values of those files, and derives what the cost models need:
weight bytes, KV bytes per token, matmul FLOPs per token and attention FLOPs per context position.
KV caches are bf16 (2 bytes); weights are bf16 unless the checkpoint says fp8 (``weight_dtype``).

Dense decoders (Llama, Qwen2/3, Mistral) are grouped-query attention + a SwiGLU MLP per layer. Two
optional parts change that, each a small frozen dataclass so a dense model carries ``None`` and prices
exactly as before:

* :class:`MoEShape` - mixture-of-experts MLPs (Qwen3-MoE, Mixtral, DeepSeek-V3): ``num_experts`` routed
  SwiGLU experts of width ``expert_intermediate_size`` of which each token uses ``experts_per_token``,
  always-on shared experts, a router, and the first ``dense_layers`` layers keeping a dense MLP. What a
  forward *reads* then depends on how many distinct experts its tokens touch
  (:mod:`tltcore.cost.moe`); what it *computes* on the active experts only.
* :class:`MLAShape` - DeepSeek's multi-head latent attention: low-rank query/KV projections and one
  compressed latent (``kv_lora_rank + qk_rope_head_dim`` values) cached per token and layer, instead of
  K and V per KV head.

The drafter (DESIGN §1) is one decoder layer of the target's width plus EAGLE's input projection
``[token embedding ; target hidden] (2h) -> h``; it shares the target's embedding and LM head, so
those are not extra parameters but are still *read* every draft step. Built with
``dataclasses.replace`` of the target, it keeps the target's layer kind (an MoE target's drafter layer
is an MoE layer, as DeepSeek-V3's MTP module is).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from tltcore.errors import InputError
from tltcore.model_catalog import CatalogModel, catalog
from tltcore.model_catalog import find as find_in_catalog
from tltcore.model_config import MLAConfig, ModelConfig, config_json_path

BF16_BYTES = 2
#: Bytes per weight element of each supported checkpoint dtype (block-scaled fp8 counts its scales as
#: negligible: one float per 128 x 128 block).
WEIGHT_DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class MoEShape:
    """Mixture-of-experts MLP layers (HF names in brackets).

    ``num_experts`` routed experts per MoE layer (``num_experts`` / ``num_local_experts`` /
    ``n_routed_experts``), ``experts_per_token`` of them per token (``num_experts_per_tok``), each a SwiGLU
    of width ``expert_intermediate_size`` (``moe_intermediate_size``; Mixtral: ``intermediate_size``).
    ``shared_intermediate_size``: the total width of the always-on shared experts (DeepSeek:
    ``n_shared_experts * moe_intermediate_size``; Qwen2-MoE: ``shared_expert_intermediate_size``; 0: none).
    ``dense_layers``: how many layers keep a dense MLP of the model's ``intermediate_size`` (DeepSeek's
    ``first_k_dense_replace``, Qwen-MoE's ``mlp_only_layers``)."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int = 0
    dense_layers: int = 0

    def __post_init__(self) -> None:
        for name in ("num_experts", "experts_per_token", "expert_intermediate_size"):
            if getattr(self, name) <= 0:
                raise InputError(f"must be a positive integer, got {getattr(self, name)}", field=name)
        if self.experts_per_token > self.num_experts:
            raise InputError(f"{self.experts_per_token} experts per token of only {self.num_experts}",
                             field="num_experts_per_tok")
        for name in ("shared_intermediate_size", "dense_layers"):
            if getattr(self, name) < 0:
                raise InputError(f"must be >= 0, got {getattr(self, name)}", field=name)

    def expert_params(self, hidden: int) -> int:
        """One routed expert's gate, up and down projections."""
        return 3 * hidden * self.expert_intermediate_size


#: DeepSeek's multi-head latent attention: the config reader's own :class:`~tltcore.model_config.MLAConfig`
#: (HF names; ``q_lora_rank`` 0: queries projected directly), which is already all the cost needs.
MLAShape = MLAConfig


@dataclass(frozen=True)
class ModelShape:
    """Architecture numbers of one decoder-only transformer (HF config.json field names)."""

    name: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    head_dim: int = 0  # 0: hidden_size // num_attention_heads (the HF default)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 has q/k/v biases; negligible cost, counted for exact param totals
    input_proj_features: int = 0  # EAGLE drafter: input projection in_features -> hidden (0 = none)
    moe: MoEShape | None = None  # None: every layer has a dense SwiGLU MLP of intermediate_size
    mla: MLAShape | None = None  # None: grouped-query attention over num_key_value_heads x head_dim
    weight_dtype: str = "bf16"  # the checkpoint's weight dtype (WEIGHT_DTYPE_BYTES); the KV cache is bf16
    qk_norm: bool = False  # Qwen3: RMSNorm on each q and k head (2 x head_dim weights per layer)
    mtp_layers: int = 0  # multi-token-prediction modules shipped with the checkpoint (DeepSeek-V3: 1)

    def __post_init__(self) -> None:
        for name in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                     "intermediate_size", "vocab_size"):
            if getattr(self, name) <= 0:
                raise InputError(f"must be a positive integer, got {getattr(self, name)}",
                                 path=f"model {self.name}", field=name)
        if self.num_attention_heads % self.num_key_value_heads:
            raise InputError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}", path=f"model {self.name}",
                field="num_key_value_heads")
        if self.head_dim == 0:
            if self.hidden_size % self.num_attention_heads:
                raise InputError("hidden_size is not divisible by num_attention_heads and no head_dim given",
                                 path=f"model {self.name}", field="head_dim")
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        elif self.head_dim < 0:
            raise InputError(f"must be positive, got {self.head_dim}", path=f"model {self.name}",
                             field="head_dim")
        if self.weight_dtype not in WEIGHT_DTYPE_BYTES:
            raise InputError(f"'{self.weight_dtype}' is not one of {', '.join(WEIGHT_DTYPE_BYTES)}",
                             path=f"model {self.name}", field="weight_dtype")
        if self.moe is not None and self.moe.dense_layers > self.num_hidden_layers:
            raise InputError(f"{self.moe.dense_layers} dense layers of {self.num_hidden_layers}",
                             path=f"model {self.name}", field="first_k_dense_replace")

    # ---- parameters -------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def attention_params_per_layer(self) -> int:
        """q, k, v, o projections (+ q/k/v biases, + Qwen3's per-head q/k norms); MLA's projections."""
        h = self.hidden_size
        if self.mla is not None:
            return self.mla.params(h, self.num_attention_heads)
        weights = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        norms = 2 * self.head_dim if self.qk_norm else 0
        return weights + bias + norms

    @property
    def mlp_params_per_layer(self) -> int:
        """SwiGLU: gate, up and down projections (a dense layer's MLP)."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def dense_mlp_layers(self) -> int:
        """Layers with a dense MLP (all of them unless the model is MoE)."""
        return self.num_hidden_layers if self.moe is None else self.moe.dense_layers

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.num_hidden_layers - self.dense_mlp_layers

    @property
    def moe_always_params_per_layer(self) -> int:
        """The part of one MoE layer's MLP every token uses: shared experts and the router."""
        if self.moe is None:
            return 0
        return 3 * self.hidden_size * self.moe.shared_intermediate_size + self.hidden_size * self.moe.num_experts

    @property
    def routed_expert_params(self) -> int:
        """One routed expert of one MoE layer (0 for a dense model)."""
        return 0 if self.moe is None else self.moe.expert_params(self.hidden_size)

    @property
    def moe_params_per_layer(self) -> int:
        """One MoE layer's MLP, every expert counted (what sits in memory)."""
        if self.moe is None:
            return 0
        return self.moe.num_experts * self.routed_expert_params + self.moe_always_params_per_layer

    @property
    def always_read_params(self) -> int:
        """Decoder weights every forward reads whatever its tokens: attention, dense MLPs, shared experts,
        routers, norms and the drafter's input projection (not the routed experts, whose share depends on
        the tokens: :mod:`tltcore.cost.moe`). A dense model's :attr:`decoder_params`."""
        if self.moe is None:
            return self.decoder_params
        return self.decoder_params - self.moe_layers * self.moe.num_experts * self.routed_expert_params

    @property
    def linear_params_per_layer(self) -> int:
        """Parameters of a dense layer that take part in matmuls (what FLOPs scale with)."""
        return self.attention_params_per_layer + self.mlp_params_per_layer

    @property
    def params_per_layer(self) -> int:
        """One dense decoder layer, its two RMSNorms included (MoE models: :attr:`decoder_params`)."""
        return self.linear_params_per_layer + 2 * self.hidden_size

    @property
    def input_proj_params(self) -> int:
        return self.input_proj_features * self.hidden_size

    @property
    def decoder_params(self) -> int:
        """All decoder layers, the drafter's input projection and the final norm."""
        if self.moe is None:
            return self.num_hidden_layers * self.params_per_layer + self.input_proj_params + self.hidden_size
        per_layer = self.attention_params_per_layer + 2 * self.hidden_size
        return (self.num_hidden_layers * per_layer + self.dense_mlp_layers * self.mlp_params_per_layer
                + self.moe_layers * self.moe_params_per_layer + self.input_proj_params + self.hidden_size)

    @property
    def active_decoder_params(self) -> int:
        """Decoder parameters one token computes with: every dense weight and, per MoE layer, its
        ``experts_per_token`` routed experts (Qwen3-30B-A3B: the "A3B")."""
        if self.moe is None:
            return self.decoder_params
        return self.always_read_params + self.moe_layers * self.moe.experts_per_token * self.routed_expert_params

    @property
    def active_params(self) -> int:
        """Parameters one token uses, counted as :attr:`total_params` counts (embedding and LM head
        in): all of a dense model; an MoE model's ``experts_per_token`` routed experts per MoE layer
        (Qwen3-30B-A3B: 3.35B, Mixtral-8x7B: 12.9B, as their cards count; DeepSeek quotes 37B
        without the 0.9B embedding)."""
        return self.total_params - (self.decoder_params - self.active_decoder_params)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """The LM head matmul's weights (the embedding itself when tied)."""
        return self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        """Parameter count as HF reports it (a tied LM head counted once)."""
        lm_head = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.decoder_params + self.embedding_params + lm_head

    @property
    def weight_element_bytes(self) -> int:
        """Bytes per weight element (``weight_dtype``)."""
        return WEIGHT_DTYPE_BYTES[self.weight_dtype]

    @property
    def weight_bytes(self) -> int:
        """Weights in GPU memory: the decoder in ``weight_dtype``, the embedding and LM head in bf16 (fp8
        checkpoints keep them so). The MTP modules are loaded only for MTP drafting."""
        return self.decoder_params * self.weight_element_bytes + (self.total_params - self.decoder_params) * BF16_BYTES

    # ---- per-token costs --------------------------------------------------------------------
    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 K and V of one token across all layers (MLA: its one latent per layer)."""
        if self.mla is not None:
            return self.num_hidden_layers * self.mla.latent_dim * BF16_BYTES
        return 2 * self.num_hidden_layers * self.kv_dim * BF16_BYTES

    def kv_bytes_per_token_per_gpu(self, tp: int) -> int:
        """KV bytes of one token on one GPU of a TP group: KV heads split over the group (replicated when
        fewer than ``tp``); MLA's latent is not split by head, every GPU keeps all of it."""
        if self.mla is not None:
            return self.kv_bytes_per_token
        return 2 * self.num_hidden_layers * -(-self.num_key_value_heads // tp) * self.head_dim * BF16_BYTES

    def kv_bytes_per_token_on_group(self, tp: int) -> int:
        """KV bytes one token takes over a whole TP group of ``tp`` GPUs: MLA's latent once per GPU; grouped-
        query attention :attr:`kv_bytes_per_token` (its replication when KV heads < tp is not counted)."""
        return tp * self.kv_bytes_per_token if self.mla is not None else self.kv_bytes_per_token

    @property
    def mean_layer_params(self) -> int:
        """One decoder layer's parameters on average (a dense model's :attr:`params_per_layer`)."""
        if self.moe is None:
            return self.params_per_layer
        return -(-(self.decoder_params - self.input_proj_params - self.hidden_size) // self.num_hidden_layers)

    @property
    def decoder_matmul_flops_per_token(self) -> int:
        """2 FLOPs per multiply-add over every decoder-layer (and input projection) weight a token uses
        (MoE: its active experts only)."""
        if self.moe is None and self.mla is None:
            return 2 * (self.num_hidden_layers * self.linear_params_per_layer + self.input_proj_params)
        return 2 * (self.active_decoder_params - (self.num_hidden_layers * 2 + 1) * self.hidden_size)

    @property
    def routed_matmul_flops_per_token(self) -> int:
        """The routed experts' share of :attr:`decoder_matmul_flops_per_token` (0 for a dense model): the
        MoE cost term prices it apart, by the experts the tokens touch."""
        if self.moe is None:
            return 0
        return 2 * self.moe_layers * self.moe.experts_per_token * self.routed_expert_params

    @property
    def lm_head_flops_per_token(self) -> int:
        return 2 * self.lm_head_params

    @property
    def matmul_flops_per_token(self) -> int:
        """Forward FLOPs of all weight matmuls for one token, LM head included."""
        return self.decoder_matmul_flops_per_token + self.lm_head_flops_per_token

    @property
    def attention_flops_per_position(self) -> int:
        """FLOPs one token spends per context position it attends to: QK^T and PV, all layers. MLA as
        engines run it in decode (weights absorbed): scores over the latent plus the rope part, values
        over the latent, for every head."""
        if self.mla is not None:
            m = self.mla
            return 2 * self.num_hidden_layers * self.num_attention_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        return 4 * self.num_hidden_layers * self.q_dim

    @classmethod
    def from_config(cls, cfg: ModelConfig, name: str) -> ModelShape:
        """The shape of a parsed config. Its experts (``cfg.moe``: the dense layers counted), latent
        attention (``cfg.mla``), QK-norm, weight dtype and MTP modules map one to one; o_proj and MLP
        biases, Qwen2-MoE's shared-expert gate (hidden_size weights a layer) and the rotary layout are
        negligible next to the weights, and a sliding window does not change what a token reads at the
        contexts the cost model prices (it is the engine's business)."""
        moe = None if cfg.moe is None else MoEShape(
            cfg.moe.num_experts, cfg.moe.experts_per_token, cfg.moe.expert_intermediate_size,
            cfg.moe.shared_intermediate_size, len(cfg.moe.dense_layer_ids))
        return cls(name, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                   cfg.intermediate_size, cfg.vocab_size, head_dim=cfg.head_dim,
                   tie_word_embeddings=cfg.tie_word_embeddings, qkv_bias=cfg.qkv_bias, moe=moe, mla=cfg.mla,
                   weight_dtype=cfg.weight_dtype, qk_norm=cfg.qk_norm, mtp_layers=cfg.mtp_layers)

    def drafter(self) -> ModelShape:
        """TLT's EAGLE-style drafter for this target: one decoder layer of the same width, input
        projection from [embedding ; hidden] (2h -> h), embedding and LM head shared. Its MLP is dense
        (``intermediate_size``) even for an MoE target, as EAGLE heads trained for MoE models are; a head
        that reuses the target's own MoE layer is the ``mtp`` drafter kind."""
        return replace(self, name=f"{self.name}-drafter", num_hidden_layers=1,
                       input_proj_features=2 * self.hidden_size, moe=None, mtp_layers=0)


# Public config.json values (huggingface.co/<repo>/blob/main/config.json).
_PRESETS: tuple[ModelShape, ...] = (
    # Qwen/Qwen2.5-7B (and -Instruct): 7.62B params.
    ModelShape("Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, qkv_bias=True),
    # Qwen/Qwen2.5-32B: 32.8B params.
    ModelShape("Qwen2.5-32B", 64, 5120, 40, 8, 27648, 152064, qkv_bias=True),
    # deepseek-ai/DeepSeek-R1-Distill-Qwen-7B: the Qwen2.5-Math-7B architecture.
    ModelShape("DeepSeek-R1-Distill-Qwen-7B", 28, 3584, 28, 4, 18944, 152064, qkv_bias=True),
    # meta-llama/Llama-3.3-70B-Instruct: 70.6B params, head_dim 128.
    ModelShape("Llama-3.3-70B", 80, 8192, 64, 8, 28672, 128256),
    # Qwen/Qwen2.5-1.5B: tied embeddings.
    ModelShape("Qwen2.5-1.5B", 28, 1536, 12, 2, 8960, 151936, tie_word_embeddings=True, qkv_bias=True),
    # Qwen/Qwen2.5-0.5B: tied embeddings.
    ModelShape("Qwen2.5-0.5B", 24, 896, 14, 2, 4864, 151936, tie_word_embeddings=True, qkv_bias=True),
)

MODEL_NAMES: tuple[str, ...] = tuple(m.name for m in _PRESETS)
_BY_NAME: dict[str, ModelShape] = {m.name.lower(): m for m in _PRESETS}
_ALIASES = {"qwen-7b": "qwen2.5-7b", "qwen-32b": "qwen2.5-32b", "llama-70b": "llama-3.3-70b",
            "r1-distill-qwen-7b": "deepseek-r1-distill-qwen-7b", "qwen-1.5b": "qwen2.5-1.5b",
            "qwen-0.5b": "qwen2.5-0.5b"}

def load_config_json(path: str | Path, name: str | None = None) -> ModelShape:
    """The cost shape of a HF ``config.json``, read by :mod:`tltcore.model_config` (the reader the
    native engine uses too), so the simulator and the engine never disagree on a field."""
    path = Path(path)
    cfg = ModelConfig.from_json(path)
    if path.is_dir():
        path = path / "config.json"
    return ModelShape.from_config(cfg, name or path.parent.name or path.stem)


@cache
def catalog_shape(hub_id: str) -> ModelShape:
    """The shape of catalog entry ``hub_id`` (:mod:`tltcore.model_catalog`), named by its model part."""
    entry = catalog()[hub_id]
    return ModelShape.from_config(entry.model_config(), entry.name)


#: How to see and get models, for every "unknown model" line.
MODEL_HELP = ("`tlt model list` shows the catalog of hub ids; or give a path to a config.json (`tlt model fetch "
              "ORG/NAME` downloads one)")


def get_model(name_or_path: str | Path) -> ModelShape:
    """A preset by name (case-insensitive), a file or folder holding a ``config.json``, or a hub id of
    the bundled catalog (``Qwen/Qwen3-30B-A3B``, or ``Qwen3-30B-A3B`` alone). A path that exists wins
    over a catalog entry of the same name: the user's own file is the more specific."""
    return resolve_model(name_or_path)[0]


def resolve_model(name_or_path: str | Path) -> tuple[ModelShape, Path | CatalogModel | None]:
    """:func:`get_model`'s shape and where it came from: the config.json read, the catalog entry, or
    None for a preset."""
    text = str(name_or_path).strip()
    key = text.lower()
    key = _ALIASES.get(key, key)
    if key in _BY_NAME:
        return _BY_NAME[key], None
    path = Path(text).expanduser()
    if path.exists():
        return load_config_json(path), config_json_path(path)
    hub_tail = key.rsplit("/", 1)[-1]  # "Qwen/Qwen2.5-7B" style hub ids name the preset too
    if "/" in key and hub_tail in _BY_NAME:
        return _BY_NAME[hub_tail], None
    entry = find_in_catalog(text) if text else None
    if entry is not None:
        return catalog_shape(entry.hub_id), entry
    if path.suffix == ".json":
        return load_config_json(path), path  # "file not found", naming it
    raise InputError(f"unknown model '{text}'; presets: {', '.join(MODEL_NAMES)}; {MODEL_HELP}", field="model")
