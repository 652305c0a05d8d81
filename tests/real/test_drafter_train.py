"""Online EAGLE drafter training (tltreal.rl.drafter_train) and its checkpoints (tltreal.spot.drafter_checkpoint).

What must hold: training runs the arithmetic the engine runs (the cache-free forward equals the
cached one) on the pairs the engine feeds; packing changes nothing but speed; training lowers the
loss and raises the engine's measured accept length on held-out prompts, losslessly; the buffer
keeps two steps and draws with the one-step offset within its window limits; a checkpoint holds
the drafter's trainables only and is never seen half-written, even when the writer is SIGKILLed.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

from tltcore.errors import InputError  # noqa: E402
from tltcore.policy.base import NoSD  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.model.transformer import padded_causal_mask  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.rl.drafter_train import (  # noqa: E402
    DrafterTrainer,
    DrafterTrainerConfig,
    drafter_loss,
    engine_acceptance,
    pack,
    train_steps,
    window_pairs,
)
from tltreal.spec_decode.proposers.eagle import random_drafter  # noqa: E402
from tltreal.spot.drafter_checkpoint import (  # noqa: E402
    AsyncCheckpointer,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    restore,
    save_checkpoint,
)
from tltreal.spot.sample_buffer import Sample, SampleBuffer, Window, target_sample  # noqa: E402

from .drafter_fixtures import KILL_CFG, progressions  # noqa: E402
from .tiny_models import MICRO  # noqa: E402

SMALL = replace(MICRO, max_position_embeddings=256)
HERE = Path(__file__).resolve().parent
TRAIN = DrafterTrainerConfig(lr=3e-3, seed=0)


def _small(dtype=torch.float64):
    target = random_model(SMALL, seed=0, dtype=dtype)
    return target, random_drafter(target, seed=1)


def _random_sample(target, n: int, seed: int, step: int = 0) -> Sample:
    gen = torch.Generator().manual_seed(seed)
    return target_sample(target, torch.randint(0, target.cfg.vocab_size, (n,), generator=gen), step)


# ---- training runs the engine's arithmetic on the engine's pairs ---------------------------------
@pytest.mark.parametrize("start", [0, 5])
def test_training_forward_equals_the_cached_draft_forward(start):
    """float64: forward_train over a window == draft_forward over the same pairs on a fresh cache."""
    target, drafter = _small()
    sample = _random_sample(target, 20, 0)
    b = pack([Window(sample, start, 20)])
    logits, feats = drafter.forward_train(b.tokens, b.feats, b.positions, b.mask)
    n = 20 - start
    zero = torch.zeros(1, dtype=torch.long)
    ref_logits, ref_feats = drafter.draft_forward(b.tokens, b.feats, b.positions, drafter.new_cache(1, n), zero,
                                                  zero, padded_causal_mask(torch.tensor([n]), n))
    assert torch.allclose(logits, ref_logits, rtol=0, atol=1e-12)
    assert torch.allclose(feats, ref_feats, rtol=0, atol=1e-12)


def test_window_pairs_are_token_j_with_the_hidden_state_before_it():
    """Pair j = (t_j, h_{j-1}) at position j, h_{-1} = 0, predicting h_j (tltreal.spec_decode.proposers.base)."""
    target, _ = _small()
    s = _random_sample(target, 12, 1)
    tokens, feats, positions, want = window_pairs(Window(s, 0, 12))
    assert torch.equal(tokens, s.tokens) and torch.equal(positions, torch.arange(12))
    assert torch.equal(feats[0], torch.zeros_like(feats[0])) and torch.equal(feats[1:], s.hidden[:-1])
    assert torch.equal(want, s.hidden)
    tokens, feats, positions, want = window_pairs(Window(s, 4, 9))
    assert torch.equal(tokens, s.tokens[4:9]) and torch.equal(positions, torch.arange(4, 9))
    assert torch.equal(feats, s.hidden[3:8]) and torch.equal(want, s.hidden[4:9])


def test_loss_is_smooth_l1_on_the_next_hidden_state_plus_a_tenth_of_soft_cross_entropy():
    """Recomputed independently: torch's SmoothL1 and its cross-entropy with probability targets."""
    target, drafter = _small()
    batch = pack([Window(_random_sample(target, 14, 3), 0, 14)])
    parts = drafter_loss(drafter, batch)
    logits, pred = drafter.forward_train(batch.tokens, batch.feats, batch.positions, batch.mask)
    p_target = target.lm_head(batch.target_hidden[0]).softmax(-1)
    hidden = torch.nn.functional.smooth_l1_loss(pred[0], batch.target_hidden[0], reduction="none").mean(-1)
    ce = torch.nn.functional.cross_entropy(logits[0], p_target, reduction="none")
    assert torch.allclose(parts.per_pair, 1.0 * hidden + 0.1 * ce, rtol=0, atol=1e-12)
    assert float(parts.total.detach()) == pytest.approx(float((hidden + 0.1 * ce).mean().detach()), abs=1e-12)


