"""``--wandb``'s logger: a finished output folder becomes one W&B run holding the folder's own numbers,
figures and files; tested in W&B's offline mode (no network), and refused in one line without the package."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.wandb_export import log_folder, payload, require_wandb
from conftest import invoke_cli
from tltcore.errors import InputError


@pytest.fixture(scope="module")
def sim_folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "run"
    res = invoke_cli("sim", "run", "--seeds", "1", "--gpus", "4", "--tp", "2", "--set", "trace.prompts_per_step=8",
                     "--policy", "elastic+beg-mab", "--out", str(out))
    assert res.returncode == 0, res.stderr
    return out


def test_the_payload_is_what_the_folder_holds(sim_folder) -> None:
    p = payload(sim_folder, "sim run")
    summary = pd.read_csv(sim_folder / "summary.csv")
    sd = summary[summary["policy"] == "elastic+beg-mab"]
    assert p.summary["elastic+beg-mab/speedup"] == pytest.approx(float(sd["speedup"].median()))
    assert p.summary["no-sd/speedup"] == 1.0
    assert p.config["trace.prompts_per_step"] == 8 and p.config["cluster.gpus"] == 4
    assert p.table is not None and len(p.table) == len(summary)
    assert sim_folder / "scenario.resolved.toml" in p.files


def test_an_offline_run_logs_the_summary_config_and_files(sim_folder, tmp_path, monkeypatch) -> None:
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    where = Path(log_folder(sim_folder, "sim run", project="tlt-test"))
    assert where.is_relative_to(tmp_path)
    runs = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    record = runs[0].read_bytes()  # W&B's record log: protobuf, keys and JSON values as text
    speedup = payload(sim_folder, "sim run").summary["elastic+beg-mab/speedup"]
    assert b"elastic+beg-mab/speedup" in record and repr(speedup).encode() in record
    assert b"prompts_per_step" in record
    saved = runs[0].parent / "files" / "scenario.resolved.toml"
    assert saved.read_bytes() == (sim_folder / "scenario.resolved.toml").read_bytes()


def test_without_the_package_wandb_is_refused_in_one_line(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(InputError, match=r"pip install 'tlt\[wandb\]'") as err:
        require_wandb()
    assert err.value.field == "--wandb"


def test_wandb_on_the_command_line_logs_advise_and_refuses_early_without_the_package(tmp_path, monkeypatch) -> None:
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    small = ("--trace", "intern_s1_math", "--gpus", "4", "--tp", "2", "--set", "trace.prompts_per_step=4", "--quick")
    res = invoke_cli("advise", *small, "--wandb", "tlt-test", "--out", str(tmp_path / "a"))
    assert res.returncode == 0, res.stderr
    assert "W&B: " in res.stdout
    record = next(tmp_path.glob("wandb/offline-run-*/run-*.wandb")).read_bytes()
    assert b"recommended" in record and (tmp_path / "a" / "ranking.csv").is_file()
    monkeypatch.setitem(sys.modules, "wandb", None)
    res = invoke_cli("sim", "run", "--seeds", "1", "--wandb", "p", "--out", str(tmp_path / "s"))
    assert res.returncode == 2 and "pip install 'tlt[wandb]'" in res.stderr
    assert not (tmp_path / "s").exists()  # refused before anything ran or was written
