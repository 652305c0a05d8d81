"""One speculative-decoding iteration of the native engine, hop by hop.

``Engine._decode_iteration`` asks the policy for a decision; an SD one (``config.enabled``) goes:

0. **switch** (only when the decision has ``switch_on``): every live request's drafter is brought
   up to date (:mod:`tltreal.engine.switch`), and requests whose drafter lags by more than
   ``catch_up_limit`` pairs get a separate drafter-only ``catch_up`` forward
   (:meth:`SpeculativeStep._catch_up_laggards`);
1. **catch up the drafter**: the pending drafter pairs ``(t_j, h_{j-1})`` of every request (token +
   target hidden state, :mod:`tltreal.spec_decode.proposers.base`) up to the root, one drafter
   forward (:meth:`SpeculativeStep._pending`, ``catch_up``);
2. **expand the draft tree** from the root: ``depth`` levels of ``topk`` children, the best
   ``verify_tokens`` nodes kept (:func:`~tltreal.spec_decode.tree_search.expand_tree`);
3. **one target forward over root + tree** with the tree attention mask (each node sees its
   ancestors and the request's cached prefix);
4. **lossless verification**: the accepted path, its length and the bonus token per request
   (:mod:`tltreal.spec_decode.verify` / :mod:`tltreal.spec_decode.kernels`; exact match along a
   greedy chain);
5. **commit**: the target KV cache compacted to the accepted path (a chain's accepted path is
   already contiguous, so chains skip the copy), the accepted nodes' hidden states into the slab, the
   accepted tokens plus the bonus token emitted;
6. **telemetry** (back in ``_decode_iteration``): one ``decode`` event in the event log, the
   recent-accept view updated, the policy's :class:`~tltcore.policy.base.Outcome` (per-request
   accepted counts included).

Steps 1-5 are :meth:`SpeculativeStep._speculative_step` (3-5 in :meth:`SpeculativeStep._verify`).
With a model-free :class:`~tltreal.spec_decode.proposers.base.TokenProposer` (the n-gram drafter)
steps 1-2 are one ``propose`` call over the requests' token ids instead
(:meth:`SpeculativeStep._chain_step`): each request gets a chain of at most
``min(depth, verify_tokens)`` tokens, padded per batch with nodes no path can reach, verified in
steps 3-5 as one-hot (point-mass) proposals; when nobody has a proposal the iteration is a plain step.

A mixin of :class:`~tltreal.engine.engine.Engine`: the methods use its target, drafter, caches,
hidden-state slab, requests and clock.
"""

from __future__ import annotations

import numpy as np
import torch

from tltcore.policy.base import SDConfig
from tltreal.engine.engine_config import skip_padding
from tltreal.engine.requests import Request
from tltreal.model.transformer import padded_causal_mask
from tltreal.spec_decode import kernels
from tltreal.spec_decode.proposers.base import ProposalContext, catch_up
from tltreal.spec_decode.tree import DraftTree
from tltreal.spec_decode.tree_search import expand_tree
from tltreal.spec_decode.verify import greedy_chain_accept


