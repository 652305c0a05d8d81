"""The Spot Trainer in the simulator: drafter training on rollout workers the long tail leaves idle.

It runs the shared drafter-training contract (:mod:`tltcore.spot_coordinator`: the
:class:`~tltcore.spot_coordinator.WorkerCoordinator` state machine, a
:class:`~tltcore.spot_coordinator.DrafterTrainingPolicy`, :class:`TrainingSession`
checkpoints) over one step's worker finish times:

* a worker is released when it finishes its responses; the policy decides which released workers
  train (TLT: all, once ``min_workers`` are released). Training never overlaps a worker's own
  generation: it starts at or after its release.
* training is data-parallel over the training workers, ``samples_per_s`` each (29.6 samples/s with
  sequence packing, 13.3 without, the paper's reference); it needs a non-empty
  :class:`~tltsim.spot.coverage.DataCoverage`.
* every ``checkpoint_every`` samples a checkpoint is written, blocking training for
  ``checkpoint_s`` (selective asynchronous 0.097 s vs a full synchronous 0.893 s); it is committed
  when the write completes.
* when the step's rollout ends every training worker is preempted: samples since the last committed
  checkpoint, and a checkpoint still being written, are lost. A session also ends on its own after
  ``max_samples`` samples (TLT: at most 200 training steps per session).

:func:`inline_train` is the ``tlt-no-spot`` ablation: the same training as a serial stage on every
worker after the rollout. Pure Python and numpy; the RL-run controller turns the result into event
rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from tltcore.config import MAX_GPUS, MAX_SECONDS, Bool, ConfigModel, Float, Int
from tltcore.spot_coordinator import (
    Checkpoint,
    DrafterTrainingPolicy,
    TrainingSession,
    WorkerCoordinator,
    WorkerState,
)
from tltsim.spot.coverage import DataCoverage

_EPS = 1e-12


#: The paper's reference training throughput per worker, samples/s, with and without sequence packing.
PACKED_SAMPLES_PER_S, UNPACKED_SAMPLES_PER_S = 29.6, 13.3


class SpotTrainerConfig(ConfigModel):
    """Drafter training (module docstring, :mod:`tltsim.spot.coverage`), the scenario's ``[spot]``
    section. ``min_workers`` released workers start the Spot Trainer; each trains ``samples_per_s``
    samples per second (None: the paper's reference, 29.6 with ``packing``, 13.3 without); a session
    stops after ``max_samples`` samples (200 training steps x 4 samples); a checkpoint every
    ``checkpoint_every`` samples blocks training for ``selective_checkpoint_s`` (trainable weights,
    asynchronous) or ``full_checkpoint_s``. ``one_step_offset`` mixes the previous step's complete
    responses into the data buffer (DataCoverage); ``window_tokens`` is one training sample's length.
    ``bubble_budget``: samples per step of the ``speco-bubble`` preset's fixed-budget training
    (:meth:`bubble`). ``retrain_every``: the ``tlt-periodic`` preset retrains the drafter as a serial
    stage after every ``retrain_every``-th rollout (10: the cadence of TLT's released trainer)."""

    SECTION = "spot"

    min_workers: Int = Field(1, ge=1, le=MAX_GPUS)
    packing: Bool = True
    samples_per_s: Float | None = Field(None, ge=1e-6, le=1e6)
    max_samples: Int = Field(800, ge=1, le=10**9)  # 0: a session that trains nothing
    checkpoint_every: Int = Field(64, ge=1, le=10**9)
    selective_checkpoint: Bool = True
    selective_checkpoint_s: Float = Field(0.097, ge=0, le=MAX_SECONDS)
    full_checkpoint_s: Float = Field(0.893, ge=0, le=MAX_SECONDS)
    one_step_offset: Bool = True
    window_tokens: Int = Field(512, ge=1, le=10**7)
    bubble_budget: Int = Field(256, ge=1, le=10**9)  # 0: speco-bubble would train nothing
    retrain_every: Int = Field(10, ge=1, le=10**6)

    @property
    def rate(self) -> float:
        """Samples per second per training worker."""
        if self.samples_per_s is not None:
            return self.samples_per_s
        return PACKED_SAMPLES_PER_S if self.packing else UNPACKED_SAMPLES_PER_S

    @property
    def checkpoint_s(self) -> float:
        """Seconds one checkpoint blocks training (selective or full)."""
        return self.selective_checkpoint_s if self.selective_checkpoint else self.full_checkpoint_s

    def bubble(self) -> SpotTrainerConfig:
        """The fixed-budget, fully-checkpointed training of ``speco-bubble``: ``bubble_budget``
        samples per step, full checkpoints."""
        return self.model_copy(update={"max_samples": self.bubble_budget, "selective_checkpoint": False})


@dataclass(frozen=True)
class TrainingSegment:
    """One worker training from ``t_start`` to ``t_end``; ``preempted``: cut by the rollout's end."""

    worker: int
    t_start: float
    t_end: float
    preempted: bool


@dataclass(frozen=True)
class CheckpointWrite:
    """A checkpoint written from ``t_start`` to ``t_end`` (committed at ``t_end``)."""

    t_start: float
    t_end: float
    checkpoint: Checkpoint


@dataclass(frozen=True)
class TrainingResult:
    """One step's drafter training: the segments, the committed checkpoints, and the samples
    committed (``committed``), their worth to the drafter (``effective``, see DataCoverage) and the
    samples lost to preemption (``lost``)."""

    segments: tuple[TrainingSegment, ...]
    checkpoints: tuple[CheckpointWrite, ...]
    committed: int
    effective: float
    lost: float

    @property
    def worker_seconds(self) -> float:
        return sum(s.t_end - s.t_start for s in self.segments)


NO_TRAINING = TrainingResult((), (), 0, 0.0, 0.0)


def spot_train(release_times: np.ndarray, t_end: float, *, policy: DrafterTrainingPolicy, session: TrainingSession,
               cfg: SpotTrainerConfig, buffer: DataCoverage, step: int) -> TrainingResult:
    """Train on released workers from their release until ``t_end`` (the rollout's end) or until
    ``cfg.max_samples`` are committed. ``release_times[w]``: when worker ``w`` finished its responses
    (absolute seconds; at or after ``t_end`` means never released in time). ``session`` carries the
    committed drafter across steps and is advanced in place."""
    n = len(release_times)
    coord = WorkerCoordinator(n, policy)
    coord.start_step(step)
    order = [int(w) for w in np.argsort(release_times, kind="stable") if release_times[w] < t_end]
    started: dict[int, float] = {}
    segments: list[TrainingSegment] = []
    writes: list[CheckpointWrite] = []
    t = float(release_times[order[0]]) if order else t_end
    pending, pending_value, effective, committed = 0.0, 0.0, 0.0, 0
    i = 0
    done = cfg.max_samples == 0
    while t < t_end:
        while i < len(order) and release_times[order[i]] <= t + _EPS:  # releases due now
            plan = coord.release(order[i])
            if not done:  # a session that already ended starts no new segment
                for w in plan.start:
                    started.setdefault(w, t)
            i += 1
        nxt = float(release_times[order[i]]) if i < len(order) else t_end
        training = coord.workers(WorkerState.TRAINING)
        rate = len(training) * cfg.rate if buffer.windows_at(t) > 0 else 0.0
        if done or rate == 0:
            t = nxt
            continue
        target = min(cfg.checkpoint_every, cfg.max_samples - committed)
        t_full = t + (target - pending) / rate
        if t_full > nxt:  # the rate changes (a release) or the rollout ends first
            pending += (nxt - t) * rate
            pending_value += (nxt - t) * rate * buffer.value_at(0.5 * (t + nxt))
            t = nxt
            continue
        pending_value += (target - pending) * buffer.value_at(0.5 * (t + t_full))
        pending, t = float(target), t_full
        if t + cfg.checkpoint_s > t_end:  # the write would outlast the rollout: preempted during it
            t = t_end
            break
        session.train(target, step)
        if target < cfg.checkpoint_every:  # the session's last, short chunk
            session.flush(step)
        writes.append(CheckpointWrite(t, t + cfg.checkpoint_s, session.committed))
        t += cfg.checkpoint_s
        committed += target
        effective += pending_value
        pending, pending_value = 0.0, 0.0
        if committed >= cfg.max_samples:  # the session ends on its own: workers stop training
            done = True
            for w, t0 in sorted(started.items()):
                segments.append(TrainingSegment(w, t0, t, preempted=False))
            started.clear()
    coord.end_rollout()
    for w, t0 in sorted(started.items()):
        segments.append(TrainingSegment(w, t0, t_end, preempted=True))
    return TrainingResult(tuple(sorted(segments, key=lambda s: (s.t_start, s.worker))), tuple(writes), committed,
                          effective, pending)


def inline_train(t0: float, n_workers: int, *, session: TrainingSession, cfg: SpotTrainerConfig, buffer: DataCoverage,
                 step: int) -> TrainingResult:
    """``cfg.max_samples`` samples on every worker as a serial stage starting at ``t0`` (after the
    rollout: the whole step's data is there), checkpointing as it goes; never preempted."""
    if cfg.max_samples == 0:
        return NO_TRAINING
    rate = n_workers * cfg.rate
    t, left, writes = t0, cfg.max_samples, []
    while left > 0:
        chunk = min(cfg.checkpoint_every, left)
        t += chunk / rate
        session.train(chunk, step)
        if chunk < cfg.checkpoint_every:
            session.flush(step)
        writes.append(CheckpointWrite(t, t + cfg.checkpoint_s, session.committed))
        t += cfg.checkpoint_s
        left -= chunk
    segments = tuple(TrainingSegment(w, t0, t, preempted=False) for w in range(n_workers))
    value = buffer.value_at(t0) * cfg.max_samples
    return TrainingResult(segments, tuple(writes), cfg.max_samples, value, 0.0)
