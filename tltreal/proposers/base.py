"""What the engine needs from a draft model, and how a drafter's state is brought up to date.

Drafter state. The drafter consumes *pairs*: pair ``j`` is ``(token t_j, target hidden h_{j-1})``
(``h_{-1} = 0``), stored at index ``j`` of the drafter's own slab KV cache, and its output feature
predicts the hidden state at ``j`` and, through the target's LM head, token ``t_{j+1}``. The engine
keeps every request's target hidden states (it computes them anyway), so a request's drafter can be
brought up to date at any time by running its pending pairs (:func:`catch_up`); it never needs a
target re-prefill.

Proposers, one per module: :mod:`~tltreal.proposers.eagle` (TLT's one-layer EAGLE drafter),
:mod:`~tltreal.proposers.oracle` (the target itself: the acceptance upper bound) and
:mod:`~tltreal.proposers.pinned` (real drafting compute, acceptance pinned to a model, for
validation). Tree search over any of them is :mod:`tltreal.tree_search`.
"""

from __future__ import annotations

from typing import Protocol

import torch

from tltreal.kv_cache import KVCache
from tltreal.model import padded_causal_mask


class DraftModel(Protocol):
    """What tree expansion needs from a drafter."""

    def new_cache(self, slots: int, max_len: int) -> KVCache: ...

    def draft_forward(self, tokens: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache, slots: torch.Tensor, cache_lens: torch.Tensor,
                      new_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [B, T, V], feats_out [B, T, H])`` for pairs (tokens, feats); same cache
        semantics as :meth:`Transformer.forward`."""
        ...



def catch_up(drafter: DraftModel, cache: KVCache, slots: torch.Tensor, draft_lens: torch.Tensor,
             tokens: torch.Tensor, feats: torch.Tensor, counts: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Run pending pairs ``[B, P]`` (``counts`` real per request, padding after) at indices
    ``draft_lens + i``. Returns the drafter's logits and features at each request's last real pair.
    The caller advances ``draft_lens`` by ``counts``."""
    b, p = tokens.shape
    offs = torch.arange(p, device=tokens.device)
    positions = draft_lens[:, None] + offs
    mask = padded_causal_mask(counts, p)
    logits, out = drafter.draft_forward(tokens, feats, positions, cache, slots, draft_lens, mask)
    rows = torch.arange(b, device=tokens.device)
    last = (counts - 1).clamp_min(0)
    return logits[rows, last], out[rows, last]


