"""Online training of TLT's adaptive EAGLE drafter from rollout data (DESIGN §1, §2.3).

Samples (a finished response's tokens and the target's hidden states), their windows and the store
they are drawn from (:class:`~tltreal.spot.sample_buffer.SampleBuffer`, with TLT's one-step offset)
are :mod:`tltreal.spot.sample_buffer`'s.

**Loss** (EAGLE / TLT): per pair, ``hidden_weight * SmoothL1(pred_h, h_j)`` (mean over the hidden
dimension) ``+ ce_weight * H(p_target, q_drafter)`` (soft cross-entropy, summed over the vocabulary);
averaged over the pairs of a step. Weights 1.0 and 0.1 (EAGLE's), AdamW; TLT's released trainer
uses 0.5 and 0.5 (:data:`FASTRL_WEIGHTS`).

**Response-only** (``response_only``, TLT's released trainer): only pairs whose token is a response
token (``j >= prompt_len`` of the sample) count. Why: the drafter only ever drafts after response
tokens (the target's prefill supplies the prompt's hidden states), and a prompt here is random
numbers no drafter can predict, so training on them spends capacity on noise. Samples that do not
know their prompt length (``prompt_len == 0``) count every pair.

**Sequence packing.** A step's windows (≤ ``samples_per_step`` of ≤ ``window_tokens`` pairs each)
are concatenated into one row with a block-diagonal causal mask and per-window positions: no
padding, and each pair's loss is exactly what it would be alone (tested to 1e-9 in float64).

Everything is deterministic given ``DrafterTrainerConfig.seed`` (a numpy generator draws windows;
training has no dropout).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from tltcore.errors import InputError
from tltreal.model.transformer import Transformer
from tltreal.spec_decode.proposers.eagle import EagleDrafter
from tltreal.spot.sample_buffer import SampleBuffer, Window

#: TLT's released trainer's loss weights (hidden SmoothL1, soft cross-entropy), the ``fastrl`` option
FASTRL_WEIGHTS = (0.5, 0.5)


@dataclass(frozen=True)
class DrafterTrainerConfig:
    """Drafter-training knobs. Defaults are TLT's (DESIGN §1): lr 1e-6 is for *online adaptation* of
    an already trained drafter; a randomly initialised one needs ~1e-3 to learn in a few hundred
    steps. ``max_steps`` bounds one Spot Trainer session (TLT: 200)."""

    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    samples_per_step: int = 4
    window_tokens: int = 512
    max_steps: int = 200
    hidden_weight: float = 1.0
    ce_weight: float = 0.1
    max_grad_norm: float = 0.5  # EAGLE's clipping; 0 turns it off
    one_step_offset: bool = True
    seed: int = 0
    response_only: bool = False  # module docstring: only response pairs count in the loss

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise InputError(f"must be > 0, got {self.lr}", field="drafter.lr")
        if self.samples_per_step < 1 or self.window_tokens < 1 or self.max_steps < 0:
            raise InputError("samples_per_step and window_tokens must be >= 1, max_steps >= 0",
                             field="drafter")
        if self.hidden_weight < 0 or self.ce_weight < 0 or self.max_grad_norm < 0:
            raise InputError("loss weights and max_grad_norm must be >= 0", field="drafter")


# ---- packing and the loss --------------------------------------------------------------------------
@dataclass(frozen=True)
class PackedWindows:
    """Windows concatenated into one row ``[1, T]`` (module docstring)."""

    tokens: torch.Tensor  # [1, T] t_j
    feats: torch.Tensor  # [1, T, H] h_{j-1} (0 for j = 0)
    positions: torch.Tensor  # [1, T] j
    mask: torch.Tensor  # [1, T, T] block-diagonal causal
    target_hidden: torch.Tensor  # [1, T, H] h_j
    lengths: tuple[int, ...]
    weights: torch.Tensor | None = None  # [T] 1 where a pair counts in the loss (None: every pair)


def block_causal_mask(lengths: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """``[T, T]``: causal inside each consecutive block of ``lengths``, nothing across blocks."""
    seg = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                  torch.as_tensor(list(lengths), device=device))
    t = len(seg)
    return (seg[:, None] == seg[None, :]) & torch.ones(t, t, dtype=torch.bool, device=device).tril()


def window_pairs(w: Window) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(tokens, feats, positions, target_hidden)`` of one window's pairs (:mod:`tltreal.spot.sample_buffer`)."""
    s = w.sample
    feats = s.hidden.new_zeros(len(w), s.hidden.shape[1])
    lo = max(w.start - 1, 0)
    feats[lo + 1 - w.start:] = s.hidden[lo: w.end - 1]
    return s.tokens[w.start: w.end], feats, torch.arange(w.start, w.end), s.hidden[w.start: w.end]


