"""What the engine needs from a proposer, and how a neural drafter's state is brought up to date.

Two kinds of proposer, two protocols, because they need different things from the engine:

- :class:`DraftModel`, a neural drafter (EAGLE layer, oracle, pinned): it has its own KV cache, is
  fed target hidden states, and its logits drive an EAGLE-2 tree search
  (:mod:`tltreal.spec_decode.tree_search`).
- :class:`TokenProposer`, a model-free proposer (n-gram retrieval, :mod:`~tltreal.spec_decode.proposers.ngram`):
  no cache, no hidden states, no logits; it looks at token ids (:class:`ProposalContext`) and
  returns a chain of draft tokens per request, which the engine verifies as a one-hot (point-mass)
  proposal with the same lossless acceptance as a tree.

Drafter state. The drafter consumes *pairs*: pair ``j`` is ``(token t_j, target hidden h_{j-1})``
(``h_{-1} = 0``), stored at index ``j`` of the drafter's own slab KV cache, and its output feature
predicts the hidden state at ``j`` and, through the target's LM head, token ``t_{j+1}``. The engine
keeps every request's target hidden states (it computes them anyway), so a request's drafter can be
brought up to date at any time by running its pending pairs (:func:`catch_up`); it never needs a
target re-prefill.

Proposers, one per module: :mod:`~tltreal.spec_decode.proposers.eagle` (TLT's one-layer EAGLE drafter),
:mod:`~tltreal.spec_decode.proposers.oracle` (the target itself: the acceptance upper bound),
:mod:`~tltreal.spec_decode.proposers.pinned` (real drafting compute, acceptance pinned to a model, for
validation) and :mod:`~tltreal.spec_decode.proposers.ngram` (TLT-Base's model-free n-gram retrieval). Tree
search over any draft model is :mod:`tltreal.spec_decode.tree_search`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from tltreal.model.kv_cache import KVCache
from tltreal.model.transformer import padded_causal_mask


class DraftModel(Protocol):
    """What tree expansion needs from a drafter."""

    def new_cache(self, slots: int, max_len: int) -> KVCache: ...

    def draft_forward(self, tokens: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache, slots: torch.Tensor, cache_lens: torch.Tensor,
                      new_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [B, T, V], feats_out [B, T, H])`` for pairs (tokens, feats); same cache
        semantics as :meth:`Transformer.forward`."""
        ...


@dataclass(frozen=True)
class ProposalContext:
    """What a :class:`TokenProposer` sees of one running request.

    ``tokens``: the request's prompt + output so far; the last one is the draft root (emitted, not
    yet verified), so drafts continue after it. ``group``: the token sequences (prompt + output so
    far, finished ones included) of every request in this request's group -- GRPO's responses to
    one prompt -- in admission order, this request's own at index ``member`` (-1 when it has no
    group). Both are the engine's live lists, not copies: read them, never change them."""

    tokens: Sequence[int]
    group: Sequence[Sequence[int]] = ()
    member: int = -1


class TokenProposer(Protocol):
    """A model-free proposer: draft chains from token ids alone (no cache, no target features).

    ``propose(contexts, k)`` returns one list per context of at most ``k`` draft tokens that follow
    its ``tokens`` (empty: no proposal; the engine then runs that request as a plain decode). The
    engine verifies each proposal as a point mass (a one-hot draft distribution), which keeps
    sampling exact as long as the proposal does not depend on the request's own future random
    draws -- a function of the tokens already emitted (the request's, its siblings') is fine."""

    def propose(self, contexts: Sequence[ProposalContext], k: int) -> list[list[int]]: ...


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


