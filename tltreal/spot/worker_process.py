"""The worker process of the real Spot Trainer (DESIGN §1, :mod:`tltreal.spot.trainer`).

One worker is one rollout instance: it holds a target (the current policy) and TLT's EAGLE
drafter, generates its share of a step's responses with an :class:`~tltreal.engine.engine.Engine`,
and, once released, trains the drafter in the step's bubble. It runs in its own process (started by the
coordinator with the ``spawn`` method: a fresh interpreter that shares nothing with the coordinator
but what the messages carry) and does one thing at a time, so it can never train while it generates.
Before it says :class:`Ready` it takes one scratch optimizer step (the first AdamW step of a process
imports ``torch._dynamo``, seconds that would otherwise come out of the first bubble).

The commands, the replies and the protocol (one :class:`Failed` reply on any exception,
:class:`Alive` heartbeats while busy): :mod:`tltreal.spot.messages`.

**Training session.** Starts from the latest committed checkpoint (:func:`load_latest`) with a
fresh :class:`~tltreal.rl.drafter_train.DrafterTrainer`. The worker keeps its own
:class:`~tltreal.spot.sample_buffer.SampleBuffer`, a mirror of the coordinator's: the coordinator sends
every sample it holds for the step and the previous one (TLT's one-step offset) with
:class:`Train` and each new response's sample as it streams in (:class:`AddSamples`); the worker
reads them between optimizer steps, so windows are drawn from everything finished so far (a
non-streaming session, ``Train.streaming=False``, trains on what it was given and stops when that
is empty: the repeatable "budget" mode).
Every ``checkpoint_every`` optimizer steps a selective (trainable weights only) checkpoint is
committed through :class:`~tltreal.spot.drafter_checkpoint.AsyncCheckpointer` (snapshot now, atomic
write in the background). Preemption is a ``multiprocessing.Event`` checked between optimizer
steps: the session stops after the step in progress; steps since the last commit are lost, as the
shared contract says; a write already in flight is completed (it is already a consistent snapshot
and takes milliseconds), so :class:`Trained` always means "nothing is being written any more". A
session that reaches ``max_train_steps`` ends on its own and commits what is pending.

Times are ``time.monotonic()`` stamps: one system-wide clock on Linux, so the coordinator can
compare them with its own.
"""

from __future__ import annotations

import queue
import time
import traceback
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from tltreal.spot import messages as msg
from tltreal.spot.sample_buffer import Sample

#: A busy worker that has sent nothing for this long sends ``Alive`` (:mod:`tltreal.spot.messages`), so the
#: coordinator can tell a long generation or training session from a hung worker.
HEARTBEAT_S = 5.0


# ---- the worker ------------------------------------------------------------------------------------
class ProtocolError(RuntimeError):
    """A command the worker cannot take in its current state."""


