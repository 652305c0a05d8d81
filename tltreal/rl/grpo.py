"""GRPO: the RL algorithm whose rollouts TLT speeds up (DESIGN §1; DeepSeekMath's group-relative
policy optimisation, with DAPO's token-level loss).

Why GRPO here: the adaptive drafter only matters if the policy *changes every step*; a real policy
update is what makes a drafter trained once go stale. GRPO is the algorithm of the paper's runs
and needs no value model: each prompt is answered ``group_size`` times (8 in TLT's runs), and a
response's advantage is its reward standardised within its group::

    A_i = (r_i - mean(r_group)) / (std(r_group) + eps)

so a group whose answers are all right (or all wrong) teaches nothing (all ``A_i = 0``), and the
signal comes from prompts at the edge of the policy's ability -- on our task, the long problems.
Responses cut by the length cap count in their group's statistics (reward 0) but take no part in the
loss (DAPO's overlong filtering, ``mask_truncated``).

The update is the clipped surrogate over response tokens, averaged over every response token of the
batch (DAPO's token-level mean: a long response weighs in proportion to its length)::

    loss = -mean_t min(rho_t A, clip(rho_t, 1 - eps, 1 + eps) A),  rho_t = pi(y_t) / pi_old(y_t)

``pi_old`` is the policy that generated the rollout. With ``minibatches = 1`` there is one
optimizer step per RL step and ``rho = 1`` (plain policy gradient); with more, later minibatches
see a policy that already moved and the clip bounds how far. No KL term (KL-free, as DAPO): the
drift that makes drafters stale is not held back.

Everything is deterministic given the rollouts and the model: minibatches are contiguous slices
in response order, and the forward has no dropout.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tltcore.errors import InputError
from tltreal.model.train_forward import PackedBatch, pack_sequences, token_logprobs
from tltreal.model.transformer import Transformer


@dataclass(frozen=True)
class GRPOConfig:
    """GRPO knobs. ``lr`` is high by LLM standards on purpose: a 4-layer model and 20 steps must
    move enough for a static drafter to go stale, as a 32B model does over hundreds of steps."""

    group_size: int = 8
    lr: float = 1e-4
    minibatches: int = 2
    clip_eps: float = 0.2
    grad_clip: float = 1.0
    betas: tuple[float, float] = (0.9, 0.99)
    row_len: int = 1024
    eps: float = 1e-6
    mask_truncated: bool = True

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise InputError(f"must be >= 2 (advantages are relative to the group), got {self.group_size}",
                             field="group_size")
        if self.minibatches < 1:
            raise InputError(f"must be >= 1, got {self.minibatches}", field="minibatches")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"must be a positive number, got {self.lr}", field="lr")
        if not 0 < self.clip_eps < 1:
            raise InputError(f"must be in (0, 1), got {self.clip_eps}", field="clip_eps")
        if self.row_len < 2:
            raise InputError(f"must be >= 2, got {self.row_len}", field="row_len")


@dataclass(frozen=True)
class Rollout:
    """One response of the step: ``tokens`` is prompt + response, ``prompt_len`` where the response
    starts; ``group`` the prompt it answers."""

    group: int
    tokens: tuple[int, ...]
    prompt_len: int
    reward: float
    truncated: bool = False  # stopped by the length cap, not by the policy

    def __post_init__(self) -> None:
        if not 0 < self.prompt_len <= len(self.tokens):
            raise ValueError(f"prompt_len {self.prompt_len} outside 1..{len(self.tokens)}")

    @property
    def response_len(self) -> int:
        return len(self.tokens) - self.prompt_len


def group_advantages(rewards: Sequence[float], groups: Sequence[int], eps: float = 1e-6) -> np.ndarray:
    """Each reward standardised within its group (module docstring); 0 for a group without spread."""
    r = np.asarray(rewards, dtype=np.float64)
    g = np.asarray(groups)
    if r.shape != g.shape:
        raise ValueError(f"{len(r)} rewards for {len(g)} group ids")
    out = np.zeros_like(r)
    for key in np.unique(g):
        members = g == key
        spread = r[members].std()
        out[members] = (r[members] - r[members].mean()) / (spread + eps) if spread > 0 else 0.0
    return out


@dataclass(frozen=True)
class PolicyBatch:
    """Responses packed for the loss: ``packed.weights`` is 1 where a response token is predicted
    (0 on prompts and padding); ``advantages`` ``[R, L]`` the advantage of that token's response."""

    packed: PackedBatch
    advantages: torch.Tensor


