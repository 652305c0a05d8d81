"""``overprovision:mode=resume`` on given requests with a given cost model, on one worker: the simulated
half of ``tlt validate --strategy`` (the native engine runs the same strategy for real,
:mod:`tltreal.validation.partial`).

:func:`simulate_resume` runs :func:`tltsim.strategy.overprovision.schedule_resume` itself, the
strategy ``tlt sim run --strategy overprovision:eta=E,mode=resume`` runs, on a one-worker
:class:`~tltsim.rollout.RolloutRun` scheduled as the native engine (every admission one prefill pass),
with no SD and no training phases (the validation compares rollouts). :func:`fresh_groups` is the
launch the strategy makes at each step, for the real half to launch the same groups: it depends only
on how many groups the pool carries, not on which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tltcore.cost.protocol import CostModel
from tltcore.policy.registry import make_policy
from tltcore.step_simulator import SimulatedEngine
from tltsim.rl.phases import PhaseTimes
from tltsim.rollout import RolloutRun
from tltsim.rollout.entities import EngineConfig, StepRequests
from tltsim.strategy.overprovision import LaunchedStep, launch_extra, launched_groups, schedule_resume
from tltsim.strategy.run import batch_rollout

NO_TRAINING = PhaseTimes(0.0, 0.0, 0.0, 0.0, 0.0)


def fresh_groups(work: StepRequests, carried_groups: int, eta: float, seed: int) -> LaunchedStep:
    """The groups a step launches after ``carried_groups`` carried ones: its own N groups and copies up
    to ``ceil(N (1 + eta))`` groups in all (as :func:`~tltsim.strategy.overprovision.schedule_resume`
    launches them)."""
    n = len(dict.fromkeys(np.asarray(work.group_ids).tolist()))
    return launch_extra(work, max(launched_groups(n, eta) - carried_groups - n, 0), seed)


@dataclass(frozen=True)
class SimulatedStep:
    """One simulated step: its rollout's makespan (stopped at the N-th complete group), the requests it
    ran and their prompt tokens (re-prefilled tokens included), the samples trained and carried, and
    the trained tokens (all, and per lag); ``prefill_s`` and ``decode_s``: the seconds of its prefill
    passes and decode iterations (where the makespan goes)."""

    step: int
    makespan_s: float
    requests: int
    prefill_tokens: int
    trained_samples: int
    trained_tokens: int
    carried_samples: int
    lag_tokens: dict[int, int]
    prefill_s: float = 0.0
    decode_s: float = 0.0


def simulate_resume(works: Sequence[StepRequests], eta: float, cost: CostModel, *, engine: SimulatedEngine,
                    seed: int, deal_mode: str) -> list[SimulatedStep]:
    """Every step of ``works`` under ``overprovision:eta=E,mode=resume`` without SD on one worker
    priced by ``cost`` (module docstring)."""
    config = EngineConfig.of(engine.limits, acceptance_mode=engine.acceptance_mode, mixed_prefill=engine.mixed_prefill)
    run = RolloutRun([make_policy("no-sd", seed=seed)], cost=cost, accept=None, engine=config, seed=seed,
                     deal_mode=deal_mode, policy_name="no-sd", track_requests=True)
    ran: list[tuple[int, int]] = []

    def roll(reqs, stop):
        ran.append((len(reqs.group_ids), int(np.sum(reqs.prompt_tokens))))
        return batch_rollout(reqs, run.step(reqs, stop=stop), 1)

    rows = schedule_resume(works, eta, seed, roll, lambda prompts, responses: NO_TRAINING, "replay")
    events = run.events()
    seconds = (events["t_end"] - events["t_start"]).groupby([events["step"], events["kind"]]).sum()
    out = []
    for row, (requests, prefill) in zip(rows, ran, strict=True):
        lag = np.asarray(row.piece_lag if row.piece_lag is not None else row.lag, dtype=np.int64)
        tok = np.asarray(row.piece_tokens if row.piece_tokens is not None else row.tokens, dtype=np.int64)
        lags = {int(v): int(tok[lag == v].sum()) for v in np.unique(lag)}
        ran_now = row.rollout_s > 0  # a step whose batch was complete before it stops at its start
        out.append(SimulatedStep(int(row.step), float(row.rollout_s), requests if ran_now else 0,
                                 prefill if ran_now else 0, int(row.trained_samples), int(row.trained_tokens),
                                 int(row.carried_samples), lags,
                                 float(seconds.get((row.step, "prefill"), 0.0)),
                                 float(seconds.get((row.step, "decode"), 0.0))))
    return out
