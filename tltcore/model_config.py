"""The one reader of Hugging Face ``config.json`` files (Llama and Qwen2 families), for both halves.

The simulator derives its cost shape from it (:meth:`tltcore.model_shape.ModelShape.from_config`) and
the native engine builds its network from it, so a field means the same thing everywhere -- and
the same thing as in ``transformers``, which the engine is tested against.

Supported, as ``transformers`` 5 reads them: ``rope_parameters`` (and the older top-level
``rope_theta`` / ``rope_scaling``) with rope types ``default``, ``linear`` and ``llama3``;
``hidden_act`` silu, gelu, gelu_new, gelu_pytorch_tanh, relu; Llama's ``attention_bias`` (q, k, v
and o) and ``mlp_bias``; Qwen2's q/k/v biases and sliding-window layers (``use_sliding_window``,
``sliding_window``, ``max_window_layers`` or ``layer_types``); tied embeddings; ``head_dim`` other
than hidden / heads. Any other field that changes the network (a quantisation config, yarn rope, a
partial rotary factor...) is refused with one line naming it: a field is never ignored silently.
Fields that do not change a forward pass (token ids, dtype, dropout, generation defaults) are
accepted and not used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tltcore.errors import InputError
from tltcore.input_files import check_input

SUPPORTED_TYPES = ("llama", "qwen2")
ROPE_TYPES = ("default", "linear", "llama3")
ACTIVATIONS = ("silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
MAX_DIM = 1 << 20  # bounds before anything is allocated from these numbers
MAX_LAYERS = 4096
MAX_VOCAB = 1 << 24
MAX_CONTEXT = 1 << 24

# Fields that do not change the forward pass: accepted, not used.
INERT_FIELDS = frozenset({
    "architectures", "transformers_version", "torch_dtype", "dtype", "bos_token_id",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range", "use_cache",
    "attention_dropout", "pretraining_tp", "_name_or_path", "name_or_path", "output_attentions",
    "output_hidden_states", "return_dict", "tokenizer_class", "id2label", "label2id", "torchscript",
    "pruned_heads", "chunk_size_feed_forward", "is_decoder", "is_encoder_decoder", "add_cross_attention",
    "problem_type", "finetuning_task", "prefix", "task_specific_params", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k",
    "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "tf_legacy_loss",
    "use_bfloat16", "cross_attention_hidden_size", "tie_encoder_decoder", "model_name",
})
SHAPE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
HANDLED_FIELDS = frozenset({
    *SHAPE_FIELDS, "model_type", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act",
    "max_position_embeddings", "eos_token_id", "use_sliding_window", "sliding_window", "max_window_layers",
    "layer_types", "partial_rotary_factor", "text_config",
})


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling (``rope_type`` in transformers): none, linear, or Llama-3.1's."""

    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_max_position_embeddings: int = 8192  # llama3 only

    def inverse_frequencies(self, head_dim: int, theta: float) -> list[float]:
        """Per-pair rotation frequencies (float64 math, as transformers' formulas)."""
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
class ModelConfig:
    """A Llama/Qwen2 decoder, field names as in ``config.json``; ``qkv_bias`` / ``o_bias`` say which
    attention projections carry biases (Llama: all four iff ``attention_bias``; Qwen2: q, k, v)."""

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

    def __post_init__(self) -> None:
        for name, hi in (("vocab_size", MAX_VOCAB), ("hidden_size", MAX_DIM), ("intermediate_size", MAX_DIM),
                         ("num_hidden_layers", MAX_LAYERS), ("num_attention_heads", MAX_DIM),
                         ("num_key_value_heads", MAX_DIM), ("max_position_embeddings", MAX_CONTEXT)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
                raise InputError(f"must be an integer in [1, {hi:,}], got {value!r}", field=name)
        if self.model_type not in SUPPORTED_TYPES:
            raise InputError(f"model_type '{self.model_type}' is not one of {', '.join(SUPPORTED_TYPES)}",
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
        if self.sliding_window is not None and not 1 <= self.sliding_window <= MAX_CONTEXT:
            raise InputError(f"must be in [1, {MAX_CONTEXT:,}], got {self.sliding_window}", field="sliding_window")
        if self.model_type == "qwen2" and (not self.qkv_bias or self.o_bias or self.mlp_bias):
            raise InputError("a Qwen2 model has q/k/v biases and no o_proj or MLP biases", field="qkv_bias")
        if self.model_type == "llama" and self.qkv_bias != self.o_bias:
            raise InputError("Llama's attention_bias puts biases on q, k, v and o alike", field="o_bias")
        if any(not 0 <= t < self.vocab_size for t in self.eos_token_ids):
            raise InputError(f"token ids must be in [0, {self.vocab_size}), got {list(self.eos_token_ids)}",
                             field="eos_token_id")
        if any(not 0 <= i < self.num_hidden_layers for i in self.sliding_layers):
            raise InputError("names a layer beyond num_hidden_layers", field="layer_types")

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
        path = Path(path)
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise InputError("is a folder without a config.json; give the config.json file", path=path)
            path = path / "config.json"
        check_input(path, what="a config.json file", missing_ok=True)  # a FIFO or /dev/zero: one line, no hang
        try:
            raw = json.loads(path.read_bytes().decode("utf-8-sig"))
        except FileNotFoundError:
            raise InputError("file not found", path=path) from None
        except UnicodeDecodeError:
            raise InputError("not UTF-8 text (a binary file?)", path=path) from None
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or type(exc).__name__}", path=path) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg} at line {exc.lineno})", path=path) from None
        except (ValueError, RecursionError) as exc:  # >4300-digit integers, absurd nesting
            raise InputError(f"not valid JSON ({type(exc).__name__})", path=path) from None
        if not isinstance(raw, dict):
            raise InputError("expected a JSON object", path=path)
        return cls.from_dict(raw, path=path)

    def to_hf_dict(self) -> dict[str, Any]:
        """``config.json`` content for this model, as transformers 5 writes it (round-trips)."""
        d: dict[str, Any] = {
            "architectures": ["Qwen2ForCausalLM" if self.model_type == "qwen2" else "LlamaForCausalLM"],
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
        else:
            d["use_sliding_window"] = self.sliding_window is not None
            d["sliding_window"] = self.sliding_window
            d["layer_types"] = ["sliding_attention" if i in self.sliding_layers else "full_attention"
                                for i in range(self.num_hidden_layers)]
        return d


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


def _rope(raw: dict[str, Any]) -> tuple[float, RopeScaling]:
    """transformers 5's ``rope_parameters``, or the older top-level ``rope_theta`` + ``rope_scaling``."""
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
    known = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
             "original_max_position_embeddings"}
    for key in params:
        if key not in known:
            raise InputError("is not supported (it would change the rotary embedding)", field=f"{where}.{key}")
    theta = _float(params, "rope_theta", 10000.0)
    if kind == "default":
        return theta, RopeScaling()
    factor = _float(params, "factor", math.nan)
    if not (math.isfinite(factor) and factor > 0):
        raise InputError(f"must be a positive number, got {params.get('factor')!r}", field=f"{where}.factor")
    if kind == "linear":
        return theta, RopeScaling("linear", factor)
    low, high = _float(params, "low_freq_factor", math.nan), _float(params, "high_freq_factor", math.nan)
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
        raise InputError(f"llama3 rope needs 0 < low_freq_factor < high_freq_factor, got {low}, {high}",
                         field=f"{where}.low_freq_factor")
    old = _int(params, "original_max_position_embeddings")
    if old < 1:
        raise InputError(f"must be positive, got {old}", field=f"{where}.original_max_position_embeddings")
    return theta, RopeScaling("llama3", factor, low, high, old)


