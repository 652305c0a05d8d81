"""The drafter-training contract shared by the simulator and the real coordinator.

TLT trains its drafter on rollout workers the long tail leaves idle (DESIGN §1, Spot Trainer). This
module says, in pure Python, what that means, so the simulator's Spot Trainer and the real
multi-process coordinator implement one set of rules:

* **Worker states.** Every rollout worker is ``GENERATING`` at the start of a step. When it has
  finished its share of the step's responses and freed its memory it is ``RELEASED``. A
  :class:`DrafterTrainingPolicy` decides which released workers start ``TRAINING`` (TLT: all of
  them, once at least ``min_workers`` are released). A worker never trains while it generates.
* **Preemption.** When the step's last response finishes (the rollout ends), every training worker
  is preempted at once: the synchronous RL step needs the GPUs for its later phases, and the next
  step's rollout needs the workers back.
* **Checkpoints.** A training session commits :class:`Checkpoint` s as it goes (TLT: selective,
  trainable weights only, written asynchronously). Preemption keeps the last committed checkpoint;
  what was trained after it is lost. So a preemption loses at most the work since the last
  checkpoint, and a checkpoint either exists whole or not at all.
* **Use.** Trained weights reach the rollout engine at the next step (the drafter version the
  engines see changes only between steps).

:class:`WorkerCoordinator` is the state machine; :class:`TrainingSession` the checkpointing of one
training session. Neither imports SimPy, torch or vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from tltcore.errors import InputError


class WorkerState(StrEnum):
    GENERATING = "generating"
    RELEASED = "released"
    TRAINING = "training"


@dataclass(frozen=True)
class Checkpoint:
    """A committed drafter checkpoint. ``version`` is the drafter version it holds (the engines load
    it at the next step); ``trained_samples`` counts every sample the drafter has been trained on up
    to it; ``selective``: trainable weights only (TLT) rather than the full training state."""

    version: int
    step: int
    trained_samples: int
    selective: bool = True


@dataclass(frozen=True)
class TrainingPlan:
    """What the coordinator asks of the engines after an event: workers that start training now
    and workers whose training is preempted now."""

    start: frozenset[int] = frozenset()
    preempt: frozenset[int] = frozenset()


class DrafterTrainingPolicy(Protocol):
    """Decides when and where the drafter trains."""

    name: str

    def spot_workers(self, step: int, released: frozenset[int], training: frozenset[int]) -> frozenset[int]:
        """Which of the ``released`` (idle, not training) workers start training now."""
        ...

    def trains_inline(self, step: int) -> bool:
        """Whether the drafter trains as a serial stage after this step's rollout (the cluster
        waits for it), instead of or besides spot training."""
        ...


@dataclass(frozen=True)
class SpotTraining:
    """TLT's Spot Trainer: once at least ``min_workers`` workers are released, every released
    worker trains (later releases join at once); never inline."""

    min_workers: int = 1
    name: str = "spot"

    def __post_init__(self) -> None:
        if self.min_workers < 1:
            raise InputError(f"must be >= 1, got {self.min_workers}", field="min_workers")

    def spot_workers(self, step: int, released: frozenset[int], training: frozenset[int]) -> frozenset[int]:
        if training or len(released) >= self.min_workers:
            return released
        return frozenset()

    def trains_inline(self, step: int) -> bool:
        return False


@dataclass(frozen=True)
class InlineTraining:
    """Drafter training as an extra serial stage every ``every`` steps (the ``tlt-no-spot``
    ablation with ``every=1``); no spot training."""

    every: int = 1
    name: str = "inline"

    def __post_init__(self) -> None:
        if self.every < 1:
            raise InputError(f"must be >= 1, got {self.every}", field="every")

    def spot_workers(self, step: int, released: frozenset[int], training: frozenset[int]) -> frozenset[int]:
        return frozenset()

    def trains_inline(self, step: int) -> bool:
        return step % self.every == self.every - 1


@dataclass(frozen=True)
class NeverTrain:
    """A drafter trained once and never again (the static drafter)."""

    name: str = "never"

    def spot_workers(self, step: int, released: frozenset[int], training: frozenset[int]) -> frozenset[int]:
        return frozenset()

    def trains_inline(self, step: int) -> bool:
        return False


class WorkerCoordinator:
    """GENERATING -> RELEASED -> TRAINING for the rollout workers of one run (see module doc)."""

    def __init__(self, n_workers: int, policy: DrafterTrainingPolicy) -> None:
        if n_workers < 1:
            raise ValueError(f"a coordinator needs >= 1 worker, got {n_workers}")
        self.policy = policy
        self.step = -1
        self._state = [WorkerState.GENERATING] * n_workers

    def state(self, worker: int) -> WorkerState:
        return self._state[worker]

    def workers(self, state: WorkerState) -> frozenset[int]:
        return frozenset(i for i, s in enumerate(self._state) if s is state)

    def start_step(self, step: int) -> None:
        """Every worker generates again. Training must have been preempted by ``end_rollout``."""
        if self.workers(WorkerState.TRAINING):
            raise RuntimeError("a step cannot start while workers still train (end_rollout first)")
        self.step = step
        self._state = [WorkerState.GENERATING] * len(self._state)

    def release(self, worker: int) -> TrainingPlan:
        """``worker`` finished its responses: it is released; the policy may start training."""
        if self._state[worker] is not WorkerState.GENERATING:
            raise RuntimeError(f"worker {worker} is {self._state[worker]}, not generating")
        self._state[worker] = WorkerState.RELEASED
        start = self.policy.spot_workers(self.step, self.workers(WorkerState.RELEASED),
                                         self.workers(WorkerState.TRAINING))
        for w in start:
            if self._state[w] is not WorkerState.RELEASED:
                raise RuntimeError(f"policy {self.policy.name} tried to train on worker {w} ({self._state[w]})")
            self._state[w] = WorkerState.TRAINING
        return TrainingPlan(start=frozenset(start))

    def end_rollout(self) -> TrainingPlan:
        """The step's last response finished: preempt every training worker."""
        preempt = self.workers(WorkerState.TRAINING)
        self._state = [WorkerState.RELEASED if s is WorkerState.TRAINING else s for s in self._state]
        return TrainingPlan(preempt=preempt)