def test_training_leaves_the_frozen_target_without_gradients():
    target, drafter = _small()
    parts = drafter_loss(drafter, pack([Window(_random_sample(target, 10, 2), 0, 10)]))
    parts.total.backward()
    assert all(p.grad is None for p in target.parameters())
    assert all(p.grad is not None for p in drafter.parameters())


# ---- sequence packing ------------------------------------------------------------------------------
def test_packed_loss_and_gradients_equal_per_window_ones():
    target, drafter = _small()
    windows = [Window(_random_sample(target, n, 10 + n), a, n) for n, a in ((9, 0), (23, 4), (5, 0), (31, 11))]
    packed = drafter_loss(drafter, pack(windows))
    alone = [drafter_loss(drafter, pack([w])) for w in windows]
    per_pair = torch.cat([a.per_pair for a in alone])
    assert float((packed.per_pair - per_pair).abs().max().detach()) <= 1e-12
    assert float(packed.per_pair.sum().detach()) == pytest.approx(float(per_pair.sum().detach()), rel=0, abs=1e-9)
    packed.per_pair.sum().backward()
    packed_grads = [p.grad.clone() for p in drafter.parameters()]
    drafter.zero_grad()
    sum(a.per_pair.sum() for a in alone).backward()
    for g, p in zip(packed_grads, drafter.parameters(), strict=True):
        assert torch.allclose(g, p.grad, rtol=0, atol=1e-10)
    assert pack(windows).tokens.shape == (1, sum(len(w) for w in windows))  # no padding


# ---- the SampleBuffer --------------------------------------------------------------------------------
def _buffer(**kw) -> tuple[SampleBuffer, object]:
    target, _ = _small(torch.float32)
    return SampleBuffer(**kw), target


def test_buffer_draws_half_from_the_previous_step_with_the_one_step_offset():
    buf, target = _buffer(window_tokens=8)
    buf.start_step(0)
    for i in range(4):
        buf.add(_random_sample(target, 8, i, step=0))
    buf.start_step(1)
    for i in range(4):
        buf.add(_random_sample(target, 8, 10 + i, step=1))
    rng = np.random.default_rng(0)
    for _ in range(20):
        steps = sorted(w.sample.step for w in buf.draw(4, rng))
        assert steps == [0, 0, 1, 1]
    no_offset = SampleBuffer(window_tokens=8, one_step_offset=False)
    no_offset.start_step(1)
    no_offset.add(_random_sample(target, 8, 0, step=1))
    assert [w.sample.step for w in no_offset.draw(4, rng)] == [1]


def test_buffer_falls_back_to_the_previous_step_and_keeps_two_steps():
    buf, target = _buffer(window_tokens=8)
    buf.start_step(3)
    buf.add(_random_sample(target, 16, 0, step=3))
    buf.start_step(4)  # nothing of step 4 finished yet: the offset still gives data to train on
    assert buf.windows_available() == 2
    assert {w.sample.step for w in buf.draw(4, np.random.default_rng(0))} == {3}
    buf.start_step(5)  # step 3 is older than the last two steps: dropped
    assert buf.windows_available() == 0 and buf.draw(4, np.random.default_rng(0)) == []
    with pytest.raises(ValueError, match="outside"):
        buf.add(_random_sample(target, 4, 1, step=3))
    off = SampleBuffer(one_step_offset=False)
    off.start_step(1)
    off.start_step(2)
    assert off.windows_available() == 0


