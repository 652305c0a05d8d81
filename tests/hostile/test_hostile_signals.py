"""Signals in the middle of every long-running results-writing command.

Each case starts one command in a real subprocess, waits until it is visibly working (its first
line of output), sends SIGINT (Ctrl-C) or SIGTERM (a scheduler, ``timeout``), and asserts what a
user relies on: exit 130 or 143, exactly one line saying nothing half written was left, no
traceback, no results folder, no temp folder, and the files that were there before untouched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_output_safety import snapshot

from conftest import hang_seconds

TRACE = "tlt_grpo_arith_seed0"


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]  # --out out is appended
    signum: int


_LONG: dict[str, tuple[str, ...]] = {
    "sim-run-rl-steps": ("sim", "run", "--trace", TRACE, "--preset", "tlt", "--steps", "20", "--perfetto", "off"),
    "demo": ("demo", "--trace", TRACE),
    "real-rl": ("real", "rl", "--tiny"),
}
COMMANDS = ("sim run", "demo", "real rl")
CASES: list[Case] = [Case(f"{name}:{signal.Signals(s).name}", argv, s)
                     for name, argv in _LONG.items() for s in (signal.SIGINT, signal.SIGTERM)]
_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
_LINE = {signal.SIGINT: "tlt: interrupted; nothing half written was left behind",
         signal.SIGTERM: "tlt: terminated (SIGTERM); nothing half written was left behind"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_signal_mid_command_leaves_nothing_half_written(case: Case, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("mine")
    before = snapshot(tmp_path)
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tltcli", *case.argv, "--out", "out"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()  # it has started working (imports done, inputs read)
        assert line, proc.communicate(timeout=hang_seconds(12))[1]
        proc.send_signal(case.signum)
        _, err = proc.communicate(timeout=hang_seconds(24))  # a hang guard, by load
    finally:
        proc.kill()
    if proc.returncode == 0:
        pytest.skip("the command finished before the signal arrived")
    assert proc.returncode == _EXIT[case.signum], err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1:] == [_LINE[case.signum]], err
    assert snapshot(tmp_path) == before, sorted(set(snapshot(tmp_path)) ^ set(before))


#: Where a Ctrl-C can land before any command runs: importing typer, then (when the command is looked
#: up) its module with pandas and the simulator takes up to a second, and an interrupt there printed a
#: traceback out of `from tltcli import main`.
IMPORTS = ["typer", "pandas", "tltcore.errors", "tltcli.cli", "tltcli.sweep", "tltsim.scenario"]
_INTERRUPT_AT = """
import os, signal, sys

class Interrupt:  # a real SIGINT, sent by the process to itself as MODULE starts importing
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["tlt", "sweep", "points", "elastic_threshold_gpu"]
from tltcli import main  # what the console script runs
main()
"""


@pytest.mark.parametrize("module", IMPORTS)
def test_ctrl_c_while_importing_is_one_line_and_exit_130(module: str, tmp_path: Path) -> None:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", f"MODULE = {module!r}\n{_INTERRUPT_AT}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.splitlines() == [_LINE[signal.SIGINT]], proc.stderr
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []
