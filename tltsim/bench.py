"""Simulator speed benchmark (``tlt sim bench``).

The reference case is the one the speed target is written for: one RL step of all 4,768 responses of
``r1distill_qwen1.5b_aime_8samples`` (596 prompts x 8) on 64 H100 with TP 4 (16 rollout workers),
Qwen2.5-7B, ``elastic+beg-mab``, stochastic acceptance. The timed part is the simulation itself
(one policy's :class:`tltsim.rollout.RolloutRun` step, event-log frame included); loading the trace and building the
cost model are reported separately because they are paid once per sweep, not per policy.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time
from dataclasses import dataclass

import pandas as pd

from tltsim.scenario import AcceptanceSection, Scenario, SimInputs, prepare, run_policy

BENCH_POLICY = "elastic+beg-mab"


def bench_scenario() -> Scenario:
    """The reference scenario (the defaults are already the reference layout)."""
    return Scenario(policies=(BENCH_POLICY,), acceptance=AcceptanceSection(preset="paper-qwen32b", mode="stochastic"))


@dataclass(frozen=True)
class BenchResult:
    """Median wall time of ``repeats`` runs and what one run produced."""

    wall_s: float
    walls: tuple[float, ...]
    prepare_s: float
    events: int
    iterations: int
    requests: int
    makespan_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def iterations_per_s(self) -> float:
        return self.iterations / self.wall_s if self.wall_s > 0 else float("inf")


def _once(inputs: SimInputs, spec: str) -> pd.DataFrame:
    return run_policy(inputs.scenario, spec, inputs)


def run_bench(repeats: int = 3, scenario: Scenario | None = None) -> BenchResult:
    """Time ``repeats`` simulations of the reference step; returns the median."""
    s = scenario or bench_scenario()
    t0 = time.perf_counter()
    inputs = prepare(s)
    prepare_s = time.perf_counter() - t0
    spec = s.policies[0]
    walls = []
    res = None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        res = _once(inputs, spec)
        walls.append(time.perf_counter() - t0)
    assert res is not None
    ev = res
    dec = ev[ev["kind"] == "decode"]
    stage = ev[ev["kind"] == "stage"]
    return BenchResult(wall_s=statistics.median(walls), walls=tuple(walls), prepare_s=prepare_s,
                       events=len(ev), iterations=int(dec["iterations"].sum()),
                       requests=int(inputs.workload.n_requests),
                       makespan_s=float((stage["t_end"] - stage["t_start"]).sum()))


def profile_bench(top: int = 25, scenario: Scenario | None = None) -> str:
    """cProfile of one reference simulation, the ``top`` functions by cumulative time."""
    s = scenario or bench_scenario()
    inputs = prepare(s)
    prof = cProfile.Profile()
    prof.enable()
    _once(inputs, s.policies[0])
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()
