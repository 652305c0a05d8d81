"""The drafter-training contract: worker states, spot/inline/never policies, preemption, checkpoints."""

from __future__ import annotations

import pytest

from tltcore.errors import InputError
from tltcore.spot_coordinator import (
    Checkpoint,
    InlineTraining,
    NeverTrain,
    SpotTraining,
    TrainingSession,
    WorkerCoordinator,
    WorkerState,
)

G, R, T = WorkerState.GENERATING, WorkerState.RELEASED, WorkerState.TRAINING


def states(c: WorkerCoordinator) -> list[WorkerState]:
    return [c.state(w) for w in range(4)]


def test_spot_training_waits_for_min_workers_then_takes_every_released_worker() -> None:
    c = WorkerCoordinator(4, SpotTraining(min_workers=2))
    c.start_step(0)
    assert c.release(2).start == frozenset()
    assert states(c) == [G, G, R, G]
    assert c.release(0).start == frozenset({0, 2})
    assert states(c) == [T, G, T, G]
    assert c.release(3).start == frozenset({3})  # later releases join at once
    assert c.end_rollout().preempt == frozenset({0, 2, 3})
    assert T not in states(c)
    c.start_step(1)
    assert states(c) == [G, G, G, G]


def test_a_worker_never_trains_while_it_generates() -> None:
    c = WorkerCoordinator(3, SpotTraining())
    c.start_step(0)
    for w in range(3):
        plan = c.release(w)
        assert all(c.state(x) is T for x in plan.start)
        assert all(c.state(x) is not T for x in c.workers(G))
    with pytest.raises(RuntimeError):
        c.release(1)  # already released
    with pytest.raises(RuntimeError):
        c.start_step(1)  # training must be preempted when the rollout ends


def test_inline_and_never_policies_train_no_released_worker() -> None:
    for policy in (InlineTraining(every=2), NeverTrain()):
        c = WorkerCoordinator(2, policy)
        c.start_step(0)
        assert c.release(0).start == frozenset() and c.release(1).start == frozenset()
    assert [InlineTraining(every=2).trains_inline(s) for s in range(4)] == [False, True, False, True]
    assert not any(NeverTrain().trains_inline(s) or SpotTraining().trains_inline(s) for s in range(3))


def test_preemption_loses_at_most_the_work_since_the_last_checkpoint() -> None:
    session = TrainingSession(Checkpoint(version=0, step=0, trained_samples=0), checkpoint_every=10)
    committed = session.train(25, step=3)
    assert [c.version for c in committed] == [1, 2] and session.committed.trained_samples == 20
    assert session.preempt() == 5  # lost: at most checkpoint_every - 1
    assert session.committed == Checkpoint(version=2, step=3, trained_samples=20)
    session.train(4, step=4)
    assert session.flush(step=4) == Checkpoint(version=3, step=4, trained_samples=24)
    assert session.flush(step=4) is None


@pytest.mark.parametrize("make", [lambda: SpotTraining(min_workers=0), lambda: InlineTraining(every=0),
                                  lambda: TrainingSession(Checkpoint(0, 0, 0), checkpoint_every=0)])
def test_bad_parameters_are_input_errors(make) -> None:
    with pytest.raises(InputError):
        make()