def test_windows_are_at_most_window_tokens_and_a_step_at_most_samples_per_step():
    buf, target = _buffer()  # defaults: 512-token windows
    for n in (1300, 40, 700, 512, 3):
        buf.add(_random_sample(target, n, n))
    windows = buf.windows(0)
    assert [len(w) for w in windows] == [512, 512, 276, 40, 512, 188, 512, 3]  # aligned, ceil(n / 512) each
    assert all(w.start % 512 == 0 for w in windows)
    rng = np.random.default_rng(0)
    for _ in range(5):
        drawn = buf.draw(DrafterTrainerConfig().samples_per_step, rng)
        assert len(drawn) == 4 and len({(id(w.sample), w.start) for w in drawn}) == 4
    metrics = train_steps(random_drafter(target, seed=0), buf, 1, DrafterTrainerConfig(lr=1e-3))
    assert metrics.steps == 1 and metrics.windows == 4 and metrics.tokens <= 4 * 512
    assert DrafterTrainerConfig().samples_per_step == 4 and DrafterTrainerConfig().window_tokens == 512


def test_training_is_deterministic_given_the_seed_and_preemptible():
    buf, target = _buffer(window_tokens=16)
    for i in range(6):
        buf.add(_random_sample(target, 30, i))
    runs = []
    for seed in (0, 0, 1):
        drafter = random_drafter(target, seed=5)
        m = train_steps(drafter, buf, 4, DrafterTrainerConfig(lr=1e-3, seed=seed))
        runs.append((m.losses, torch.cat([p.detach().flatten() for p in drafter.parameters()])))
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])
    assert runs[0][0] != runs[2][0]
    calls = iter([False, False, True])
    m = train_steps(random_drafter(target), buf, 10, DrafterTrainerConfig(lr=1e-3), should_stop=lambda: next(calls))
    assert m.steps == 2 and m.preempted
    capped = train_steps(random_drafter(target), buf, 10, DrafterTrainerConfig(lr=1e-3, max_steps=3))
    assert capped.steps == 3 and not capped.preempted  # a session is at most max_steps (TLT: 200)


# ---- training improves acceptance (trained target) -------------------------------------------------
@pytest.fixture(scope="module")
def trained(progression_target):
    """A target trained on progressions (the session's), two RL steps of its greedy rollouts in a
    buffer, and a drafter trained on them; held-out prompts come from another seed."""
    target = progression_target
    buf = SampleBuffer()
    for step in (0, 1):
        buf.start_step(step)
        prompts = [p[:8] for p in progressions(16, 8, seed=100 + step)]
        engine = Engine(target, NoSD(), config=EngineConfig(max_batch=16, max_len=48))
        for p in prompts:
            engine.add_request(p, 40)
        for rid, out in engine.run().outputs.items():  # finished responses of this step's rollout
            buf.add(target_sample(target, prompts[rid] + out, step))
    drafter = random_drafter(target, seed=3)
    trainer = DrafterTrainer(drafter, TRAIN)
    t0 = time.perf_counter()
    metrics = trainer.train(buf, 150)
    return target, drafter, metrics, time.perf_counter() - t0


def test_training_lowers_the_loss(trained):
    _, _, m, seconds = trained
    first, last = np.mean(m.losses[:10]), np.mean(m.losses[-10:])
    print(f"\ndrafter training: loss {first:.3f} -> {last:.3f} over {m.steps} steps, {seconds:.1f} s, "
          f"{m.samples_per_s:.0f} windows/s")
    assert last < 0.3 * first
    assert np.mean(m.hidden_losses[-10:]) < np.mean(m.hidden_losses[:10])
    assert np.mean(m.ce_losses[-10:]) < 0.3 * np.mean(m.ce_losses[:10])


def test_training_raises_the_engines_accept_length_losslessly(trained):
    target, drafter, _, _ = trained
    held_out = [p[:8] for p in progressions(6, 8, seed=999)]
    good = engine_acceptance(target, drafter, held_out, new_tokens=40, depth=4)
    bad = engine_acceptance(target, random_drafter(target, seed=3), held_out, new_tokens=40, depth=4)
    print(f"\naccept length (4_1_4, held out): trained {good.accept_length:.2f}, random {bad.accept_length:.2f}")
    assert good.outputs == bad.outputs  # both are the target's own greedy output
    assert bad.accept_length < 1.3
    assert good.accept_length > 3.0


