"""What every strategy schedules and reports: one batch's rollout as the simulator ran it, the trainer's
price of a batch, and one row per RL step with its lag distribution.

A strategy never re-simulates decoding: it takes each batch's rollout (:class:`BatchRollout`, from
:class:`~tltsim.rollout.RolloutRun` with the run's SD policy) and the training phases of the batch it
trains (:func:`tltsim.rl.phases.phase_times`, the one home of their formulas), and places them on a
run clock by its own rules. That is why every strategy composes with every SD policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tltsim.rl.phases import PhaseTimes


@dataclass(frozen=True)
class BatchRollout:
    """One batch's rollout on the rollout pool, times in seconds since the rollout started.

    ``worker_finish``: when each worker finished its last response (``tp`` GPUs each); per response
    (workload order): ``group_ids``, ``prompt_tokens``, ``response_tokens`` and ``finish`` (None when
    the rollout did not track which response finished when: strategies that train whole batches
    never need it)."""

    step: int
    makespan: float
    worker_finish: np.ndarray
    tp: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    finish: np.ndarray | None = None
    #: a stopped rollout: per response the whole tokens it generated in this rollout (its response
    #: tokens when it finished); None when the rollout ran to its end
    generated: np.ndarray | None = None

    @property
    def gpus(self) -> int:
        return len(self.worker_finish) * self.tp

    def tail_idle(self, until: float) -> float:
        """GPU-seconds the rollout pool's workers sit idle between their last response and ``until``
        (the rollout's end), as :func:`tltcore.summary.summarize_step` counts ``gpu_idle_s``."""
        return float(np.maximum(until - self.worker_finish, 0.0).sum() * self.tp)


#: Runs one rollout of the given requests on the rollout pool with the run's SD policy, stopped by
#: the stop condition when one is given (:meth:`tltsim.rollout.RolloutRun.step`): the strategies with
#: partial rollout drive the rollouts themselves, since what a rollout holds depends on the last one.
Roll = Callable[[Any, Any], "BatchRollout"]

#: The trainer's price of a batch: ``(prompt_tokens, response_tokens) -> PhaseTimes`` on its pool.
Trainer = Callable[[np.ndarray, np.ndarray], PhaseTimes]


def train_seconds(p: PhaseTimes) -> float:
    """Reward, old log-probs, reference and actor update, one after the other (weight sync apart:
    strategies place it differently)."""
    return p.reward + p.old_log_prob + p.reference + p.actor_update


def colocated_end(start: float, rollout: float, p: PhaseTimes) -> float:
    """When a colocated step (``sync``, ``overprovision``, tail batching's rounds) that starts at
    ``start`` ends: its rollout, then each training phase and the weight sync, added one at a time in
    this order (the floats ``sync`` has always given; ``start + rollout + train_seconds(p)`` rounds
    differently)."""
    t = start + rollout
    for dt in (p.reward, p.old_log_prob, p.reference, p.actor_update, p.weight_sync):
        t += dt
    return t


#: :class:`StepRow`'s fields only tail batching sets (``strategy.csv`` columns only when set).
TAIL_FIELDS = ("round", "deferred_groups", "queued_groups", "discarded_tokens")


@dataclass(frozen=True)
class StepRow:
    """One RL step as a strategy ran it: its window ``[t_start, t_end]`` on the run clock (the end of
    the previous step's actor update and weight sync to the end of this one's), the rollout and
    training inside it, what was trained, the GPUs held and how long they sat idle (GPU-seconds
    attributed to this batch), and per trained sample its lag (``lag``: policy versions between the
    weights that generated it and the actor that trains it) and its response tokens (``tokens``)."""

    strategy: str
    step: int
    t_start: float
    t_end: float
    rollout_s: float
    train_s: float
    weight_sync_s: float
    trained_samples: int
    trained_tokens: int
    dropped_samples: int
    gpus: int
    gpu_idle_s: float
    lag: np.ndarray
    tokens: np.ndarray
    #: responses left unfinished (or finished but not yet trained) after the step, to continue later
    #: (partial rollout); 0 for the strategies that train whole rollouts
    carried_samples: int = 0
    #: per-token lag, for responses generated under several versions: ``piece_lag[i]`` versions
    #: behind for ``piece_tokens[i]`` tokens (None: every token at its sample's lag)
    piece_lag: np.ndarray | None = None
    piece_tokens: np.ndarray | None = None
    #: tail batching (:mod:`tltsim.strategy.tail_batching`): the round's kind (``short`` or ``long``), the
    #: prompt groups it deferred to the long-prompt queue, the queue's length after it, and the tokens
    #: generated and not trained (aborted responses, regenerated later or never); None for the other
    #: strategies, whose ``strategy.csv`` has no such columns
    round: str | None = None
    deferred_groups: int | None = None
    queued_groups: int | None = None
    discarded_tokens: int | None = None

    @property
    def step_s(self) -> float:
        return self.t_end - self.t_start

    def row(self) -> dict[str, object]:
        """The table row (``strategy.csv``): the fields, step seconds, throughput, idle share and lag."""
        out = {k: v for k, v in asdict(self).items() if k not in ("lag", "tokens", "piece_lag", "piece_tokens")
               and not (k in TAIL_FIELDS and v is None)}
        lag = np.asarray(self.lag, dtype=np.float64)
        out.update(step_s=self.step_s,
                   tokens_per_s=self.trained_tokens / self.step_s if self.step_s > 0 else float("nan"),
                   idle_fraction=self.gpu_idle_s / (self.gpus * self.step_s) if self.step_s > 0 else 0.0,
                   mean_lag=float(lag.mean()) if len(lag) else float("nan"),
                   max_lag=int(lag.max()) if len(lag) else 0)
        return out


def lag_rows(row: StepRow) -> list[dict[str, object]]:
    """The step's lag distribution (``lag.csv``): per lag, the trained samples and their tokens. A
    sample generated under one policy version has every token at the sample's lag, so the token shares
    weight the same lags by length. A response continued under newer weights (partial rollout) has its
    tokens at several lags: ``samples`` counts each sample at its oldest token's lag (its head
    off-policyness, AReaL's measure), ``tokens`` each token at the lag of the version that generated it."""
    lag = np.asarray(row.lag, dtype=np.int64)
    tok = np.asarray(row.tokens, dtype=np.int64)
    if len(lag) != len(tok):
        raise ValueError(f"{len(lag)} lags for {len(tok)} trained samples")
    piece_lag = lag if row.piece_lag is None else np.asarray(row.piece_lag, dtype=np.int64)
    piece_tok = tok if row.piece_tokens is None else np.asarray(row.piece_tokens, dtype=np.int64)
    if int(piece_tok.sum()) != int(tok.sum()):
        raise ValueError(f"{int(piece_tok.sum())} tokens by version for {int(tok.sum())} trained tokens")
    total = piece_tok.sum()
    out = []
    for value in np.unique(np.concatenate([lag, piece_lag])):
        mine, pieces = lag == value, piece_lag == value
        out.append({"strategy": row.strategy, "step": row.step, "lag": int(value), "samples": int(mine.sum()),
                    "tokens": int(piece_tok[pieces].sum()), "sample_share": float(mine.sum() / len(lag)),
                    "token_share": float(piece_tok[pieces].sum() / total) if total > 0 else float("nan")})
    return out
