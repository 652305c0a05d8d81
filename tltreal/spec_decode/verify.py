"""Lossless acceptance of a verified draft tree: the PyTorch reference.

Input per request: the target's distribution at every tree node (``p [B, N+1, V]``, computed by one
tree-masked target forward; node 0 is the root), the proposal distribution each draft node was drawn
from given its parent (``q [B, N+1, V]``, row 0 unused), and the tree.

Rule (multi-draft recursive rejection sampling, SpecInfer / EAGLE form). Start at the root with
residual ``r = p[root]``. Test the current node's children in order; child ``c`` with token ``x`` is
accepted with probability ``min(1, r(x) / q_c(x))`` (r normalised); if accepted, move to ``c`` and
reset ``r = p[c]``; if rejected, ``r <- normalise(max(r - q_c, 0))`` and try the next sibling. When
no child is accepted, the bonus token is drawn from ``r``. Each emitted token is then distributed
exactly as the target's own next-token distribution, whatever the drafter proposed, provided
siblings were proposed independently from their ``q_c`` given the path (i.i.d. sampling from q, or
deterministic choices encoded as one-hot q: the engine's top-k tree uses one-hot q, for which a
rejected token is simply removed from the residual).

Greedy decoding is the special case of one-hot ``p`` rows: a child is accepted iff its token is the
argmax, and the bonus is the argmax at the last accepted node, so SD output equals plain greedy
output token for token.

Outputs: ``path [B, D+1]`` (verify indices of the accepted nodes, root first, -1 padded),
``accept_len [B]`` (accepted draft nodes, root excluded) and ``next_token [B]`` (the bonus).
"""

from __future__ import annotations

import torch

from tltreal.model.sampling import sample_inverse_cdf


def residual(r: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The rejection residual ``max(normalise(r) - q, 0)``; falls back to ``r`` where it is all zero
    (which only happens when the rejection had probability zero)."""
    rn = r / r.sum(-1, keepdim=True)
    out = (rn - q).clamp_min(0)
    empty = out.sum(-1, keepdim=True) <= 0
    return torch.where(empty, rn, out)


def tree_accept_reference(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor,
                          u: torch.Tensor, u_bonus: torch.Tensor, max_depth: int
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Walk every request's tree in verify order (see module docstring). ``u [B, N+1]`` holds one
    uniform per node (its acceptance test), ``u_bonus [B]`` the uniform for the bonus draw."""
    b, n1, _ = p.shape
    rows = torch.arange(b, device=p.device)
    cur = torch.zeros(b, dtype=torch.long, device=p.device)
    length = torch.zeros(b, dtype=torch.long, device=p.device)
    path = torch.full((b, max_depth + 1), -1, dtype=torch.long, device=p.device)
    path[:, 0] = 0
    r = p[:, 0].clone()
    for j in range(1, n1):
        cand = parents[:, j] == cur
        if not bool(cand.any()):
            continue
        x = tokens[:, j]
        rx = r[rows, x]
        qx = q[rows, j, x]
        accept = cand & (u[:, j].to(r.dtype) * qx * r.sum(-1) < rx)
        reject = cand & ~accept
        r = torch.where(accept[:, None], p[:, j], torch.where(reject[:, None], residual(r, q[:, j]), r))
        cur = torch.where(accept, torch.full_like(cur, j), cur)
        length = length + accept.long()
        slot = length.clamp_max(max_depth)
        path[rows[accept], slot[accept]] = j
    return path, length, sample_inverse_cdf(r, u_bonus)


def greedy_chain_accept(logits: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, max_depth: int
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`tree_accept_reference` for the case the engine runs most: every request greedy (one-hot
    ``p`` at the argmax of ``logits [B, N+1, V]``, first index on ties) and draft chains (node ``j``'s
    parent is ``j - 1``; padding nodes have parent -1 and are never reached) with one-hot ``q``. Then
    draft ``j`` is accepted iff its token is the argmax at node ``j - 1`` and every earlier draft was
    accepted, and the bonus is the argmax at the last accepted node: a handful of batched ops
    instead of a walk over the nodes, and no ``[B, N+1, V]`` one-hot tensors. Same outputs as the
    reference (tests/real/test_fast_paths.py pins it)."""
    best = logits.argmax(-1)  # [B, N+1]
    n1 = tokens.shape[1]
    step = torch.arange(1, n1, device=tokens.device)
    match = (tokens[:, 1:] == best[:, :-1]) & (parents[:, 1:] == step - 1)
    length = match.long().cumprod(1).sum(1).clamp_max(max_depth)
    cols = torch.arange(max_depth + 1, device=tokens.device)
    path = torch.where(cols[None, :] <= length[:, None], cols[None, :], torch.full_like(cols, -1)[None, :])
    return path, length, best.gather(1, length[:, None])[:, 0]
