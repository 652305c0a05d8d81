"""The drafter's dynamics, the DataCoverage and the Spot Trainer: the rules of DESIGN §1 as tests."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest

from tltcore.drafter.dynamics import DrafterConfig
from tltcore.drafter.state import DrafterState
from tltcore.errors import InputError
from tltcore.spot_coordinator import Checkpoint, SpotTraining, TrainingSession
from tltsim.spot.analytic_trainer import SpotTrainerConfig, inline_train, spot_train
from tltsim.spot.coverage import DataCoverage


# ---- drafter dynamics ---------------------------------------------------------------------------
def test_acceptance_drops_after_an_update_and_recovers_monotonically_with_samples() -> None:
    dyn = DrafterConfig(quality=1.0, stale_quality=0.8, drift=0.4, recovery_samples=100)
    fresh = dyn.initial()
    stale = dyn.after_update(fresh)
    assert stale.quality == pytest.approx(0.8 + 0.2 * 0.6)
    qs = [dyn.after_training(stale, n).quality for n in (0, 1, 10, 50, 100, 400, 10_000)]
    assert qs[0] == stale.quality
    assert all(b > a for a, b in pairwise(qs))
    assert qs[-1] <= 1.0 and qs[-1] == pytest.approx(1.0, abs=1e-9)
    assert dyn.after_training(stale, 100).quality == pytest.approx(1.0 - 0.08 * math.exp(-1))



def _cfg(*, samples_per_s: float, max_samples: int, checkpoint_every: int, checkpoint_s: float) -> SpotTrainerConfig:
    """The scenario's spot section with selective checkpoints of ``checkpoint_s``; ``max_samples`` 0
    (no scenario allows it, the trainer handles it) set past validation."""
    cfg = SpotTrainerConfig(samples_per_s=samples_per_s, checkpoint_every=checkpoint_every,
                            selective_checkpoint_s=checkpoint_s)
    return cfg.model_copy(update={"max_samples": max_samples})

def test_a_drafter_never_trained_tends_to_the_stale_quality() -> None:
    dyn = DrafterConfig(quality=1.0, stale_quality=0.85, drift=0.3)
    state = dyn.initial()
    seen = []
    for _ in range(40):
        state = dyn.after_update(state)
        seen.append(state.quality)
    assert all(b < a for a, b in pairwise(seen))
    assert seen[-1] == pytest.approx(0.85, abs=1e-5) and min(seen) >= 0.85


def test_drift_zero_never_degrades_a_trained_drafter() -> None:
    dyn = DrafterConfig(quality=1.0, stale_quality=0.5, drift=0.0, recovery_samples=50)
    state = DrafterState(quality=0.9)
    for n in (0, 10, 0, 300, 5):
        before = state.quality
        state = dyn.after_update(dyn.after_training(state, n))
        assert state.quality >= before


def test_training_counts_versions_and_samples() -> None:
    dyn = DrafterConfig()
    s = dyn.after_training(DrafterState(quality=0.9), 128, checkpoints=2)
    assert (s.version, s.trained_samples) == (2, 128)
    assert dyn.after_training(s, 0, checkpoints=0) == s


@pytest.mark.parametrize(("kw", "field"), [({"drift": 1.5}, "drafter.drift"),
                                           ({"stale_quality": 1.2}, "drafter.stale_quality"),
                                           ({"recovery_samples": 0.0}, "drafter.recovery_samples")])
def test_bad_dynamics_name_their_field(kw, field) -> None:
    with pytest.raises(InputError) as info:  # the scenario's drafter section is the dynamics' one class
        DrafterConfig(**kw)
    assert info.value.field == field


def test_the_spot_section_is_the_trainer_config() -> None:
    """The rate falls back to the paper's reference (packing or not); speco-bubble's fixed budget
    trains ``bubble_budget`` samples with full checkpoints."""
    cfg = SpotTrainerConfig()
    assert cfg.rate == 29.6 and SpotTrainerConfig(packing=False).rate == 13.3
    assert SpotTrainerConfig(samples_per_s=5.0).rate == 5.0
    assert cfg.checkpoint_s == cfg.selective_checkpoint_s
    bubble = cfg.bubble()
    assert (bubble.max_samples, bubble.selective_checkpoint, bubble.checkpoint_s) == (256, False, 0.893)


# ---- DataCoverage ----------------------------------------------------------------------------------
def test_buffer_holds_only_finished_responses() -> None:
    buf = DataCoverage(np.array([3.0, 1.0, 2.0]), np.array([600, 100, 300]), window_tokens=512)
    assert buf.windows_at(0.5) == 0
    assert buf.windows_at(1.0) == 1 and buf.coverage_at(1.0) == pytest.approx(0.1)
    assert buf.windows_at(2.5) == 2 and buf.coverage_at(2.5) == pytest.approx(0.4)
    assert buf.windows_at(3.0) == 4 and buf.coverage_at(3.0) == 1.0


def test_one_step_offset_mixes_in_the_previous_step() -> None:
    kw = dict(finish_times=np.array([1.0, 5.0]), response_tokens=np.array([100, 900]), window_tokens=100)
    own = DataCoverage(**kw, previous_tokens=1000, one_step_offset=False)
    mixed = DataCoverage(**kw, previous_tokens=1000, one_step_offset=True)
    first = DataCoverage(**kw, previous_tokens=0, one_step_offset=True)
    assert own.windows_at(0.0) == 0 and mixed.windows_at(0.0) == 10
    assert own.value_at(2.0) == pytest.approx(0.1) and mixed.value_at(2.0) == pytest.approx(0.55)
    assert first.value_at(2.0) == own.value_at(2.0)


# ---- Spot Trainer --------------------------------------------------------------------------------
def _session(every: int = 10) -> TrainingSession:
    return TrainingSession(Checkpoint(version=0, step=-1, trained_samples=0), checkpoint_every=every)


def _full_buffer() -> DataCoverage:
    return DataCoverage(np.array([0.0]), np.array([10_000]))


def test_training_starts_at_release_and_is_preempted_at_the_rollout_end() -> None:
    release = np.array([2.0, 5.0, 10.0, 10.0])  # two stragglers end the rollout at 10
    cfg = _cfg(samples_per_s=1.0, max_samples=10**6, checkpoint_every=4, checkpoint_s=0.5)
    res = spot_train(release, 10.0, policy=SpotTraining(), session=_session(4), cfg=cfg, buffer=_full_buffer(),
                     step=0)
    assert {(s.worker, s.t_start, s.t_end, s.preempted) for s in res.segments} == {(0, 2.0, 10.0, True),
                                                                                  (1, 5.0, 10.0, True)}
    for s in res.segments:
        assert s.t_start >= release[s.worker]  # never while the worker still generates
    # committed samples come in whole checkpoints; what is lost is less than one checkpoint's worth
    assert res.committed % 4 == 0 and 0 <= res.lost < 4 + 1e-9
    assert all(c.t_end <= 10.0 for c in res.checkpoints)


def test_min_workers_delays_training_until_enough_are_released() -> None:
    release = np.array([1.0, 4.0, 9.0])
    cfg = _cfg(samples_per_s=1.0, max_samples=100, checkpoint_every=1, checkpoint_s=0.0)
    res = spot_train(release, 9.0, policy=SpotTraining(min_workers=2), session=_session(1), cfg=cfg,
                     buffer=_full_buffer(), step=0)
    assert sorted((s.worker, s.t_start) for s in res.segments) == [(0, 4.0), (1, 4.0)]
    assert res.committed == 10  # two workers x 5 s


def test_a_session_ends_on_its_own_at_max_samples() -> None:
    cfg = _cfg(samples_per_s=10.0, max_samples=20, checkpoint_every=8, checkpoint_s=0.1)
    res = spot_train(np.array([0.0, 100.0]), 100.0, policy=SpotTraining(), session=_session(8), cfg=cfg,
                     buffer=_full_buffer(), step=3)
    assert res.committed == 20 and res.lost == 0
    assert [s.preempted for s in res.segments] == [False]
    assert res.segments[0].t_end == pytest.approx(2.0 + 3 * 0.1)
    assert [c.checkpoint.trained_samples for c in res.checkpoints] == [8, 16, 20]


def test_preemption_loses_at_most_the_work_since_the_last_checkpoint() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 6))
        release = np.sort(rng.uniform(0, 20, n))
        t_end = float(release[-1] + rng.uniform(0, 10))
        every = int(rng.integers(1, 40))
        cfg = _cfg(samples_per_s=float(rng.uniform(0.5, 30)), max_samples=int(rng.integers(0, 500)),
                   checkpoint_every=every, checkpoint_s=float(rng.uniform(0, 1)))
        session = _session(every)
        res = spot_train(release, t_end, policy=SpotTraining(), session=session, cfg=cfg, buffer=_full_buffer(),
                         step=0)
        assert res.lost <= every + 1e-6
        assert session.committed.trained_samples == res.committed <= cfg.max_samples
        assert all(s.t_end <= t_end + 1e-9 for s in res.segments)


def test_a_checkpoint_still_being_written_at_the_end_is_lost() -> None:
    cfg = _cfg(samples_per_s=1.0, max_samples=100, checkpoint_every=5, checkpoint_s=2.0)
    res = spot_train(np.array([0.0, 6.0]), 6.0, policy=SpotTraining(), session=_session(5), cfg=cfg,
                     buffer=_full_buffer(), step=0)
    assert res.committed == 0 and res.lost == 5 and res.checkpoints == ()


def test_no_data_no_training() -> None:
    empty = DataCoverage(np.array([50.0]), np.array([100]))
    cfg = _cfg(samples_per_s=1.0, max_samples=100, checkpoint_every=1, checkpoint_s=0.0)
    res = spot_train(np.array([1.0, 10.0]), 10.0, policy=SpotTraining(), session=_session(1), cfg=cfg, buffer=empty,
                     step=0)
    assert res.committed == 0


def test_inline_training_is_a_serial_stage_on_every_worker() -> None:
    cfg = _cfg(samples_per_s=2.0, max_samples=40, checkpoint_every=16, checkpoint_s=0.5)
    res = inline_train(100.0, 4, session=_session(16), cfg=cfg, buffer=_full_buffer(), step=0)
    end = 100.0 + 40 / 8.0 + 3 * 0.5
    assert [(s.t_start, s.t_end) for s in res.segments] == [(100.0, pytest.approx(end))] * 4
    assert res.committed == 40 and res.lost == 0