class SpeculativeStep:
    """One SD iteration of :class:`~tltreal.engine.engine.Engine` (module docstring), top to bottom."""

    def _speculative_step(self, reqs: list[Request], config: SDConfig) -> tuple[int, int, list[int]]:
        """One tree-SD iteration with the drafter; returns (tokens emitted, draft tokens verified,
        accepted per request)."""
        assert self.drafter is not None and self.draft_cache is not None
        b = len(reqs)
        # 1. catch up the drafter: its pending pairs (t_j, h_{j-1}) up to the root, one drafter forward
        tokens, feats, counts = self._pending(reqs)
        info = self._tensor([[r.slot, r.draft_len, r.cache_len, r.tokens[-1]] for r in reqs])
        slots, draft_lens, lens, root = info.unbind(1)
        root_logits, root_feat = catch_up(self.drafter, self.draft_cache, slots, draft_lens, tokens, feats,
                                          counts)
        for r, n in zip(reqs, counts.tolist(), strict=True):
            r.draft_len += n
        # 2. expand the draft tree from the root (depth, topk, then the verify_tokens best nodes)
        tree = expand_tree(self.drafter, self.draft_cache, slots, draft_lens + counts, root, root_logits,
                           root_feat, lens, config)
        # 3-5. one target forward over root + tree, lossless verification, commit (self._verify)
        # topk 1: the verify tree is a chain (select_tree keeps a prefix), so accepted paths are contiguous
        lengths, emitted = self._verify(reqs, tree, slots, lens, config.depth, chain=config.topk == 1)
        return emitted, b * tree.num_nodes, lengths

    def _pending(self, reqs: list[Request], drop_root: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pending drafter pairs ``(t_j, h_{j-1})`` for ``j`` in ``[draft_len, cache_len]``, padded
        to the longest (one gather for the features: per-request copies cost a dispatch each)."""
        counts = [r.cache_len - r.draft_len + 1 - int(drop_root) for r in reqs]
        p = max(counts)
        tokens = self._tensor([r.tokens[r.draft_len: r.draft_len + n] + [0] * (p - n)
                               for r, n in zip(reqs, counts, strict=True)])
        info = self._tensor([[r.slot, r.draft_len, n] for r, n in zip(reqs, counts, strict=True)])
        slots, draft_lens, n_t = info.unbind(1)
        src = draft_lens[:, None] - 1 + torch.arange(p, device=info.device)  # h index of each pair
        real = (src >= 0) & (src < (draft_lens + n_t - 1)[:, None])  # h_{-1} = 0 and padding = 0
        feats = self.hidden[slots[:, None], src.clamp_min(0)].masked_fill_(~real[..., None], 0.0)
        return tokens, feats, n_t

    def _catch_up_laggards(self, reqs: list[Request], limit: int, kind: str | None = "catch_up") -> None:
        """Drafter-only prefill (a ``catch_up`` event unless ``kind`` is None) of the requests whose
        drafter has more than ``limit`` pending pairs (nothing to do without a drafter)."""
        if self.drafter is None:
            return
        lag = [r for r in reqs if r.cache_len - r.draft_len + 1 > limit]
        if not lag:
            return
        t_start = self._now()
        tokens, feats, counts = self._pending(lag, drop_root=True)
        slots = self._tensor([r.slot for r in lag])
        draft_lens = [r.draft_len for r in lag]
        catch_up(self.drafter, self.draft_cache, slots, self._tensor(draft_lens), tokens, feats, counts)
        n = counts.cpu().numpy().astype(np.int64)
        self._charge(lambda c: c.drafter_prefill_time(n, np.asarray(draft_lens, dtype=np.int64)))
        for r, k in zip(lag, counts.tolist(), strict=True):
            r.draft_len += k
        if kind is not None:
            self.log.span(self.cfg.worker, kind, t_start, self._now(), batch=len(lag), prefill_tokens=int(n.sum()))

    def _verify(self, reqs: list[Request], tree: DraftTree, slots: torch.Tensor, lens: torch.Tensor,
                max_depth: int, *, chain: bool, keep: torch.Tensor | None = None) -> tuple[list[int], int]:
        """Target forward over ``tree``, lossless acceptance, commit of the accepted path (KV, hidden
        slab, tokens, records). Returns (accepted drafts per request, tokens emitted).

        Drafts are one-hot proposals (top-k choices or retrieved tokens): a rejected token is removed
        from the residual (:mod:`tltreal.spec_decode.verify`). With ``chain`` the accepted path is nodes
        ``0..a`` in place, so the KV compaction (an identity copy) is skipped. ``keep`` (optional): the
        nodes some path can reach; the target skips the others (padding)."""
        b = len(reqs)
        # 3. one target forward over root + tree (each node sees its ancestors and the cached prefix)
        logits, hidden = self.target(tree.tokens, lens[:, None] + tree.depths, self.cache, slots, lens, tree.mask,
                                     keep=keep)
        # 4. lossless verification: the accepted path, its length and the bonus token per request
        p = None
        if chain and not self.cfg.record_logprobs and self._all_greedy(reqs):
            # exact match along the chain: the same outputs as the general rule, without its walk
            path, length, nxt = greedy_chain_accept(logits, tree.tokens, tree.parents, max_depth)
        else:
            p = self._probs(reqs, logits)
            q = torch.zeros_like(p).scatter_(-1, tree.tokens[..., None], 1.0)
            n1 = tree.num_nodes + 1
            u = self._uniforms(reqs, n1 + 1, p.dtype)
            path, length, nxt = kernels.tree_accept(p, q, tree.tokens, tree.parents, u[:, :n1], u[:, n1], max_depth)
        # 5. commit: the accepted path's KV moved after the prefix (chains: already there), its hidden
        # states into the slab, the emitted tokens (accepted drafts + bonus) into each request
        if not chain:
            kept = length + 1
            kernels.compact_kv(self.cache.k, slots, lens, path, kept)
            kernels.compact_kv(self.cache.v, slots, lens, path, kept)
        # Commit in a few batched ops: the accepted nodes' hidden states, then the emitted tokens.
        cols = torch.arange(path.shape[1], device=path.device)
        rows = torch.arange(b, device=path.device)[:, None]
        on_path = cols[None, :] <= length[:, None]
        src = path.clamp_min(0)
        dst = lens[:, None] + cols
        self.hidden[slots[:, None].expand_as(src)[on_path], dst[on_path]] = hidden[rows, src][on_path]
        # emission i of a request: the accepted draft at path node i + 1, or the bonus at i == a
        emitted_t = torch.cat([tree.tokens[rows, src][:, 1:], nxt[:, None]], 1)
        emitted_t = torch.where(cols[None, :] == length[:, None], nxt[:, None], emitted_t)
        lengths = length.tolist()
        counts = []
        for r, a, toks in zip(reqs, lengths, emitted_t.tolist(), strict=True):
            r.cache_len += a + 1
            counts.append(self._emit(r, toks[: a + 1]))
        if self.cfg.record_logprobs and p is not None:  # emission i was drawn from p at path node i
            self._record_logprobs(reqs, logits[rows, src], p[rows, src], emitted_t, counts)
        return lengths, sum(counts)

    def _chain_step(self, reqs: list[Request], config: SDConfig) -> tuple[int, int, list[int]]:
        """One SD iteration with the token proposer: chains of at most ``min(depth, verify_tokens)``
        tokens, verified like a tree; a plain step when nobody has a proposal."""
        assert self.proposer is not None
        k = min(config.depth, config.verify_tokens)
        no_group: list[list[int]] = []
        contexts = [ProposalContext(r.tokens, self.groups.get(r.group, no_group), r.member) for r in reqs]
        drafts = self.proposer.propose(contexts, k)
        if len(drafts) != len(reqs) or any(len(d) > k for d in drafts):
            raise ValueError(f"the token proposer must return one list of at most {k} tokens per request")
        counts = [len(d) for d in drafts]
        m = max(counts)
        if m == 0:
            return self._plain_step(reqs), 0, [0] * len(reqs)
        info = self._tensor([[r.slot, r.cache_len] for r in reqs])
        slots, lens = info.unbind(1)
        tree = self._chain_tree([[r.tokens[-1], *d] + [0] * (m - len(d)) for r, d in zip(reqs, drafts, strict=True)],
                                counts)
        real = sum(counts) + len(reqs)
        keep = tree.parents >= 0 if skip_padding(real, tree.tokens.numel()) else None
        if keep is not None:
            keep[:, 0] = True  # the root
        lengths, emitted = self._verify(reqs, tree, slots, lens, m, chain=True, keep=keep)
        return emitted, sum(counts), lengths

    def _chain_tree(self, rows: list[list[int]], counts: list[int]) -> DraftTree:
        """Root + drafts per request, padded to one width. Padding nodes get parent -1, so no path
        reaches them (acceptance only tests children of the current node), and see only themselves."""
        tokens = self._tensor(rows)
        b, n1 = tokens.shape
        if int(tokens.min()) < 0 or int(tokens.max()) >= self.target.cfg.vocab_size:
            raise ValueError("the token proposer returned a token id outside the vocabulary")
        real = self._tensor(counts)[:, None] + 1  # root + drafts
        depths = torch.arange(n1, device=tokens.device).expand(b, n1)
        parents = torch.where(depths < real, depths - 1, torch.full_like(depths, -1))
        return DraftTree(tokens, parents, depths, padded_causal_mask(real[:, 0], n1))
