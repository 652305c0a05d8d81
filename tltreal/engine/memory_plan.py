"""What a native-engine run will allocate, estimated before anything is allocated.

The engine keeps slab KV caches (every slot holds ``max_len`` positions) and per-slot hidden-state
buffers, so its memory is known from the settings alone. ``tlt real generate`` checks this against
the memory free on the device and refuses, with one line naming the big terms and what to lower,
instead of dying half-way (``--prompts 10^6`` used to ask for hundreds of GB).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tltcore.model_config import ModelConfig
from tltcore.model_shape import ModelShape

LOGIT_COPIES = 3  # verify logits, their softmax and the sampler's working copy, float32 each
HEADROOM = 0.9  # never plan to use more than this share of the free memory


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per term (the engine's large buffers; activations of one forward are small next to them)."""

    weights: int
    kv_cache: int
    hidden: int
    drafter: int
    logits: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.hidden + self.drafter + self.logits

    def describe(self) -> str:
        gb = 1e9
        return (f"~{self.total / gb:.1f} GB (weights {self.weights / gb:.1f}, KV cache {self.kv_cache / gb:.1f}, "
                f"hidden states {self.hidden / gb:.1f}, drafter {self.drafter / gb:.1f}, "
                f"logits {self.logits / gb:.1f})")


def _extra_biases(cfg: ModelConfig) -> int:
    """Per-layer o_proj and MLP biases, which the cost shape leaves out (negligible for cost, not for
    an exact count)."""
    h = cfg.hidden_size
    return (h if cfg.o_bias else 0) + (2 * cfg.intermediate_size + h if cfg.mlp_bias else 0)


def layer_params(cfg: ModelConfig) -> int:
    """One decoder layer, norms and every bias included (the cost shape's count plus the biases)."""
    return ModelShape.from_config(cfg, "native").params_per_layer + _extra_biases(cfg)


def model_params(cfg: ModelConfig) -> int:
    """Parameters of the target (embeddings, layers, final norm, LM head unless tied)."""
    return ModelShape.from_config(cfg, "native").total_params + cfg.num_hidden_layers * _extra_biases(cfg)


def estimate(cfg: ModelConfig, *, dtype_bytes: int, max_batch: int, max_len: int, max_verify: int,
             max_draft_nodes: int, drafter: bool) -> MemoryEstimate:
    """The engine's allocations for these settings (mirrors ``Engine.__init__`` and the drafter)."""
    alloc_len = max_len + max_verify + 2
    kv_per_position = 2 * cfg.num_key_value_heads * cfg.head_dim * dtype_bytes
    kv = cfg.num_hidden_layers * max_batch * alloc_len * kv_per_position
    hidden = max_batch * alloc_len * cfg.hidden_size * dtype_bytes
    draft = 0
    if drafter:
        draft_len = 2 * max_len + max_draft_nodes + 2
        own = layer_params(cfg) - cfg.hidden_size + 2 * cfg.hidden_size ** 2  # no input norm; fc: 2h -> h
        draft = own * dtype_bytes + max_batch * draft_len * kv_per_position
    logits = LOGIT_COPIES * max_batch * (max_verify + 1) * cfg.vocab_size * 4
    return MemoryEstimate(model_params(cfg) * dtype_bytes, kv, hidden, draft, logits)


def available_bytes(device: str = "cpu") -> int | None:
    """Free memory on ``device`` (CUDA: the driver's free bytes; CPU: MemAvailable), None if unknown."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info()[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
