"""Shared test helpers. Tests run CPU-only; see Makefile for the environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _shared() -> Path:
    from tltsim.traces.catalog import shared_dir

    return shared_dir()


#: ../shared beside the checkout, or $TLT_SHARED_DIR (set it to a missing folder to act as a fresh clone).
SHARED = _shared()


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``tlt`` in a subprocess (so exit codes and stderr are the user's)."""
    full_env = {**os.environ, "MPLBACKEND": "Agg", **(env or {})}
    return subprocess.run([sys.executable, "-m", "tltcli", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, env=full_env, timeout=hang_seconds(120))


def invoke_cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``tlt`` in this process (fast): same entry point, exit code, stdout and stderr (the way
    ``tlt sim bench --case cmd:...`` runs a command, :func:`tltcli.bench_cmd.run_once`)."""
    from tltcli.bench_cmd import run_once

    code, out, err = run_once(list(args))
    return subprocess.CompletedProcess(["tlt", *args], code, out, err)


#: A wall-clock bound that only guards against hangs is this many times the CPU-time bound, and more
#: on a loaded machine (:func:`hang_seconds`): a command that blocks (a FIFO read, a server that never
#: answers) uses no CPU, so only wall time can catch it, but wall time is also what a busy machine
#: stretches (issue 39: at load ~18 on 2 cores two wall-bounded tests failed).
HANG_FACTOR = 5.0


def load_factor() -> float:
    """How many times longer than on an idle machine wall time runs now: the 1-minute load average
    per usable core, at least 1 (1 where the platform has no load average)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1.0, load / max(1, cores))


def hang_seconds(seconds: float) -> float:
    """A wall-clock limit that fails a test only for a hang: ``seconds`` (what the work may take on an
    idle machine) times :data:`HANG_FACTOR` times :func:`load_factor`. For subprocess and wait
    timeouts whose only job is to keep a broken command from hanging the suite."""
    return seconds * HANG_FACTOR * load_factor()


def child_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process's finished, waited-for children so far: take the
    difference around a ``subprocess.run`` to bound the child's work, which load does not stretch."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_child_bounded(cpu_s: float, cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, **kwargs)`` that fails the test when the
    child used more than ``cpu_s`` CPU seconds (runaway work), or ran past :func:`hang_seconds` of
    ``cpu_s`` in wall time (a hang): a bound that holds on a loaded machine."""
    before = child_cpu_seconds()
    wall = hang_seconds(cpu_s)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=wall, **kwargs)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(map(str, cmd))}` still ran after {wall:.0f} s of wall time (a hang; load factor "
                    f"{load_factor():.1f})")
    used = child_cpu_seconds() - before
    assert used < cpu_s, f"`{' '.join(map(str, cmd))}` used {used:.1f} s of CPU (bound {cpu_s:g} s)"
    return proc


class Hang(BaseException):
    """A bounded command ran past its bound: a BaseException, so no ``except Exception`` in tlt swallows it."""


def invoke_bounded(seconds: float, *args: str) -> subprocess.CompletedProcess:
    """:func:`invoke_cli` that fails the test instead of running on or hanging the suite: the hostile
    corpora's bound. ``seconds`` bounds the command's CPU time (runaway work: ITIMER_PROF, this
    process's user + system time, which a loaded machine does not stretch); a command that blocks (a
    FIFO read, a server that never answers) uses no CPU, so a wall-clock guard of
    :func:`hang_seconds` (``seconds`` x 5, more under load) fails it as a hang."""
    fired: list[str] = []
    wall = hang_seconds(seconds)

    def fire(signum: int, frame: object) -> None:
        fired.append("cpu" if signum == signal.SIGPROF else "wall")
        raise Hang

    previous = signal.signal(signal.SIGALRM, fire), signal.signal(signal.SIGPROF, fire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, wall)
    try:
        return invoke_cli(*args)
    except Hang:
        if fired[:1] == ["cpu"]:
            pytest.fail(f"`tlt {' '.join(args)}` used more than {seconds:g} s of CPU (runaway work)")
        pytest.fail(f"`tlt {' '.join(args)}` did not finish in {wall:.0f} s of wall time (a hang; load factor "
                    f"{load_factor():.1f})")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGALRM, previous[0])
        signal.signal(signal.SIGPROF, previous[1])


@pytest.fixture
def cli():
    """In-process CLI runner; use ``run_cli`` where a real subprocess matters."""
    return invoke_cli


def real_traces_available() -> bool:
    """Whether every third-party catalogued trace is on the search path (../shared, the fetch cache or
    $TLT_TRACE_PATH): tests of the real traces' contents need them; a fresh clone has none."""
    from tltsim.traces.catalog import catalog, find_file

    files = [e.file for e in catalog().values() if e.file]
    return all(find_file(f) is not None for f in files)


MISSING_TRACE = "is not downloaded: tlt trace fetch"
NEEDS_TRACES = "needs the real traces (no ../shared here; tlt trace fetch NAME gets them)"


def require_real_traces() -> None:
    """Skip (in a fixture or test body) where the real traces are not on the search path."""
    if not real_traces_available():
        pytest.skip(NEEDS_TRACES)


def skip_if_trace_missing(stderr: str) -> None:
    """A data-driven case whose command stopped at a trace that is not downloaded skips in a clone
    without the real traces (its check needs their contents); with them, it runs and must pass."""
    if MISSING_TRACE in stderr and not real_traces_available():
        pytest.skip(NEEDS_TRACES)


def needs_shared_traces() -> pytest.MarkDecorator:
    return pytest.mark.skipif(not real_traces_available(), reason=NEEDS_TRACES)
