"""Model shapes: the handful of HF ``config.json`` numbers that decide inference cost.

A :class:`ModelShape` is built from any Llama/Qwen2-family ``config.json`` (or a preset holding the
public values of those files) and derives what the roofline needs: weight bytes, KV bytes per token,
matmul FLOPs per token and attention FLOPs per context position. Everything assumes bf16 weights
and KV cache (2 bytes), SwiGLU MLPs and grouped-query attention, as in the models TLT trains.

The drafter (DESIGN §1) is one decoder layer of the target's width plus EAGLE's input projection
``[token embedding ; target hidden] (2h) -> h``; it shares the target's embedding and LM head, so
those are not extra parameters but are still *read* every draft step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tltcore.errors import InputError
from tltcore.model_config import ModelConfig

BF16_BYTES = 2


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

    # ---- parameters -------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def attention_params_per_layer(self) -> int:
        """q, k, v, o projections (+ q/k/v biases)."""
        h = self.hidden_size
        weights = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        return weights + bias

    @property
    def mlp_params_per_layer(self) -> int:
        """SwiGLU: gate, up and down projections."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def linear_params_per_layer(self) -> int:
        """Parameters that take part in matmuls (what FLOPs scale with)."""
        return self.attention_params_per_layer + self.mlp_params_per_layer

    @property
    def params_per_layer(self) -> int:
        """One decoder layer, its two RMSNorms included."""
        return self.linear_params_per_layer + 2 * self.hidden_size

    @property
    def input_proj_params(self) -> int:
        return self.input_proj_features * self.hidden_size

    @property
    def decoder_params(self) -> int:
        """All decoder layers, the drafter's input projection and the final norm."""
        return self.num_hidden_layers * self.params_per_layer + self.input_proj_params + self.hidden_size

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
    def weight_bytes(self) -> int:
        """bf16 weights in GPU memory."""
        return self.total_params * BF16_BYTES

    # ---- per-token costs --------------------------------------------------------------------
    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 K and V of one token across all layers."""
        return 2 * self.num_hidden_layers * self.kv_dim * BF16_BYTES

    @property
    def decoder_matmul_flops_per_token(self) -> int:
        """2 FLOPs per multiply-add over every decoder-layer (and input projection) weight."""
        return 2 * (self.num_hidden_layers * self.linear_params_per_layer + self.input_proj_params)

    @property
    def lm_head_flops_per_token(self) -> int:
        return 2 * self.lm_head_params

    @property
    def matmul_flops_per_token(self) -> int:
        """Forward FLOPs of all weight matmuls for one token, LM head included."""
        return self.decoder_matmul_flops_per_token + self.lm_head_flops_per_token

    @property
    def attention_flops_per_position(self) -> int:
        """FLOPs one token spends per context position it attends to: QK^T and PV, all layers."""
        return 4 * self.num_hidden_layers * self.q_dim

    @classmethod
    def from_config(cls, cfg: ModelConfig, name: str) -> ModelShape:
        """The shape of a parsed config (o_proj and MLP biases are negligible next to the weights)."""
        return cls(name, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                   cfg.intermediate_size, cfg.vocab_size, head_dim=cfg.head_dim,
                   tie_word_embeddings=cfg.tie_word_embeddings, qkv_bias=cfg.qkv_bias)

    def drafter(self) -> ModelShape:
        """TLT's EAGLE-style drafter for this target: one decoder layer of the same width, input
        projection from [embedding ; hidden] (2h -> h), embedding and LM head shared."""
        return replace(self, name=f"{self.name}-drafter", num_hidden_layers=1,
                       input_proj_features=2 * self.hidden_size)


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


def get_model(name_or_path: str | Path) -> ModelShape:
    """A preset by name (case-insensitive), or the shape in a ``config.json`` file / directory."""
    text = str(name_or_path).strip()
    key = text.lower()
    key = _ALIASES.get(key, key)
    if key in _BY_NAME:
        return _BY_NAME[key]
    path = Path(text).expanduser()
    hub_tail = key.rsplit("/", 1)[-1]  # "Qwen/Qwen2.5-7B" style hub ids name the preset too
    if "/" in key and hub_tail in _BY_NAME and not path.exists():
        return _BY_NAME[hub_tail]
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        return load_config_json(path)
    raise InputError(
        f"unknown model '{text}'; known: {', '.join(MODEL_NAMES)} (or a path to a config.json)",
        field="model")
