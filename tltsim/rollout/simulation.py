"""Rollout steps as a SimPy simulation: one process per rollout worker, steps back to back (the
reference path; with ``engine.fast`` the workers run on their fast paths without a SimPy clock,
which only ordered them: :func:`tltsim.rollout.fast.run_step`).

A :class:`RolloutRun` is one policy's run over consecutive RL steps. What persists across steps is
what persists in a real engine: each worker's policy object (``reset(step)`` is called at every
step start, so BEG-MAB's reward windows carry over as in TLT), each worker's recent-accept estimate
and the run-level clock of the event log. Each step deals its responses to the workers
(:mod:`tltcore.dealing`), runs every worker to completion, marks workers that finished
early as idle until the step's makespan and writes one cluster-wide ``stage`` row spanning the
step's rollout. Whole RL steps (reward, actor update, drafter training) build on this.

Randomness: the acceptance RNG of worker ``w`` in step ``s`` is seeded from ``(seed, s, w)`` only,
and dealing from ``(seed, s)``, so every policy sees the same workload split and random stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import simpy

from tltcore.acceptance import AcceptanceModel, AcceptSampler
from tltcore.cost import CostModel
from tltcore.dealing import deal
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.events import CLUSTER
from tltcore.policy.base import SDPolicy
from tltcore.policy.recent_accept import RecentAccept
from tltcore.policy.registry import make_policy
from tltcore.step_simulator import SimulatedEngine
from tltsim.rollout.entities import EngineConfig, StepRequests
from tltsim.rollout.fast import FastRun, SimEventLog, accelerate, run_step
from tltsim.rollout.worker import RolloutWorker

DEFAULT_ENGINE = EngineConfig()


@dataclass(frozen=True)
class StepResult:
    """One simulated step's rollout: when it started and ended on the run clock, when each
    worker finished, and when each response finished with its length (absolute times)."""

    step: int
    t_start: float
    t_end: float
    finish_times: np.ndarray
    response_finish: np.ndarray = field(default_factory=lambda: np.zeros(0))
    response_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: each finished response's index in the step's workload, aligned with ``response_finish``: only
    #: with ``RolloutRun(track_requests=True)``, else empty
    response_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def makespan(self) -> float:
        return self.t_end - self.t_start


@dataclass(frozen=True)
class RolloutResult:
    """One policy's single simulated step: the event log and each worker's finish time."""

    policy: str
    step: int
    events: pd.DataFrame
    finish_times: np.ndarray  # seconds since the step's start, per worker
    makespan: float


class RolloutRun:
    """One policy's rollouts over consecutive steps (see module docstring).

    ``policies[w]`` is worker ``w``'s own policy object; ``drafter`` is the drafter every worker
    holds (whole-run simulations change it between steps). ``track_requests`` reports which response
    finished when (:attr:`StepResult.response_index`), for strategies that keep the first prompt
    groups to finish (:mod:`tltsim.strategy`): it runs the reference path (``engine.fast`` off), whose
    numbers are the fast paths' bit for bit.
    """

    def __init__(self, policies: Sequence[SDPolicy], *, cost: CostModel, accept: AcceptanceModel | None,
                 engine: EngineConfig = DEFAULT_ENGINE, seed: int = 0, deal_mode: str = "shuffle",
                 run_id: str = "", policy_name: str | None = None, drafter: DrafterState = INITIAL_DRAFTER,
                 track_requests: bool = False) -> None:
        if len(policies) < 1:
            raise ValueError("a rollout needs at least one worker")
        if track_requests and engine.fast:
            engine = replace(engine, fast=False)  # the fast paths retire in bulk, without request ids
        self.track_requests = track_requests
        self.policies = list(policies)
        self.cost, self.accept, self.engine = cost, accept, engine
        self.sampler = AcceptSampler(accept) if accept is not None else None
        self.seed, self.deal_mode, self.drafter = seed, deal_mode, drafter
        self.name = policy_name or self.policies[0].name
        self.log = SimEventLog(run_id=run_id, source="sim", policy=self.name, coalesce=engine.coalesce)
        self.recent = [RecentAccept() for _ in self.policies]
        self._fast = FastRun(cost, self.log) if engine.fast else None  # the fast paths' run-wide state
        self.clock = 0.0

    @property
    def n_workers(self) -> int:
        return len(self.policies)

    def step(self, workload: StepRequests, progress: Callable[[int], None] | None = None) -> StepResult:
        """Simulate one step's rollout from the current clock; ``progress(n)`` is called as ``n`` more
        responses finish."""
        step = int(workload.step)
        self.log.step = step
        self.log.drafter_version = self.drafter.version
        t0 = self.clock
        parts = deal(workload.group_ids, self.n_workers, self.deal_mode, self.seed, step)
        prompts = np.asarray(workload.prompt_tokens, dtype=np.int64)
        responses = np.asarray(workload.response_tokens, dtype=np.int64)
        workers, doors = [], []
        for w, idx in enumerate(parts):
            self.policies[w].reset(step)
            worker = RolloutWorker(w, prompts[idx], responses[idx], policy=self.policies[w], cost=self.cost,
                                   accept=self.accept, sampler=self.sampler, engine=self.engine,
                                   rng=np.random.default_rng([self.seed, step, w]), log=self.log,
                                   drafter=self.drafter, recent=self.recent[w], step=step, t0=t0, on_finish=progress,
                                   ids=idx.astype(np.int64) if self.track_requests else None)
            workers.append(worker)
            if self._fast is not None:
                doors.append(accelerate(worker, self._fast))
        if self._fast is not None:
            run_step(doors, self._fast, self.sampler, self.drafter, self.engine.acceptance_mode == "stochastic")
        else:
            env = simpy.Environment(initial_time=t0)
            for worker in workers:
                env.process(_worker_process(env, worker))
            env.run()
        finish = np.array([w.finish_time for w in workers], dtype=np.float64)
        t_end = max(float(finish.max()), t0)
        for w in workers:
            if w.finish_time < t_end:
                self.log.span(w.idx, "idle", w.finish_time, t_end)
        self.log.span(CLUSTER, "stage", t0, t_end, batch=len(responses), tokens=int(responses.sum()),
                      prefill_tokens=int(prompts.sum()))
        self.clock = t_end
        done_at = [a for w in workers for a in w.done_at]
        done_tokens = [a for w in workers for a in w.done_tokens]
        done_ids = [a for w in workers for a in w.done_ids]
        return StepResult(step, t0, t_end, finish,
                          np.concatenate(done_at) if done_at else np.zeros(0),
                          np.concatenate(done_tokens) if done_tokens else np.zeros(0, dtype=np.int64),
                          np.concatenate(done_ids) if done_ids else np.zeros(0, dtype=np.int64))

    def events(self) -> pd.DataFrame:
        return self.log.frame()


def _worker_process(env: simpy.Environment, worker: RolloutWorker):
    """SimPy process of the reference path: advance the worker, yielding to the clock once per
    closed event row."""
    while worker.advance():
        if worker.row_closed:
            worker.row_closed = False
            yield env.timeout(max(0.0, worker.t - env.now))
    if worker.t > env.now:
        yield env.timeout(worker.t - env.now)


def simulate_step(workload: StepRequests, *, policies: Sequence[SDPolicy], cost: CostModel,
                  accept: AcceptanceModel | None, engine: EngineConfig = DEFAULT_ENGINE, seed: int = 0,
                  deal_mode: str = "shuffle", policy_name: str | None = None,
                  drafter: DrafterState = INITIAL_DRAFTER) -> RolloutResult:
    """One step with fresh run state (``policies[w]`` for worker ``w``), clock starting at 0."""
    run = RolloutRun(policies, cost=cost, accept=accept, engine=engine, seed=seed, deal_mode=deal_mode,
                     policy_name=policy_name, drafter=drafter)
    res = run.step(workload)
    return RolloutResult(run.name, res.step, run.events(), res.finish_times - res.t_start, res.makespan)


def simulate_policy_step(workload: StepRequests, spec: str, cost: CostModel, accept: AcceptanceModel | None, *,
                         engine: SimulatedEngine, seed: int, deal_mode: str) -> pd.DataFrame:
    """One step of the policy ``spec`` on one worker, scheduled as ``engine`` describes a real backend;
    the event log. This is the :class:`~tltcore.step_simulator.StepSimulator` the validator is given."""
    config = EngineConfig.of(engine.limits, acceptance_mode=engine.acceptance_mode, mixed_prefill=engine.mixed_prefill)
    policy = make_policy(spec, seed=seed, accept_model=accept, cost_model=cost, switch=engine.limits.switch)
    return simulate_step(workload, policies=[policy], cost=cost, accept=accept, engine=config, seed=seed,
                         deal_mode=deal_mode, policy_name=spec).events
