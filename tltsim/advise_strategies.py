"""``tlt advise --strategies``: long-tail strategies x SD settings, ranked by whole-run time, with staleness.

The long tail has more than one cure (:mod:`tltsim.strategy`): SD shortens it, one-step-off
asynchrony hides it behind training, over-provisioning cuts it off, tail batching gathers it into a
few long rounds. A user asks which to run and
whether they compose. advise answers on the user's own workload: each strategy with no SD, the
recommended SD setting and TLT's ``elastic:32+beg-mab``, at the grid's seeds, ranked by the median
whole-run time (rollout and training, as the strategy schedules them), with

* its speedup over the synchronous step without SD at the same seed (median, min-max),
* the staleness it costs: the mean and largest policy-version lag of the trained samples,
* the GPUs it holds (one-step-off adds a trainer pool),

and, per strategy, whether SD and the strategy **add** (the combination's speedup is the product
of each alone, within :data:`ADDS_WITHIN`), **reinforce** (more than the product) or **compete** for
the same bubble (SD shortens the tail
the strategy already hides or cuts). What is pure here: the tasks (:func:`strategy_tasks`), one
seed's evaluation (:func:`evaluate_strategies`, top-level: the sweep executors run it as they run
advise's grid), the ranking (:func:`rank_strategies`) and the verdicts (:func:`composition`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from tltcore.errors import InputError
from tltsim.scenario import BASELINE_POLICY, Scenario, with_values

#: ``--strategies all``: every built strategy at its default parameters; over-provisioning by a quarter
#: (dropping or resuming the unfinished groups) and a staleness bound of one version are illustrative
#: settings, not published ones: give ``overprovision:eta=E`` or ``async:staleness=K`` for yours. Tail
#: batching runs at RollPacker's released ratios (1.25 prompts and responses per kept one).
ALL_STRATEGIES: tuple[str, ...] = ("sync", "one-step-off", "overprovision:eta=0.25",
                                   "overprovision:eta=0.25,mode=resume", "async:staleness=1", "tail-batching")
#: TLT's setting, always composed with each strategy beside the recommendation.
TLT_POLICY = "elastic:32+beg-mab"
#: SD and a strategy "add" when their combination's speedup is at least this share of the product of
#: each one's speedup alone; below, they compete for the same bubble.
ADDS_WITHIN = 0.98
#: Steps a strategy comparison needs: an overlap of step t+1 with step t shows only from two steps on.
MIN_STEPS = 2


def parse_strategies(values: Sequence[str]) -> tuple[Any, ...]:
    """The strategy specs of ``--strategies`` (``all``, or specs; repeatable or comma-free list items),
    with ``sync`` always first, once each."""
    from tltsim.strategy.spec import Sync, parse_strategy

    texts: list[str] = []
    for v in values:
        texts.extend(ALL_STRATEGIES if v.strip() == "all" else [v])
    specs = [Sync(), *(parse_strategy(t, where="--strategies") for t in texts)]
    return tuple(dict.fromkeys(specs))


def strategy_policies(rec_policy: str | None) -> tuple[str, ...]:
    """The SD settings composed with each strategy: no SD, the recommendation (when SD pays) and TLT's."""
    return tuple(dict.fromkeys([BASELINE_POLICY, *([rec_policy] if rec_policy else []), TLT_POLICY]))


def strategy_tasks(s: Scenario, seeds: Sequence[int], policies: Sequence[str], switch: str | None
                   ) -> tuple[list[Any], str]:
    """One task per seed over the workload's steps (:func:`tltsim.advise.workload_steps`), or no tasks
    and why: one step cannot show a strategy that overlaps steps."""
    from tltsim.advise import Task, inputs_for, workload_steps

    sk, words = workload_steps(s)
    values: dict[str, Any] = {"policies": tuple(p for p in policies if p != BASELINE_POLICY) or (BASELINE_POLICY,),
                              "presets": ()}
    if switch is not None:
        values["engine.switch"] = switch
    sk = with_values(sk, values)
    n = len(inputs_for(sk).workloads)
    if n < MIN_STEPS:
        return [], (f"not run: the workload gives {n} RL step ({words}); strategies that overlap or cut steps need "
                    f"{MIN_STEPS} or more (set trace.prompts_per_step, e.g. --set trace.prompts_per_step=64)")
    return [Task("strategies", int(k), with_values(sk, {"seed": int(k)})) for k in seeds], words


def evaluate_strategies(scenario: Scenario, strategies: Sequence[Any] = ()) -> pd.DataFrame:
    """One seed: every policy of ``scenario`` under each strategy, one row per (strategy, policy) with
    the whole run's seconds, GPUs, lag and idle share (:func:`tltsim.strategy.run.totals_frame`).
    Top-level, so that it runs in a sweep worker as is."""
    from tltsim.advise import inputs_for
    from tltsim.strategy.run import compare_strategy, totals_frame

    inputs = inputs_for(scenario)
    frames = []
    for spec in strategies:
        _, _, steps, _ = compare_strategy(scenario, spec, inputs)
        totals = totals_frame(steps)
        totals["gpus"] = [int(steps.loc[steps["policy"] == p, "gpus"].max()) for p in totals["policy"]]
        frames.append(totals)
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "seed", scenario.seed)
    return out


