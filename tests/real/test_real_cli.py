"""`tlt real generate`: prints the metrics, writes an event log the simulator's schema accepts,
and turns bad input into one error line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

pytest.importorskip("torch")

from tltsim.events import check_event_log
from tltsim.model_config import ModelConfig

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, model_type="qwen2", qkv_bias=True)


def tlt(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from tltsim.cli import main; sys.argv = ['tlt', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})


@pytest.fixture()
def config_path(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CFG.to_hf_dict()))
    return path


def test_generate_prints_metrics_and_writes_events(config_path, tmp_path):
    out = tmp_path / "events.parquet"
    proc = tlt("real", "generate", "--config", str(config_path), "--prompts", "3", "--max-tokens", "12",
               "--policy", "elastic:3:2+static:3_2_4", "--drafter", "oracle", "--dtype", "float64",
               "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "tokens/s" in proc.stdout and "mean accept length" in proc.stdout and "latency/iteration" in proc.stdout
    events = pd.read_parquet(out)
    check_event_log(events)
    assert set(events["kind"]) == {"prefill", "decode", "switch", "catch_up", "stage"}
    assert (events["source"] == "real").all()
    resolved = json.loads((tmp_path / "events.config.json").read_text())
    assert resolved["settings"]["policy"] == "elastic:3:2+static:3_2_4"
    assert ModelConfig.from_dict(resolved["model"]) == CFG


def test_generate_with_the_ngram_drafter_is_lossless_and_drafts(config_path, tmp_path):
    """TLT-Base's model-free drafter from the command line: the same tokens as no SD (float64,
    greedy), and SD iterations that draft."""
    outs = {}
    for policy, drafter in (("no-sd", "none"), ("static:4_1_4", "ngram")):
        out = tmp_path / f"{drafter}.parquet"
        proc = tlt("real", "generate", "--config", str(config_path), "--prompts", "3", "--max-tokens", "24",
                   "--policy", policy, "--drafter", drafter, "--dtype", "float64", "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        outs[drafter] = (tmp_path / f"{drafter}.tokens.jsonl").read_text()
        events = pd.read_parquet(out)
    assert outs["ngram"] == outs["none"]
    decode = events[(events["kind"] == "decode") & (events["depth"] > 0)]
    assert len(decode) and decode["drafted"].sum() > 0


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "bogus"], "unknown policy"),
    (["--policy", "static:3_1_3", "--drafter", "none"], "--drafter"),
    (["--drafter", "magic"], "drafter"),
    (["--policy", "static:3_2_4", "--drafter", "ngram"], "chains"),
    (["--config", "/nonexistent/config.json"], "not found"),
])
def test_bad_input_is_one_line_exit_2(config_path, args, message):
    base = ["real", "generate", "--config", str(config_path), "--prompts", "2", "--max-tokens", "3"]
    proc = tlt(*base, *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
