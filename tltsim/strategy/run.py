"""Running a scenario's SD policies under one strategy: each policy's rollouts, then the strategy's
schedule of them (:mod:`tltsim.strategy`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from tltcore.model_shape import get_model
from tltcore.policy.spec import PolicyBase, as_spec
from tltsim.rl.phases import phase_times
from tltsim.rollout import RolloutRun, StepResult
from tltsim.rollout.entities import StepRequests
from tltsim.scenario import (
    BASELINE_POLICY,
    Scenario,
    SimInputs,
    make_policies,
    policies_with_baseline,
    prepare,
    run_each,
    scenario_gpu,
)
from tltsim.strategy import fully_async, one_step_off, overprovision, sync, tail_batching
from tltsim.strategy.spec import Async, OneStepOff, Overprovision, StrategySpec, Sync, TailBatching
from tltsim.strategy.timeline import TAIL_FIELDS, BatchRollout, StepRow, Trainer, lag_rows

SYNC = Sync()


@dataclass(frozen=True)
class StrategyRun:
    """One policy's run under a strategy: the rollouts' event log and the strategy's steps."""

    policy: str
    events: pd.DataFrame
    steps: list[StepRow]


def trainer_for(s: Scenario, gpus: int) -> Trainer:
    """The training phases of a batch on ``gpus`` GPUs of the scenario's kind (``[rl]`` section)."""
    model, gpu = get_model(s.model.name), scenario_gpu(s)
    return lambda prompts, responses: phase_times(model, gpu, gpus, prompts, responses, s.rl)


def batch_rollout(work: StepRequests, res: StepResult, tp: int) -> BatchRollout:
    """A simulated step as the strategies read it (times since the step's start)."""
    finish = generated = None
    responses = np.asarray(work.response_tokens, dtype=np.int64)
    if len(res.response_index) or res.stopped_at is not None:
        finish = np.full(len(responses), np.nan)
        finish[res.response_index] = res.response_finish - res.t_start
    if res.stopped_at is not None:
        generated = responses.copy()
        generated[res.unfinished_index] = res.unfinished_generated
    return BatchRollout(int(work.step), res.makespan, res.finish_times - res.t_start, tp,
                        np.asarray(work.group_ids), np.asarray(work.prompt_tokens, dtype=np.int64),
                        responses, finish, generated)


def launched(s: Scenario, strategy: StrategySpec, inputs: SimInputs) -> list[Any]:
    """The requests each step launches under ``strategy``: the workloads, with the extra groups of
    ``overprovision``."""
    if isinstance(strategy, Overprovision) and strategy.mode == "drop":
        return [overprovision.launch(w, strategy.eta, s.seed) for w in inputs.workloads]
    return list(inputs.workloads)


