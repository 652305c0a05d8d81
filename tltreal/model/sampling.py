"""Per-request sampling: greedy or temperature / top-p, driven by per-request seeded generators.

Every random number a request consumes comes from its own ``torch.Generator`` and is drawn as a
uniform, then turned into a token by inverse-CDF lookup. So a request's draws do not depend on which
other requests share its batch, and the same seed reproduces the same output. Greedy requests
(temperature 0) are represented as one-hot distributions, which lets verification treat greedy and
sampled decoding with one acceptance rule (for one-hot target rows it reduces to exact match).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """``temperature == 0`` is greedy. ``seed`` seeds the request's own generator."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def target_probs(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Distributions ``[B, T, V]`` to sample from, per row ``b`` with its own temperature / top-p.

    Greedy rows (temperature 0) become one-hot at the argmax (first index on ties).
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 probabilities are too coarse
    b = logits.shape[0]
    greedy = (temperature == 0).view(b, *([1] * (logits.dim() - 1)))
    temp = torch.where(temperature == 0, torch.ones_like(temperature), temperature)
    probs = (logits / temp.view(b, *([1] * (logits.dim() - 1))).to(logits.dtype)).softmax(-1)
    if bool((top_p < 1).any()):
        probs = top_p_filter(probs, top_p.view(b, *([1] * (logits.dim() - 1))).to(probs.dtype))
    one_hot = torch.zeros_like(probs).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return torch.where(greedy, one_hot, probs)


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest most-likely set whose mass reaches ``top_p``; renormalise."""
    sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)
    before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
    keep_sorted = before < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)


def sample_inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Token ``[...]`` drawn from unnormalised non-negative ``weights`` ``[..., V]`` with uniforms ``u``.

    Returns the first index whose cumulative weight exceeds ``u * total``: zero-weight tokens are
    never chosen, one-hot weights give their hot index for any ``u`` in [0, 1).
    """
    cdf = weights.cumsum(-1)
    target = (u.to(cdf.dtype) * cdf[..., -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf.contiguous(), target.contiguous(), right=True).squeeze(-1)
    return idx.clamp_max(weights.shape[-1] - 1)


def draw_uniforms(generators: list[torch.Generator | None], n: int, dtype: torch.dtype = torch.float64
                  ) -> torch.Tensor:
    """``[B, n]`` uniforms, row ``b`` from ``generators[b]``; greedy rows (None) get 0.5 (unused)."""
    rows = [torch.rand(n, generator=g, dtype=dtype) if g is not None else torch.full((n,), 0.5, dtype=dtype)
            for g in generators]
    return torch.stack(rows) if rows else torch.zeros(0, n, dtype=dtype)