def pack(windows: Sequence[Window], *, dtype: torch.dtype | None = None,
         device: torch.device | str = "cpu", response_only: bool = False) -> PackedWindows:
    """One padding-free row of ``windows`` (``dtype``: of the features, the drafter's);
    ``response_only``: pairs at positions before their sample's ``prompt_len`` get weight 0."""
    if not windows:
        raise ValueError("nothing to pack")
    parts = [window_pairs(w) for w in windows]
    tokens, feats, positions, hidden = (torch.cat([p[i] for p in parts]) for i in range(4))
    dtype = dtype or feats.dtype
    lengths = tuple(len(w) for w in windows)
    weights = None
    if response_only:
        starts = torch.cat([torch.full((len(w),), w.sample.prompt_len) for w in windows])
        weights = (positions >= starts).to(device, dtype)
    return PackedWindows(tokens[None].to(device), feats[None].to(device, dtype), positions[None].to(device),
                         block_causal_mask(lengths, device)[None], hidden[None].to(device, dtype), lengths, weights)


@dataclass(frozen=True)
class LossParts:
    """Per-pair losses ``[T]`` of one packed row; :attr:`total` is what is minimised."""

    hidden: torch.Tensor
    ce: torch.Tensor
    per_pair: torch.Tensor
    weights: torch.Tensor | None = None  # [T] pairs that count (None: all)

    @property
    def total(self) -> torch.Tensor:
        if self.weights is None:
            return self.per_pair.mean()
        return (self.per_pair * self.weights).sum() / self.weights.sum().clamp_min(1.0)


def drafter_loss(drafter: EagleDrafter, batch: PackedWindows, *, hidden_weight: float = 1.0,
                 ce_weight: float = 0.1) -> LossParts:
    """SmoothL1 on the next hidden state + soft cross-entropy against the target's distribution
    (module docstring), per pair."""
    logits, pred = drafter.forward_train(batch.tokens, batch.feats, batch.positions, batch.mask)
    target = drafter.__dict__["_target"]
    with torch.no_grad():
        p_target = nn.functional.linear(batch.target_hidden, target.lm_head.weight).softmax(-1)
    hidden = nn.functional.smooth_l1_loss(pred, batch.target_hidden, reduction="none").mean(-1)[0]
    ce = -(p_target * logits.log_softmax(-1)).sum(-1)[0]
    return LossParts(hidden, ce, hidden_weight * hidden + ce_weight * ce, batch.weights)


# ---- the trainer -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainMetrics:
    """One call's training: per-step total / hidden / CE losses, windows and pairs trained on,
    wall seconds, and whether it was preempted (``should_stop``) before ``n_steps``."""

    losses: tuple[float, ...] = ()
    hidden_losses: tuple[float, ...] = ()
    ce_losses: tuple[float, ...] = ()
    windows: int = 0
    tokens: int = 0
    seconds: float = 0.0
    preempted: bool = False

    @property
    def steps(self) -> int:
        return len(self.losses)

    @property
    def samples_per_s(self) -> float:
        """Windows (the paper's "samples") per second."""
        return self.windows / self.seconds if self.seconds > 0 else 0.0


