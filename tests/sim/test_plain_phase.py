"""Whole plain phases in closed form (:mod:`tltsim.rollout.fast.plain_phase`) equal the per-span reference
path bit for bit: event rows, finish times, retired responses, progress calls and the clock across
steps -- with admissions while requests queue (slot- and KV-limited), one-token responses done at
their prefill (admission rounds at one iteration), mixed prefill, expected and stochastic
acceptance, the roofline (vectorised pricer) and a cost model it does not mirror (one call per span),
every policy that promises plain phases (no-SD, elastic before its switch, the vLLM table above its
last row). Also: the simulator's column-built event frame equals the base class's row-built one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from rollout_fixtures import Work

import tltsim.rollout.fast.plain_phase as plain_phase_mod
from tltcore.acceptance import ChainAcceptance, paper_qwen32b_tp4
from tltcore.cost import RooflineCostModel
from tltcore.cost.protocol import PerConfigSDTimes
from tltcore.errors import InputError
from tltcore.events import EventLog
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import NoSD, SDConfig, Static
from tltcore.policy.beg_mab import BucketedEpsilonGreedy
from tltcore.policy.elastic import Elastic
from tltcore.policy.vllm_table import VllmTable
from tltsim.rollout import EngineConfig, RolloutRun
from tltsim.rollout.fast.plain_phase import fcfs_admissions


class LinearCost(PerConfigSDTimes):
    """Not a roofline: the worker prices each span by its own call (no vectorised pricer)."""

    def prefill_time(self, new_tokens, cached_tokens):
        return 1e-2 + 1e-5 * float(np.sum(new_tokens))

    def drafter_prefill_time(self, new_tokens, cached_tokens):
        return 2e-3 + 3e-6 * float(np.sum(new_tokens))

    def decode_time(self, context_lens):
        return 1e-3 + 1e-6 * float(np.sum(context_lens))

    def decode_span_time(self, context_lens, n_iters):
        # order-sensitive float sum over requests: a reordered batch would show in the last bits
        s, b = float(np.cumsum(np.asarray(context_lens, dtype=np.float64) * 1.000001)[-1]), len(context_lens)
        return n_iters * 1e-3 + 1e-6 * (n_iters * s + b * n_iters * (n_iters - 1) / 2)

    def sd_time(self, context_lens, config):
        return 1.5 * self.decode_time(context_lens) + config.depth * 1e-4


def _roofline():
    return RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("h100"))


def _workload(seed: int, n: int, step: int = 0) -> Work:
    rng = np.random.default_rng(seed)
    prompts = rng.integers(1, 400, n)
    responses = rng.integers(1, 600, n)
    responses[rng.random(n) < 0.15] = 1  # one-token responses: done at prefill
    responses[rng.random(n) < 0.1] = 2
    return Work(step, np.array([f"g{i // 4}" for i in range(n)]), prompts.astype(np.int64), responses.astype(np.int64))


POLICIES = {
    "no-sd": lambda: NoSD(),
    "elastic+static": lambda: Elastic(Static(SDConfig(4, 1, 4)), threshold=6, consecutive=3),
    "elastic+beg-mab": lambda: Elastic(BucketedEpsilonGreedy(), threshold=5, consecutive=2),
    "vllm-table": lambda: VllmTable(((2, SDConfig.chain(3)), (4, SDConfig.chain(1)))),
}
ENGINES = {
    "roomy": {},
    "slots": {"max_batch": 7},
    "kv": {"kv_capacity_tokens": 9000},
    "slots+kv+mixed": {"max_batch": 12, "kv_capacity_tokens": 14000, "mixed_prefill": True},
    "mixed": {"mixed_prefill": True, "prefill_budget": 256},
}


def _run(policy: str, engine: dict, mode: str, cost, fast: bool, seed: int, steps: int = 2, workers: int = 2):
    accept = paper_qwen32b_tp4() if not isinstance(cost, LinearCost) else ChainAcceptance((0.7,))
    eng = EngineConfig(acceptance_mode=mode, fast=fast, **engine)
    run = RolloutRun([POLICIES[policy]() for _ in range(workers)], cost=cost, accept=accept, engine=eng, seed=seed)
    calls: list[int] = []
    results = []
    for step in range(steps):
        res = run.step(_workload(seed * 10 + step, 70, step), calls.append)
        results.append(pd.DataFrame({"finish": res.response_finish, "tokens": res.response_tokens}))
        results.append(pd.DataFrame({"worker_finish": res.finish_times}))
    # progress: the same calls; their order across workers is the SimPy interleaving (reference) or
    # worker by worker (fast), by design
    return [run.events(), *results, pd.DataFrame({"progress": sorted(calls)})]


def _same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        pd.testing.assert_frame_equal(x, y, check_exact=True)


@pytest.fixture
def phases(monkeypatch):
    """Counts the plain phases the fast path runs (so a silently declined phase fails the test)."""
    count = [0]
    real = plain_phase_mod.run_phase

    def spy(fast, bound):
        done = real(fast, bound)
        count[0] += bool(done)
        return done

    monkeypatch.setattr(plain_phase_mod, "run_phase", spy)
    return count


@pytest.mark.parametrize("mode", ["stochastic", "expected"])
@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plain_phases_equal_per_span_path_on_the_roofline(seed, policy, engine, mode, phases):
    cost = _roofline()
    fast = _run(policy, ENGINES[engine], mode, cost, True, seed)
    assert phases[0] > 0
    _same(fast, _run(policy, ENGINES[engine], mode, cost, False, seed))


@pytest.mark.parametrize("mode", ["stochastic", "expected"])
@pytest.mark.parametrize("engine", ["roomy", "slots", "slots+kv+mixed"])
@pytest.mark.parametrize("policy", ["no-sd", "elastic+static"])
def test_plain_phases_equal_per_span_path_on_a_cost_model_without_pricer(policy, engine, mode, phases):
    cost = LinearCost()
    fast = _run(policy, ENGINES[engine], mode, cost, True, 3)
    assert phases[0] > 0
    _same(fast, _run(policy, ENGINES[engine], mode, cost, False, 3))


def test_a_request_that_never_fits_raises_the_same_error_after_a_phase():
    """The KV cache holds the first requests but not a later one, even alone: the per-span path
    raises when it reaches it with nothing live; the phase stops there and the same error follows."""
    w = Work(0, np.array(["a", "b", "c"]), np.array([10, 10, 500], dtype=np.int64),
             np.array([50, 80, 600], dtype=np.int64))
    messages = []
    for fast in (True, False):
        run = RolloutRun([NoSD()], cost=_roofline(), accept=None,
                         engine=EngineConfig(kv_capacity_tokens=1000, fast=fast, acceptance_mode="stochastic"))
        with pytest.raises(InputError) as err:
            run.step(w)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "1100 KV tokens" in messages[0]


def test_fcfs_admissions_rounds_at_one_iteration():
    # one slot: a finishes at 3; b (one token) is admitted at 3 and done at its prefill, so c is
    # admitted at 3 in the next round; c finishes at 3 + 5 - 1 = 7, then d
    got = fcfs_admissions([3], [10], [5, 5, 5], [1, 5, 2], max_batch=1, kv_capacity=100)
    assert got == ([3, 3, 7], [0, 1, 0])
    # KV-limited: both live must finish before the big one fits; the small one behind it waits (FCFS)
    got = fcfs_admissions([2, 4], [40, 40], [90, 5], [3, 3], max_batch=10, kv_capacity=100)
    assert got == ([4, 4], [0, 0])
    assert fcfs_admissions([2], [10], [5], [3], max_batch=5, kv_capacity=100) is None  # fits now: not a phase
    assert fcfs_admissions([2], [10], [500, 5], [3, 3], max_batch=5, kv_capacity=100) == ([], [])


@pytest.mark.parametrize("fast", [True, False])
def test_event_frame_from_columns_equals_the_row_built_frame(fast):
    """SimEventLog.frame (columns, blocks) equals EventLog.frame over the same rows as tuples."""
    cost = _roofline()
    run = RolloutRun([Elastic(Static(SDConfig(4, 1, 4)), threshold=6, consecutive=3) for _ in range(3)], cost=cost,
                     accept=paper_qwen32b_tp4(), engine=EngineConfig(fast=fast, max_batch=9,
                                                                     acceptance_mode="stochastic"), seed=1)
    for step in range(2):
        run.drafter = replace(run.drafter, version=step)
        run.step(_workload(5 + step, 60, step))
    log = run.log
    got = log.frame()
    # the same rows through the base class: blocks turned into tuples where they were added
    rows = list(log.rows)
    for pos, blk in reversed(log._blocks):
        names = blk["kind"][1]
        tuples = [(blk["worker"], names[k], t0, t1, it, bt, blk["config"], tok, dr, ac, "rollout", pf, blk["step"],
                   blk["version"])
                  for k, t0, t1, it, bt, tok, dr, ac, pf in zip(
                      blk["kind"][0].tolist(), blk["t0"].tolist(), blk["t1"].tolist(), blk["iterations"].tolist(),
                      blk["batch"].tolist(), blk["tokens"].tolist(), blk["drafted"].tolist(), blk["accepted"].tolist(),
                      blk["prefill"].tolist(), strict=True)]
        rows[pos:pos] = tuples
    plain = EventLog(run_id=log.run_id, source=log.source, policy=log.policy)
    plain.rows = rows
    pd.testing.assert_frame_equal(got, plain.frame(), check_exact=True)
    assert bool(log._blocks) == fast


@pytest.mark.parametrize("mode", ["stochastic", "expected"])
@pytest.mark.parametrize("engine", [{"max_batch": 1, "mixed_prefill": True},
                                    {"max_batch": 2, "mixed_prefill": True, "prefill_budget": 64}])
def test_plain_phases_with_a_drained_batch_and_mixed_prefill(engine, mode, phases):
    """Admissions into an empty batch pay their whole prefill, into a running one only its margin."""
    cost = _roofline()
    fast = _run("no-sd", engine, mode, cost, True, 4)
    assert phases[0] > 0
    _same(fast, _run("no-sd", engine, mode, cost, False, 4))


@pytest.mark.parametrize("fast", [True, False])
def test_a_phase_resets_the_elastic_count_of_small_batches(fast):
    """One big request alone (batch 1: the small-batch count grows to 9), then ten admitted when it
    frees the KV (a plain phase above the threshold, whose last span resets the count), then the
    tail: SD switches on 12 iterations after the batch is small again, not 3."""
    prompts = np.array([2000] + [10] * 10, dtype=np.int64)
    responses = np.array([10] + [100 + 3 * i for i in range(10)], dtype=np.int64)
    w = Work(0, np.array([f"g{i}" for i in range(11)]), prompts, responses)
    run = RolloutRun([Elastic(Static(SDConfig(4, 1, 4)), threshold=6, consecutive=12)], cost=_roofline(),
                     accept=paper_qwen32b_tp4(), engine=EngineConfig(kv_capacity_tokens=2100, fast=fast,
                                                                     acceptance_mode="expected"), deal_mode="trace")
    run.step(w)
    ev = run.events()
    switch = ev[ev["kind"] == "switch"]
    assert len(switch) == 1 and int(switch["batch_size"].iloc[0]) == 3
    decode = ev[(ev["kind"] == "decode") & (ev["sd_config"] == "off")]
    small = decode[(decode["batch_size"] <= 6) & (decode["t_start"] > ev[ev["kind"] == "prefill"]["t_end"].max())]
    assert int(small["iterations"].sum()) == 11  # the 12th small-batch iteration is the first SD one


class _LatePlain:
    """Plain spans of 2 iterations at first, then the plain-phase promise: the phase's first span
    continues the open row of the same batch (one coalesced row, as the per-span path writes)."""

    name = "late-plain"

    def __init__(self) -> None:
        self.seen = 0

    def decide(self, view):
        from tltcore.policy.base import HOLD_UNTIL_EVENT, NO_SD, Decision

        return Decision(NO_SD, HOLD_UNTIL_EVENT if self.seen else 2)

    def plain_above(self):
        return 0 if self.seen else None

    def observe(self, outcome) -> None:
        self.seen += 1

    def reset(self, step: int) -> None:
        return None


@pytest.mark.parametrize("mode", ["stochastic", "expected"])
def test_a_phase_continues_an_open_plain_row(mode, phases):
    w = Work(0, np.array(["a", "b", "c"]), np.array([5, 6, 7], dtype=np.int64), np.array([30, 40, 50], dtype=np.int64))
    out = []
    for fast in (True, False):
        run = RolloutRun([_LatePlain()], cost=_roofline(), accept=None,
                         engine=EngineConfig(fast=fast, acceptance_mode=mode))
        run.step(w)
        out.append(run.events())
    assert phases[0] == 1
    pd.testing.assert_frame_equal(out[0], out[1], check_exact=True)
    decode = out[0][out[0]["kind"] == "decode"]
    assert decode["iterations"].tolist() == [29, 10, 10] and decode["batch_size"].tolist() == [3, 2, 1]


class _PlainBetweenSD:
    """SD until the first finish, then the plain-phase promise above a bound below the batch, then SD
    again once the batch is at or below it: a plain phase that starts after SD spans, with every
    drafter up to date, and leaves the drafters lagging by the whole phase."""

    name = "plain-between-sd"
    SD = SDConfig(4, 1, 4)

    def __init__(self) -> None:
        self.bound: int | None = None
        self.done = False

    def decide(self, view):
        from tltcore.policy.base import HOLD_UNTIL_EVENT, NO_SD, Decision

        plain = self.bound is not None and not self.done and view.batch_size > self.bound
        return Decision(NO_SD if plain else self.SD, HOLD_UNTIL_EVENT)

    def plain_above(self):
        return None if self.done else self.bound

    def observe(self, outcome) -> None:
        if self.bound is None:
            self.bound = outcome.batch_size - 3
        elif outcome.batch_size <= self.bound:
            self.done = True

    def reset(self, step: int) -> None:
        return None


def test_drafters_catch_up_after_a_phase_that_follows_sd(phases):
    """Stochastic acceptance: whole tokens after SD, so the phase runs in closed form (in expected mode
    the fractional progress after SD declines it)."""
    w = Work(0, np.array([f"g{i}" for i in range(8)]), np.full(8, 50, dtype=np.int64),
             np.array([40, 300, 310, 320, 330, 340, 350, 360], dtype=np.int64))
    out = []
    for fast in (True, False):
        run = RolloutRun([_PlainBetweenSD()], cost=_roofline(), accept=paper_qwen32b_tp4(),
                         engine=EngineConfig(fast=fast, acceptance_mode="stochastic"), deal_mode="trace")
        run.step(w)
        out.append(run.events())
    assert phases[0] == 1
    pd.testing.assert_frame_equal(out[0], out[1], check_exact=True)
    kinds = out[0]["kind"].tolist()
    assert "catch_up" in kinds[kinds.index("decode"):]  # the drafters caught up after the phase