def run_strategy(s: Scenario, spec: PolicyBase | str, inputs: SimInputs | None = None, *,
                 strategy: StrategySpec = SYNC, run_id: str = "",
                 progress: Callable[[int], None] | None = None) -> StrategyRun:
    """Every step of the scenario under one SD policy and ``strategy``. The rollouts run exactly as
    :func:`tltsim.scenario.run_policy` runs them (the same event log under ``sync``); ``overprovision``
    launches its extra groups and tracks which response finished when; the strategies that stop rollouts
    (``overprovision:mode=resume``, ``async``, ``tail-batching``) drive them through ``roll``."""
    inputs = inputs or prepare(s)
    typed = as_spec(spec)
    track = isinstance(strategy, Overprovision | Async | TailBatching)
    run = RolloutRun(make_policies(typed, inputs), cost=inputs.cost, accept=inputs.accept, engine=inputs.engine,
                     seed=s.seed, deal_mode=s.trace.deal, run_id=run_id, policy_name=typed.name,
                     drafter=inputs.drafter, track_requests=track)
    tp = s.cluster.tp

    def roll(work: Any, stop: Any) -> BatchRollout:
        return batch_rollout(work, run.step(work, progress, stop=stop), tp)

    if isinstance(strategy, Overprovision) and strategy.mode == "resume":
        rows = overprovision.schedule_resume(inputs.workloads, strategy.eta, s.seed, roll,
                                             trainer_for(s, s.cluster.gpus), strategy.label)
        return StrategyRun(typed.name, run.events(), rows)
    if isinstance(strategy, TailBatching):
        rows = tail_batching.schedule(inputs.workloads, strategy.prompt_ratio, strategy.response_ratio, s.seed, roll,
                                      trainer_for(s, s.cluster.gpus), strategy.label)
        return StrategyRun(typed.name, run.events(), rows)
    if isinstance(strategy, Async):
        gpus = strategy.trainer_gpus or s.cluster.gpus
        rows = fully_async.schedule(inputs.workloads, strategy.staleness, roll, trainer_for(s, gpus), gpus,
                                    strategy.label)
        return StrategyRun(typed.name, run.events(), rows)
    works = launched(s, strategy, inputs)
    batches = [batch_rollout(w, run.step(w, progress), s.cluster.tp) for w in works]
    if isinstance(strategy, Sync):
        rows = sync.schedule(batches, trainer_for(s, s.cluster.gpus))
    elif isinstance(strategy, OneStepOff):
        gpus = strategy.trainer_gpus or s.cluster.gpus
        rows = one_step_off.schedule(batches, trainer_for(s, gpus), gpus, strategy.label)
    else:
        rows = overprovision.schedule(batches, [w.batch_groups for w in works], trainer_for(s, s.cluster.gpus),
                                      strategy.label)
    return StrategyRun(typed.name, run.events(), rows)


def steps_frame(runs: list[StrategyRun]) -> pd.DataFrame:
    """``strategy.csv``: one row per (policy, step)."""
    return pd.DataFrame([{"policy": r.policy, **row.row()} for r in runs for row in r.steps])


def lag_frame(runs: list[StrategyRun]) -> pd.DataFrame:
    """``lag.csv``: one row per (policy, step, lag) with its samples and tokens."""
    return pd.DataFrame([{"policy": r.policy, **x} for r in runs for row in r.steps for x in lag_rows(row)])


