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

from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import Field

from tltcore.config import MAX_SECONDS, Bool, ConfigModel, Float, Int, Why
from tltcore.errors import InputError
from tltcore.hardware import GPUSpec
from tltcore.model_shape import ModelShape

#: PPO epochs per step: RL recipes use 1-4; beyond 100 a "step" is no longer an RL step.
MAX_PPO_EPOCHS = 100


class RLPhaseConfig(ConfigModel):
    """Costs of the post-rollout phases (module docstring), the scenario's ``[rl]`` section.
    Defaults: a rule-based reward, veRL's GRPO with a reference policy and one PPO epoch, MFUs typical
    of FSDP training of 7-32B models on long sequences (not published by the paper: assumptions shown
    in every report). ``micro_batch_tokens``: tokens per GPU per micro-batch of the actor update that
    its memory check assumes (veRL's ``ppo_max_token_len_per_gpu``; :mod:`tltsim.rl.gpu_memory`)."""

    SECTION = "rl"

    reward_s_per_sample: Float = Field(0.01, ge=0, le=MAX_SECONDS)
    reward_parallelism: Int = Field(64, ge=1, le=10**7)
    reference: Bool = True
    old_log_prob: Bool = True
    ppo_epochs: Annotated[Int, Why("0 epochs never update the actor")] = Field(1, ge=1, le=MAX_PPO_EPOCHS)
    activation_recompute: Bool = True
    train_mfu: Float = Field(0.35, gt=0, le=1)
    forward_mfu: Float = Field(0.45, gt=0, le=1)
    weight_sync_overhead_s: Float = Field(3.0, ge=0, le=MAX_SECONDS)
    micro_batch_tokens: Int = Field(32768, ge=1, le=10**8)


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
                cfg: RLPhaseConfig | None = None) -> PhaseTimes:
    """The post-rollout phases of one step whose sequences are ``prompt_tokens + response_tokens``,
    on ``gpus`` GPUs of ``gpu`` (all of them train: the colocated layout); ``cfg`` None: the defaults."""
    cfg = cfg or RLPhaseConfig()
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
