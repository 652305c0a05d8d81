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

    loss = -mean_t s_t,  s_t = min(rho_t A, clip(rho_t, 1 - eps, 1 + eps) A),  rho_t = pi(y_t) / pi_old(y_t)

and, with the *dual clip* (Ye et al. 2020, "Mastering Complex Control in MOBA Games"; verl's
``clip_ratio_c = 3``), for a negative advantage ``s_t = max(s_t, c A)``. Why: the plain clip bounds
the ratio only in the direction the advantage pushes; a disfavoured token whose ratio has already
grown far above ``1 + eps`` (a later minibatch, or a stale ``pi_old``) keeps its full, unbounded
``rho A`` term, and one such token can dominate the batch (the committed run's loss of 3.21 at a
step where ~0 is normal). The dual clip caps that term at ``c |A|`` and stops its gradient there.

``pi_old`` is the policy that generated the rollout. With ``minibatches = 1`` there is one
optimizer step per RL step and ``rho = 1`` (plain policy gradient); with more, later minibatches
see a policy that already moved and the clip bounds how far. The KL term to the reference policy is
off by default (KL-free, as DAPO: the drift that makes drafters stale is not held back); with
``kl_coef > 0`` each response token adds ``kl_coef * k3`` with GRPO's estimator
``k3 = exp(ref - logp) - (ref - logp) - 1`` (>= 0, 0 where the policy equals the reference), which
keeps a learning run near the pre-trained policy.

Everything is deterministic given the rollouts and the model: minibatches are contiguous slices
in response order, and the forward has no dropout.
"""

from __future__ import annotations

import copy
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
    dual_clip: float | None = 3.0  # c of the dual clip (module docstring); None: off
    kl_coef: float = 0.0  # weight of the k3 KL to the reference (the policy the trainer started from)

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
        if self.dual_clip is not None and not (math.isfinite(self.dual_clip) and self.dual_clip > 1):
            raise InputError(f"must be > 1 (or None: off), got {self.dual_clip}", field="dual_clip")
        if not (math.isfinite(self.kl_coef) and self.kl_coef >= 0):
            raise InputError(f"must be >= 0, got {self.kl_coef}", field="kl_coef")
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
                 clip_eps: float, dual_clip: float | None = None) -> tuple[torch.Tensor, float]:
    """The clipped surrogate averaged over masked tokens, and the fraction of tokens clipped (by
    either clip). ``dual_clip`` ``c``: a negative advantage's term is at least ``c A`` (module
    docstring); None leaves the plain PPO clip."""
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    outside = (ratio - clipped).abs() > 0
    if dual_clip is not None:
        floor = dual_clip * advantages
        surrogate = torch.where(advantages < 0, torch.maximum(surrogate, floor), surrogate)
    n = mask.sum().clamp_min(1.0)
    clip_frac = float((outside.float() * mask).sum() / n)
    return -(surrogate * mask).sum() / n, clip_frac


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GRPO's per-token KL estimate to the reference, ``exp(ref - logp) - (ref - logp) - 1``,
    averaged over masked tokens: unbiased for KL(pi || ref) under samples of pi, never negative."""
    d = ref_logp - logp
    n = mask.sum().clamp_min(1.0)
    return ((torch.exp(d) - d - 1) * mask).sum() / n


@dataclass(frozen=True)
class UpdateMetrics:
    """One RL step's policy update."""

    loss: float
    clip_fraction: float
    grad_norm: float
    response_tokens: int
    learning_responses: int  # responses with a non-zero advantage
    seconds: float
    kl: float = 0.0  # mean k3 KL to the reference over the minibatches (0 when kl_coef is 0)


class GRPOTrainer:
    """The policy and its AdamW state across RL steps."""

    def __init__(self, model: Transformer, config: GRPOConfig, *, pad_id: int) -> None:
        self.model, self.config, self.pad_id = model, config, pad_id
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=config.betas, weight_decay=0.0)
        # the KL's reference: a frozen copy of the policy as the trainer received it
        self.reference = copy.deepcopy(model).eval().requires_grad_(False) if config.kl_coef > 0 else None

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
            refs = [batch_logprobs(self.reference, b) for b in batches] if self.reference is not None else \
                [None] * len(batches)
        losses, clips, norms, kls = [], [], [], []
        self.model.train()
        for b, old_logp, ref_logp in zip(batches, old, refs, strict=True):
            with torch.enable_grad():
                logp = batch_logprobs(self.model, b)
                loss, clip_frac = clipped_loss(logp, old_logp, b.advantages, b.packed.weights, c.clip_eps,
                                               c.dual_clip)
                if ref_logp is not None:
                    kl = kl_k3(logp, ref_logp, b.packed.weights)
                    loss = loss + c.kl_coef * kl
                    kls.append(float(kl.detach()))
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)))
            self.optimizer.step()
            losses.append(float(loss.detach()))
            clips.append(clip_frac)
        self.model.eval()
        return UpdateMetrics(float(np.mean(losses)), float(np.mean(clips)), float(np.mean(norms)),
                             tokens, int(np.count_nonzero(adv)),
                             time.perf_counter() - t0, float(np.mean(kls)) if kls else 0.0)


__all__ = ["GRPOConfig", "GRPOTrainer", "PolicyBatch", "Rollout", "UpdateMetrics", "batch_logprobs",
           "clipped_loss", "group_advantages", "kl_k3", "policy_batch"]
