"""The package works when installed from its wheel, away from the source checkout.

Builds the wheel from a copy of the tracked sources, installs it into a fresh virtualenv and runs the
trace and simulation examples of docs/guide/traces.md and docs/guide/simulate.md from an unrelated
folder. The fresh environment borrows the already installed dependencies (numpy, pandas, simpy, ...)
through a path file, so the test needs no network; tlt itself comes only from the wheel (the checkout
is neither on the path nor the cwd).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO, SHARED, hang_seconds, needs_shared_traces


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=hang_seconds(60), **kw)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv with tlt installed from a freshly built wheel; returns its bin folder."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    files = _run(["git", "ls-files", "-z"], cwd=REPO).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                  str(root / "dist"), str(src)])
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "dist").glob("tlt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tltsim/data/catalog.toml" in names and "tltsim/data/scenarios/dapo_qwen32b_polytrace.toml" in names
    assert "tltcore/data/model_catalog.json" in names
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    pip = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    assert pip.returncode == 0, pip.stderr
    purelib = _run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    # dependencies only: a plain path line (no site processing), so the checkout's editable install
    # (a .pth + finder in that folder) is not activated
    (Path(purelib.stdout.strip()) / "borrowed_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv / "bin"


def _tlt(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "TLT_TRACE_PATH": str(SHARED / "traces"), "HOME": os.environ.get("HOME", "/tmp")}
    return _run([str(bin_dir / "tlt"), *args], cwd=cwd, env=env)


def test_the_installed_package_is_the_wheel(installed, tmp_path):
    where = _run([str(installed / "python"), "-c", "import tltsim; print(tltsim.__file__)"], cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    assert str(REPO) not in where.stdout and "site-packages" in where.stdout


@needs_shared_traces()
def test_readme_trace_and_simulation_examples_run_from_the_wheel(installed, tmp_path):
    listed = _tlt(installed, "trace", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "polytrace_rl_rollouts" in listed.stdout and "intern_s1_math" in listed.stdout
    stats = _tlt(installed, "trace", "stats", "polytrace_rl_rollouts", "--by", "source", "--format", "csv",
                 cwd=tmp_path)
    assert stats.returncode == 0 and "verl_dapo_qwen2.5-32b" in stats.stdout, stats.stderr
    run = _tlt(installed, "sim", "run", "--scenario", "dapo_qwen32b_polytrace", "--out", "res", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "elastic+beg-mab" in run.stdout and (tmp_path / "res" / "summary.csv").is_file()
    small = _tlt(installed, "sim", "run", "--trace", "polytrace_rl_rollouts", "--step", "0", "--gpus", "8",
                 "--set", "trace.source=polytrace/verl_dapo_qwen2.5-32b", "--policy", "no-sd", cwd=tmp_path)
    assert small.returncode == 0, small.stderr
    assert list((tmp_path / "results" / "sim").iterdir())


def test_the_model_catalog_ships_in_the_wheel(installed, tmp_path):
    """``--model Qwen/Qwen3-30B-A3B`` works offline from the installed package alone."""
    shown = _tlt(installed, "model", "show", "Qwen/Qwen3-30B-A3B", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "128 routed experts" in shown.stdout and "catalog: https://huggingface.co/Qwen/Qwen3-30B-A3B" in shown.stdout
