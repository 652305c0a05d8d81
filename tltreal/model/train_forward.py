"""Helpers around :meth:`tltreal.model.transformer.Transformer.forward_train`: per-token log-probabilities and
padding-free packing of variable-length sequences.

Why packing: RL responses (and the task's worked solutions) have long-tailed lengths, so padding a
batch to its longest member would spend most of the compute on padding. Packing concatenates
sequences into fixed-length rows; ``segment_ids`` keep each sequence's attention to itself and
positions restart per sequence, so the loss is the one each sequence would get alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tltcore.errors import InputError


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log p(targets)`` under ``logits`` ``[..., V]`` for ``targets`` ``[...]`` (aligned: the
    logits at index i score target i). Computed in at least float32 so bf16 logits do not round the
    normaliser; differentiable."""
    compute = torch.promote_types(logits.dtype, torch.float32)
    logp = logits.to(compute).log_softmax(dim=-1)
    return logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def next_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[B, T-1]``: log-prob of ``tokens[:, t+1]`` given the prefix up to t, from the logits
    ``[B, T, V]`` of a forward over ``tokens`` ``[B, T]`` (the usual causal-LM shift)."""
    return token_logprobs(logits[:, :-1], tokens[:, 1:])


@dataclass
class PackedBatch:
    """Sequences packed into ``[R, L]`` rows. ``targets[r, i]`` is the token that should follow
    ``tokens[r, i]`` and ``weights[r, i]`` its loss weight (0 at each sequence's last token, on
    padding, and wherever the caller's per-token weight said so)."""

    tokens: torch.Tensor  # [R, L] long
    segment_ids: torch.Tensor  # [R, L] long, -1 on padding
    targets: torch.Tensor  # [R, L] long
    weights: torch.Tensor  # [R, L] float
    sequences: int  # how many sequences were packed


def pack_sequences(seqs: Sequence[Sequence[int]], row_len: int, pad_id: int,
                   loss_weights: Sequence[Sequence[float]] | None = None) -> PackedBatch:
    """Pack ``seqs`` in order into rows of ``row_len`` tokens (first fit on the current row, a new
    row when it is full); a sequence longer than ``row_len`` is truncated to it. ``loss_weights[i][j]``
    is the weight of predicting token j of sequence i (e.g. 0 on the prompt; booleans work)."""
    if row_len < 2:
        raise InputError(f"must be >= 2, got {row_len}", field="row_len")
    rows: list[list[tuple[int, int, int, float]]] = [[]]
    for i, seq in enumerate(seqs):
        seq = list(seq)[:row_len]
        weights = list(loss_weights[i])[:row_len] if loss_weights is not None else [1.0] * len(seq)
        if len(rows[-1]) + len(seq) > row_len:
            rows.append([])
        for j, tok in enumerate(seq):
            nxt = seq[j + 1] if j + 1 < len(seq) else pad_id
            weight = float(weights[j + 1]) if j + 1 < len(seq) else 0.0
            rows[-1].append((tok, i, nxt, weight))
    rows = [r for r in rows if r]
    pad = (pad_id, -1, pad_id, 0.0)
    grid = [r + [pad] * (row_len - len(r)) for r in rows] or [[pad] * row_len]

    def column(k: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([[cell[k] for cell in row] for row in grid], dtype=dtype)

    return PackedBatch(column(0, torch.long), column(1, torch.long), column(2, torch.long),
                       column(3, torch.float32), len(seqs))


__all__ = ["PackedBatch", "next_token_logprobs", "pack_sequences", "token_logprobs"]
