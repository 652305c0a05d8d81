"""The real Spot Trainer (tltreal.spot.trainer, tltreal.spot.worker_process): rollout workers as processes
that train the drafter in the rollout's bubble.

What must hold: a worker trains only after it is released (never while it generates); every trainer
is preempted when the step's last response finishes; the next step rolls out with exactly the
drafter last committed; SD stays lossless whatever the drafter; the static drafter ("never") writes
no checkpoint; training in the bubbles raises the rollout's acceptance; a seeded step repeats; a
failing or dying worker is one clear error; and SIGKILLing the training worker at random moments
never leaves a checkpoint that does not load, so a fresh Spot Trainer resumes from the newest one.

Cost: one core. The main run uses ``spawn`` (the default); the others use ``forkserver`` (same
isolation, no per-worker re-import of torch), so the file runs in well under a minute.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import threading
import time
from dataclasses import replace

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from conftest import hang_seconds, load_factor  # noqa: E402
from tltcore.atomic import pid_alive  # noqa: E402
from tltcore.policy.base import NoSD  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.rl.drafter_train import DrafterTrainerConfig  # noqa: E402
from tltreal.spec_decode.proposers.eagle import random_drafter  # noqa: E402
from tltreal.spot.contract import SpotConfig, StepReport, WorkerError  # noqa: E402
from tltreal.spot.drafter_checkpoint import list_checkpoints, load_checkpoint, load_latest  # noqa: E402
from tltreal.spot.messages import RolloutRequest, weights_digest  # noqa: E402
from tltreal.spot.trainer import SpotTrainer, split_requests  # noqa: E402

from .drafter_fixtures import progressions, train_target  # noqa: E402
from .tiny_models import TINY_V64  # noqa: E402

CFG = replace(TINY_V64, max_position_embeddings=512)
SPOT = SpotConfig(n_workers=2, sd_policy="static:4_1_4", trainer=DrafterTrainerConfig(lr=3e-3, seed=0),
                  max_train_steps=1000, checkpoint_every=5, window_tokens=32, max_batch=8, max_len=256,
                  dtype="float64", timeout_s=hang_seconds(12))  # a hang guard: 60 s when idle
LONG, SHORT = 120, 20


@pytest.fixture(scope="module")
def target():
    """A tiny float64 target trained on arithmetic progressions (a few seconds): its next token
    depends on the context, so the drafter has something to learn from its hidden states."""
    torch.set_num_threads(1)
    return train_target(CFG, steps=100, batch=8, length=32, seed=0).to(torch.float64)


def requests(step: int, *, temperature: float = 0.0, groups: int = 8, long: int = LONG) -> list[RolloutRequest]:
    """``groups`` prompts x 2 responses. Odd groups (worker 1's share) hold one long response, so
    worker 0 is released early and worker 1 is the straggler whose tail is the bubble."""
    out = []
    for g, prompt in enumerate(progressions(groups, 6, 100 + step, CFG.vocab_size)):
        for k in range(2):
            n = long if g % 2 == 1 and k == 0 else SHORT
            out.append(RolloutRequest(2 * g + k, tuple(prompt), n, g, 1000 * step + 10 * g + k, temperature))
    return out


def greedy_reference(target, reqs: list[RolloutRequest]) -> dict[int, tuple[int, ...]]:
    """The target's own greedy outputs (no SD), in this process."""
    engine = Engine(target, NoSD(), None, EngineConfig(max_batch=8, max_len=SPOT.max_len))
    rids = {engine.add_request(list(r.prompt), r.max_new_tokens): r.rid for r in reqs}
    return {rids[k]: tuple(v) for k, v in engine.run().outputs.items()}


# ---- the main run: spawn, spot training over three steps --------------------------------------------
@pytest.fixture(scope="module")
def spot_run(target, tmp_path_factory):
    """Three greedy steps with spot training; each report with the committed drafter's digest after it."""
    workdir = tmp_path_factory.mktemp("spot")
    runs: list[tuple[StepReport, str]] = []
    with SpotTrainer(SPOT, workdir, CFG) as trainer:
        initial = weights_digest(trainer.latest_drafter_state())
        for step in range(3):
            report = trainer.run_step(step, target, requests(step))
            runs.append((report, weights_digest(trainer.latest_drafter_state())))
    for report, _ in runs:
        print(f"\nstep {report.step}: rollout {report.rollout_s:.2f} s, drafter v{report.drafter_version} -> "
              f"v{report.committed_version}, {report.train_steps} training steps in {report.bubble_train_s:.2f} s "
              f"of bubble, accept length {report.accept_length:.2f}")
    return runs, initial, workdir


def test_requests_are_split_round_robin_by_group():
    reqs = requests(0, groups=5)
    shares = split_requests(reqs, 2)
    assert [sorted({r.group for r in s}) for s in shares] == [[0, 2, 4], [1, 3]]
    assert sorted(r.rid for s in shares for r in s) == [r.rid for r in reqs]
    assert split_requests(list(reversed(reqs)), 2)[0][0].group == 4  # order of first appearance


def test_a_worker_trains_only_after_it_is_released(spot_run):
    runs, _, _ = spot_run
    trained = [w for report, _ in runs for w in report.workers if w.trained]
    assert trained, "no worker trained"
    for report, _ in runs:
        for w in report.workers:
            assert w.generate_start_s <= w.released_s
            own = max(r.finish_s for r in report.responses if r.worker == w.worker)
            if w.release_decided_s is not None:  # the coordinator released it after its last response
                assert own <= w.release_decided_s
            if w.trained:  # ordered to train only once released, and it began after it stopped generating
                assert w.release_decided_s is not None and w.release_decided_s <= w.train_ordered_s
                assert own <= w.released_s <= w.train_start_s


def test_trainers_are_preempted_when_the_last_response_finishes(spot_run):
    runs, _, _ = spot_run
    for report, _ in runs:
        assert max(r.finish_s for r in report.responses) <= report.rollout_s
        straggler = report.workers[1]
        assert not straggler.trained  # released only when the rollout was over
        trainer = report.workers[0]
        assert trainer.trained and trainer.train_steps > 0 and report.bubble_train_s > 0
        assert trainer.preempted
        # It stopped after the last response, within one optimizer step (plus scheduling on a busy core:
        # the 2 s are wall time, stretched by the machine's load).
        assert report.rollout_s <= trainer.train_end_s < report.rollout_s + 2.0 * load_factor()
        assert trainer.committed_s >= trainer.train_end_s  # the write in flight was finished, not torn


def test_the_next_step_rolls_out_with_the_committed_drafter(spot_run, target):
    runs, initial, workdir = spot_run
    assert runs[0][0].drafter_version == 0 and runs[0][0].drafter_digest == initial
    for (before, committed_digest), (after, _) in itertools.pairwise(runs):
        assert before.committed_version > before.drafter_version  # training committed something
        assert after.drafter_version == before.committed_version
        assert after.drafter_digest == committed_digest  # the weights the workers ran are the checkpoint's
    latest = load_latest(workdir / "drafter")
    assert latest is not None and latest.version == runs[-1][0].committed_version
    assert set(latest.weights) == {n for n, _ in random_drafter(target).named_parameters()}  # trainables only
    assert not latest.optimizer_state


def test_greedy_rollouts_are_lossless_with_any_drafter(spot_run, target):
    runs, _, _ = spot_run
    for report, _ in runs:
        reference = greedy_reference(target, requests(report.step))
        assert {r.rid: r.output for r in report.responses} == reference


def test_training_in_the_bubbles_raises_the_rollouts_acceptance(spot_run):
    runs, _, _ = spot_run
    first, last = runs[0][0], runs[-1][0]
    losses = [w.train_losses for report, _ in runs for w in report.workers if w.train_losses]
    start, end = sum(losses[0][:5]) / 5, sum(losses[-1][-5:]) / 5
    print(f"\nloss {start:.3f} -> {end:.3f}; accept length {first.accept_length:.2f} -> {last.accept_length:.2f}")
    assert end < 0.5 * start
    assert first.accept_length < 1.3  # the random initial drafter
    assert last.accept_length > first.accept_length + 0.5


# ---- the static drafter, repeatability, failures (forkserver) ----------------------------------------
FAST = replace(SPOT, start_method="forkserver")


def test_the_static_drafter_never_trains_and_a_seeded_step_repeats(target, tmp_path):
    state = {n: p.detach() for n, p in random_drafter(target, seed=5).named_parameters()}
    with SpotTrainer(replace(FAST, training="never"), tmp_path, CFG, state) as trainer:
        a = trainer.run_step(0, target, requests(0, temperature=1.0, groups=4, long=40))
        b = trainer.run_step(0, target, requests(0, temperature=1.0, groups=4, long=40))
    assert [(r.rid, r.worker, r.output) for r in a.responses] == [(r.rid, r.worker, r.output) for r in b.responses]
    assert len({r.output for r in a.responses}) > 1  # sampled, not all alike
    for report in (a, b):
        assert report.drafter_version == report.committed_version == 0
        assert report.drafter_digest == weights_digest(state)
        assert not any(w.trained for w in report.workers)
    assert list_checkpoints(tmp_path / "drafter") == []


def test_budget_training_repeats_bit_for_bit(target, tmp_path):
    """``training="budget"``: worker 0 trains exactly max_train_steps steps on data fixed in
    advance, so two seeded runs commit the same drafter and, sampling with it, the same responses."""
    config = replace(FAST, training="budget", max_train_steps=12)
    runs = []
    for run in ("a", "b"):
        with SpotTrainer(config, tmp_path / run, CFG) as trainer:
            steps = [trainer.run_step(s, target, requests(s, temperature=1.0, groups=4, long=40)) for s in (0, 1)]
            runs.append((steps, weights_digest(trainer.latest_drafter_state())))
    (a, digest_a), (b, digest_b) = runs
    assert digest_a == digest_b
    for x, y in zip(a, b, strict=True):
        assert [(r.rid, r.output) for r in x.responses] == [(r.rid, r.output) for r in y.responses]
        assert x.drafter_digest == y.drafter_digest and x.accept_length == y.accept_length
        trainer_report = x.workers[0]
        assert trainer_report.train_steps == 12 and not trainer_report.preempted
        assert trainer_report.committed_versions[-1] == x.committed_version
        assert trainer_report.train_losses == y.workers[0].train_losses
    assert a[1].drafter_version == a[0].committed_version > 0


def test_a_failing_worker_is_one_clear_error(target, tmp_path):
    bad = requests(0)
    bad[3] = replace(bad[3], prompt=(1, 2, CFG.vocab_size + 7))  # group 1: worker 1
    trainer = SpotTrainer(FAST, tmp_path, CFG)
    with pytest.raises(WorkerError, match=r"rollout worker 1 failed while generating: ValueError: prompt token id"):
        trainer.run_step(0, target, bad)
    assert not any(pid_alive(pid) for pid in trainer.worker_pids)  # closed: nothing left running
    with pytest.raises(RuntimeError, match="closed"):
        trainer.run_step(1, target, requests(1))


def test_a_dying_worker_is_one_clear_error(target, tmp_path):
    def kill_when_generating(trainer: SpotTrainer) -> None:
        deadline = time.monotonic() + hang_seconds(6)
        while not trainer.buffer.samples(0) and time.monotonic() < deadline:  # responses stream: generating
            time.sleep(0.002)
        os.kill(trainer.worker_pids[1], signal.SIGKILL)  # worker 1 still has its long response to finish

    with SpotTrainer(replace(FAST, training="never"), tmp_path, CFG) as trainer:
        threading.Thread(target=kill_when_generating, args=(trainer,)).start()
        with pytest.raises(WorkerError, match=r"rollout worker 1 \(pid \d+\) died \(exit code -9\) while generating"):
            trainer.run_step(0, target, requests(0, long=200))


# ---- SIGKILL during training --------------------------------------------------------------------------
def _kill_training_worker(trainer: SpotTrainer, delay: float, aim: bool, killed: list[int]) -> None:
    """Wait until a worker trains, then ``delay`` seconds; SIGKILL it then (``aim`` False) or as soon
    as a new file shows up in the checkpoint folder (``aim``: a temp file, i.e. inside an atomic
    write, or a new final name), if it still trains."""
    folder = trainer.checkpoint_dir
    deadline = time.monotonic() + hang_seconds(4)
    while not trainer.training_workers() and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(delay)
    seen = set(os.listdir(folder))
    while aim and trainer.training_workers() and time.monotonic() < deadline:
        now = set(os.listdir(folder))
        if now - seen:
            break
        seen = now
    for w in trainer.training_workers():
        os.kill(trainer.worker_pids[w], signal.SIGKILL)
        killed.append(w)


def test_killing_the_training_worker_never_leaves_a_checkpoint_that_fails_to_load(target, tmp_path):
    """Four trials, each a fresh Spot Trainer on the same workdir: a clean step (it must roll out
    with the newest checkpoint the last kill left), then a step whose training worker is SIGKILLed
    at a seeded random moment of its session, in two trials aimed at a checkpoint write
    (checkpoints every optimizer step). Every checkpoint on disk must load whole."""
    rng = random.Random(11)
    config = replace(FAST, checkpoint_every=1)
    template = {n: tuple(p.shape) for n, p in random_drafter(target).named_parameters()}
    kills, resumed, temps = 0, [], 0
    for trial, aim in enumerate((False, True, False, True)):
        before = load_latest(tmp_path / "drafter")
        with SpotTrainer(config, tmp_path, CFG) as trainer:
            clean = trainer.run_step(2 * trial, target, requests(2 * trial, groups=2, long=SHORT))
            expected = (before.version, weights_digest(before.weights)) if before else (0, clean.drafter_digest)
            assert (clean.drafter_version, clean.drafter_digest) == expected  # resumed from the newest checkpoint
            resumed.append(clean.drafter_version)
            killed: list[int] = []
            killer = threading.Thread(target=_kill_training_worker, args=(trainer, rng.uniform(0.02, 0.4), aim, killed))
            killer.start()
            try:
                trainer.run_step(2 * trial + 1, target, requests(2 * trial + 1, groups=4, long=2 * LONG))
            except WorkerError as exc:
                assert killed and "while training" in str(exc)
                kills += 1
            killer.join()
        temps += any(p.name.startswith(".") for p in (tmp_path / "drafter").iterdir())
        finals = list_checkpoints(tmp_path / "drafter")
        assert finals
        for _, path in finals:  # every file under a final name is whole
            ckpt = load_checkpoint(path)
            assert {n: tuple(t.shape) for n, t in ckpt.weights.items()} == template
        latest = load_latest(tmp_path / "drafter")
        assert latest is not None and latest.version == finals[-1][0]
    print(f"\nkill test: {kills} of 4 trials killed a training worker ({temps} inside a write); clean steps "
          f"resumed from {resumed}")
    assert kills >= 3
    assert resumed == sorted(resumed) and resumed[-1] > resumed[0]