def policy_batch(rollouts: Sequence[Rollout], advantages: Sequence[float], row_len: int, pad_id: int, *,
                 mask_truncated: bool = False) -> PolicyBatch:
    """Pack ``rollouts`` (no padding inside rows) with per-token response masks and advantages.
    ``mask_truncated``: responses cut by the length cap take no part in the loss (DAPO's overlong
    filtering: their reward says nothing about their tokens, only that the cap came first)."""
    too_long = [r for r in rollouts if len(r.tokens) > row_len]
    if too_long:
        raise InputError(f"a rollout of {len(too_long[0].tokens)} tokens does not fit a row of {row_len}",
                         field="row_len")
    masks = [[0.0] * r.prompt_len + [0.0 if mask_truncated and r.truncated else 1.0] * r.response_len
             for r in rollouts]
    packed = pack_sequences([r.tokens for r in rollouts], row_len, pad_id, masks)
    adv = torch.as_tensor(np.asarray(advantages, dtype=np.float32))
    seg = packed.segment_ids
    per_token = torch.where(seg >= 0, adv[seg.clamp_min(0)], torch.zeros((), dtype=adv.dtype))
    return PolicyBatch(packed, per_token)


def batch_logprobs(model: Transformer, batch: PolicyBatch) -> torch.Tensor:
    """``[R, L]`` log-probability of each packed target token under ``model`` (differentiable)."""
    logits, _ = model.forward_train(batch.packed.tokens, segment_ids=batch.packed.segment_ids)
    return token_logprobs(logits, batch.packed.targets)


def clipped_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                 clip_eps: float) -> tuple[torch.Tensor, float]:
    """The clipped surrogate averaged over masked tokens, and the fraction of tokens clipped."""
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    n = mask.sum().clamp_min(1.0)
    clip_frac = float((((ratio - clipped).abs() > 0).float() * mask).sum() / n)
    return -(surrogate * mask).sum() / n, clip_frac


@dataclass(frozen=True)
class UpdateMetrics:
    """One RL step's policy update."""

    loss: float
    clip_fraction: float
    grad_norm: float
    response_tokens: int
    learning_responses: int  # responses with a non-zero advantage
    seconds: float


class GRPOTrainer:
    """The policy and its AdamW state across RL steps."""

    def __init__(self, model: Transformer, config: GRPOConfig, *, pad_id: int) -> None:
        self.model, self.config, self.pad_id = model, config, pad_id
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=config.betas, weight_decay=0.0)

    def update(self, rollouts: Sequence[Rollout]) -> UpdateMetrics:
        """One RL step: advantages per group, then ``minibatches`` clipped optimizer steps (none when
        every advantage is 0: a step without signal leaves the policy exactly as it was)."""
        c = self.config
        t0 = time.perf_counter()
        adv = group_advantages([r.reward for r in rollouts], [r.group for r in rollouts], c.eps)
        tokens = sum(r.response_len for r in rollouts)
        if not np.any(adv):  # no group has reward spread: no signal, and AdamW's momentum must not move it
            return UpdateMetrics(0.0, 0.0, 0.0, tokens, 0, time.perf_counter() - t0)
        slices = [s for s in np.array_split(np.arange(len(rollouts)), c.minibatches) if len(s)]
        batches = [policy_batch([rollouts[i] for i in s], adv[s], c.row_len, self.pad_id,
                                mask_truncated=c.mask_truncated) for s in slices]
        self.model.eval()
        with torch.no_grad():  # pi_old: the policy that generated the rollouts, before any step
            old = [batch_logprobs(self.model, b) for b in batches]
        losses, clips, norms = [], [], []
        self.model.train()
        for b, old_logp in zip(batches, old, strict=True):
            with torch.enable_grad():
                logp = batch_logprobs(self.model, b)
                loss, clip_frac = clipped_loss(logp, old_logp, b.advantages, b.packed.weights, c.clip_eps)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)))
            self.optimizer.step()
            losses.append(float(loss.detach()))
            clips.append(clip_frac)
        self.model.eval()
        return UpdateMetrics(float(np.mean(losses)), float(np.mean(clips)), float(np.mean(norms)),
                             tokens, int(np.count_nonzero(adv)),
                             time.perf_counter() - t0)


__all__ = ["GRPOConfig", "GRPOTrainer", "PolicyBatch", "Rollout", "UpdateMetrics", "batch_logprobs",
           "clipped_loss", "group_advantages", "policy_batch"]
