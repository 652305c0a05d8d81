"""The example model that ships with the repository runs the `tlt real generate` commands of
docs/guide/real-engine.md as written (tests/test_docs.py checks they are shown there; examples/tiny-llama:
config.json and prompts.jsonl, random weights from --seed)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

pytest.importorskip("torch")

from conftest import REPO, invoke_cli
from tltcore.model_config import ModelConfig

EXAMPLE = REPO / "examples" / "tiny-llama"


def test_the_example_config_is_a_tiny_llama():
    cfg = ModelConfig.from_json(EXAMPLE / "config.json")
    assert cfg.model_type == "llama" and cfg.num_hidden_layers <= 2 and cfg.hidden_size <= 64
    from tltreal.engine.memory_plan import model_params

    assert model_params(cfg) < 200_000  # well under a MB of float32 weights: milliseconds per token on CPU


def test_the_readme_commands_run_on_the_example(tmp_path, monkeypatch):
    """The two commands of docs/guide/real-engine.md's "Generate" section, with the example's paths
    (shorter runs: the same options, fewer tokens), from a working folder holding a copy of examples/."""
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "tiny-llama")
    monkeypatch.chdir(tmp_path)
    first = invoke_cli("real", "generate", "--config", "examples/tiny-llama/config.json", "--prompts", "2",
                       "--max-tokens", "16", "--policy", "elastic:8:3+beg-mab", "--drafter", "oracle")
    assert first.returncode == 0, first.stderr
    assert "mean accept length" in first.stdout
    second = invoke_cli("real", "generate", "--config", "examples/tiny-llama/", "--prompts-file",
                        "examples/tiny-llama/prompts.jsonl", "--max-tokens", "16", "--policy", "static:4_2_6",
                        "--drafter", "oracle", "--out", "run.parquet")
    assert second.returncode == 0, second.stderr
    rows = [json.loads(line) for line in (tmp_path / "run.tokens.jsonl").read_text().splitlines()]
    prompts = [json.loads(line) for line in (EXAMPLE / "prompts.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == [p if isinstance(p, list) else p["tokens"] for p in prompts]
    assert all(1 <= len(r["tokens"]) <= 16 for r in rows)
    assert len(pd.read_parquet(tmp_path / "run.parquet"))
    assert json.loads((tmp_path / "run.config.json").read_text())["tool"] == "tlt"