@dataclass
class TrainingSession:
    """Checkpointing of drafter training: commit every ``checkpoint_every`` samples; preemption
    keeps only what was committed.

    ``committed`` is the last checkpoint (the drafter the engines load next step); samples trained
    after it are ``pending`` until the next commit."""

    committed: Checkpoint
    checkpoint_every: int = 64
    selective: bool = True
    pending: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.checkpoint_every < 1:
            raise InputError(f"must be >= 1, got {self.checkpoint_every}", field="checkpoint_every")

    def train(self, samples: int, step: int) -> list[Checkpoint]:
        """Train on ``samples`` more samples; returns the checkpoints committed meanwhile."""
        if samples < 0:
            raise ValueError(f"samples must be >= 0, got {samples}")
        out = []
        self.pending += samples
        while self.pending >= self.checkpoint_every:
            self.pending -= self.checkpoint_every
            out.append(self._commit(self.checkpoint_every, step))
        return out

    def flush(self, step: int) -> Checkpoint | None:
        """Commit what is pending (training ended on its own, not preempted)."""
        if self.pending == 0:
            return None
        n, self.pending = self.pending, 0
        return self._commit(n, step)

    def preempt(self) -> int:
        """Stop now: pending samples are lost; returns how many."""
        lost, self.pending = self.pending, 0
        return lost

    def _commit(self, samples: int, step: int) -> Checkpoint:
        c = self.committed
        self.committed = Checkpoint(version=c.version + 1, step=step, trained_samples=c.trained_samples + samples,
                                    selective=self.selective)
        return self.committed
