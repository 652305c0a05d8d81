"""Shared test helpers. Tests run CPU-only; see Makefile for the environment."""

from __future__ import annotations

import contextlib
import io
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
                          cwd=cwd or REPO, env=full_env, timeout=600)


def invoke_cli(*args: str) -> subprocess.CompletedProcess:
    """Run ``tlt`` in this process (fast): same entry point, exit code, stdout and stderr."""
    from tltcli import main

    out, err = io.StringIO(), io.StringIO()
    old_argv = sys.argv
    sys.argv = ["tlt", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
    return subprocess.CompletedProcess(["tlt", *args], code, out.getvalue(), err.getvalue())


class Hang(BaseException):
    """SIGALRM in a bounded command: a BaseException, so no ``except Exception`` in tlt swallows it."""


def invoke_bounded(seconds: float, *args: str) -> subprocess.CompletedProcess:
    """:func:`invoke_cli` that fails the test instead of hanging the suite when the command has not
    finished after ``seconds`` (a FIFO read, a server that never answers): the hostile corpora's bound."""
    def fire(signum: int, frame: object) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return invoke_cli(*args)
    except Hang:
        pytest.fail(f"`tlt {' '.join(args)}` did not finish in {seconds:g} s (a hang)")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
