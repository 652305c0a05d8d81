"""Triton kernels for the small-batch hot path, each with a PyTorch reference and one switch.

- :func:`tree_accept`: walk the verified draft tree and do lossless acceptance (exact match for
  greedy, recursive rejection sampling with residual resampling otherwise) -> accepted path,
  accept length and bonus token per request. Reference: :mod:`tltreal.spec_decode.verify`.
- :func:`compact_kv`: move the accepted path's keys/values (any slab ``[L, S, H, P, D]``) to sit
  contiguously after the committed prefix. Reference: :func:`compact_kv_reference`.

The switch: :func:`set_use_triton` (or ``TLT_TRITON=1/0``); by default Triton is used when CUDA is
available. On CPU the kernels run under ``TRITON_INTERPRET=1`` (tests), compute in float32 and mask
every access, so the same code is correct on a GPU.
"""

from __future__ import annotations

import os

import torch

from tltreal.spec_decode.verify import tree_accept_reference

_USE_TRITON: bool | None = None


def use_triton() -> bool:
    """Whether the dispatchers below run the Triton kernels."""
    if _USE_TRITON is not None:
        return _USE_TRITON
    env = os.environ.get("TLT_TRITON")
    if env is not None:
        return env not in ("0", "false", "")
    return torch.cuda.is_available()


def set_use_triton(flag: bool | None) -> None:
    """Force Triton on/off (None: back to the default rule)."""
    global _USE_TRITON
    _USE_TRITON = flag


def tree_accept(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor,
                u: torch.Tensor, u_bonus: torch.Tensor, max_depth: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lossless tree acceptance; see :func:`tltreal.spec_decode.verify.tree_accept_reference`."""
    if use_triton():
        from tltreal.spec_decode.kernels.accept import tree_accept_triton

        return tree_accept_triton(p, q, tokens, parents, u, u_bonus, max_depth)
    return tree_accept_reference(p, q, tokens, parents, u, u_bonus, max_depth)


def compact_kv_reference(cache: torch.Tensor, slots: torch.Tensor, base: torch.Tensor, src: torch.Tensor,
                         counts: torch.Tensor) -> None:
    """In place: ``cache[:, slot, :, base + i] = cache[:, slot, :, base + src[i]]`` for ``i < count``.

    ``src`` is increasing with ``src[i] >= i`` (a root-to-leaf path in verify order), so copying in
    increasing ``i`` never reads an entry already overwritten.
    """
    for b in range(slots.shape[0]):
        n = int(counts[b])
        if n <= 1:
            continue
        s, o = int(slots[b]), int(base[b])
        idx = src[b, :n].to(torch.long) + o
        cache[:, s, :, o:o + n] = cache[:, s, :, idx]


def compact_kv(cache: torch.Tensor, slots: torch.Tensor, base: torch.Tensor, src: torch.Tensor,
               counts: torch.Tensor) -> None:
    """KV compaction along the accepted path (see :func:`compact_kv_reference`)."""
    if use_triton():
        from tltreal.spec_decode.kernels.compact import compact_kv_triton

        compact_kv_triton(cache, slots, base, src, counts)
    else:
        compact_kv_reference(cache, slots, base, src, counts)
