"""Triton kernel: KV compaction along the accepted path.

After tree verification the accepted nodes' keys/values sit at scattered verify indices after the
committed prefix; this moves them to ``base + 0, 1, 2, ...``. One program per (request, layer)
copies one ``[heads, head_dim]`` row per accepted node, in increasing order: since the path's
verify indices satisfy ``src[i] >= i``, no row is read after it has been overwritten, and each
element is loaded and stored by the same program, so the sequential order is the only one needed.
Works on any slab ``[L, S, H, P, D]`` of any dtype (it only copies): the target's keys and
values, or a per-slot hidden-state slab viewed as ``[1, S, 1, P, H]``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _compact_kernel(cache_ptr, slots_ptr, base_ptr, src_ptr, count_ptr, max_count, heads, dim,
                    stride_l, stride_s, stride_h, stride_p, stride_srcb,
                    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    layer = tl.program_id(1).to(tl.int64)
    slot = tl.load(slots_ptr + b).to(tl.int64)
    base = tl.load(base_ptr + b).to(tl.int64)
    count = tl.load(count_ptr + b).to(tl.int64)
    hh = tl.arange(0, BLOCK_H)[:, None]
    dd = tl.arange(0, BLOCK_D)[None, :]
    in_dim = dd < dim
    row = cache_ptr + layer * stride_l + slot * stride_s + hh * stride_h + dd
    for i in range(1, max_count):
        src = tl.load(src_ptr + b * stride_srcb + i).to(tl.int64)
        ok = (i < count) & (src != i) & (src >= 0)
        src = tl.where(ok, src, i)
        # The scalar condition becomes a bound on the head index rather than `block_mask & ok`: Triton's
        # interpreter (3.8+) turns a block-&-scalar of booleans into int32, which its load/store refuse
        # ("mask has unsupported dtype"). Comparing two blocks keeps the mask boolean on every version.
        mask = (hh < tl.where(ok, heads, 0)) & in_dim
        vals = tl.load(row + (base + src) * stride_p, mask=mask, other=0.0)
        tl.store(row + (base + i) * stride_p, vals, mask=mask)


def compact_kv_triton(cache: torch.Tensor, slots: torch.Tensor, base: torch.Tensor, src: torch.Tensor,
                      counts: torch.Tensor) -> None:
    """In-place compaction of ``cache`` ``[L, S, H, P, D]``; see the module docstring."""
    assert cache.dim() == 5 and cache.stride(-1) == 1, "cache must be [L, S, H, P, D] with unit last stride"
    b = slots.shape[0]
    assert base.shape == (b,) and counts.shape == (b,) and src.shape[0] == b
    if b == 0 or src.shape[1] <= 1:
        return
    slots, base, counts, src = slots.contiguous(), base.contiguous(), counts.contiguous(), src.contiguous()
    assert int((base + counts).max()) <= cache.shape[3], "compaction beyond the slab"
    assert int(src.max()) + int(base.max()) < cache.shape[3], "source index beyond the slab"
    layers, _, heads, _, dim = cache.shape
    _compact_kernel[(b, layers)](
        cache, slots, base, src, counts, src.shape[1], heads, dim,
        cache.stride(0), cache.stride(1), cache.stride(2), cache.stride(3), src.stride(0),
        BLOCK_H=triton.next_power_of_2(heads), BLOCK_D=triton.next_power_of_2(dim),
    )
