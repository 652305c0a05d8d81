"""`tlt real generate`: prints the metrics, writes an event log the simulator's schema accepts,
and turns bad input into one error line with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

pytest.importorskip("torch")

from conftest import hang_seconds
from tltcore.events import check_event_log
from tltcore.model_config import ModelConfig

CFG = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, model_type="qwen2", qkv_bias=True)


def tlt(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from tltcli import main; sys.argv = ['tlt', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=hang_seconds(24),
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
    # the one default switch (EngineLimits.switch): TLT's re-prefill
    assert set(events["kind"]) == {"prefill", "decode", "switch", "switch_reprefill", "stage"}
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


def test_companion_files_are_checked_up_front_and_only_tlts_are_replaced(config_path, tmp_path):
    """`--out r.parquet` writes r.tokens.jsonl and r.config.json beside it: a rerun replaces the ones
    tlt wrote (their digests are in r.config.json), a user's file of either name is refused in one
    line before any work (its bytes kept), and --force overwrites it without deleting anything."""
    from conftest import invoke_cli

    out = tmp_path / "r.parquet"
    base = ["real", "generate", "--config", str(config_path), "--prompts", "2", "--max-tokens", "3", "--out", str(out)]
    assert invoke_cli(*base).returncode == 0
    first = (tmp_path / "r.tokens.jsonl").read_bytes()
    assert invoke_cli(*base, "--seed", "1").returncode == 0  # tlt's own companions: replaced
    assert (tmp_path / "r.tokens.jsonl").read_bytes() != first
    for name, mine in (("r.tokens.jsonl", b"my notes\n"), ("r.config.json", b'{"mine": true}\n')):
        (tmp_path / name).write_bytes(mine)
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        res = invoke_cli(*base)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and name in res.stderr, res.stderr
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
        assert invoke_cli(*base, "--force").returncode == 0
        assert (tmp_path / name).read_bytes() != mine
    (tmp_path / "r.tokens.jsonl").write_bytes(b"edited\n")  # a tlt file the user changed is theirs now
    assert invoke_cli(*base).returncode == 2


def test_an_output_that_is_an_input_is_refused(tmp_path):
    """`--out run.csv` would write run.config.json: refused when that is the --config being read."""
    from conftest import invoke_cli

    config = tmp_path / "run.config.json"
    config.write_text(json.dumps(CFG.to_hf_dict()))
    res = invoke_cli("real", "generate", "--config", str(config), "--out", str(tmp_path / "run.csv"), "--force")
    assert res.returncode == 2 and "input" in res.stderr, res.stderr
    assert json.loads(config.read_text()) == CFG.to_hf_dict()


def test_generate_help_shows_the_prompt_examples_and_every_option_has_text():
    """Rich markup swallowed the `[ids]` examples; --top-p and --seed had no text."""
    import re

    from typer.testing import CliRunner

    from tltcli import app

    res = CliRunner().invoke(app, ["real", "generate", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert 'one per line: [ids] (token ids, e.g. [1, 5, 9]), {"tokens": [ids]} or {"text": "..."}' in text
    assert "Nucleus sampling" in text and "Seeds the random weights" in text
    rows = re.findall(r"│ +(?:\* +)?(--[a-z-]+)(?: +--no-[a-z-]+)? +<\w+> +(\S*)", res.output)
    assert len(rows) >= 18 and all(first and first != "[default:" for _, first in rows), rows


def test_rl_tiny_help_states_its_measured_cost():
    """`--tiny` said "a few-second" run; with the defaults it takes about 1.5 CPU minutes (measured)."""
    from typer.testing import CliRunner

    from tltcli import app

    res = CliRunner().invoke(app, ["real", "rl", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    text = " ".join(res.output.split())
    assert "few-second" not in text and "a few seconds" not in text
    assert "about 1.5 CPU minutes" in text


def test_rl_tiny_keeps_the_drafter_step_flags_given_beside_it(tmp_path, monkeypatch):
    # --tiny clamped an explicit --budget-steps 50 to 5 and --upper-steps 40 to 10 without a word
    from typer.testing import CliRunner

    import tltreal.rl.adaptive_run as adaptive_run
    from tltcli import app

    seen = []

    def capture(cfg, *args, **kwargs):
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(adaptive_run, "run_adaptive", capture)
    base = ["real", "rl", "--tiny", "--out", str(tmp_path / "r")]
    CliRunner().invoke(app, [*base, "--budget-steps", "50", "--upper-steps", "40"])
    CliRunner().invoke(app, base)
    given, tiny = seen
    assert (given.budget_steps, given.upper_steps, given.upper_samples) == (50, 40, 4)
    assert (tiny.budget_steps, tiny.upper_steps, tiny.upper_samples) == (5, 10, 4)  # tiny's sizes by default
