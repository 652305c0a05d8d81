"""The target model's shape, read from a Hugging Face ``config.json`` (Llama / Qwen2 family).

Only the fields a decoder-only Llama/Qwen2 transformer needs are read; anything malformed raises
:class:`~tltsim.errors.InputError` naming the file and field, so the CLI prints one line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tltsim.errors import InputError

SUPPORTED_TYPES = ("llama", "qwen2")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Llama/Qwen2 decoder. ``attention_bias`` is True for Qwen2 (q/k/v biases)."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    max_position_embeddings: int = 4096
    model_type: str = "llama"
    head_dim_override: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"must be a positive integer, got {getattr(self, name)!r}", field=name)
        if self.model_type not in SUPPORTED_TYPES:
            raise InputError(f"model_type '{self.model_type}' is not one of {SUPPORTED_TYPES}",
                             field="model_type")
        if self.num_attention_heads % self.num_key_value_heads:
            raise InputError("num_attention_heads must be a multiple of num_key_value_heads",
                             field="num_key_value_heads")
        if self.head_dim_override is None and self.hidden_size % self.num_attention_heads:
            raise InputError("hidden_size must be a multiple of num_attention_heads", field="hidden_size")
        if self.head_dim % 2:
            raise InputError("head dimension must be even for RoPE", field="head_dim")

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, path: object | None = None) -> ModelConfig:
        """Build from a parsed HF config. Qwen2 implies q/k/v biases unless told otherwise."""
        model_type = str(raw.get("model_type", "llama"))
        kwargs: dict[str, Any] = {"model_type": model_type}
        ints = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "max_position_embeddings")
        for name in ints:
            if name in raw:
                kwargs[name] = _as_int(raw[name], name, path)
            elif name != "max_position_embeddings":
                raise InputError("missing required field", path=path, field=name)
        heads = kwargs["num_attention_heads"]
        kwargs["num_key_value_heads"] = _as_int(raw.get("num_key_value_heads", heads), "num_key_value_heads",
                                                path)
        if raw.get("head_dim") is not None:
            kwargs["head_dim_override"] = _as_int(raw["head_dim"], "head_dim", path)
        for name in ("rms_norm_eps", "rope_theta"):
            if name in raw:
                try:
                    kwargs[name] = float(raw[name])
                except (TypeError, ValueError):
                    raise InputError(f"not a number: {raw[name]!r}", path=path, field=name) from None
        kwargs["tie_word_embeddings"] = bool(raw.get("tie_word_embeddings", False))
        kwargs["attention_bias"] = bool(raw.get("attention_bias", model_type == "qwen2"))
        try:
            return cls(**kwargs)
        except InputError as exc:
            raise InputError(str(exc), path=path) from None

    @classmethod
    def from_json(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError("file not found", path=path) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg} at line {exc.lineno})", path=path) from None
        if not isinstance(raw, dict):
            raise InputError("expected a JSON object", path=path)
        return cls.from_dict(raw, path=path)

    def to_hf_dict(self) -> dict[str, Any]:
        """The HF ``config.json`` content for this shape (round-trips through :meth:`from_dict`)."""
        d = asdict(self)
        head_dim = d.pop("head_dim_override")
        arch = "Qwen2ForCausalLM" if self.model_type == "qwen2" else "LlamaForCausalLM"
        d["architectures"] = [arch]
        if head_dim is not None:
            d["head_dim"] = head_dim
        return d


def _as_int(value: Any, name: str, path: object | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"expected an integer, got {value!r}", path=path, field=name)
    return value
