"""Progress of long commands (issue 21: `tlt validate` printed three lines in 13-21 minutes).

:class:`~tltcli.progress.PhaseProgress` draws a bar with ETA per phase on a terminal and one
line per phase with the elapsed time elsewhere; ``tltreal.validation.validate`` and ``tltreal.validation.profiler``
report their phases and units to it. A full ``tlt validate`` takes 15+ minutes, so the plumbing is
tested on a tiny real run (one step, two prompt groups, grid of two batch sizes).
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from conftest import needs_shared_traces
from tltcli.progress import PhaseProgress


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_off_a_terminal_one_line_per_phase_with_elapsed_time() -> None:
    buf, clock = io.StringIO(), Clock()
    with PhaseProgress(Console(file=buf, force_terminal=False, width=200), planned=3, clock=clock) as bar:
        bar.phase("warm-up")
        clock.t = 75
        bar.phase("real runs, step 0", 12, "runs")
        for _ in range(12):
            bar.advance()  # silent off a terminal: a line per unit would flood a log
        clock.t = 3725
        bar.phase("writing the report")
    assert buf.getvalue().splitlines() == ["[0:00:00] phase 1/3: warm-up",
                                           "[0:01:15] phase 2/3: real runs, step 0 (12 runs)",
                                           "[1:02:05] phase 3/3: writing the report", "[1:02:05] done"]


def test_on_a_terminal_a_bar_per_phase_with_units_and_eta() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with PhaseProgress(console, planned=2) as bar:
        bar.phase("profiling the engine", 4, "grid points")
        bar.advance(3)
        assert bar._bar is not None
        task = bar._bar.tasks[-1]
        assert (task.completed, task.total, task.description) == (3, 4, "[1/2] profiling the engine")
        bar.phase("writing the table")
        assert bar._bar.tasks[0].finished  # an earlier phase is shown complete
    out = buf.getvalue()
    assert "profiling the engine" in out and "ETA" in out and "[2/2] writing the table" in out


def test_validation_takes_a_plain_callable_or_a_phase_display() -> None:
    pytest.importorskip("torch")
    from tltreal.validation.validate import phases

    said: list[str] = []
    shown = phases(said.append)
    shown.phase("real runs, step 0", 4, "runs")
    shown.advance()
    assert said == ["real runs, step 0"]
    bar = PhaseProgress(Console(file=io.StringIO()))
    assert phases(bar) is bar and phases(None).phase("x") is None


class Recorder:
    """Records what a phase display is told."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, int | None]] = []
        self.done: list[int] = []

    def phase(self, name: str, total: int | None = None, unit: str = "units") -> None:
        self.phases.append((name, total))
        self.done.append(0)

    def advance(self, n: int = 1) -> None:
        self.done[-1] += n


@needs_shared_traces()
@pytest.mark.parametrize("policies", ["static:2_1_2", "static:2_1_2,cost-aware:arms=2_1_2"])
def test_validate_native_reports_every_phase_and_unit(monkeypatch, policies: str) -> None:
    """A tiny real validation: the phases are the ones `tlt validate` plans (tltcli.validate
    ._phase_plan, less the report it writes itself) and each phase's units all arrive. A policy that
    prices its decisions (cost-aware) runs in the first round after the round's profile points, priced
    by that table."""
    pytest.importorskip("torch")
    from tltcli.validate import RealBackend, _phase_plan
    from tltreal.validation.validate import NativeSettings, validate_native
    from tltsim.rollout import simulate_policy_step
    from tltsim.scenario import acceptance_model, load_steps, policies_with_baseline, policy_names, resolve

    s = resolve(None, [("trace.name", "polytrace_rl_rollouts", "t"), ("trace.source", "polytrace/verl_dapo_qwen2.5-32b",
                                                                      "t"),
                       ("trace.prompts_per_step", "1", "t"), ("policies", policies, "t")]).scenario
    workloads = load_steps(s.trace)
    settings = NativeSettings(length_scale=1 / 128, max_batch=2, grid_batches=(1, 2), grid_iterations=2,
                              grid_repeats=1, real_repeats=1)
    rec = Recorder()
    specs = policy_names(policies_with_baseline(s.policies))
    result, _, _ = validate_native(workloads, specs, acceptance_model(s.acceptance), settings,
                                   simulate=simulate_policy_step, progress=rec)
    names = [name for name, _ in rec.phases]
    priced = "cost-aware" in policies
    assert names[0].startswith("building the model") and names[1].startswith("warm-up runs")
    assert names[2].startswith("round 1 (at least 1, at most 1): ") and "interleaved" in names[2]
    if priced:
        assert "cost-aware:arms=2_1_2" in set(result.makespans["policy"])
    assert names[3] == "simulating step 0"
    assert len(names) == _phase_plan(len(workloads), RealBackend.native, rounds=1) - 1
    for (_, total), done in zip(rec.phases, rec.done, strict=True):
        assert done == (total or 0)  # every unit announced arrives, no more


@pytest.mark.parametrize("seed", range(6))
def test_a_burst_of_counts_prints_what_one_call_per_count_prints(seed: int) -> None:
    """``tlt sim run``'s progress lines: ``many(counts)`` (a plain phase's retirements at once) prints
    the lines, with the same counts, that calling the callback once per count prints."""
    import numpy as np

    from tltcli.progress import policy_progress
    from tltsim.rollout.entities import finish_many

    rng = np.random.default_rng(seed)
    total = int(rng.integers(1, 400))
    counts = rng.integers(0, 6, size=int(rng.integers(1, 300))).tolist()
    bursts = np.split(np.arange(len(counts)), np.sort(rng.integers(0, len(counts), size=12)))
    printed = []
    for burst in (False, True):
        buf = io.StringIO()
        with policy_progress(Console(file=buf, force_terminal=False), ["a", "b"], total) as (on_policy, on_finish):
            for spec in ("a", "b"):
                on_policy(spec)
                for part in bursts:
                    chunk = [counts[i] for i in part]
                    if burst:
                        finish_many(on_finish)(chunk)
                    else:
                        for n in chunk:
                            on_finish(n)
        printed.append(buf.getvalue())
    assert printed[0] == printed[1] and "responses)" in printed[0]


def test_a_plain_callable_hears_each_count_of_a_burst() -> None:
    from tltsim.rollout.entities import finish_many

    heard: list[int] = []
    finish_many(heard.append)([3, 0, 1])
    assert heard == [3, 0, 1]


def test_a_burst_that_reaches_the_total_prints_no_line_for_it() -> None:
    from tltcli.progress import policy_progress
    from tltsim.rollout.entities import finish_many

    buf = io.StringIO()
    with policy_progress(Console(file=buf, force_terminal=False), ["a"], 10) as (on_policy, on_finish):
        on_policy("a")
        finish_many(on_finish)([1] * 12)
    assert buf.getvalue().splitlines()[1:] == [f"  a: {k * 10}% ({k}/10 responses)" for k in range(1, 10)]
