"""`tlt sim bench --case cmd:"<a tlt command>"`: time a whole ``tlt`` command as a user launches it.

The simulator's own cases (:mod:`tltsim.bench`) time the simulation alone; what users wait for is the
command around it -- trace loading, every policy and seed, the warnings pass, the summary and the files
written. A command case runs that command **in this process** through the CLI's own entry point
(:func:`tltcli.cli.main`, as the tests' ``invoke_cli`` does: the same parsing, exit code and outputs,
without a second interpreter's ~1 s of imports, which ``tlt --help`` measures on its own), ``repeats``
times, and reports the medians of

* **CPU seconds**: this process's CPU time plus that of every process it started (a sweep's or a
  parallel advise's workers: psutil's per-process times, those of exited children through their
  parent's), so a command that spreads over processes is not flattered; and
* **peak RSS**: the largest resident set of this process during the run (Linux: the high-water mark
  reset before each run through ``/proc/self/clear_refs``; elsewhere the process's peak so far, said so
  in the output). Worker processes' memory is not included.

``{out}`` in a command is replaced by a fresh, not yet existing folder inside a temporary directory for
each run (removed afterwards), so a command that resumes or refuses a folder it wrote before (``tlt sweep
run``, ``--out``) does the whole work every time. Commands that write to a default folder instead write
there, as they would for a user.

Named cases (:data:`COMMAND_CASES`) are the commands the speed targets of the project name.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tltcore.errors import InputError

#: The whole commands the speed targets are stated for (``tlt sim bench --case NAME``).
COMMAND_CASES: dict[str, str] = {
    "advise-aime": "advise --scenario aime_qwen7b_64xh100 --out {out}",
    "advise-dapo": "advise --scenario dapo_qwen32b_polytrace --out {out}",
    "advise-quick": "advise --scenario aime_qwen7b_64xh100 --quick --out {out}",
    # the 100-step run a user launches: 3 seeds by default, the warnings pass and the results folder included
    "rl100": "sim run --preset tlt --steps 100 --set trace.prompts_per_step=596 --out {out}",
    "sweep16": "sweep run elastic_threshold_gpu --limit 16 --out {out}",
}
CMD_PREFIX = "cmd:"


def is_command_case(case: str) -> bool:
    """A named command case or ``cmd:<a tlt command>``."""
    return case in COMMAND_CASES or (case.startswith(CMD_PREFIX) and bool(case[len(CMD_PREFIX):].strip()))


def command_words(case: str) -> list[str]:
    """The ``tlt`` arguments of a command case (without the leading ``tlt``), ``{out}`` still in them."""
    text = COMMAND_CASES.get(case, case[len(CMD_PREFIX):] if case.startswith(CMD_PREFIX) else case)
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"cannot split the command {text!r}: {exc}", path="--case") from None
    if words and words[0] == "tlt":
        words = words[1:]
    if not words:
        raise InputError("cmd: names no tlt command", path="--case")
    if words[0] == "sim" and len(words) > 1 and words[1] == "bench":
        raise InputError("a command case cannot time tlt sim bench itself", path="--case")
    return words


def check_command(words: list[str]) -> None:
    """Parse ``tlt WORDS`` with the CLI's own parser without running it: an unknown command or option
    fails here, before anything is timed."""
    import typer
    from typer.core import TyperGroup

    cli = _cli()
    command = typer.main.get_command(cli.app)
    rest = list(words)
    path = ["tlt"]
    while isinstance(command, TyperGroup) and rest and not rest[0].startswith("-"):
        sub = command.get_command(command.make_context(" ".join(path), [], resilient_parsing=True), rest[0])
        if sub is None:
            raise InputError(f"`{' '.join(path)}` has no command {rest[0]!r}", path="--case")
        path.append(rest.pop(0))
        command = sub
    if "--help" in rest:  # parsing it prints the help and exits: nothing more to check
        return
    try:
        command.make_context(" ".join(path), rest)
    except cli.click_errors.ClickException as exc:
        raise InputError(f"`tlt {' '.join(words)}`: {exc.format_message()}", path="--case") from None


def _cli():
    """:mod:`tltcli.cli`, looked up when a bench runs: the bench is one of the commands of the CLI it
    runs (``tlt sim bench`` lives in :mod:`tltcli.sim`, which the CLI imports), so a static import
    would close an import circle; resolved at run time, as :func:`tltcli.main` resolves it."""
    return importlib.import_module("tltcli.cli")


@dataclass(frozen=True)
class CommandBench:
    """Median CPU seconds, wall seconds and peak RSS of ``repeats`` runs of one command."""

    case: str
    command: str
    cpu_s: float
    cpus: tuple[float, ...]
    wall_s: float
    walls: tuple[float, ...]
    peak_rss_mb: float
    rss_reset: bool  # False: the peak is the process's since it started (no per-run reset here)
    exit_code: int


def _tree_cpu() -> float:
    """CPU seconds of this process and every process it started: its own times, its reaped children's,
    and each live descendant's own and reaped children's (a pool worker that exited is counted in its
    parent's children times)."""
    import psutil

    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in psutil.Process().children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.Error:  # exited between listing and reading: its parent's times hold it later
            continue
        total += c.user + c.system + c.children_user + c.children_system
    return total


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_mb(reset: bool) -> float:
    if reset:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_once(words: list[str]) -> tuple[int, str, str]:
    """``tlt WORDS`` in this process: (exit code, stdout, stderr)."""
    main = _cli().main
    out, err = io.StringIO(), io.StringIO()
    old_argv = sys.argv
    sys.argv = ["tlt", *words]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
    return code, out.getvalue(), err.getvalue()


def profile_command(case: str, top: int = 25) -> str:
    """cProfile of one run of ``case``'s command, the ``top`` functions by own time."""
    import cProfile
    import pstats

    words = command_words(case)
    check_command([w.replace("{out}", "OUT") for w in words])
    with tempfile.TemporaryDirectory(prefix="tlt-bench-") as tmp:
        prof = cProfile.Profile()
        prof.enable()
        run_once([w.replace("{out}", str(Path(tmp) / "out")) for w in words])
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def run_command_bench(case: str, repeats: int = 3) -> CommandBench:
    """Run the command of ``case`` ``repeats`` times (module docstring); a run that fails stops the
    bench with its own error line."""
    words = command_words(case)
    check_command([w.replace("{out}", "OUT") for w in words])
    cpus, walls, peaks = [], [], []
    reset = False
    code = 0
    for _ in range(max(1, repeats)):
        with tempfile.TemporaryDirectory(prefix="tlt-bench-") as tmp:
            args = [w.replace("{out}", str(Path(tmp) / "out")) for w in words]
            reset = _reset_peak_rss()
            c0, w0 = _tree_cpu(), time.perf_counter()
            code, _, err = run_once(args)
            walls.append(time.perf_counter() - w0)
            cpus.append(_tree_cpu() - c0)
            peaks.append(_peak_rss_mb(reset))
        if code != 0:
            last = err.strip().splitlines()[-1] if err.strip() else f"exit {code}"
            raise InputError(f"`tlt {' '.join(words)}` failed (exit {code}): {last}", path="--case")
    return CommandBench(case=case, command="tlt " + " ".join(words), cpu_s=statistics.median(cpus),
                        cpus=tuple(cpus), wall_s=statistics.median(walls), walls=tuple(walls),
                        peak_rss_mb=statistics.median(peaks), rss_reset=reset, exit_code=code)
