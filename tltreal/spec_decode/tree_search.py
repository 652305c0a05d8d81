"""Draft-tree search over any proposer (EAGLE-2 style).

Tree expansion (:func:`expand_tree`): the root's children are the drafter's top-k tokens; then
``depth - 1`` times the current frontier (k nodes) is run through the drafter with a tree mask,
each frontier node proposes its top-k children, and the k best of those k*k candidates by
cumulative log-probability become the next frontier. Finally the ``verify_tokens`` best nodes of the
whole pool (by cumulative log-probability; ties to shallower, earlier nodes, so the set is closed
under ancestors) form the verify tree (:func:`select_tree`). ``topk = 1`` is a chain of ``depth``
tokens.
"""

from __future__ import annotations

import torch

from tltcore.policy.base import SDConfig
from tltreal.model.kv_cache import KVCache
from tltreal.spec_decode.proposers.base import DraftModel
from tltreal.spec_decode.tree import DraftTree, ancestor_mask


def expand_tree(drafter: DraftModel, cache: KVCache, slots: torch.Tensor, draft_lens: torch.Tensor,
                root: torch.Tensor, root_logits: torch.Tensor, root_feat: torch.Tensor,
                root_pos: torch.Tensor, config: SDConfig) -> DraftTree:
    """Grow the draft tree below ``root`` ``[B]`` (see module docstring).

    ``root_logits``/``root_feat`` are the drafter's outputs for the root pair; ``draft_lens`` is the
    committed drafter length (scratch nodes go after it and are discarded afterwards);
    ``root_pos`` is the root token's position.
    """
    k, depth = config.topk, config.depth
    b = root.shape[0]
    dev = root.device
    rows = torch.arange(b, device=dev)
    logp, tok = root_logits.log_softmax(-1).topk(k, dim=-1)
    pool_tok, pool_score = [tok], [logp]
    pool_parent = [torch.full((b, k), -1, dtype=torch.long, device=dev)]
    frontier = torch.arange(k, device=dev).expand(b, k)  # pool indices
    n_scratch = (depth - 1) * k
    scratch_anc = torch.zeros(b, max(n_scratch, 1), max(n_scratch, 1), dtype=torch.bool, device=dev)
    scratch_feat = root_feat.new_zeros(b, max(n_scratch, 1), root_feat.shape[-1])
    pool_scratch = torch.full(  # pool index -> scratch index of nodes already run through the drafter
(b, k + (depth - 1) * k * k), -1, dtype=torch.long, device=dev)
    for d in range(1, depth):
        f_tok = torch.cat(pool_tok, 1).gather(1, frontier)
        f_score = torch.cat(pool_score, 1).gather(1, frontier)
        f_parent = torch.cat(pool_parent, 1).gather(1, frontier)
        base = (d - 1) * k
        s_idx = base + torch.arange(k, device=dev)
        pool_scratch[rows[:, None], frontier] = s_idx.expand(b, k)
        par_s = pool_scratch.gather(1, f_parent.clamp_min(0))  # parent's scratch index
        is_root_child = f_parent < 0
        anc = scratch_anc[rows[:, None], par_s.clamp_min(0)] & ~is_root_child[..., None]
        anc[:, torch.arange(k), s_idx] = True
        scratch_anc[:, s_idx] = anc
        feats = torch.where(is_root_child[..., None], root_feat[:, None],
                            scratch_feat[rows[:, None], par_s.clamp_min(0)])
        positions = (root_pos + d)[:, None].expand(b, k)
        logits, out = drafter.draft_forward(f_tok, feats, positions, cache, slots, draft_lens,
                                            anc[:, :, : base + k])
        scratch_feat[:, s_idx] = out
        c_logp, c_tok = logits.log_softmax(-1).topk(k, dim=-1)  # [B, k, k]
        c_score = (f_score[..., None] + c_logp).reshape(b, k * k)
        start = sum(t.shape[1] for t in pool_tok)
        pool_tok.append(c_tok.reshape(b, k * k))
        pool_score.append(c_score)
        pool_parent.append(frontier[..., None].expand(b, k, k).reshape(b, k * k))
        frontier = start + c_score.topk(k, dim=-1).indices
    return select_tree(root, torch.cat(pool_tok, 1), torch.cat(pool_score, 1), torch.cat(pool_parent, 1),
                       config.verify_tokens)


def select_tree(root: torch.Tensor, tokens: torch.Tensor, scores: torch.Tensor, parents: torch.Tensor,
                n: int) -> DraftTree:
    """Keep the ``n`` best pool nodes (score desc, then pool order) and renumber them in pool order,
    which is topological. Parents always outrank children, so the kept set is ancestor-closed."""
    b = root.shape[0]
    rows = torch.arange(b, device=root.device)
    order = (-scores).argsort(dim=1, stable=True)[:, :n]
    keep = order.sort(dim=1).values  # pool indices, topological
    verify_of_pool = torch.zeros_like(tokens)
    verify_of_pool[rows[:, None], keep] = torch.arange(1, n + 1, device=root.device).expand(b, n)
    par_pool = parents.gather(1, keep)
    par_verify = torch.where(par_pool < 0, torch.zeros_like(par_pool),
                             verify_of_pool.gather(1, par_pool.clamp_min(0)))
    if bool(((par_pool >= 0) & (par_verify == 0)).any()):
        raise AssertionError("draft tree selection is not closed under ancestors")
    tree_tokens = torch.cat([root[:, None], tokens.gather(1, keep)], 1)
    tree_parents = torch.cat([torch.full((b, 1), -1, dtype=torch.long, device=root.device), par_verify], 1)
    depths = torch.zeros_like(tree_parents)
    for i in range(1, n + 1):
        depths[:, i] = depths[rows, tree_parents[:, i]] + 1
    return DraftTree(tree_tokens, tree_parents, depths, ancestor_mask(tree_parents))