# ---- checkpoints ------------------------------------------------------------------------------------
def _trainables(drafter) -> dict[str, tuple[int, ...]]:
    return {n: tuple(p.shape) for n, p in drafter.named_parameters()}


def test_checkpoint_holds_only_the_drafters_trainables_and_round_trips(tmp_path):
    target, drafter = _small(torch.float32)
    buf = SampleBuffer(window_tokens=16)
    buf.add(_random_sample(target, 40, 0))
    trainer = DrafterTrainer(drafter, DrafterTrainerConfig(lr=1e-3))
    trainer.train(buf, 3)
    path = save_checkpoint(drafter, tmp_path, version=7, step=trainer.steps_done, optimizer=trainer.optimizer)
    ckpt = load_checkpoint(path)
    assert path.name == "drafter-v00000007.safetensors" and (ckpt.version, ckpt.step) == (7, 3)
    assert {n: tuple(t.shape) for n, t in ckpt.weights.items()} == _trainables(drafter)
    target_names = set(target.state_dict())
    assert not target_names & set(ckpt.weights)
    assert not any(k.startswith(("model.", "lm_head", "embed")) for k in ckpt.weights)
    assert set(ckpt.optimizer_state) == set(ckpt.weights)
    # restored drafter + optimizer continue exactly like the original
    copy = random_drafter(target, seed=9)
    copy_trainer = DrafterTrainer(copy, DrafterTrainerConfig(lr=1e-3, seed=1))
    restore(copy, ckpt, copy_trainer.optimizer)
    for a, b in zip(drafter.parameters(), copy.parameters(), strict=True):
        assert torch.equal(a, b)
    w = buf.windows(0)[:2]
    trainer.step(w)
    copy_trainer.step(w)
    for a, b in zip(drafter.parameters(), copy.parameters(), strict=True):
        assert torch.equal(a, b)


def test_load_latest_skips_damaged_and_foreign_files_and_prunes(tmp_path):
    _, drafter = _small(torch.float32)
    for v in range(1, 6):
        save_checkpoint(drafter, tmp_path, version=v, step=v, keep=3)
    assert [v for v, _ in list_checkpoints(tmp_path)] == [3, 4, 5]
    newest = tmp_path / "drafter-v00000009.safetensors"
    newest.write_bytes((tmp_path / "drafter-v00000005.safetensors").read_bytes()[:1000])  # truncated
    (tmp_path / "drafter-v00000008.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="readable"):
        load_checkpoint(newest)
    assert load_latest(tmp_path).version == 5
    other = random_drafter(random_model(replace(SMALL, hidden_size=64), seed=0))
    assert load_latest(tmp_path, other) is None  # shapes do not match: not this drafter's
    assert load_latest(tmp_path / "missing") is None


def test_async_checkpoint_writes_the_snapshot_while_training_goes_on(tmp_path):
    _, drafter = _small(torch.float32)
    before = {n: p.detach().clone() for n, p in drafter.named_parameters()}
    with AsyncCheckpointer(tmp_path) as background:
        blocked = background.save(drafter, version=1, step=1)
        with torch.no_grad():  # the trainer moves on before the write is done
            for p in drafter.parameters():
                p.add_(1.0)
    ckpt = load_latest(tmp_path, drafter)
    assert ckpt is not None and ckpt.version == 1 and blocked >= 0
    for name, value in ckpt.weights.items():
        assert torch.equal(value, before[name])


def test_checkpoint_data_is_fsynced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    """What SIGKILL cannot show (the kernel keeps a killed process's writes): durability across an
    OS crash needs the file's fsync before the rename and the folder's after it."""
    import stat

    calls = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(
        "fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file"), fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("rename"), replace(a, b))[1])
    _, drafter = _small(torch.float32)
    save_checkpoint(drafter, tmp_path, version=1, step=1)
    assert calls == ["fsync file", "rename", "fsync dir"]


