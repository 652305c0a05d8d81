"""Triton kernel: lossless acceptance over a verified draft tree, one program per request.

Same rule and outputs as :func:`tltreal.spec_decode.verify.tree_accept_reference`. The program keeps the
current residual distribution (one ``BLOCK_V`` vector, float32) in registers and scans the nodes in
verify order; a node is tested only if its parent is the current node. Vocabularies up to
``BLOCK_V = next_power_of_2(V)`` are held in one block; this is the batch-1..64 long-tail regime
the kernel is for (the work is O(N * V) per request).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _tree_accept_kernel(p_ptr, q_ptr, tok_ptr, par_ptr, u_ptr, ub_ptr, path_ptr, len_ptr, next_ptr,
                        n_nodes, vocab, max_depth,
                        stride_pb, stride_pn, stride_qb, stride_qn, stride_tb, stride_parb, stride_ub,
                        stride_pathb,
                        BLOCK_V: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_V)
    vmask = offs < vocab
    p_row = p_ptr + b * stride_pb
    q_row = q_ptr + b * stride_qb
    r = tl.load(p_row + offs, mask=vmask, other=0.0).to(tl.float32)
    cur = tl.zeros((), dtype=tl.int32)
    length = tl.zeros((), dtype=tl.int32)
    for j in range(1, n_nodes):
        par = tl.load(par_ptr + b * stride_parb + j).to(tl.int32)
        x = tl.load(tok_ptr + b * stride_tb + j).to(tl.int32)
        u = tl.load(u_ptr + b * stride_ub + j).to(tl.float32)
        q = tl.load(q_row + j * stride_qn + offs, mask=vmask, other=0.0).to(tl.float32)
        p_j = tl.load(p_row + j * stride_pn + offs, mask=vmask, other=0.0).to(tl.float32)
        total = tl.sum(r, axis=0)
        rx = tl.sum(tl.where(offs == x, r, 0.0), axis=0)
        qx = tl.sum(tl.where(offs == x, q, 0.0), axis=0)
        cand = par == cur
        accept = cand & (u * qx * total < rx)
        reject = cand & (accept == 0)
        rn = r / total
        res = tl.maximum(rn - q, 0.0)
        res = tl.where(tl.sum(res, axis=0) > 0, res, rn)
        r = tl.where(accept, p_j, tl.where(reject, res, r))
        length = length + accept.to(tl.int32)
        tl.store(path_ptr + b * stride_pathb + length, j + tl.zeros((), dtype=tl.int64),
                 mask=accept & (length <= max_depth))
        cur = tl.where(accept, j, cur)
    tl.store(len_ptr + b, length.to(tl.int64))
    # Bonus token by inverse CDF: first index whose cumulative residual exceeds u * total.
    ub = tl.load(ub_ptr + b).to(tl.float32)
    cdf = tl.cumsum(r, axis=0)
    total = tl.max(tl.where(vmask, cdf, 0.0), axis=0)
    below = tl.where(vmask & (cdf <= ub * total), 1, 0)
    idx = tl.minimum(tl.sum(below, axis=0), vocab - 1)
    tl.store(next_ptr + b, idx.to(tl.int64))


def tree_accept_triton(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor,
                       u: torch.Tensor, u_bonus: torch.Tensor, max_depth: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch one program per request; inputs as for the reference (any float dtype)."""
    b, n1, v = p.shape
    assert q.shape == p.shape and tokens.shape == (b, n1) and parents.shape == (b, n1)
    assert u.shape == (b, n1) and u_bonus.shape == (b,) and v >= 1 and n1 >= 1
    p, q = p.contiguous(), q.contiguous()
    tokens, parents = tokens.contiguous(), parents.contiguous()
    u, u_bonus = u.contiguous(), u_bonus.contiguous()
    assert int(tokens.min()) >= 0 and int(tokens.max()) < v, "token ids out of range"
    path = torch.full((b, max_depth + 1), -1, dtype=torch.long, device=p.device)
    path[:, 0] = 0
    length = torch.empty(b, dtype=torch.long, device=p.device)
    nxt = torch.empty(b, dtype=torch.long, device=p.device)
    if b == 0:
        return path, length, nxt
    _tree_accept_kernel[(b,)](
        p, q, tokens, parents, u, u_bonus, path, length, nxt,
        n1, v, max_depth,
        p.stride(0), p.stride(1), q.stride(0), q.stride(1), tokens.stride(0), parents.stride(0),
        u.stride(0), path.stride(0),
        BLOCK_V=triton.next_power_of_2(v),
    )
    return path, length, nxt
