"""The real Spot Trainer's contract with its caller: its knobs (:class:`SpotConfig`), what a step
reports (:class:`Response`, :class:`WorkerReport`, :class:`StepReport`), the drafter-training
policies it adds to the shared ones (:class:`BudgetTraining`, :class:`SingleWorkerSpotTraining`;
the rest are :mod:`tltcore.spot_coordinator`'s) and its one error (:class:`WorkerError`). The
coordinator itself is :mod:`tltreal.spot.trainer`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tltcore.errors import InputError
from tltcore.policy.registry import make_policy
from tltreal.rl.drafter_train import DrafterTrainerConfig
from tltreal.spot.messages import DTYPES

TRAININGS = ("spot", "budget", "never")
START_METHODS = ("spawn", "forkserver")


@dataclass(frozen=True)
class Response:
    """A finished response: ``finish_s`` seconds after the rollout started. Its hidden states stay
    in the coordinator's :class:`~tltreal.spot.sample_buffer.SampleBuffer`
    (:attr:`~tltreal.spot.trainer.SpotTrainer.buffer`)."""

    rid: int
    worker: int
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    finish_s: float


@dataclass(frozen=True)
class WorkerReport:
    """One worker's step. Times are seconds since the rollout started: ``released_s`` when its share
    was done; ``train_start_s`` / ``train_end_s`` when its training session began (after loading the
    committed drafter) and stopped taking optimizer steps (None if it did not train);
    ``committed_s`` when its last checkpoint write was on disk. ``accept_length`` is over its SD
    iterations (0 if none). The coordinator's side: ``release_decided_s`` when it moved the worker to
    RELEASED (None: not within the rollout), ``train_ordered_s`` when it sent it training."""

    worker: int
    requests: int
    released_s: float
    train_start_s: float | None
    train_end_s: float | None
    train_steps: int
    train_windows: int
    train_tokens: int
    committed_versions: tuple[int, ...]
    preempted: bool
    accept_length: float
    sd_iterations: int
    generate_start_s: float = 0.0
    committed_s: float | None = None
    train_losses: tuple[float, ...] = ()
    sd_tokens: int = 0
    sd_request_iterations: int = 0
    release_decided_s: float | None = None
    train_ordered_s: float | None = None

    @property
    def trained(self) -> bool:
        return self.train_start_s is not None


@dataclass(frozen=True)
class StepReport:
    """One RL step's rollout and the drafter training in its bubble. ``drafter_version`` is the
    drafter the rollout used (``drafter_digest`` its weights), ``committed_version`` the latest after
    the step; ``accept_length`` is rollout-wide over SD iterations (tokens emitted per request per SD
    iteration, bonus included; 0 if no SD iteration ran)."""

    step: int
    responses: tuple[Response, ...]
    workers: tuple[WorkerReport, ...]
    rollout_s: float
    drafter_version: int
    committed_version: int
    accept_length: float
    drafter_digest: str = ""

    @property
    def bubble_train_s(self) -> float:
        """Worker-seconds of drafter training inside the rollout (before its last response)."""
        return sum(max(0.0, min(w.train_end_s, self.rollout_s) - w.train_start_s)
                   for w in self.workers if w.train_start_s is not None and w.train_end_s is not None)

    @property
    def train_steps(self) -> int:
        return sum(w.train_steps for w in self.workers)

    @property
    def committed_versions(self) -> tuple[int, ...]:
        return tuple(sorted(v for w in self.workers for v in w.committed_versions))


@dataclass(frozen=True)
class SpotConfig:
    """Spot Trainer knobs. ``training``: ``"spot"`` (TLT: train on the first released worker until
    preempted), ``"budget"`` (repeatable: worker 0 trains exactly ``max_train_steps`` steps once
    released, on its own share plus the previous step; the step waits for it) or ``"never"`` (the
    static drafter). ``sd_policy``: a :func:`tltcore.policy.registry.make_policy` spec; the default is
    deterministic (a 4-token chain once the running batch is <= 8). ``max_train_steps``: optimizer
    steps per session (TLT: <= 200); ``checkpoint_every``: optimizer steps per committed
    checkpoint; ``window_tokens`` / ``keep_steps``: the SampleBuffer's (``trainer.samples_per_step``
    windows per step). ``timeout_s``: silence from every worker longer than this is a failure.
    ``start_method``: ``"spawn"``, or ``"forkserver"`` (forks from a server that has imported the
    worker module once: the same isolation, much cheaper when many trainers are started, as tests do)."""

    n_workers: int = 2
    training: str = "spot"
    sd_policy: str = "elastic:8+static:4_1_4"
    trainer: DrafterTrainerConfig = field(default_factory=DrafterTrainerConfig)
    max_train_steps: int = 200
    checkpoint_every: int = 10
    window_tokens: int = 512
    keep_steps: int = 2
    max_batch: int = 16
    max_len: int = 1024
    eos_token_ids: tuple[int, ...] = ()
    seed: int = 0
    dtype: str = "float32"
    keep_checkpoints: int = 3
    timeout_s: float = 300.0
    start_method: str = "spawn"

    def __post_init__(self) -> None:
        if self.n_workers < 1:
            raise InputError(f"must be >= 1, got {self.n_workers}", field="spot.n_workers")
        if self.training not in TRAININGS:
            raise InputError(f"must be one of {TRAININGS}, got {self.training!r}", field="spot.training")
        make_policy(self.sd_policy)  # a bad spec is one InputError here, not a worker crash
        positive = {"max_train_steps": self.max_train_steps, "checkpoint_every": self.checkpoint_every,
                    "window_tokens": self.window_tokens, "keep_steps": self.keep_steps,
                    "max_batch": self.max_batch, "max_len": self.max_len}
        for name, value in positive.items():
            if value < 1:
                raise InputError(f"must be >= 1, got {value}", field=f"spot.{name}")
        if self.keep_checkpoints < 0:
            raise InputError(f"must be >= 0, got {self.keep_checkpoints}", field="spot.keep_checkpoints")
        if self.dtype not in DTYPES:
            raise InputError(f"must be one of {tuple(DTYPES)}, got {self.dtype!r}", field="spot.dtype")
        if not self.timeout_s > 0:
            raise InputError(f"must be > 0, got {self.timeout_s}", field="spot.timeout_s")
        if self.start_method not in START_METHODS:
            raise InputError(f"must be one of {START_METHODS}, got {self.start_method!r}", field="spot.start_method")


@dataclass(frozen=True)
class BudgetTraining:
    """Repeatable bubble training: worker ``worker`` (fixed, so the data it trains on is too) trains
    once released, exactly ``max_train_steps`` steps, and is not preempted (the step waits for it)."""

    worker: int = 0
    name: str = "budget"

    def spot_workers(self, step: int, released: frozenset[int], training: frozenset[int]) -> frozenset[int]:
        return frozenset({self.worker}) if self.worker in released and not training else frozenset()

    def trains_inline(self, step: int) -> bool:
        return False


@dataclass(frozen=True)
class SingleWorkerSpotTraining:
    """Spot training on one worker: the first worker released in a step trains (from its release to
    the end of the rollout); later releases do not join (:mod:`tltreal.spot.trainer`: no data-parallel
    training across processes on 2 cores)."""

    name: str = "spot-single"

    def spot_workers(self, step: int, released: frozenset[int], training: frozenset[int]) -> frozenset[int]:
        if training or not released:
            return frozenset()
        return frozenset({min(released)})

    def trains_inline(self, step: int) -> bool:
        return False


class WorkerError(RuntimeError):
    """A rollout worker failed, died or went silent; ``worker`` is its index (-1: unknown) and
    ``remote_traceback`` the worker's own traceback when it reported one."""

    def __init__(self, worker: int, message: str, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.worker = worker
        self.remote_traceback = remote_traceback
        if remote_traceback:
            self.add_note(f"traceback in rollout worker {worker}:\n{remote_traceback.rstrip()}")


__all__ = ["START_METHODS", "TRAININGS", "BudgetTraining", "Response", "SingleWorkerSpotTraining", "SpotConfig",
           "StepReport", "WorkerError", "WorkerReport"]
