"""Whole RL runs: the RL-step controller over a preset's rollout, drafter training and later phases.

One preset (:mod:`tltsim.rl.presets`) runs every step of the scenario in order, on one run-level clock:

1. **rollout** with the drafter the workers hold this step (:class:`~tltsim.rollout.RolloutRun`);
2. **drafter training** on that step's data: the Spot Trainer on released workers during the
   rollout (``spot``; ``bubble`` with a fixed budget and full checkpoints), or a serial stage after
   it (``inline``; ``periodic``: after every ``spot.retrain_every``-th rollout only), or none
   (:mod:`tltsim.spot.analytic_trainer`, :mod:`tltsim.spot.coverage`);
3. **reward, old log-probs, reference, actor update, weight sync**, cluster-wide, one after the
   other (:mod:`tltsim.rl.phases`);
4. the **drafter for the next step**: the committed checkpoints' training recovers its quality, then
   the actor update makes it staler (:mod:`tltcore.drafter.dynamics`). Trained weights are used from
   the next step on, never within the step that trained them.

Before anything runs, the training memory under FSDP is checked (:mod:`tltsim.rl.gpu_memory`): a run that
cannot train is reported out of memory, as the paper reports Qwen2.5-32B on 1-2 nodes.

Everything is written to one event log (phases and kinds of :mod:`tltcore.events`): rollout rows per
worker, ``train`` rows per training worker (phase ``drafter_train``), ``checkpoint`` rows, and one
cluster-wide ``stage`` row per later phase. :func:`step_table` and :func:`run_summary` turn a run into
a per-step table and a per-preset summary with the speedup over ``verl``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from tltcore.drafter.kinds import drafter_kind
from tltcore.drafter.state import DrafterState
from tltcore.events import CLUSTER, EventLog, empty_event_log
from tltcore.model_shape import get_model
from tltcore.policy.base import NO_SD
from tltcore.spot_coordinator import Checkpoint, InlineTraining, SpotTraining, TrainingSession
from tltcore.summary import StepSummary, step_summaries
from tltsim.rl.gpu_memory import TrainingMemoryConfig, training_memory
from tltsim.rl.phases import PhaseTimes, phase_times
from tltsim.rl.presets import (
    BASELINE_PRESET,
    Preset,
    get_preset,
    preset_drafter,
    presets_with_baseline,
    rollout_policy,
)
from tltsim.rollout import RolloutRun
from tltsim.scenario import (
    Scenario,
    SimInputs,
    cost_model,
    drafter_acceptance,
    make_policies,
    prepare,
    run_each,
    scenario_gpu,
)
from tltsim.spot.analytic_trainer import NO_TRAINING, TrainingResult, inline_train, spot_train
from tltsim.spot.coverage import DataCoverage

#: Phases after rollout, in the order they run.
LATER_PHASES = ("reward", "old_log_prob", "reference", "actor_update", "weight_sync")


@dataclass(frozen=True)
class RLRunResult:
    """One preset's run: its event log and per-step table, or why it could not run (``oom``)."""

    preset: str
    events: pd.DataFrame
    steps: pd.DataFrame
    oom: str | None = None


def preset_inputs(s: Scenario, preset: Preset, inputs: SimInputs) -> SimInputs:
    """The simulation inputs with the preset's drafter kind (:func:`tltsim.rl.presets.preset_drafter`):
    its cost model and acceptance."""
    kind = preset_drafter(preset, s.drafter.kind)
    if kind in ("none", s.drafter.kind):
        return inputs
    return replace(inputs, cost=cost_model(s, kind), accept=drafter_acceptance(s, kind),
                   drafter=s.drafter.initial(kind))


def training_memory_problem(s: Scenario) -> str | None:
    """Why the actor cannot train on this cluster (FSDP memory), or None when it fits."""
    cfg = TrainingMemoryConfig(micro_batch_tokens=s.rl.micro_batch_tokens)
    mem = training_memory(get_model(s.model.name), scenario_gpu(s), s.cluster.gpus, cfg)
    return None if mem.fits else f"out of memory in the actor update: {mem.describe()}"


