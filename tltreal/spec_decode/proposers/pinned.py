"""A drafter whose acceptance is a controlled input: real drafting compute, pinned proposals.

Validating the simulator's *cost* model against real runs needs the two to agree on acceptance, and a
random-weight target gives no natural drafter to agree on. The pinned drafter runs a real one-layer
EAGLE drafter forward at every draft step (so drafting costs what it costs), then replaces its
proposals: it knows each request's greedy continuation from a plain (no-SD) reference run, and
at every draft node that carries the true token it puts the true next token among its top-k
children at sibling rank ``r`` with probability ``p(d, r)`` of an acceptance model's positional table
(:meth:`tltcore.acceptance.TreeAcceptance.position_probs`), or leaves it out with the remaining
probability. The other children are random wrong tokens. Their draft scores are ``log p(d, r)``, so
tree expansion and the verify-node selection rank nodes as the acceptance model assumes.

Verification is the engine's own and stays lossless: proposals never change what is emitted (tests
check greedy output equals the reference), only how many tokens an iteration emits.

The reference continuations are looked up per KV-cache slot through ``truth(slot)``, which returns the
request's full reference sequence (prompt + greedy output) and the position of its root token (the
last emitted token, not yet in the KV cache); the replay wires it to
:meth:`tltreal.engine.engine.Engine.request_in_slot`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from tltreal.model.kv_cache import KVCache
from tltreal.spec_decode.proposers.eagle import EagleDrafter

TruthLookup = Callable[[int], tuple[Sequence[int], int]]
_WRONG_GAP = 20.0  # log-score gap below the last rank for tokens outside the top-k


class PinnedDrafter:
    """``inner``'s compute, proposals pinned to a positional acceptance table (module docstring).

    ``position_probs[d, r]``: probability that the true token is the child of sibling rank ``r`` at
    draft depth ``d + 1`` given the path so far is right (rows past the end reuse the last row)."""

    def __init__(self, inner: EagleDrafter, position_probs: np.ndarray, truth: TruthLookup, *, seed: int = 0) -> None:
        probs = np.asarray(position_probs, dtype=np.float64)
        if probs.ndim != 2 or probs.shape[0] < 1 or (probs < 0).any() or (probs.sum(1) > 1 + 1e-9).any():
            raise ValueError("position_probs must be a (depth, topk) table of probabilities summing to <= 1 per depth")
        self.inner = inner
        self.truth = truth
        self.topk = probs.shape[1]
        self.vocab = inner.cfg.vocab_size
        floor = np.log(np.maximum(probs, 1e-300))
        self._log_p = torch.tensor(floor, dtype=torch.float64)
        self._cdf = torch.tensor(np.concatenate([np.cumsum(probs, 1), np.ones((len(probs), 1))], 1))
        self._gen = torch.Generator().manual_seed(seed)

    def new_cache(self, slots: int, max_len: int) -> KVCache:
        return self.inner.new_cache(slots, max_len)

    def draft_forward(self, tokens: torch.Tensor, feats: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache, slots: torch.Tensor, cache_lens: torch.Tensor,
                      new_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, out = self.inner.draft_forward(tokens, feats, positions, cache, slots, cache_lens, new_mask)
        self._pin(logits, tokens, positions, slots)
        return logits, out

    def _pin(self, logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
        """Overwrite, in place, the rows whose proposals matter: the root and the draft nodes (rows of
        older pairs being caught up keep the drafter's own logits, nobody reads them)."""
        k, v = self.topk, self.vocab
        pos = positions.cpu()
        rows_b, rows_t, here, nxt, depth = [], [], [], [], []
        for i, slot in enumerate(slots.tolist()):
            seq, root = self.truth(int(slot))
            live = torch.nonzero((pos[i] >= root) & (pos[i] + 1 < len(seq))).flatten()
            if live.numel() == 0:
                continue
            ref = torch.as_tensor(seq, dtype=torch.long)
            p = pos[i, live]
            rows_b.append(torch.full_like(live, i))
            rows_t.append(live)
            here.append(ref[p])
            nxt.append(ref[p + 1])
            depth.append((p - root).clamp_max(self._log_p.shape[0] - 1))
        if not rows_b:
            return
        rb, rt = torch.cat(rows_b), torch.cat(rows_t)
        true_here, true_next, d = torch.cat(here), torch.cat(nxt), torch.cat(depth)
        n = rb.numel()
        on_path = tokens.cpu()[rb, rt] == true_here
        # the true token's sibling rank (k = not proposed), drawn from the row's depth distribution
        u = torch.rand(n, generator=self._gen, dtype=torch.float64)
        rank = torch.searchsorted(self._cdf[d], u[:, None]).squeeze(-1).clamp_max(k)
        rank = torch.where(on_path, rank, torch.full_like(rank, k))
        wrong = torch.randint(0, v, (n, k), generator=self._gen)
        clash = wrong == true_next[:, None]
        wrong = torch.where(clash, (wrong + 1 + torch.arange(k)) % v, wrong)  # a wrong token is never the true one
        chosen = torch.where(torch.arange(k).expand(n, k) == rank[:, None], true_next[:, None], wrong)
        scores = self._log_p[d]  # (n, k): log p(d, r) of each rank
        rows = (scores[:, -1:] - _WRONG_GAP).expand(n, v).clone()
        rows.scatter_(-1, chosen, scores)
        dev = logits.device
        logits[rb.to(dev), rt.to(dev)] = rows.to(dtype=logits.dtype, device=dev)