@dataclass
class DrafterTrainer:
    """A drafter, its AdamW state and the window-drawing generator: a Spot Trainer session's
    state. ``steps_done`` counts optimizer steps over the trainer's life (checkpoint metadata)."""

    drafter: EagleDrafter
    config: DrafterTrainerConfig = field(default_factory=DrafterTrainerConfig)
    optimizer: torch.optim.AdamW = field(init=False)
    steps_done: int = 0

    def __post_init__(self) -> None:
        c = self.config
        self.optimizer = torch.optim.AdamW([p for _, p in self.drafter.named_parameters()], lr=c.lr,
                                           betas=c.betas, weight_decay=c.weight_decay)
        self._rng = np.random.default_rng(c.seed)

    def step(self, windows: Sequence[Window]) -> LossParts:
        """One optimizer step on ``windows`` packed into one row."""
        c = self.config
        self.drafter.train()
        batch = pack(windows, dtype=self.drafter.dtype, device=self.drafter.fc.weight.device,
                     response_only=c.response_only)
        with torch.enable_grad():
            parts = drafter_loss(self.drafter, batch, hidden_weight=c.hidden_weight, ce_weight=c.ce_weight)
            self.optimizer.zero_grad(set_to_none=True)
            parts.total.backward()
        if c.max_grad_norm > 0:
            nn.utils.clip_grad_norm_(self.drafter.parameters(), c.max_grad_norm)
        self.optimizer.step()
        self.steps_done += 1
        self.drafter.eval()
        return parts

    def train(self, buffer: SampleBuffer, n_steps: int, *,
              should_stop: Callable[[], bool] | None = None) -> TrainMetrics:
        """One session: up to ``n_steps`` (at most ``config.max_steps``) steps of
        ``samples_per_step`` windows drawn from ``buffer``; stops early (preempted) when
        ``should_stop()`` turns true between steps, or when the buffer is empty."""
        t0 = time.perf_counter()
        losses: list[tuple[float, float, float]] = []
        windows = tokens = 0
        preempted = False
        for _ in range(min(n_steps, self.config.max_steps)):
            if should_stop is not None and should_stop():
                preempted = True
                break
            drawn = buffer.draw(self.config.samples_per_step, self._rng)
            if not drawn:
                break
            parts = self.step(drawn)
            losses.append((float(parts.total.detach()), float(parts.hidden.detach().mean()),
                           float(parts.ce.detach().mean())))
            windows += len(drawn)
            tokens += sum(len(w) for w in drawn)
        cols = tuple(zip(*losses, strict=True)) if losses else ((), (), ())
        return TrainMetrics(cols[0], cols[1], cols[2], windows, tokens, time.perf_counter() - t0, preempted)


def train_steps(drafter: EagleDrafter, buffer: SampleBuffer, n_steps: int,
                config: DrafterTrainerConfig | None = None, *,
                should_stop: Callable[[], bool] | None = None) -> TrainMetrics:
    """``n_steps`` steps of a fresh :class:`DrafterTrainer` (fresh AdamW state); deterministic given
    ``config.seed``. Keep a :class:`DrafterTrainer` instead to carry AdamW state across calls."""
    return DrafterTrainer(drafter, config or DrafterTrainerConfig()).train(buffer, n_steps, should_stop=should_stop)


# ---- evaluation ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AcceptStats:
    """Acceptance of one engine run. ``accept_length`` is the engine's own measure (tokens emitted
    per request per SD iteration, bonus included, so a request's last iteration is cut at its
    ``max_new_tokens``); :attr:`mean_accepted_plus_one` counts every accepted draft token, as vLLM's
    spec-decode counters do (``1 + num_accepted_tokens / num_drafts``), so the two compare."""

    accept_length: float
    drafts: int  # request-iterations that verified a draft
    accepted: int  # draft tokens accepted over them
    outputs: dict[int, list[int]]

    @property
    def mean_accepted_plus_one(self) -> float:
        return 1.0 + self.accepted / self.drafts if self.drafts else 1.0


def engine_acceptance(target: Transformer, drafter: EagleDrafter, prompts: Sequence[Sequence[int]], *,
                      new_tokens: int, depth: int = 4, topk: int = 1, verify_tokens: int | None = None,
                      max_batch: int = 8) -> AcceptStats:
    """Run our engine greedily with a static ``depth_topk_verify`` draft (a chain by default) over
    ``prompts``; its acceptance and outputs (which must equal the target's own greedy outputs)."""
    from tltcore.policy.base import SDConfig, Static
    from tltreal.engine.engine import Engine
    from tltreal.engine.engine_config import EngineConfig

    config = SDConfig(depth, topk, verify_tokens or depth * topk)
    longest = max(len(p) for p in prompts)
    engine = Engine(target, Static(config), drafter,
                    EngineConfig(max_batch=max_batch, max_len=longest + new_tokens + 1,
                                 max_verify=config.verify_tokens, max_draft_nodes=max(1, (depth - 1) * topk)))
    for p in prompts:
        engine.add_request(list(p), new_tokens)
    result = engine.run()
    sd = result.decode_events[result.decode_events["depth"] > 0]
    return AcceptStats(result.mean_accept_length, int((sd["batch_size"] * sd["iterations"]).sum()),
                       int(sd["accepted"].sum()), result.outputs)


__all__ = ["FASTRL_WEIGHTS", "AcceptStats", "DrafterTrainer", "DrafterTrainerConfig", "LossParts", "PackedWindows",
           "TrainMetrics", "block_causal_mask", "drafter_loss", "engine_acceptance", "pack", "train_steps",
           "window_pairs"]