def run_strategies(tasks: Sequence[Any], strategies: Sequence[Any], *, workers: int = 1,
                   backend: str = "local", address: str | None = None, on_done=None) -> pd.DataFrame:
    """Every task's rows (:func:`strategy_tasks`), through advise's task runner
    (:func:`tltsim.advise.run_tasks`)."""
    from tltsim.advise import run_tasks

    return run_tasks(tasks, partial(evaluate_strategies, strategies=tuple(strategies)), workers=workers,
                     backend=backend, address=address, on_done=on_done)


def rank_strategies(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (strategy, policy): median, min and max over seeds of the whole-run seconds and of the
    speedup over ``sync`` without SD at the same seed (``speedup_per_gpu``: its median divided by the GPUs
    held relative to that run's, since one-step-off's trainer pool adds GPUs), the lag (mean of the
    per-seed means, largest), the GPUs and idle share; ordered by median seconds (fastest first), ``rank`` from 1."""
    sync_nosd = rows[(rows["strategy"] == "sync") & (rows["policy"] == BASELINE_POLICY)].set_index("seed")
    rows = rows.assign(speedup=rows["seed"].map(sync_nosd["total_s"]) / rows["total_s"])
    rows = rows.assign(speedup_per_gpu=rows["speedup"] * rows["seed"].map(sync_nosd["gpus"]) / rows["gpus"])
    out = []
    for (strategy, policy), part in rows.groupby(["strategy", "policy"], sort=False):
        t, sp = part["total_s"].to_numpy(float), part["speedup"].to_numpy(float)
        out.append({"strategy": strategy, "policy": policy, "total_s_median": float(np.median(t)),
                    "total_s_min": float(t.min()), "total_s_max": float(t.max()),
                    "speedup_median": float(np.median(sp)), "speedup_min": float(sp.min()),
                    "speedup_max": float(sp.max()),
                    "speedup_per_gpu": float(np.median(part["speedup_per_gpu"].to_numpy(float))),
                    "step_s_median": float(np.median(t / part["steps"])),
                    "mean_lag": float(part["mean_lag"].mean()), "max_lag": int(part["max_lag"].max()),
                    "gpus": int(part["gpus"].max()), "idle_fraction": float(part["idle_fraction"].median()),
                    "dropped_samples": int(part["dropped_samples"].median())})
    table = pd.DataFrame(out).sort_values("total_s_median", kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table


@dataclass(frozen=True)
class Composition:
    """Whether SD setting ``policy`` and ``strategy`` add or compete: each one's speedup alone over the
    synchronous step without SD, the combination's, and the product the two would give if they added."""

    strategy: str
    policy: str
    sd_alone: float
    strategy_alone: float
    together: float

    @property
    def product(self) -> float:
        return self.sd_alone * self.strategy_alone

    @property
    def verdict(self) -> str:
        if not all(math.isfinite(x) for x in (self.sd_alone, self.strategy_alone, self.together)):
            return "unknown"
        if self.together > self.product / ADDS_WITHIN:
            return "reinforce"
        if self.together >= ADDS_WITHIN * self.product:
            return "add"
        return "compete" if self.together <= max(self.sd_alone, self.strategy_alone) else "partly compete"

    def line(self) -> str:
        words = {"reinforce": "reinforce: the combination beats the product of each alone (with the rollout "
                              "overlapped, SD's shorter rollout comes off the critical path in full)",
                 "add": "add: the combination is the product of each alone",
                 "partly compete": "partly compete for the same bubble: the combination beats each alone but not "
                                   "their product",
                 "compete": "compete for the same bubble: the combination is no faster than the better one alone "
                            "(SD shortens the tail the strategy already hides or cuts)",
                 "unknown": "cannot tell (a run is missing)"}[self.verdict]
        return (f"{self.strategy} + {self.policy}: {self.together:.3f}x together vs {self.strategy_alone:.3f}x "
                f"(strategy alone) x {self.sd_alone:.3f}x (SD alone) = {self.product:.3f}x: {words}")

    def short(self) -> str:
        """One printed line: the verdict and the two numbers it rests on."""
        sign = {"reinforce": ">", "add": "~", "partly compete": "<", "compete": "<="}.get(self.verdict, "?")
        return (f"{self.strategy} + {self.policy}: {self.verdict} ({self.together:.3f}x together {sign} "
                f"{self.product:.3f}x, the product of each alone)")


def composition(table: pd.DataFrame) -> list[Composition]:
    """Per non-``sync`` strategy and SD setting, :class:`Composition` from the medians of the ranking."""
    med = {(r["strategy"], r["policy"]): float(r["speedup_median"]) for r in table.to_dict("records")}
    out = []
    for strategy in dict.fromkeys(table["strategy"]):
        if strategy == "sync":
            continue
        for policy in dict.fromkeys(table["policy"]):
            if policy == BASELINE_POLICY:
                continue
            out.append(Composition(strategy, policy, med.get(("sync", policy), float("nan")),
                                   med.get((strategy, BASELINE_POLICY), float("nan")),
                                   med.get((strategy, policy), float("nan"))))
    return out


@dataclass(frozen=True)
class StrategyAnswer:
    """The comparison advise prints and writes (``strategies.csv``, ``strategies_runs.csv``, the figure),
    or why it was not run (``skipped``)."""

    table: pd.DataFrame = field(default_factory=pd.DataFrame)
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    compositions: tuple[Composition, ...] = ()
    steps: str = ""
    skipped: str = ""


def check_strategies_option(values: Sequence[str] | None) -> tuple[Any, ...]:
    """``--strategies`` parsed before anything runs (an unknown name is one line, exit 2)."""
    if not values:
        return ()
    try:
        return parse_strategies(values)
    except InputError as exc:
        raise InputError(exc.message, path="--strategies") from None
