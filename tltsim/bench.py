"""Simulator speed benchmark (``tlt sim bench``).

Cases (``--case``), each timed in **process CPU time** (``time.process_time``: what the simulation
itself costs, unaffected by other processes sharing the cores), the median of ``repeats`` runs:

* ``p1`` (the default, the speed target's reference): one RL step of all 4,768 responses of
  ``r1distill_qwen1.5b_aime_8samples`` (596 prompts x 8) on 64 H100 with TP 4 (16 rollout
  workers), Qwen2.5-7B, ``elastic+beg-mab``, stochastic acceptance. The timed part is the simulation
  (one policy's :class:`tltsim.rollout.RolloutRun` step, event-log frame included); loading the trace
  and building the cost model are reported separately (``prepare_s``) because they are paid once per
  sweep, not per policy. ``nosd`` is the same step under ``no-sd``.
* ``rl100-sim``: the simulation of a whole 100-step RL run of ``--preset tlt`` (with the ``verl``
  baseline ``tlt sim run`` adds), each step 596 AIME prompt groups x 8 = 4,768 responses, 64 H100,
  TP 4. The timed part is building the 100 step workloads (``prepare``) and
  :func:`tltsim.rl.run.compare_presets`: one seed, without the warnings pass or any output. The run
  a user launches (3 seeds, warnings, the results folder) is the command case ``rl100`` of
  ``tlt sim bench`` (:mod:`tltcli.bench_cmd`).
* ``scale``: one step of 500,000 responses on 4,096 H100 (TP 4, 1,024 workers), ``elastic+beg-mab``,
  stochastic. The AIME trace has 596 groups only, so the workload is 62,500 groups drawn with
  replacement (seeded, ``numpy.random.default_rng(0)``) from its 596 groups, each group keeping its
  8 recorded response lengths and prompt length (group ids made unique): the trace's lengths and
  within-group dispersion, resampled.
* ``scenario:NAME``: ``tlt sim run --scenario NAME`` without writing results (prepare and every
  policy, ``no-sd`` included, or every preset with ``verl``), timed whole.
* ``preset:NAME``: one AIME step of one preset alone (:func:`tltsim.rl.run.run_preset`), 64 H100, TP 4.
* ``policy:NAME``: the ``p1`` step under the policy ``NAME`` (e.g. ``policy:cost-aware``), with ``p1``
  itself (``elastic+beg-mab``) timed alternately in the same process: the speed target for a policy
  is a multiple of the reference's time (at most 2x), and a ratio taken side by side holds on a
  loaded box where two separate runs do not.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from tltsim.scenario import AcceptanceSection, Scenario, SimInputs, prepare, run_policy

BENCH_POLICY = "elastic+beg-mab"
CASES = ("p1", "nosd", "rl100-sim", "scale")
SCALE_GPUS = 4096
SCALE_GROUPS = 62_500  # x 8 samples = 500,000 responses
RL100_STEPS = 100
RL100_PROMPTS = 596


def bench_scenario(policy: str = BENCH_POLICY) -> Scenario:
    """The reference scenario (the defaults are already the reference layout)."""
    return Scenario(policies=(policy,), acceptance=AcceptanceSection(preset="paper-qwen32b", mode="stochastic"))


@dataclass(frozen=True)
class BenchResult:
    """Median CPU and wall time of ``repeats`` runs and what one run produced."""

    case: str
    wall_s: float
    walls: tuple[float, ...]
    cpu_s: float
    cpus: tuple[float, ...]
    prepare_s: float
    events: int
    iterations: int
    requests: int
    makespan_s: float
    peak_rss_mb: float
    #: ``policy:NAME`` cases: the CPU seconds of the ``p1`` reference, timed alternately with the case
    reference_cpus: tuple[float, ...] = ()

    @property
    def reference_cpu_s(self) -> float | None:
        """The median CPU seconds of the ``p1`` reference, where it was timed alongside."""
        return statistics.median(self.reference_cpus) if self.reference_cpus else None

    @property
    def events_per_s(self) -> float:
        return self.events / self.cpu_s if self.cpu_s > 0 else float("inf")

    @property
    def iterations_per_s(self) -> float:
        return self.iterations / self.cpu_s if self.cpu_s > 0 else float("inf")


def scale_workload(groups: int = SCALE_GROUPS, seed: int = 0):
    """``groups`` AIME prompt groups drawn with replacement (seeded), as one StepWorkload (module docstring)."""
    from tltsim.traces.workload import StepWorkload

    base = prepare(bench_scenario()).workload
    gid = np.asarray(base.group_ids)
    uniq, inverse = np.unique(gid, return_inverse=True)
    order = np.argsort(inverse, kind="stable")  # rows grouped by group, trace order within a group
    counts = np.bincount(inverse, minlength=len(uniq))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pick = np.random.default_rng(seed).integers(0, len(uniq), size=groups)
    rows = np.concatenate([order[starts[g]:starts[g] + counts[g]] for g in pick])
    new_gid = np.repeat(np.array([f"s{i}" for i in range(groups)]), counts[pick])
    return StepWorkload(step=0, source=base.source, group_ids=new_gid, prompt_tokens=base.prompt_tokens[rows],
                        response_tokens=base.response_tokens[rows], hit_cap=base.hit_cap[rows], cap=base.cap)


def _case(case: str) -> tuple[Callable[[], SimInputs], Callable[[SimInputs], object]]:
    """(prepare, run) of one case."""
    if case in ("p1", "nosd") or case.startswith("policy:"):
        policy = BENCH_POLICY if case == "p1" else "no-sd" if case == "nosd" else case.partition(":")[2]
        s = bench_scenario(policy)
        return (lambda: prepare(s)), (lambda inputs: run_policy(s, s.policies[0], inputs))
    if case == "scale":
        from tltsim.scenario.schema import ClusterSection

        s = bench_scenario().model_copy(update={"cluster": ClusterSection(gpu="H100", gpus=SCALE_GPUS, tp=4)})

        def prep() -> SimInputs:
            return replace(prepare(s), workloads=(scale_workload(),))

        return prep, (lambda inputs: run_policy(s, s.policies[0], inputs))
    if case.startswith("scenario:"):
        from tltsim.scenario import compare_policies, resolve

        s = resolve(case.partition(":")[2], []).scenario

        def whole(_: object) -> object:
            inputs = prepare(s)
            if s.presets:
                from tltsim.rl.run import compare_presets

                return compare_presets(s, inputs)
            return compare_policies(s, inputs)

        return (lambda: None), whole  # type: ignore[return-value]
    if case.startswith("preset:"):
        from tltsim.rl.run import run_preset

        name = case.partition(":")[2]
        s = Scenario(presets=(name,))
        return (lambda: prepare(s)), (lambda inputs: run_preset(s, name, inputs).events)
    if case == "rl100-sim":
        from tltsim.rl.run import compare_presets
        from tltsim.scenario.schema import TraceSection

        s = Scenario(presets=("tlt",), trace=TraceSection(num_steps=RL100_STEPS, prompts_per_step=RL100_PROMPTS))
        # the step workloads are built inside the timed part: re-sampling them is per-step cost
        return (lambda: None), (lambda _: compare_presets(s, prepare(s)))  # type: ignore[return-value]
    raise ValueError(f"unknown bench case {case!r}; one of {CASES}")


def is_case(case: str) -> bool:
    """A fixed case or ``scenario:NAME`` / ``preset:NAME`` / ``policy:NAME``."""
    return case in CASES or (case.partition(":")[0] in ("scenario", "preset", "policy")
                             and bool(case.partition(":")[2]))


def _stats(case: str, res: object, inputs: SimInputs | None) -> tuple[int, int, int, float]:
    ev = res[0] if isinstance(res, tuple) else res
    dec = ev[ev["kind"] == "decode"]
    stage = ev[(ev["kind"] == "stage") & (ev["phase"] == "rollout")]
    requests = int(stage["batch_size"].sum()) if inputs is None else sum(int(w.n_requests) for w in inputs.workloads)
    return len(ev), int(dec["iterations"].sum()), requests, float((stage["t_end"] - stage["t_start"]).sum())


def run_bench(repeats: int = 3, case: str = "p1") -> BenchResult:
    """Time ``repeats`` simulations of ``case``; returns the medians."""
    prep, run = _case(case)
    t0 = time.process_time()
    inputs = prep()
    prepare_s = time.process_time() - t0
    walls, cpus, reference = [], [], []
    alongside = None
    if case.startswith("policy:"):
        ref_prep, ref_run = _case("p1")
        alongside = (ref_run, ref_prep())
    res = None
    for _ in range(max(1, repeats)):
        if alongside is not None:  # the reference first, then the case: alternately, the same load for both
            c0 = time.process_time()
            alongside[0](alongside[1])
            reference.append(time.process_time() - c0)
        w0, c0 = time.perf_counter(), time.process_time()
        res = run(inputs)
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    events, iterations, requests, makespan = _stats(case, res, inputs)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return BenchResult(case=case, wall_s=statistics.median(walls), walls=tuple(walls), cpu_s=statistics.median(cpus),
                       cpus=tuple(cpus), prepare_s=prepare_s, events=events, iterations=iterations,
                       requests=requests, makespan_s=makespan, peak_rss_mb=rss, reference_cpus=tuple(reference))


def profile_bench(top: int = 25, case: str = "p1") -> str:
    """cProfile of one run of ``case``, the ``top`` functions by own time."""
    prep, run = _case(case)
    inputs = prep()
    prof = cProfile.Profile()
    prof.enable()
    run(inputs)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()
