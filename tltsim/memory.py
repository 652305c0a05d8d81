"""Rollout-engine memory: how many tokens of KV cache a rollout worker holds next to its weights.

KV capacity is a property of the model, the GPUs and the engine's memory share
(``gpu_memory_utilization``), not of any cost model, so it lives here and every cost model
(analytic or measured) is paired with it the same way.
"""

from __future__ import annotations

from tltsim.hardware import GPUSpec
from tltsim.model_shape import ModelShape


def kv_capacity_tokens(model: ModelShape, gpu: GPUSpec, tp: int, memory_fraction: float) -> int:
    """Tokens of bf16 KV cache a ``tp``-GPU worker holds in ``memory_fraction`` of its memory after
    the weights (the admission-control limit); 0 when the weights alone do not fit."""
    free = memory_fraction * gpu.memory_bytes * tp - model.weight_bytes
    return max(0, int(free // model.kv_bytes_per_token))
