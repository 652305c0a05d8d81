"""Slab KV cache: one fixed-size slot per running request.

Why a slab and not pages: the engine targets the small-batch long tail, where a handful of requests
run for thousands of tokens. A slab (``[layers, slots, kv_heads, max_len, head_dim]``) keeps every
request's keys contiguous, so tree verification can write draft nodes after the committed prefix and
compaction is a short copy inside one slot, with no page table. The price is memory reserved up to
``max_len`` per slot, which is fine for the model sizes this engine runs.

Layout contract used by the model, drafter and compaction kernel:
- a request owns ``slot``; its committed context occupies indices ``[0, length)``;
- a forward pass writes its T new tokens at ``[length, length + T)`` (draft/tree nodes included);
  entries at or beyond ``length`` are scratch until the engine advances ``length`` past them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    """Keys and values for ``layers`` layers and ``slots`` requests, ``max_len`` positions each."""

    k: torch.Tensor  # [layers, slots, kv_heads, max_len, head_dim]
    v: torch.Tensor

    @classmethod
    def allocate(cls, layers: int, slots: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu") -> KVCache:
        shape = (layers, slots, kv_heads, max_len, head_dim)
        return cls(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    @property
    def num_slots(self) -> int:
        return self.k.shape[1]

    def write(self, layer: int, slots: torch.Tensor, index: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> None:
        """Store new ``k``/``v`` ``[B, T, kv_heads, head_dim]`` at ``index`` ``[B, T]`` of each slot."""
        rows = slots[:, None].expand_as(index)
        self.k[layer][rows, :, index] = k
        self.v[layer][rows, :, index] = v

    def write_tokens(self, layer: int, slots: torch.Tensor, index: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor) -> None:
        """Store ``k``/``v`` ``[N, kv_heads, head_dim]`` of N tokens, token i at ``index[i]`` of slot
        ``slots[i]``."""
        self.k[layer][slots, :, index] = k
        self.v[layer][slots, :, index] = v

    def window(self, layer: int, slots: torch.Tensor, width: int, *, first_slot: int | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``width`` positions of each slot: ``[B, kv_heads, width, head_dim]``. With
        ``first_slot`` (``slots`` is ``first_slot + arange(B)``) these are views of the slab, not
        gathered copies: do not write to them."""
        if first_slot is not None:
            end = first_slot + slots.shape[0]
            return self.k[layer, first_slot:end, :, :width], self.v[layer, first_slot:end, :, :width]
        return self.k[layer, slots, :, :width], self.v[layer, slots, :, :width]


class SlotPool:
    """Free list of cache slots; lowest free slot first so runs are reproducible."""

    def __init__(self, num_slots: int) -> None:
        self._free = list(range(num_slots))

    def take(self) -> int:
        if not self._free:
            raise RuntimeError("no free KV-cache slot")
        self._free.sort()
        return self._free.pop(0)

    def give(self, slot: int) -> None:
        self._free.append(slot)

    @property
    def free(self) -> int:
        return len(self._free)
