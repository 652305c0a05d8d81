"""The phases of a synchronous RL step after rollout, priced from the model, the cluster and the
step's sequences.

veRL and TLT colocate everything on one cluster: every GPU generates, then every GPU takes part in
the training phases (FSDP over the whole cluster), then the new weights are pushed into the rollout
engine. Per step, in order (DESIGN §2.2 "RL-step controller"):

* **reward** — ``reward_s_per_sample`` seconds per response over ``reward_parallelism`` workers
  (rule-based math checkers: milliseconds; sandboxed code or an LLM judge: seconds; users report
  reward at up to 40% of step time).
* **old log-probs** and **reference** — one forward of the actor, and one of the frozen reference
  policy, over every prompt + response (prefill-like), at ``forward_mfu`` of the cluster's peak.
* **actor update** — forward + backward (3x a forward's FLOPs, 4x with activation recomputation)
  over every sequence for ``ppo_epochs`` epochs, at ``train_mfu``. A forward of one sequence of
  length L costs ``L * 2 * params`` matmul FLOPs plus causal attention ``L(L+1)/2 * 4 * layers *
  q_dim``: at 16K-32K tokens attention is a large share, so it is counted per sequence, never from
  the mean length.
* **weight sync** — the actor's bf16 weights gathered from FSDP shards and loaded into the rollout
  engine: ``weight_bytes / interconnect`` plus ``weight_sync_overhead_s`` (engine wake-up, resharding,
  cache reset).

The rollout's share of the step is what these make of it, never assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tltcore.errors import InputError
from tltcore.hardware import GPUSpec
from tltcore.model_shape import ModelShape

#: PPO epochs per step: RL recipes use 1-4; beyond 100 a "step" is no longer an RL step.
MAX_PPO_EPOCHS = 100


@dataclass(frozen=True)
class RLPhaseConfig:
    """Costs of the post-rollout phases (module docstring). Defaults: a rule-based reward, veRL's
    GRPO with a reference policy and one PPO epoch, MFUs typical of FSDP training of 7-32B models
    on long sequences (not published by the paper: assumptions shown in every report)."""

    reward_s_per_sample: float = 0.01
    reward_parallelism: int = 64
    reference: bool = True
    old_log_prob: bool = True
    ppo_epochs: int = 1
    activation_recompute: bool = True
    train_mfu: float = 0.35
    forward_mfu: float = 0.45
    weight_sync_overhead_s: float = 3.0

    def __post_init__(self) -> None:
        for name in ("reward_s_per_sample", "weight_sync_overhead_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise InputError(f"must be >= 0, got {v}", field=f"rl.{name}")
        for name in ("train_mfu", "forward_mfu"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise InputError(f"must be in (0, 1], got {v}", field=f"rl.{name}")
        if self.reward_parallelism < 1:
            raise InputError(f"must be >= 1, got {self.reward_parallelism}", field="rl.reward_parallelism")
        if not 1 <= self.ppo_epochs <= MAX_PPO_EPOCHS:  # 0 would run RL steps that never update the actor
            raise InputError(f"must be in [1, {MAX_PPO_EPOCHS}] (0 epochs never update the actor), got "
                             f"{self.ppo_epochs}", field="rl.ppo_epochs")


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds of each post-rollout phase of one step (cluster-wide, one after the other)."""

    reward: float
    old_log_prob: float
    reference: float
    actor_update: float
    weight_sync: float

    @property
    def total(self) -> float:
        return self.reward + self.old_log_prob + self.reference + self.actor_update + self.weight_sync


def forward_flops(model: ModelShape, seq_lens: np.ndarray) -> float:
    """FLOPs of one forward over every sequence (weight matmuls + causal attention, per sequence)."""
    lens = np.asarray(seq_lens, dtype=np.float64)
    matmul = float(lens.sum()) * model.matmul_flops_per_token
    attention = float((lens * (lens + 1) / 2).sum()) * model.attention_flops_per_position
    return matmul + attention


def phase_times(model: ModelShape, gpu: GPUSpec, gpus: int, prompt_tokens: np.ndarray, response_tokens: np.ndarray,
                cfg: RLPhaseConfig = RLPhaseConfig()) -> PhaseTimes:
    """The post-rollout phases of one step whose sequences are ``prompt_tokens + response_tokens``,
    on ``gpus`` GPUs of ``gpu`` (all of them train: the colocated layout)."""
    if gpu.bf16_flops is None or gpu.interconnect_bytes_per_s is None:
        raise InputError(f"RL phases need analytic peaks; {gpu.name} has none", field="cluster.gpu")
    seqs = np.asarray(prompt_tokens, dtype=np.int64) + np.asarray(response_tokens, dtype=np.int64)
    fwd = forward_flops(model, seqs)
    peak = gpus * gpu.bf16_flops
    forward_s = fwd / (peak * cfg.forward_mfu)
    train_factor = 4.0 if cfg.activation_recompute else 3.0
    return PhaseTimes(
        reward=len(seqs) * cfg.reward_s_per_sample / cfg.reward_parallelism,
        old_log_prob=forward_s if cfg.old_log_prob else 0.0,
        reference=forward_s if cfg.reference else 0.0,
        actor_update=cfg.ppo_epochs * train_factor * fwd / (peak * cfg.train_mfu),
        weight_sync=model.weight_bytes / gpu.interconnect_bytes_per_s + cfg.weight_sync_overhead_s,
    )
