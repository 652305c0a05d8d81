"""The real Spot Trainer: rollout workers as processes that train the drafter when released (DESIGN §1).

This is :mod:`tltsim.spot.analytic_trainer`'s mechanism run for real, on the shared drafter-training contract
(:mod:`tltcore.spot_coordinator`): a :class:`~tltcore.spot_coordinator.WorkerCoordinator`
moves each rollout worker GENERATING -> RELEASED -> TRAINING, a
:class:`~tltcore.spot_coordinator.DrafterTrainingPolicy` decides which released workers train,
and every trainer is preempted when the step's last response finishes.

**Processes.** :class:`SpotTrainer` (the coordinator, in the caller's process) starts ``n_workers``
:mod:`tltreal.spot.worker_process` processes (``spawn``: fresh interpreters, ``torch.set_num_threads(1)``
each) and talks to them with small messages (:mod:`tltreal.spot.messages`, with the protocol). Per RL step
(:meth:`SpotTrainer.run_step`):

1. the policy's weights are written atomically to ``workdir/policy.safetensors``; every worker
   loads them into its target in place, and loads the latest committed drafter checkpoint (the
   initial drafter while there is none). The drafter the rollout uses is therefore always a
   committed one, and the same on every worker.
2. requests are split over workers round-robin by group (a GRPO group stays on one worker, as its
   siblings share a prompt), deterministically: groups in order of first appearance.
3. every finished response streams back at once with its tokens and the target's hidden states;
   the coordinator turns it into a :class:`~tltreal.spot.sample_buffer.Sample` in its
   :class:`~tltreal.spot.sample_buffer.SampleBuffer` (last ``keep_steps`` steps, one-step offset) and
   forwards it to the training worker.
4. when a worker has finished its share it is released (its engine is gone); the policy may start
   training on it: the coordinator sends it the buffer's samples of this step and the previous
   one, and the worker trains from the latest committed checkpoint, committing a selective
   asynchronous checkpoint every ``checkpoint_every`` optimizer steps.
5. when the step's last response arrives the rollout is over: ``end_rollout`` preempts every
   trainer (a ``multiprocessing.Event`` each trainer checks between optimizer steps). ``run_step``
   returns once every worker has reported and every trainer has stopped with its last checkpoint
   write on disk (a write in flight at preemption is completed, not abandoned: it is a consistent
   snapshot already and takes milliseconds; steps after the last commit are lost, as the contract
   says).

**One trainer at a time.** Several released workers training together would need data-parallel
training across processes (gradient all-reduce). This machine has 2 CPU cores shared by everything,
so that would only slow each step down; ``training="spot"`` therefore uses
:class:`SingleWorkerSpotTraining`: the first released worker trains, later releases do not join.
The coordinator refuses a policy that starts a second concurrent trainer.

**Failures.** A worker's exception, a worker that dies (even mid-message) or silence longer than
``timeout_s`` is one :class:`WorkerError` naming the worker and what it was doing; the trainer then
closes (all worker processes end) and must be rebuilt. Checkpoints are atomic, so a fresh
:class:`SpotTrainer` on the same ``workdir`` resumes from the newest whole one.

**Determinism.** Splitting, sampling seeds and the SD policy (a static or elastic one by default)
are deterministic, so given the same policy weights and the same drafter a step produces the same
responses. With ``training="spot"`` how many training steps fit in a bubble, and which responses
have streamed in by then, depend on the wall clock, so the drafter reached is not repeatable, and
under sampling neither are later responses (SD is exact in distribution, not token for token;
greedy outputs never depend on the drafter). ``training="budget"`` (:class:`BudgetTraining`)
trades the bubble's timing for repeatability: worker 0 trains exactly ``max_train_steps`` steps on
data fixed in advance (the previous step's responses and its own share, in request order), not
preempted, so a seeded run repeats bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from tltcore.errors import InputError
from tltcore.model_config import ModelConfig
from tltcore.spot_coordinator import (
    DrafterTrainingPolicy,
    NeverTrain,
    WorkerCoordinator,
    WorkerState,
)
from tltreal.model.transformer import Transformer
from tltreal.model.weights import init_weights, save_model
from tltreal.spec_decode.proposers.eagle import EagleDrafter
from tltreal.spot.contract import (
    BudgetTraining,
    Response,
    SingleWorkerSpotTraining,
    SpotConfig,
    StepReport,
    WorkerError,
    WorkerReport,
)
from tltreal.spot.drafter_checkpoint import load_latest
from tltreal.spot.messages import (
    DTYPES,
    AddSamples,
    Alive,
    Failed,
    Finished,
    Generate,
    Generated,
    LoadDrafter,
    Loaded,
    LoadPolicy,
    Ready,
    Reply,
    RolloutRequest,
    Shutdown,
    Train,
    Trained,
    WorkerConfig,
    to_wire,
)
from tltreal.spot.sample_buffer import Sample, SampleBuffer
from tltreal.spot.worker_process import worker_main


# ---- processes -------------------------------------------------------------------------------------
@dataclass
class _Worker:
    """The coordinator's handle on one worker process."""

    index: int
    process: Any  # multiprocessing.process.BaseProcess
    commands: Any  # multiprocessing.Queue
    replies: Connection
    preempt: Any  # multiprocessing.synchronize.Event
    pid: int = -1
    doing: str = "starting"
    dead: bool = False

    def send(self, command: object) -> None:
        self.commands.put(command)


