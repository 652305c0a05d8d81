"""`tlt sim run --model` with each family's real config.json and a catalog hub id (offline), and its
one-line error naming the key and the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke_cli

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"
# a parametric length profile: no trace file needed (a fresh clone has no ../shared/traces)
SMALL = ("--trace", "intern_s1_math", "--policy", "static:4_1_4", "--set", "trace.prompts_per_step=8", "--seeds", "1")


@pytest.mark.parametrize(("model", "cluster"), [
    (CONFIGS / "Qwen3-8B" / "config.json", ("--gpus", "8", "--tp", "1")),
    (CONFIGS / "Qwen3-30B-A3B", ("--gpus", "8", "--tp", "2")),
    (CONFIGS / "Mixtral-8x7B-v0.1" / "config.json", ("--gpus", "8", "--tp", "4")),
    (CONFIGS / "DeepSeek-V3" / "config.json", ("--gpus", "8", "--tp", "8", "--gpu", "H200")),
    ("Qwen/Qwen3-30B-A3B", ("--gpus", "8", "--tp", "2")),  # the catalog, offline
])
def test_sim_run_takes_each_family_and_a_catalog_id(tmp_path, model, cluster):
    res = invoke_cli("sim", "run", "--model", str(model), *cluster, *SMALL, "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert "static:4_1_4" in res.stdout and (tmp_path / "r" / "summary.csv").is_file()


def test_an_unsupported_key_is_one_line_naming_the_key_and_the_file(tmp_path):
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    raw = json.loads((CONFIGS / "Qwen3-30B-A3B" / "config.json").read_text())
    bad.write_text(json.dumps({**raw, "foo_bar": 1}))
    res = invoke_cli("sim", "run", "--model", str(bad), *SMALL, "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and not (tmp_path / "r").exists()
    assert res.stderr.strip().splitlines() == [
        f"tlt: error: {bad}, field 'foo_bar': is not supported by tlt's Qwen3-MoE reader (it may change the network); "
        "remove it only if it does not (scenario field model.name)"]


def test_a_scenario_file_naming_a_bad_config_names_the_config(tmp_path):
    bad = tmp_path / "config.json"
    raw = json.loads((CONFIGS / "Mixtral-8x7B-v0.1" / "config.json").read_text())
    bad.write_text(json.dumps({**raw, "quantization_config": {"quant_method": "gptq", "bits": 4}}))
    scenario = tmp_path / "s.toml"
    scenario.write_text('[model]\nname = "config.json"\n')
    res = invoke_cli("sim", "run", "--scenario", str(scenario), *SMALL, "--out", str(tmp_path / "r"))
    assert res.returncode == 2
    assert f"{bad}, field 'quantization_config.quant_method': 'gptq' is not supported" in res.stderr
    assert res.stderr.rstrip().endswith("(scenario field model.name)")


def test_an_unknown_model_points_at_the_catalog():
    res = invoke_cli("sim", "run", "--model", "Qwen/Qwen9-1T", *SMALL)
    assert res.returncode == 2 and "tlt model list" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    res = invoke_cli("cost", "build", "--gpu", "H100", "--model", "Qwen3-30B-A3", "--out", "x.parquet")
    assert res.returncode == 2 and "did you mean" in res.stderr and "Qwen/Qwen3-30B-A3B" in res.stderr