def run_preset(s: Scenario, name: str, inputs: SimInputs | None = None, *, run_id: str = "",
               progress: Callable[[int], None] | None = None) -> RLRunResult:
    """Every step of ``s`` under preset ``name`` (module docstring)."""
    preset = get_preset(name)
    oom = training_memory_problem(s)
    if oom is not None:
        return RLRunResult(preset.name, empty_event_log(), pd.DataFrame(), oom)
    inputs = preset_inputs(s, preset, inputs or prepare(s))
    dyn = s.drafter  # the drafter section moves its own quality (DrafterConfig.after_update/after_training)
    kind = preset_drafter(preset, s.drafter.kind)
    drafter = dyn.initial(kind if kind != "none" else None)
    run = RolloutRun(make_policies(rollout_policy(preset, s.presets_policy), inputs), cost=inputs.cost,
                     accept=inputs.accept, engine=inputs.engine, seed=s.seed, deal_mode=s.trace.deal, run_id=run_id,
                     policy_name=preset.name, drafter=drafter)
    trainer = s.spot.bubble() if preset.training == "bubble" else s.spot
    session = TrainingSession(Checkpoint(version=0, step=-1, trained_samples=0), trainer.checkpoint_every,
                              trainer.selective_checkpoint)
    model, gpu = get_model(s.model.name), scenario_gpu(s)
    rows = []
    previous_tokens = 0
    for index, workload in enumerate(inputs.workloads):
        run.drafter = drafter
        res = run.step(workload, progress)
        buffer = DataCoverage(res.response_finish, res.response_tokens, previous_tokens, s.spot.one_step_offset,
                            s.spot.window_tokens)
        if preset.training in ("spot", "bubble"):
            trained = spot_train(res.finish_times, res.t_end, policy=SpotTraining(s.spot.min_workers),
                                 session=session, cfg=trainer, buffer=buffer, step=res.step)
        elif preset.training in ("inline", "periodic") and InlineTraining(
                s.spot.retrain_every if preset.training == "periodic" else 1).trains_inline(index):
            trained = inline_train(res.t_end, run.n_workers, session=session, cfg=trainer, buffer=buffer,
                                   step=res.step)
        else:
            trained = NO_TRAINING
        _log_training(run.log, trained)
        t = max([res.t_end] + [c.t_end for c in trained.checkpoints] + [g.t_end for g in trained.segments])
        inline_s = t - res.t_end
        phases = phase_times(model, gpu, s.cluster.gpus, workload.prompt_tokens, workload.response_tokens, s.rl)
        t = _log_phases(run.log, phases, t, len(workload.response_tokens))
        run.clock = t
        rows.append(_step_row(preset, res, trained, phases, inline_s, drafter, t))
        if kind != "none" and not drafter_kind(kind).model_free:  # model-free drafters have no weights to go stale
            if preset.adapts:
                drafter = dyn.after_training(drafter, trained.effective, checkpoints=len(trained.checkpoints))
            drafter = dyn.after_update(drafter)
        previous_tokens = int(np.sum(workload.response_tokens))
    events = run.events()
    steps = pd.DataFrame(rows)
    _add_rollout_metrics(steps, events, s)
    return RLRunResult(preset.name, events, steps)


def _log_training(log: EventLog, trained: TrainingResult) -> None:
    for seg in trained.segments:
        log.span(seg.worker, "train", seg.t_start, seg.t_end, phase="drafter_train")
    for c in trained.checkpoints:
        log.span(CLUSTER, "checkpoint", c.t_start, c.t_end, phase="checkpoint")


def _log_phases(log: EventLog, phases: PhaseTimes, t: float, samples: int) -> float:
    for phase in LATER_PHASES:
        dt = getattr(phases, phase)
        if dt > 0:
            log.span(CLUSTER, "stage", t, t + dt, phase=phase, batch=samples, config=NO_SD)
        t += dt
    return t


def _step_row(preset: Preset, res, trained: TrainingResult, phases: PhaseTimes, inline_s: float,
              drafter: DrafterState, t_end: float) -> dict[str, object]:
    return {
        "preset": preset.name, "step": res.step, "t_start": res.t_start, "t_end": t_end,
        "step_s": t_end - res.t_start, "rollout_s": res.makespan, "drafter_train_s": inline_s,
        **{f"{p}_s": getattr(phases, p) for p in LATER_PHASES},
        "drafter_quality": drafter.quality, "drafter_version": drafter.version,
        "trained_samples": trained.committed, "effective_samples": trained.effective,
        "lost_samples": trained.lost, "spot_worker_s": trained.worker_seconds if preset.training != "inline" else 0.0,
        "checkpoints": len(trained.checkpoints),
    }


