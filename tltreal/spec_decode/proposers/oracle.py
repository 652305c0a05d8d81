"""The oracle proposer: the target itself on its own cache, ignoring features.

Its proposals are the target's own predictions (the upper bound on acceptance). ``noise > 0`` adds
a fixed, seeded perturbation per input token to make acceptance partial. The perturbation is low
rank (``A[token] @ B``, rank :data:`NOISE_RANK`), so it costs O(vocab) memory: a full per-token
table would be vocab^2 (92 GB at Qwen's 151,936 tokens).
"""

from __future__ import annotations

import math

import torch

from tltreal.model.kv_cache import KVCache
from tltreal.model.transformer import Transformer

NOISE_RANK = 16


class OracleDrafter:
    """Proposes the target's own predictions (ignores features): maximal acceptance."""

    def __init__(self, target: Transformer, *, noise: float = 0.0, seed: int = 0) -> None:
        self.target = target
        self.noise = noise
        v = target.cfg.vocab_size
        gen = torch.Generator().manual_seed(seed)
        # Each logit's perturbation is ~N(0, noise^2): a sum of NOISE_RANK unit products, rescaled.
        self._a = (torch.randn(v, NOISE_RANK, generator=gen, dtype=torch.float64) * noise).to(target.dtype)
        self._b = (torch.randn(NOISE_RANK, v, generator=gen, dtype=torch.float64) / math.sqrt(NOISE_RANK)
                   ).to(target.dtype)

    def new_cache(self, slots: int, max_len: int) -> KVCache:
        return self.target.new_cache(slots, max_len)

    def draft_forward(self, tokens: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache, slots: torch.Tensor, cache_lens: torch.Tensor,
                      new_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, hidden = self.target(tokens, positions, cache, slots, cache_lens, new_mask)
        if self.noise:
            logits = logits + self._a[tokens] @ self._b
        return logits, hidden
