"""The shuffled deal is drawn afresh every RL step (and reproducibly per seed and step).

Traces usually label a step's groups by position (``0 .. G-1`` again every step), and that position
can track difficulty (the loader's order, a dataset's order). A shuffle that ignored the step would
give every step the same permutation: the same slot, hence the same kind of prompt, would land on
the same worker step after step, a systematic tail the shuffle exists to average out (see
tltcore/dealing.py).
"""

from __future__ import annotations

import numpy as np
from rollout_fixtures import Work

from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.policy.base import NoSD
from tltsim.rollout import RolloutRun, deal

N_GROUPS, GROUP_SIZE, N_WORKERS, N_STEPS = 8, 4, 4, 240


def owner_of_each_group(parts: list[np.ndarray]) -> np.ndarray:
    """Worker index per group (requests ``4g .. 4g+3`` are group ``g``)."""
    owner = np.full(N_GROUPS * GROUP_SIZE, -1)
    for w, idx in enumerate(parts):
        owner[idx] = w
    return owner[::GROUP_SIZE]


def test_each_group_visits_every_worker_about_equally_often_over_steps() -> None:
    groups = np.repeat([f"g{i}" for i in range(N_GROUPS)], GROUP_SIZE)  # the same labels every step
    counts = np.zeros((N_GROUPS, N_WORKERS), dtype=int)
    for step in range(N_STEPS):
        owner = owner_of_each_group(deal(groups, N_WORKERS, "shuffle", seed=5, step=step))
        counts[np.arange(N_GROUPS), owner] += 1
    expected = N_STEPS / N_WORKERS  # 60; a binomial(240, 1/4) stays within +-25 of it (> 4 sigma)
    assert np.abs(counts - expected).max() < 25, counts


def test_the_deal_depends_on_the_step_and_is_reproducible() -> None:
    groups = np.repeat([f"g{i}" for i in range(N_GROUPS)], GROUP_SIZE)

    def deals(seed: int) -> list[list[list[int]]]:
        return [[p.tolist() for p in deal(groups, N_WORKERS, "shuffle", seed=seed, step=s)] for s in range(6)]

    once = deals(seed=1)
    assert once == deals(seed=1)
    assert len({str(d) for d in once}) == 6  # six steps, six different deals


class FlatCost(PerConfigSDTimes):
    """Any positive iteration times do: only who got which prompt is read."""

    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return 1e-2 + 1e-5 * float(np.sum(new_tokens))

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return 1e-3

    def decode_time(self, context_lens: np.ndarray) -> float:
        return 1e-3

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        return 1e-3 * n_iters

    def sd_time(self, context_lens: np.ndarray, config: object) -> float:
        return 1e-3


def test_the_runner_deals_each_step_differently() -> None:
    """Through the multi-step runner: the group with the longest prompt (hence the most prefill
    tokens) does not sit on one worker every step."""
    prompt = np.array([10, 20, 30, 40])  # one request per group; the prompt length names the group
    runner = RolloutRun([NoSD() for _ in range(4)], cost=FlatCost(), accept=None, seed=2, deal_mode="shuffle")
    for step in range(12):
        runner.step(Work(step, np.array(["a", "b", "c", "d"]), prompt, np.full(4, 3)))
    ev = runner.events()
    pre = ev[ev.kind == "prefill"]
    holder = pre[pre.prefill_tokens == 40].groupby("step")["worker"].first()
    assert len(holder) == 12 and holder.nunique() >= 3, holder.tolist()