def _add_rollout_metrics(steps: pd.DataFrame, events: pd.DataFrame, s: Scenario) -> None:
    """Per-step rollout metrics from the event log: the accept length, GPU idle seconds and idle
    fraction :func:`~tltcore.summary.summarize_step` gives each step (:func:`_step_metrics`)."""
    accept, idle, idle_frac = _step_metrics(events, steps["step"].tolist(), s.cluster.gpus, s.cluster.tp)
    steps["mean_accept_length"] = accept
    steps["rollout_gpu_idle_s"] = idle
    steps["rollout_idle_fraction"] = idle_frac
    steps["rollout_share"] = steps["rollout_s"] / steps["step_s"]
    # GPU-seconds of the bubble the Spot Trainer used: training worker-seconds x tp
    steps["bubble_used_fraction"] = [
        (w * s.cluster.tp / i) if i > 0 else 0.0 for w, i in zip(steps["spot_worker_s"], idle, strict=True)]


def _step_metrics(events: pd.DataFrame, step_list: list[int], gpus: int, tp: int
                  ) -> tuple[list[float], list[float], list[float]]:
    """``mean_accept_length``, ``gpu_idle_s`` and ``idle_fraction`` of every step in ``step_list`` from
    one run's log (:func:`~tltcore.summary.step_summaries`, one pass over the whole log); a step without
    rows reads NaN, 0 and 0, as a step summarised from no rows does."""
    by_step: dict[int, StepSummary] = {}
    for x in step_summaries(events, gpus=gpus, tp=tp):
        if x.step in by_step:
            raise ValueError(f"one run's log holds step {x.step} of two policies "
                             f"({by_step[x.step].policy}, {x.policy})")
        by_step[x.step] = x
    none = (float("nan"), 0.0, 0.0)
    rows = [(x.mean_accept_length, x.gpu_idle_s, x.idle_fraction) if (x := by_step.get(step)) else none
            for step in step_list]
    accept, idle, idle_frac = (list(col) for col in zip(*rows, strict=True)) if rows else ([], [], [])
    return accept, idle, idle_frac


def compare_presets(s: Scenario, inputs: SimInputs | None = None, *, progress=None,
                    on_preset: Callable[[str], None] | None = None,
                    on_events: Callable[[pd.DataFrame], None] | None = None,
                    keep_events: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Run every preset of the scenario (``verl`` first) on the same workloads: (one event log, the
    per-(preset, step) table, the per-preset summary with speedups over ``verl``). ``on_events``
    gets each preset's event log as its run ends (the one log is their concatenation in order);
    ``keep_events=False`` drops each log after that and returns an empty one, so that a long run
    holds one preset's events at a time."""
    def one(*args: Any, **kw: Any) -> RLRunResult:
        result = run_preset(*args, **kw)
        if on_events is not None:
            on_events(result.events)
        return result if keep_events else replace(result, events=empty_event_log())

    _, results = run_each(s, presets_with_baseline(s.presets), one, inputs, progress=progress, on_each=on_preset)
    events = pd.concat([r.events for r in results], ignore_index=True) if keep_events else empty_event_log()
    steps = pd.concat([r.steps for r in results if not r.steps.empty], ignore_index=True) \
        if any(not r.steps.empty for r in results) else pd.DataFrame()
    return events, steps, run_summary(results)


def run_summary(results: list[RLRunResult]) -> pd.DataFrame:
    """One row per preset: total and mean step time, time per phase, accept length, the share of
    rollout, and ``speedup`` = verl's total time / this preset's (``rollout_speedup`` likewise)."""
    rows = []
    for r in results:
        if r.oom is not None:
            rows.append({"preset": r.preset, "steps": 0, "status": "oom", "note": r.oom})
            continue
        st = r.steps
        sd = st["mean_accept_length"].notna()
        row = {"preset": r.preset, "steps": len(st), "status": "ok", "note": "",
               "total_s": float(st["step_s"].sum()), "mean_step_s": float(st["step_s"].mean()),
               "rollout_s": float(st["rollout_s"].sum()), "drafter_train_s": float(st["drafter_train_s"].sum()),
               **{f"{p}_s": float(st[f"{p}_s"].sum()) for p in LATER_PHASES},
               "rollout_share": float(st["rollout_s"].sum() / st["step_s"].sum()),
               "mean_accept_length": float(st.loc[sd, "mean_accept_length"].mean()) if sd.any() else float("nan"),
               "trained_samples": int(st["trained_samples"].sum()), "lost_samples": float(st["lost_samples"].sum()),
               "final_drafter_quality": float(st["drafter_quality"].iloc[-1])}
        rows.append(row)
    out = pd.DataFrame(rows)
    base = out[(out["preset"] == BASELINE_PRESET) & (out["status"] == "ok")]
    for col, speed in (("total_s", "speedup"), ("rollout_s", "rollout_speedup")):
        if len(base) and col in out:
            out[speed] = float(base[col].iloc[0]) / out[col]
        else:
            out[speed] = np.nan
    return out