def _sliding(raw: dict[str, Any], model_type: str, layers: int) -> tuple[int | None, tuple[int, ...]]:
    """Qwen2's sliding-window layers: ``layer_types`` if given, else layers >= max_window_layers."""
    if model_type != "qwen2":
        for name in ("use_sliding_window", "sliding_window", "max_window_layers", "layer_types"):
            if raw.get(name) not in (None, False):
                raise InputError(f"is a Qwen2 field; a {model_type} model has no sliding window", field=name)
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
    else:
        first = _int(raw, "max_window_layers", 28)
        sliding = tuple(range(first, layers)) if window is not None else ()
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


def _parse(raw: dict[str, Any]) -> ModelConfig:
    if "text_config" in raw and "num_hidden_layers" not in raw:
        inner = raw["text_config"]  # multimodal wrappers keep the language model's shape here
        if not isinstance(inner, dict):
            raise InputError("expected an object", field="text_config")
        raw = inner
    for key in raw:
        if key not in HANDLED_FIELDS and key not in INERT_FIELDS:
            raise InputError("is not supported by tlt's Llama/Qwen2 reader (it may change the network); remove it "
                             "only if it does not", field=key)
    model_type = raw.get("model_type", "llama")
    if model_type not in SUPPORTED_TYPES:
        raise InputError(f"'{model_type}' is not one of {', '.join(SUPPORTED_TYPES)}", field="model_type")
    if raw.get("partial_rotary_factor") not in (None, 1, 1.0):
        raise InputError("partial rotary embeddings are not supported", field="partial_rotary_factor")
    shape = {name: _int(raw, name) for name in SHAPE_FIELDS}
    for name, value in shape.items():
        if value < 1:
            raise InputError(f"must be a positive integer, got {value}", field=name)
    heads = shape["num_attention_heads"]
    head_dim = raw.get("head_dim")
    if head_dim is not None:
        head_dim = _int(raw, "head_dim")
        if head_dim * heads == shape["hidden_size"]:
            head_dim = None  # the default, written out (transformers 5 writes it for Llama): same model
    theta, scaling = _rope(raw)
    if model_type == "qwen2":
        if raw.get("attention_bias") not in (None, True):
            raise InputError("Qwen2's q/k/v biases are always on", field="attention_bias")
        if raw.get("mlp_bias") not in (None, False):
            raise InputError("Qwen2 has no MLP biases", field="mlp_bias")
        qkv_bias, o_bias, mlp_bias = True, False, False
    else:
        qkv_bias = o_bias = _bool(raw, "attention_bias", False)
        mlp_bias = _bool(raw, "mlp_bias", False)
    window, sliding = _sliding(raw, model_type, shape["num_hidden_layers"])
    act = raw.get("hidden_act", "silu")
    if not isinstance(act, str):
        raise InputError(f"expected a name, got {act!r}", field="hidden_act")
    default_context = 32768 if model_type == "qwen2" else 2048
    return ModelConfig(
        **shape, num_key_value_heads=_int(raw, "num_key_value_heads", heads),
        rms_norm_eps=_float(raw, "rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
        tie_word_embeddings=_bool(raw, "tie_word_embeddings", False), qkv_bias=qkv_bias, o_bias=o_bias,
        mlp_bias=mlp_bias, hidden_act=act, max_position_embeddings=_int(raw, "max_position_embeddings",
                                                                        default_context),
        model_type=model_type, head_dim_override=head_dim, sliding_window=window, sliding_layers=sliding,
        eos_token_ids=_eos(raw))