@dataclass
class _Step:
    """Bookkeeping of one run_step."""

    step: int
    t0: float
    requests: dict[int, RolloutRequest]
    responses: dict[int, Response] = field(default_factory=dict)
    generated: dict[int, Generated] = field(default_factory=dict)
    released: dict[int, float] = field(default_factory=dict)  # when the coordinator released each worker
    started: dict[int, float] = field(default_factory=dict)  # when it sent each trainer its Train
    trained: dict[int, Trained] = field(default_factory=dict)
    rollout_end: float | None = None

    @property
    def training(self) -> list[int]:
        return [w for w in self.started if w not in self.trained]


def split_requests(requests: Sequence[RolloutRequest], n_workers: int) -> list[tuple[RolloutRequest, ...]]:
    """Round-robin by group: the ``i``-th distinct group (in order of first appearance) goes to
    worker ``i % n_workers``; a group never spans workers."""
    order: dict[int, int] = {}
    for r in requests:
        order.setdefault(r.group, len(order))
    shares: list[list[RolloutRequest]] = [[] for _ in range(n_workers)]
    for r in requests:
        shares[order[r.group] % n_workers].append(r)
    return [tuple(s) for s in shares]


def _drafter_template(cfg: ModelConfig) -> EagleDrafter:
    """A drafter with the right parameter names and shapes and no target weights (meta device)."""
    with torch.device("meta"):
        return EagleDrafter(Transformer(cfg))


