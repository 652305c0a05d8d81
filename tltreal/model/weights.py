"""The target's weights: deterministic random init (:func:`init_weights`, :func:`random_model`) and
Hugging Face-named safetensors in and out (:func:`load_model`, :func:`save_model`)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from tltcore.errors import InputError, reason
from tltcore.model_config import ModelConfig
from tltreal.model.transformer import Transformer


def init_weights(module: nn.Module, seed: int, std: float = 0.02) -> None:
    """Deterministic random init from ``seed``: normal(0, std) weights and biases, unit norm scales."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * std)


def random_model(cfg: ModelConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                 std: float = 0.02) -> Transformer:
    """A target with seeded random weights: real timings for any shape, reproducible outputs."""
    model = Transformer(cfg)
    init_weights(model, seed, std)
    return model.to(dtype).eval()


def load_model(cfg: ModelConfig, weights: str | Path, *, dtype: torch.dtype = torch.float32) -> Transformer:
    """A target with weights from a safetensors file (or a folder of ``*.safetensors`` shards)."""
    from safetensors.torch import load_file

    path = Path(weights)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.exists() for f in files):
        raise InputError("no safetensors weights found", path=path)
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(str(f)))
        except Exception as exc:  # SafetensorError, OSError, ...: a file we cannot read is bad input
            first = reason(exc, 200)
            raise InputError(f"not a readable safetensors file ({first})", path=f) from None
    model = Transformer(cfg)
    expected = set(model.state_dict())
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
        expected.discard("lm_head.weight")
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise InputError(f"weights do not match the config: missing {sorted(missing)[:3]}, "
                         f"unexpected {sorted(unexpected)[:3]}", path=path)
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(model.state_dict()[name].shape):
            raise InputError(f"shape {tuple(tensor.shape)} != {tuple(model.state_dict()[name].shape)}",
                             path=path, field=name)
    model.load_state_dict(state, strict=False)
    return model.to(dtype).eval()


def save_model(model: Transformer, path: str | Path) -> None:
    """Write HF-named weights to one safetensors file (atomically)."""
    from safetensors.torch import save_file

    from tltcore.atomic import write_with

    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    write_with(path, lambda tmp: save_file(state, str(tmp)))
