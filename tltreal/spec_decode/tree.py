"""Draft trees as flat tensors: node 0 is the root (the last committed-but-unverified token).

A tree for a batch of B requests with N draft nodes is stored in verify order (parents before
children, siblings in the order their acceptance is tested):
``tokens [B, N+1]``, ``parents [B, N+1]`` (index of the parent, -1 for the root),
``depths [B, N+1]`` (root 0) and ``mask [B, N+1, N+1]`` (node i may attend node j iff j is i or an
ancestor of i). A chain is the tree where node i's parent is i-1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class DraftTree:
    tokens: torch.Tensor
    parents: torch.Tensor
    depths: torch.Tensor
    mask: torch.Tensor

    @property
    def num_nodes(self) -> int:
        """Draft nodes per request (root excluded)."""
        return self.tokens.shape[1] - 1

    @property
    def max_depth(self) -> int:
        return int(self.depths.max()) if self.depths.numel() else 0


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` ancestor-or-self mask from ``parents`` ``[B, N]`` (topologically ordered)."""
    b, n = parents.shape
    mask = torch.eye(n, dtype=torch.bool, device=parents.device).expand(b, n, n).clone()
    for i in range(1, n):
        p = parents[:, i]
        has = p >= 0
        rows = mask[torch.arange(b), p.clamp_min(0)]  # parent's ancestor set
        mask[:, i] |= rows & has[:, None]
    return mask


def make_tree(tokens: torch.Tensor, parents: torch.Tensor) -> DraftTree:
    """Build a :class:`DraftTree` from tokens and parent indices (root at index 0)."""
    b, n = parents.shape
    if bool((parents[:, 1:] >= torch.arange(1, n, device=parents.device)).any()):
        raise ValueError("tree nodes must come after their parents")
    depths = torch.zeros_like(parents)
    for i in range(1, n):
        depths[:, i] = depths[torch.arange(b), parents[:, i]] + 1
    return DraftTree(tokens, parents, depths, ancestor_mask(parents))


def chain_tree(root: torch.Tensor, drafts: torch.Tensor) -> DraftTree:
    """The chain ``root -> drafts[:, 0] -> drafts[:, 1] ...`` as a tree."""
    b, k = drafts.shape
    parents = torch.arange(-1, k, device=drafts.device).expand(b, k + 1).contiguous()
    return make_tree(torch.cat([root[:, None], drafts], 1), parents)