class SpotTrainer:
    """The coordinator (module docstring). Use as a context manager or call :meth:`close`.

    ``workdir`` holds ``policy.safetensors`` (the step's policy), ``initial-drafter.safetensors``
    (version 0: ``initial_drafter_state``, or a seeded random drafter) and ``drafter/`` (the
    committed checkpoints; if it already holds some, they win over the initial drafter: a fresh
    trainer resumes)."""

    def __init__(self, config: SpotConfig, workdir: Path, model_config: ModelConfig,
                 initial_drafter_state: dict[str, torch.Tensor] | None = None) -> None:
        self.config = config
        self.model_config = model_config
        self.workdir = Path(workdir)
        self.checkpoint_dir = self.workdir / "drafter"
        self.policy_path = self.workdir / "policy.safetensors"
        self.initial_path = self.workdir / "initial-drafter.safetensors"
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self._template = _drafter_template(model_config)
        self._target_shapes = {k: tuple(v.shape) for k, v in self._template.__dict__["_target"].state_dict().items()}
        self._write_initial(initial_drafter_state)
        policy: DrafterTrainingPolicy = {"spot": SingleWorkerSpotTraining(), "budget": BudgetTraining(),
                                         "never": NeverTrain()}[config.training]
        self.coordinator = WorkerCoordinator(config.n_workers, policy)
        self.buffer = SampleBuffer(keep_steps=config.keep_steps, window_tokens=config.window_tokens,
                                 one_step_offset=config.trainer.one_step_offset)
        self._samples: dict[int, dict[int, Sample]] = {}  # step -> rid -> the buffer's samples, by request
        self._workers: list[_Worker] = []
        self._closed = False
        self._last_message = time.monotonic()
        try:
            self._start_workers()
        except BaseException:
            self.close(kill=True)
            raise

    # -- setup
    def _write_initial(self, state: dict[str, torch.Tensor] | None) -> None:
        from safetensors.torch import save_file

        from tltcore.atomic import write_with

        dtype = DTYPES[self.config.dtype]
        shapes = {n: tuple(p.shape) for n, p in self._template.named_parameters()}
        if state is None:
            drafter = _drafter_template(self.model_config).to_empty(device="cpu")
            init_weights(drafter, self.config.seed)  # = random_drafter(target, seed=config.seed)
            state = {n: p.detach() for n, p in drafter.named_parameters()}
        if {n: tuple(t.shape) for n, t in state.items()} != shapes:
            raise InputError("initial drafter state does not match the drafter of this model config "
                             f"(expected {sorted(shapes)[:3]}...)", field="initial_drafter_state")
        tensors = {n: t.detach().to("cpu", dtype).contiguous() for n, t in state.items()}
        write_with(self.initial_path, lambda tmp: save_file(tensors, str(tmp)))

    def _worker_config(self, index: int) -> WorkerConfig:
        c = self.config
        return WorkerConfig(worker=index, model_config=self.model_config, dtype=c.dtype, sd_policy=c.sd_policy,
                            max_batch=c.max_batch, max_len=c.max_len, eos_token_ids=tuple(c.eos_token_ids),
                            trainer=c.trainer, checkpoint_dir=str(self.checkpoint_dir),
                            initial_drafter=str(self.initial_path), max_train_steps=c.max_train_steps,
                            checkpoint_every=c.checkpoint_every, window_tokens=c.window_tokens,
                            keep_steps=c.keep_steps, keep_checkpoints=c.keep_checkpoints, seed=c.seed)

    def _start_workers(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context(self.config.start_method)
        if self.config.start_method == "forkserver":
            # What every worker imports, once in the server (torch._dynamo: a process's first AdamW imports it).
            ctx.set_forkserver_preload(["tltreal.spot.worker_process", "tltreal.engine.engine",
                                        "tltreal.spot.drafter_checkpoint", "tltcore.policy.registry",
                                        "safetensors.torch", "torch._dynamo"])
        for i in range(self.config.n_workers):
            recv, send = ctx.Pipe(duplex=False)
            commands, preempt = ctx.Queue(), ctx.Event()
            proc = ctx.Process(target=worker_main, args=(self._worker_config(i), commands, send, preempt),
                               name=f"tlt-rollout-worker-{i}", daemon=True)
            proc.start()
            send.close()  # only the worker holds the write end: its death is end-of-file here
            self._workers.append(_Worker(i, proc, commands, recv, preempt))
        self._last_message = time.monotonic()
        for _ in self._workers:
            msg = self._receive(max(self.config.timeout_s, 120.0))
            if not isinstance(msg, Ready):
                raise WorkerError(getattr(msg, "worker", -1), f"expected Ready, got {type(msg).__name__}")
            self._workers[msg.worker].pid, self._workers[msg.worker].doing = msg.pid, "idle"

    # -- introspection
    @property
    def worker_pids(self) -> tuple[int, ...]:
        return tuple(w.pid for w in self._workers)

    def training_workers(self) -> frozenset[int]:
        """Workers the coordinator has training now (readable from another thread)."""
        return self.coordinator.workers(WorkerState.TRAINING)

    def latest_drafter_state(self) -> dict[str, torch.Tensor]:
        """The newest committed drafter's trainable tensors (the initial drafter while none exists)."""
        from safetensors.torch import load_file

        latest = load_latest(self.checkpoint_dir, self._template)
        return dict(latest.weights) if latest is not None else load_file(str(self.initial_path))

    def latest_version(self) -> int:
        latest = load_latest(self.checkpoint_dir, self._template)
        return latest.version if latest is not None else 0

    # -- messages
    def _receive(self, timeout_s: float | None = None) -> Reply:
        """The next reply from any worker; a failure, a death or silence is a :class:`WorkerError`."""
        limit = timeout_s or self.config.timeout_s
        while True:
            live = {w.replies: w for w in self._workers if not w.dead}
            if not live:
                raise WorkerError(-1, "no rollout worker is alive")
            for conn in wait(list(live), timeout=0.2):
                w = live[conn]
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    w.dead = True
                    w.process.join(1.0)
                    raise WorkerError(w.index, f"rollout worker {w.index} (pid {w.pid}) died (exit code "
                                      f"{w.process.exitcode}) while {w.doing}") from None
                self._last_message = time.monotonic()
                if isinstance(msg, Failed):
                    w.dead = True
                    raise WorkerError(w.index, f"rollout worker {w.index} failed while {w.doing}: {msg.message}",
                                      msg.traceback)
                if not isinstance(msg, Alive):  # a heartbeat only resets the silence clock
                    return msg
            silent = time.monotonic() - self._last_message
            if silent > limit:
                doing = ", ".join(f"{w.index}: {w.doing}" for w in self._workers)
                raise WorkerError(-1, f"no message from any rollout worker for {silent:.0f} s ({doing})")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this SpotTrainer is closed (a worker failed, or close() was called)")

    # -- a step
    def _validate(self, step: int, policy: Transformer, requests: Sequence[RolloutRequest]) -> None:
        if not requests:
            raise InputError("a step needs at least one request", field="requests")
        rids = [r.rid for r in requests]
        if len(set(rids)) != len(rids):
            raise InputError("request ids must be unique", field="requests.rid")
        for r in requests:
            if not r.prompt or r.max_new_tokens < 1 or len(r.prompt) + r.max_new_tokens > self.config.max_len:
                raise InputError(f"request {r.rid}: a non-empty prompt and 1 <= max_new_tokens with prompt + "
                                 f"max_new_tokens <= max_len {self.config.max_len}", field="requests")
        if step < self.coordinator.step:
            raise InputError(f"step {step} after step {self.coordinator.step}: steps must not go back",
                             field="step")
        shapes = {k: tuple(v.shape) for k, v in policy.state_dict().items()}
        if shapes != self._target_shapes:
            raise InputError("the policy's weights do not match the model config the workers were built for",
                             field="policy")

    def run_step(self, step: int, policy: Transformer, requests: Sequence[RolloutRequest]) -> StepReport:
        """One RL step's rollout with spot training in its bubble (module docstring)."""
        self._check_open()
        self._validate(step, policy, requests)
        try:
            return self._run_step(step, policy, list(requests))
        except BaseException:
            self.close(kill=True)  # a half-done step leaves workers in unknown states
            raise

    def _run_step(self, step: int, policy: Transformer, requests: list[RolloutRequest]) -> StepReport:
        self.coordinator.start_step(step)
        self.buffer.start_step(step)
        self._samples = {k: v for k, v in self._samples.items() if k > step - self.config.keep_steps}
        self._samples[step] = {}
        version, digest = self._load(policy)
        st = _Step(step, 0.0, {r.rid: r for r in requests})
        for w in self._workers:
            w.preempt.clear()
        st.t0 = time.monotonic()
        for w, share in zip(self._workers, split_requests(requests, len(self._workers)), strict=True):
            w.doing = "generating"
            w.send(Generate(step, share))
        while not self._step_done(st):
            self._on_message(st, self._receive())
        return self._report(st, version, digest)

    def _load(self, policy: Transformer) -> tuple[int, str]:
        """Every worker loads the policy and the latest committed drafter; the version and digest."""
        save_model(policy, self.policy_path)
        for w in self._workers:
            w.doing = "loading the policy and the drafter"
            w.send(LoadPolicy(str(self.policy_path)))
            w.send(LoadDrafter())
        drafters: dict[int, Loaded] = {}
        for _ in range(2 * len(self._workers)):
            msg = self._receive()
            if not isinstance(msg, Loaded):
                raise WorkerError(getattr(msg, "worker", -1), f"expected Loaded, got {type(msg).__name__}")
            if msg.what == "drafter":
                drafters[msg.worker] = msg
        loaded = {(m.version, m.digest) for m in drafters.values()}
        if len(loaded) != 1:
            raise WorkerError(-1, f"workers loaded different drafters: {sorted(loaded)}")
        return loaded.pop()

    def _step_done(self, st: _Step) -> bool:
        return (st.rollout_end is not None and len(st.generated) == len(self._workers)
                and not st.training)

    def _on_message(self, st: _Step, msg: Reply) -> None:
        if isinstance(msg, Finished):
            self._on_finished(st, msg)
        elif isinstance(msg, Generated):
            st.generated[msg.worker] = msg
            self._workers[msg.worker].doing = "idle"
            if st.rollout_end is None or self.config.training == "budget":  # released in time: it may train
                st.released[msg.worker] = time.monotonic()
                for w in self.coordinator.release(msg.worker).start:
                    self._start_training(st, w)
        elif isinstance(msg, Trained):
            st.trained[msg.worker] = msg
            self._workers[msg.worker].doing = "idle"
        else:
            raise WorkerError(getattr(msg, "worker", -1), f"unexpected {type(msg).__name__} during a step")

    def _on_finished(self, st: _Step, msg: Finished) -> None:
        req = st.requests[msg.rid]
        st.responses[msg.rid] = Response(msg.rid, msg.worker, req.prompt, msg.output, msg.t - st.t0)
        tokens = torch.tensor(req.prompt + msg.output, dtype=torch.long)
        sample = Sample(tokens, torch.from_numpy(msg.hidden), st.step, len(req.prompt))
        self.buffer.add(sample)
        self._samples[st.step][msg.rid] = sample
        if st.training and self.config.training == "spot":
            wire = to_wire(sample)
            for w in st.training:
                self._workers[w].send(AddSamples((wire,)))
        if len(st.responses) == len(st.requests):  # the step's last response: the rollout is over
            st.rollout_end = time.monotonic()
            if self.config.training == "spot":  # a budget session runs to its end (the step waits)
                for w in self.coordinator.end_rollout().preempt:
                    self._workers[w].preempt.set()

    def _start_training(self, st: _Step, w: int) -> None:
        if st.training:
            raise RuntimeError(f"policy {self.coordinator.policy.name} started worker {w} while worker "
                               f"{st.training[0]} trains: concurrent (data-parallel) trainers are not supported")
        samples = tuple(to_wire(s) for s in self._training_samples(st, w))
        st.started[w] = time.monotonic()
        self._workers[w].doing = "training"
        self._workers[w].send(Train(st.step, samples, streaming=self.config.training == "spot"))

    def _training_samples(self, st: _Step, w: int) -> list[Sample]:
        """What a session starts from, in request order: the previous step's responses (one-step
        offset) and this step's finished ones -- for a budget session only the trainer's own share,
        which does not depend on timing (the others' are still streaming in)."""
        previous = sorted(self._samples.get(st.step - 1, {}).items()) if self.config.trainer.one_step_offset else []
        current = sorted(self._samples[st.step].items())
        if self.config.training == "budget":
            current = [(rid, s) for rid, s in current if st.responses[rid].worker == w]
        return [s for _, s in previous + current]

    def _report(self, st: _Step, version: int, digest: str) -> StepReport:
        assert st.rollout_end is not None
        self.coordinator.end_rollout()  # a budget session has ended: nobody trains any more
        workers = tuple(self._worker_report(st, w) for w in range(len(self._workers)))
        committed = max((v for w in workers for v in w.committed_versions), default=version)
        tokens = sum(g.sd_tokens for g in st.generated.values())
        iters = sum(g.sd_request_iterations for g in st.generated.values())
        return StepReport(st.step, tuple(st.responses[r] for r in sorted(st.responses)), workers,
                          st.rollout_end - st.t0, version, committed, tokens / iters if iters else 0.0, digest)

    def _worker_report(self, st: _Step, w: int) -> WorkerReport:
        g, t = st.generated[w], st.trained.get(w)
        rel = lambda x: x - st.t0  # noqa: E731
        return WorkerReport(
            worker=w, requests=g.requests, released_s=rel(g.released_t),
            train_start_s=rel(t.start_t) if t else None, train_end_s=rel(t.end_t) if t else None,
            train_steps=t.steps if t else 0, train_windows=t.windows if t else 0,
            train_tokens=t.tokens if t else 0, committed_versions=t.versions if t else (),
            preempted=t.preempted if t else False, accept_length=g.accept_length, sd_iterations=g.sd_iterations,
            generate_start_s=rel(g.start_t), committed_s=rel(t.committed_t) if t else None,
            train_losses=t.losses if t else (), sd_tokens=g.sd_tokens, sd_request_iterations=g.sd_request_iterations,
            release_decided_s=rel(st.released[w]) if w in st.released else None,
            train_ordered_s=rel(st.started[w]) if w in st.started else None)

    # -- shutdown
    def close(self, *, kill: bool = False) -> None:
        """Stop every worker: asked to shut down and given a few seconds, or (``kill``, after a failure,
        when some may be busy or wedged) killed at once. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not kill:
            for w in self._workers:
                if w.process.is_alive():
                    w.send(Shutdown())
        deadline = time.monotonic() + (0.0 if kill else 5.0)
        for w in self._workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join(5.0)
        for w in self._workers:
            w.commands.cancel_join_thread()  # a dead reader must not hang interpreter exit
            w.commands.close()
            w.replies.close()

    def __enter__(self) -> SpotTrainer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


__all__ = ["SpotTrainer", "split_requests"]