def totals_frame(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per policy: the whole run's seconds, trained tokens per second, GPU idle share and lag
    (the trained-sample mean and max), dropped samples and, under tail batching only
    (:data:`TAIL_METRICS`), the prompt groups deferred, the long rounds and the tokens discarded."""
    rows = []
    for (policy, strategy), part in steps.groupby(["policy", "strategy"], sort=False):
        total = float(part["t_end"].iloc[-1] - part["t_start"].iloc[0])
        samples = part["trained_samples"].sum()
        gpu_s = float((part["gpus"] * part["step_s"]).sum())
        rows.append({"policy": policy, "strategy": strategy, "steps": len(part), "total_s": total,
                     "tokens_per_s": float(part["trained_tokens"].sum()) / total if total > 0 else float("nan"),
                     "idle_fraction": float(part["gpu_idle_s"].sum()) / gpu_s if gpu_s > 0 else 0.0,
                     "mean_lag": float((part["mean_lag"] * part["trained_samples"]).sum() / samples)
                     if samples else float("nan"),
                     "max_lag": int(part["max_lag"].max()), "dropped_samples": int(part["dropped_samples"].sum()),
                     **_tail_totals(part)})
    return pd.DataFrame(rows)


#: Whole-run metrics of tail batching alone (:func:`totals_frame`; absent for the other strategies).
TAIL_METRICS = ("deferred_groups", "long_rounds", "discarded_tokens")


def _tail_totals(part: pd.DataFrame) -> dict[str, int]:
    """Tail batching's whole-run counts, or nothing for the strategies without its columns."""
    if not set(TAIL_FIELDS) <= set(part.columns) or part["round"].isna().all():
        return {}
    return {"deferred_groups": int(part["deferred_groups"].sum()), "long_rounds": int((part["round"] == "long").sum()),
            "discarded_tokens": int(part["discarded_tokens"].sum())}


def compare_strategy(s: Scenario, strategy: StrategySpec, inputs: SimInputs | None = None, *, progress=None,
                     on_policy=None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Every policy of the scenario (``no-sd`` first) under ``strategy`` on the same workloads: (one
    event log, the per-(policy, step) rollout summary as :func:`tltsim.scenario.compare_policies` gives
    it, with a ``strategy`` column, ``strategy.csv``'s steps, ``lag.csv``'s distribution)."""
    from tltcore.summary import summary_table

    inputs, runs = run_each(s, policies_with_baseline(s.policies), partial(run_strategy, strategy=strategy), inputs,
                            progress=progress, on_each=on_policy)
    events = pd.concat([r.events for r in runs], ignore_index=True)
    summary = summary_table(events, gpus=s.cluster.gpus, tp=s.cluster.tp, baseline=BASELINE_POLICY)
    capped = {w.step: w.capped for w in inputs.workloads}
    summary["capped_responses"] = [capped.get(step, 0) for step in summary["step"]]
    summary.insert(0, "strategy", strategy.label)
    return events, summary, steps_frame(runs), lag_frame(runs)


#: The whole-run strategy metrics summarised over seeds (``seeds_strategy.csv``), as :func:`totals_frame` names them.
STRATEGY_METRICS = ("total_s", "tokens_per_s", "idle_fraction", "mean_lag", "max_lag", "dropped_samples")


@dataclass(frozen=True)
class StrategySeeds:
    """``compare_strategy`` at several simulation seeds, each table stacked with a leading ``seed``
    column: ``summary`` (rollouts per policy and step), ``steps`` (``strategy.csv``), ``lags``
    (``lag.csv``) and ``totals`` (:func:`totals_frame` per seed)."""

    seeds: tuple[int, ...]
    summary: pd.DataFrame
    steps: pd.DataFrame
    lags: pd.DataFrame
    totals: pd.DataFrame


def _with_seed(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    return frame.assign(seed=seed)[["seed", *frame.columns]]


def compare_strategy_seeds(s: Scenario, strategy: StrategySpec, n: int, inputs: SimInputs | None = None, *,
                           progress=None, on_policy: Callable[[int, Any], None] | None = None,
                           on_seed: Callable[[int, pd.DataFrame, pd.DataFrame], None] | None = None
                           ) -> StrategySeeds:
    """:func:`compare_strategy` at the seeds ``s.seed, ..., s.seed + n - 1`` (the same workloads:
    ``trace.seed`` stays, as :mod:`tltsim.seeds` runs policies), so seed ``k`` here is ``--seed k
    --seeds 1``; ``on_policy(seed, spec)`` before each policy of each seed, ``on_seed(seed, events,
    summary)`` after each seed (its events are not kept)."""
    from tltsim.seeds import seed_values, with_seed

    inputs = inputs or prepare(s)
    seeds = seed_values(s.seed, n)
    summaries, steps, lags, totals = [], [], [], []
    for k in seeds:
        sk, ik = with_seed(s, inputs, k)
        hook = (lambda spec, k=k: on_policy(k, spec)) if on_policy is not None else None
        events, summary, st, lg = compare_strategy(sk, strategy, ik, progress=progress, on_policy=hook)
        if on_seed is not None:
            on_seed(k, events, summary)
        del events
        summaries.append(_with_seed(summary, k))
        steps.append(_with_seed(st, k))
        lags.append(_with_seed(lg, k))
        totals.append(_with_seed(totals_frame(st), k))
    cat = partial(pd.concat, ignore_index=True)
    return StrategySeeds(tuple(seeds), cat(summaries), cat(steps), cat(lags), cat(totals))


def seeds_strategy_frame(totals: pd.DataFrame) -> pd.DataFrame:
    """``seeds_strategy.csv``: per (policy, strategy) the whole run's metrics (:data:`STRATEGY_METRICS`)
    as ``<metric>_median``, ``_min`` and ``_max`` over the seeds (:func:`tltsim.seeds.aggregate`), and
    :data:`TAIL_METRICS` where the run has them."""
    from tltsim.seeds import aggregate

    return aggregate(totals, ["policy", "strategy"], (*STRATEGY_METRICS, *(m for m in TAIL_METRICS if m in totals)))
