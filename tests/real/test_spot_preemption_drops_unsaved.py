"""A preempted real training session drops the work since its last checkpoint (tltreal.spot.worker_process).

The shared drafter-training contract (and the simulator's spot trainer, whose tests pin it) says a
preempted session loses the optimizer steps after its last committed checkpoint: preemption means the
rollout is over and the next step must start now, so nothing new may be written. A session that ends
on its own (it reached ``max_train_steps``) commits what is pending instead.

Why in-process: the rule is about one worker's session, and running it on a :class:`WorkerProcess`
in this process lets the test preempt it after an exact number of optimizer steps (the contract's
unit: preemption is checked between optimizer steps) instead of racing a rollout's wall clock.
"""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import replace
from multiprocessing import Pipe
from pathlib import Path

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltreal.rl.drafter_train import DrafterTrainer, DrafterTrainerConfig  # noqa: E402
from tltreal.spot.drafter_checkpoint import list_checkpoints, load_latest  # noqa: E402
from tltreal.spot.messages import Train, Trained, WorkerConfig, to_wire, weights_digest  # noqa: E402
from tltreal.spot.sample_buffer import target_sample  # noqa: E402
from tltreal.spot.worker_process import WorkerProcess  # noqa: E402

from .drafter_fixtures import progressions  # noqa: E402
from .tiny_models import TINY_V64  # noqa: E402

CFG = replace(TINY_V64, num_hidden_layers=1, max_position_embeddings=256)
EVERY = 5  # optimizer steps per committed checkpoint
PREEMPT_AT = 7  # two steps past the first commit: work the preempted session must not save
STEP = 1
_OPEN_PIPES: list[object] = []


def make_worker(folder: Path, max_train_steps: int) -> WorkerProcess:
    """A worker whose version-0 drafter is its freshly built one, checkpointing under ``folder``."""
    from safetensors.torch import save_file

    torch.manual_seed(0)  # the target's and drafter's initial weights: equal across the test's workers
    folder.mkdir(parents=True)
    config = WorkerConfig(worker=0, model_config=CFG, dtype="float64", sd_policy="static:2_1_2", max_batch=4,
                          max_len=64, eos_token_ids=(), trainer=DrafterTrainerConfig(lr=3e-3, seed=0),
                          checkpoint_dir=str(folder / "drafter"), initial_drafter=str(folder / "initial.safetensors"),
                          max_train_steps=max_train_steps, checkpoint_every=EVERY, window_tokens=16, keep_steps=2)
    receive, send = Pipe(duplex=False)
    worker = WorkerProcess(config, send, threading.Event(), queue.Queue())
    _OPEN_PIPES.append(receive)  # the coordinator's end stays open: the session's heartbeats must not break it
    save_file({n: p.detach().contiguous() for n, p in worker.drafter.named_parameters()}, config.initial_drafter)
    return worker


def session(worker: WorkerProcess, monkeypatch: pytest.MonkeyPatch, *, preempt_after: int | None) -> Trained:
    """One non-streaming session on fixed samples; ``preempt_after``: the coordinator's preemption
    arrives as that optimizer step finishes (None: never)."""
    samples = tuple(to_wire(target_sample(worker.target, p, STEP)) for p in progressions(6, 32, 7, CFG.vocab_size))
    real_step = DrafterTrainer.step
    done = 0

    def step_then_maybe_preempt(self: DrafterTrainer, windows: object) -> object:
        nonlocal done
        parts = real_step(self, windows)
        done += 1
        if preempt_after is not None and done == preempt_after:
            worker.preempt.set()
        return parts

    monkeypatch.setattr(DrafterTrainer, "step", step_then_maybe_preempt)
    return worker.train(Train(STEP, samples, streaming=False))


def test_a_preempted_session_commits_only_whole_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = make_worker(tmp_path / "preempted", max_train_steps=100)
    trained = session(worker, monkeypatch, preempt_after=PREEMPT_AT)
    assert trained.preempted and trained.steps == PREEMPT_AT
    # Only the checkpoint at step EVERY was committed; steps EVERY+1..PREEMPT_AT are lost.
    assert trained.versions == (1,)
    assert [v for v, _ in list_checkpoints(worker.config.checkpoint_dir)] == [1]
    # The next session (or rollout) starts from the drafter as it was after exactly EVERY steps.
    reference = make_worker(tmp_path / "reference", max_train_steps=EVERY)
    ended = session(reference, monkeypatch, preempt_after=None)
    assert not ended.preempted and ended.versions == (1,)
    loaded = worker.load_drafter()
    assert loaded.version == 1
    assert loaded.digest == reference.load_drafter().digest


def test_a_session_that_ends_on_its_own_commits_its_pending_steps(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The contrast: not preempted, the same PREEMPT_AT steps are all kept (version 2 after 7 steps)."""
    worker = make_worker(tmp_path / "ended", max_train_steps=PREEMPT_AT)
    trained = session(worker, monkeypatch, preempt_after=None)
    assert not trained.preempted and trained.steps == PREEMPT_AT and trained.versions == (1, 2)
    latest = load_latest(worker.config.checkpoint_dir)
    assert latest is not None and latest.version == 2
    trainables = {n: p for n, p in worker.drafter.named_parameters() if p.requires_grad}
    assert weights_digest(latest.weights) == weights_digest(trainables)  # the 7-step drafter, not the 5-step one