@dataclass
class WorkerProcess:
    """The worker's state between commands: target, drafter and the drafter version loaded."""

    config: msg.WorkerConfig
    replies: Connection
    preempt: Any  # multiprocessing.synchronize.Event
    commands: Any  # multiprocessing.Queue
    drafter_version: int = field(default=-1, init=False)
    _last_sent: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        from tltreal.model.transformer import Transformer
        from tltreal.spec_decode.proposers.eagle import EagleDrafter

        dtype = msg.DTYPES[self.config.dtype]
        self.target = Transformer(self.config.model_config).to(dtype).eval()
        self.drafter = EagleDrafter(self.target).to(dtype).eval()
        self._warm_up()

    def _warm_up(self) -> None:
        """One optimizer step of a scratch drafter on a scratch sample, before the worker says Ready.

        Why: the first AdamW of a process imports ``torch._dynamo`` (seconds on a CPU); paid inside
        the first bubble, it would eat the training time the Spot Trainer exists to use."""
        from tltreal.rl.drafter_train import DrafterTrainer
        from tltreal.spec_decode.proposers.eagle import EagleDrafter
        from tltreal.spot.sample_buffer import Window

        scratch = EagleDrafter(self.target).to(self.drafter.dtype)
        n = min(8, self.config.max_len)
        sample = Sample(torch.zeros(n, dtype=torch.long),
                        torch.zeros(n, self.config.model_config.hidden_size, dtype=self.drafter.dtype))
        DrafterTrainer(scratch, self.config.trainer).step([Window(sample, 0, n)])

    def send(self, message: msg.Reply) -> None:
        self.replies.send(message)
        self._last_sent = time.monotonic()

    def heartbeat(self) -> None:
        if time.monotonic() - self._last_sent > HEARTBEAT_S:
            self.send(msg.Alive(self.config.worker))

    # -- loading
    def load_policy(self, cmd: msg.LoadPolicy) -> msg.Loaded:
        """Copy the policy's weights into the target in place (the drafter shares its embedding and
        LM head by reference, so it sees the new ones too)."""
        from safetensors.torch import load_file

        state = load_file(cmd.path)
        missing, unexpected = self.target.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if self.config.model_config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise ValueError(f"policy weights {cmd.path} do not match the model config: missing "
                             f"{sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]}")
        return msg.Loaded(self.config.worker, "policy", -1, msg.weights_digest(dict(self.target.state_dict())))

    def load_drafter(self) -> msg.Loaded:
        """The latest committed checkpoint, or the initial drafter (version 0) while there is none."""
        from safetensors.torch import load_file

        from tltreal.spot.drafter_checkpoint import load_latest, restore

        latest = load_latest(self.config.checkpoint_dir, self.drafter)
        if latest is not None:
            restore(self.drafter, latest)
            self.drafter_version = latest.version
        else:
            initial = load_file(self.config.initial_drafter)
            params = dict(self.drafter.named_parameters())
            if set(initial) != set(params):
                raise ValueError(f"initial drafter {self.config.initial_drafter} has the wrong weights")
            with torch.no_grad():
                for name, value in initial.items():
                    params[name].copy_(value)
            self.drafter_version = 0
        return msg.Loaded(self.config.worker, "drafter", self.drafter_version, self.drafter_digest())

    def drafter_digest(self) -> str:
        return msg.weights_digest({n: p for n, p in self.drafter.named_parameters() if p.requires_grad})

    # -- generation
    def generate(self, cmd: msg.Generate) -> msg.Generated:
        """Run the share through one engine, streaming each response as it finishes."""
        from tltcore.policy.registry import make_policy
        from tltreal.engine.engine import Engine
        from tltreal.engine.engine_config import EngineConfig
        from tltreal.model.sampling import SamplingParams

        start = time.monotonic()
        if not cmd.requests:
            return msg.Generated(self.config.worker, 0, start, time.monotonic(), 0.0, 0, 0, 0)
        c = self.config
        engine = Engine(self.target, make_policy(c.sd_policy), self.drafter,
                        EngineConfig(max_batch=c.max_batch, max_len=c.max_len, eos_token_ids=c.eos_token_ids,
                                     record_hidden=True, step=cmd.step, worker=c.worker))
        rids = {engine.add_request(list(r.prompt), r.max_new_tokens,
                                   SamplingParams(temperature=r.temperature, seed=r.seed), group=r.group): r.rid
                for r in cmd.requests}
        engine.start()
        sent: set[int] = set()
        busy = True
        while busy:
            busy = engine.iterate()
            self.heartbeat()
            for erid in [k for k in engine.done if k not in sent]:
                sent.add(erid)
                self._stream(rids[erid], engine.done[erid])
        result = engine.finish()
        del engine  # the worker's memory is free: it is released
        sd = result.decode_events[result.decode_events["depth"] > 0]
        return msg.Generated(c.worker, len(cmd.requests), start, time.monotonic(),
                         result.mean_accept_length if len(sd) else 0.0, len(sd), int(sd["tokens"].sum()),
                         int(sd["batch_size"].sum()))

    def _stream(self, rid: int, req: Any) -> None:
        if req.hidden is None:
            raise RuntimeError("the engine recorded no hidden states (record_hidden)")
        self.send(msg.Finished(self.config.worker, rid, tuple(req.output), msg.wire_array(req.hidden),
                           time.monotonic()))

    # -- training
    def train(self, cmd: msg.Train) -> msg.Trained:
        """One preemptible training session (module docstring)."""
        from tltreal.rl.drafter_train import DrafterTrainer
        from tltreal.spot.drafter_checkpoint import AsyncCheckpointer
        from tltreal.spot.sample_buffer import SampleBuffer

        c = self.config
        start = time.monotonic()
        self.load_drafter()  # the latest committed drafter, not what a preempted session left
        trainer = DrafterTrainer(self.drafter, replace(c.trainer, seed=c.trainer.seed + 7919 * cmd.step,
                                                       max_steps=max(c.trainer.max_steps, 1)))
        buffer = SampleBuffer(keep_steps=c.keep_steps, window_tokens=c.window_tokens,
                            one_step_offset=c.trainer.one_step_offset)
        buffer.start_step(cmd.step)
        for s in cmd.samples:
            buffer.add(msg.from_wire(s))
        version, versions, losses = self.drafter_version, [], []
        windows = tokens = 0
        with AsyncCheckpointer(Path(c.checkpoint_dir), keep=c.keep_checkpoints) as checkpoints:
            while len(losses) < c.max_train_steps and not self.preempt.is_set():
                self.heartbeat()
                if cmd.streaming:
                    self._take_samples(buffer, wait=buffer.windows_available() == 0)
                if buffer.windows_available() == 0:
                    if not cmd.streaming:
                        break  # nothing to train on, and nothing more will come
                    continue
                m = trainer.train(buffer, 1, should_stop=self.preempt.is_set)
                if not m.steps:
                    continue
                losses.append(m.losses[0])
                windows, tokens = windows + m.windows, tokens + m.tokens
                if len(losses) % c.checkpoint_every == 0:
                    version += 1
                    checkpoints.save(self.drafter, version=version, step=cmd.step)
                    versions.append(version)
            end = time.monotonic()
            preempted = self.preempt.is_set() and len(losses) < c.max_train_steps
            if not preempted and len(losses) % c.checkpoint_every:  # ended on its own: commit what is pending
                version += 1
                checkpoints.save(self.drafter, version=version, step=cmd.step)
                versions.append(version)
        # Leaving the checkpointer waited for the write in flight: every version listed is on disk.
        return msg.Trained(c.worker, start, end, time.monotonic(), len(losses), windows, tokens, tuple(versions),
                       preempted, tuple(losses))

    def _take_samples(self, buffer: Any, *, wait: bool) -> None:
        """Add samples that arrived meanwhile (waiting briefly for one if the buffer is empty)."""
        timeout = 0.05 if wait else None
        while True:
            try:
                cmd = self.commands.get(timeout=timeout) if timeout else self.commands.get_nowait()
            except queue.Empty:
                return
            timeout = None
            if not isinstance(cmd, msg.AddSamples):
                raise ProtocolError(f"worker {self.config.worker} got {type(cmd).__name__} while training")
            for s in cmd.samples:
                buffer.add(msg.from_wire(s))

    # -- dispatch
    def handle(self, cmd: object) -> msg.Reply | None:
        if isinstance(cmd, msg.LoadPolicy):
            return self.load_policy(cmd)
        if isinstance(cmd, msg.LoadDrafter):
            return self.load_drafter()
        if isinstance(cmd, msg.Generate):
            return self.generate(cmd)
        if isinstance(cmd, msg.Train):
            return self.train(cmd)
        if isinstance(cmd, msg.AddSamples):  # late samples for a session that already stopped
            return None
        raise ProtocolError(f"worker {self.config.worker} got an unknown command {cmd!r}")


def worker_main(config: msg.WorkerConfig, commands: Any, replies: Connection, preempt: Any) -> None:
    """The process's entry point: serve commands until ``Shutdown``; one ``Failed`` on error."""
    import os

    torch.set_num_threads(1)
    try:
        worker = WorkerProcess(config, replies, preempt, commands)
        worker.send(msg.Ready(config.worker, os.getpid()))
        while not isinstance(cmd := commands.get(), msg.Shutdown):
            reply = worker.handle(cmd)
            if reply is not None:
                worker.send(reply)
    except BaseException as exc:
        first = (str(exc).splitlines() or [""])[0][:300]
        try:
            replies.send(msg.Failed(config.worker, f"{type(exc).__name__}: {first}", traceback.format_exc()))
        finally:
            replies.close()
        raise SystemExit(1) from None
    replies.close()


__all__ = ["HEARTBEAT_S", "ProtocolError", "WorkerProcess", "worker_main"]