def _kill_after(proc: subprocess.Popen, rng: random.Random, mode: str) -> None:
    """SIGKILL ``proc`` inside a file write (``mode`` "write": a seeded 0-40 ms after a ``begin``
    line, within the ~60 ms a 30 MB write takes before its fsync) or anywhere (a few lines, then up to
    300 ms), always after this run's first commit (so each restart resumes further)."""
    while not proc.stdout.readline().startswith("done"):
        pass
    if mode == "write":
        for _ in range(rng.randint(1, 3)):
            while not proc.stdout.readline().startswith("begin"):
                pass
        time.sleep(rng.uniform(0.0, 0.04))
    else:
        for _ in range(rng.randint(1, 6)):
            proc.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.3))
    proc.send_signal(signal.SIGKILL)


def test_checkpoints_survive_sigkill_at_random_points(tmp_path):
    """A worker trains and checkpoints in a loop (alternating sync and background writes, ~30 MB
    each, so most of its time is spent writing); it is SIGKILLed at seeded random moments, mostly
    aimed inside writes, and restarted, several times. Every file under a final name must load with
    the drafter's keys and shapes, load_latest must find the newest, and each restart resumes from it."""
    rng = random.Random(1234)
    expected = _trainables(random_drafter(random_model(KILL_CFG, seed=0)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parents[1])]), "OMP_NUM_THREADS": "1"}
    resumed_from, temps_seen = [], 0  # temps_seen: kills that left a temp file (inside a write)
    for mode in ("write", "write", "anywhere", "write"):
        proc = subprocess.Popen([sys.executable, str(HERE / "drafter_fixtures.py"), str(tmp_path), "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            first = proc.stdout.readline().split()
            assert first[:1] == ["start"], proc.stderr.read()
            resumed_from.append(int(first[1]))
            _kill_after(proc, rng, mode)
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        temps_seen += any(p.name.startswith(".") for p in tmp_path.iterdir())
        finals = list_checkpoints(tmp_path)
        assert finals
        for _, path in finals:
            ckpt = load_checkpoint(path)
            assert {n: tuple(t.shape) for n, t in ckpt.weights.items()} == expected
            assert set(ckpt.optimizer_state) == set(expected)
        latest = load_latest(tmp_path)
        assert latest is not None and latest.version == finals[-1][0]
    assert all(a < b for a, b in itertools.pairwise(resumed_from))  # each run resumed further
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and "drafter-v" not in p.name]
    print(f"\nkill test: resumed from versions {resumed_from}, {temps_seen} of 4 kills left a temp file")


def _killed_sync_writer(folder: Path, version: int) -> None:
    """Fork a process that runs a synchronous :func:`save_checkpoint` and stalls at its fsync (its
    temp file complete, not yet renamed); SIGKILL it there, as a scheduler would, and reap it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)

            def stall(fd: int) -> None:
                os.write(write, b"x")
                time.sleep(60)

            os.fsync = stall  # type: ignore[assignment]
            save_checkpoint(torch.nn.Linear(4, 4), folder, version=version, step=version)
        finally:
            os._exit(1)
    os.close(write)
    try:
        assert os.read(read, 1) == b"x", "the writer died before its fsync"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)


@pytest.mark.parametrize("writer", ["sync", "async"])
def test_next_write_sweeps_the_temp_files_of_killed_writers(tmp_path, writer):
    """Ten synchronous writers SIGKILLed mid-write, one after the other: each sweeps what the previous
    one left, so only the newest kill's temp file is ever there (it was ten after ten kills); the next
    write, synchronous or asynchronous (one shared sweep in write_snapshot), leaves none, and keeps a
    live writer's temp."""
    for version in range(1, 11):
        _killed_sync_writer(tmp_path, version)
        temps = [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
        assert len(temps) == 1 and temps[0].startswith(f".drafter-v{version:08d}."), temps
    live = tmp_path / f".drafter-v00000099.safetensors.tmp-{os.getpid()}-abc123"  # this process: alive
    live.write_bytes(b"in flight")
    module = torch.nn.Linear(4, 4)
    if writer == "sync":
        save_checkpoint(module, tmp_path, version=11, step=11)
    else:
        with AsyncCheckpointer(tmp_path) as background:
            background.save(module, version=11, step=11)
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "drafter-v00000011.safetensors"]
