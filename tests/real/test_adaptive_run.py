"""The real adaptive-drafter RL run, shortened for CI: a tiny policy pre-trained in seconds, two GRPO
steps on two rollout worker processes with the Spot Trainer, the three drafters (static, adaptive,
upper bound) measured on identical text, the designed drift's reward and format shares recorded, our
trace written in the canonical schema, the simulator's drafter dynamics fitted, and the report."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from tltcli import app
from tltcore.errors import InputError
from tltreal.rl.adaptive_run import TRACE_SOURCE, AdaptiveRunConfig, trace_rows
from tltreal.rl.grpo import Rollout
from tltreal.rl.task import sample_problems
from tltsim.traces import load_trace

TINY = ["real", "rl", "--tiny", "--steps", "2", "--prompts", "2", "--max-new-tokens", "48", "--pretrain-steps", "40",
        "--eval-prompts", "4", "--speedup-every", "1", "--bubble", "budget", "--seed", "3", "--reward", "terse",
        "--terse-share", "0.5"]
TIMING = {"rollout_s", "bubble_train_s", "update_s", "eval_s", "step_s", "padded_base_tok_s", "train_overrun_s",
          "upper_train_s", *(f"speedup_{d}{x}" for d in ("static", "adaptive", "upper")
                              for x in ("", "_min", "_max", "_repeats")),
          "e2e_rollout_nosd_s", "e2e_rollout_sd_s", "e2e_update_s", "e2e_rollout_nosd_repeats",
          "e2e_rollout_sd_repeats",
          "e2e_rollout_speedup", "e2e_step_speedup"}


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("rl")
    outs = []
    for name in ("a", "b"):
        res = CliRunner().invoke(app, [*TINY, "--out", str(root / name)])
        assert res.exit_code == 0, res.output
        outs.append(root / name)
    return outs


def test_a_short_run_writes_steps_trace_dynamics_and_report(tiny_runs):
    out = tiny_runs[0]
    steps = pd.read_csv(out / "steps.csv")
    assert steps["step"].tolist() == [0, 1]
    for col in ("accept_static", "accept_adaptive", "accept_upper", "rollout_accept", "bubble_train_s", "train_steps",
                "reward", "answer_reward", "terse_share", "eval_reward", "eval_terse_share", "speedup_static",
                "speedup_adaptive", "speedup_upper", "upper_loss_last"):
        assert steps[col].notna().all(), col
    assert (steps[["accept_static", "accept_adaptive", "accept_upper"]] >= 1).all().all()
    assert steps["eval_text_identical"].all()  # greedy: every drafter measured on the same text
    # the drift's reward pays terse right answers only: never more than the answer reward
    assert (steps["reward"] <= steps["answer_reward"]).all()
    for d in ("static", "adaptive", "upper"):  # three repeats kept, the median inside their range
        reps = steps[f"speedup_{d}_repeats"].map(lambda x: [float(v) for v in x.split()])
        assert (reps.map(len) == 3).all()
        assert (steps[f"speedup_{d}_min"] == reps.map(min)).all() and (steps[f"speedup_{d}_max"] == reps.map(max)).all()
    # the end-to-end step time with and without SD, at the last step only
    last = steps.iloc[-1]
    assert steps["e2e_step_speedup"].notna().tolist() == [False, True]
    assert last["e2e_step_speedup"] == pytest.approx((last["e2e_rollout_nosd_s"] + last["e2e_update_s"]) /
                                                     (last["e2e_rollout_sd_s"] + last["e2e_update_s"]))
    assert len(last["e2e_rollout_sd_repeats"].split()) == 3 and last["e2e_tokens_sd"] > 0
    # the rollout used the drafter committed before its step; budget mode trains every step
    assert steps["drafter_version"].iloc[1] > steps["drafter_version"].iloc[0]
    assert (steps["train_steps"] > 0).all()
    # step 0: both drafters are the initial one, measured on the same prompts and seeds
    assert steps["accept_static"].iloc[0] == steps["accept_adaptive"].iloc[0]
    trace = load_trace(out / "trace.csv")
    assert len(trace) == 2 * 2 * 8 and set(trace["source"]) == {TRACE_SOURCE}
    assert trace.groupby("step").size().tolist() == [16, 16]
    dyn = json.loads((out / "drafter_dynamics.json").read_text())
    assert "fitted" in dyn
    readme = (out / "README.md").read_text()
    assert "Reproduce: `tlt real rl --tiny" in readme and "accept.png" in readme
    assert (out / "accept.png").exists() and (out / "bubble.pdf").exists()
    assert (out / "work" / "final-target" / "model.safetensors").exists()


def test_a_budget_run_repeats_with_the_same_seed(tiny_runs):
    a, b = (pd.read_csv(o / "steps.csv") for o in tiny_runs)
    keep = [c for c in a.columns if c not in TIMING]
    pd.testing.assert_frame_equal(a[keep], b[keep])
    pd.testing.assert_frame_equal(pd.read_csv(tiny_runs[0] / "trace.csv"), pd.read_csv(tiny_runs[1] / "trace.csv"))


def test_a_foreign_out_folder_is_refused_before_any_work(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    res = CliRunner().invoke(app, [*TINY, "--out", str(tmp_path)])
    assert res.exit_code != 0
    assert isinstance(res.exception, InputError) and "not created by tlt" in str(res.exception)
    assert (tmp_path / "mine.txt").read_text() == "keep me" and len(list(tmp_path.iterdir())) == 1


def test_trace_rows_are_canonical(tmp_path):
    problems = sample_problems(2, seed=0)
    rolls = [Rollout(g, (1, 2, 3, 4, 5)[: 3 + k], 2, 1.0) for g in range(2) for k in range(2)]
    rows = trace_rows(7, problems, rolls, group_size=2, cap=3)
    path = tmp_path / "t.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    trace = load_trace(path)
    assert trace["response_tokens"].tolist() == [1, 2, 1, 2]
    assert trace["sample_idx"].tolist() == [0, 1, 0, 1]
    assert trace["hit_cap"].tolist() == [False, False, False, False]
    assert trace["prompt_id"].nunique() == 2 and set(trace["step"]) == {7}


def test_config_refuses_bad_values():
    with pytest.raises(InputError, match="bubble"):
        AdaptiveRunConfig(bubble="sometimes")
    with pytest.raises(InputError, match="temperature"):
        AdaptiveRunConfig(temperature=0.0)
    with pytest.raises(InputError, match="answer, terse, format") as bad:
        AdaptiveRunConfig(reward_kind="short")
    assert bad.value.field == "reward_kind"


def test_the_padded_target_follows_the_policy_from_step_to_step():
    import torch

    from tltcore.model_config import ModelConfig
    from tltreal.model.weights import random_model
    from tltreal.rl.adaptive_run import _padded

    cfg = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    run = AdaptiveRunConfig(pad_layers=1, pad_intermediate=128)
    policy = random_model(cfg, seed=0, dtype=torch.float64)
    tokens = torch.tensor([[1, 2, 3, 4]])
    padded = _padded(policy, None, run)
    with torch.no_grad():  # a policy update
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    again = _padded(policy, padded, run)
    assert again is padded  # built once, refreshed in place
    expected, _ = policy.forward_train(tokens)
    got, _ = again.forward_train(tokens)
    assert torch.allclose(got, expected, atol=1e-10)


def test_records_carry_no_machine_paths(tmp_path, monkeypatch):
    """A run folder is meant to be committed and moved: it records its --pretrained as typed when
    relative, relative to the working folder when under it, else as a placeholder -- never a path of
    the machine that made it (the committed report once recorded /tmp/me/pre400)."""
    from pathlib import Path

    from tltreal.rl.adaptive_run import _write_outputs, record_path

    monkeypatch.chdir(tmp_path)
    assert record_path(Path("runs/pre"), "PRETRAINED") == "runs/pre"
    assert record_path(tmp_path / "runs" / "pre", "PRETRAINED") == "runs/pre"
    assert record_path(Path("/tmp/me/pre400"), "PRETRAINED") == "PRETRAINED"
    assert record_path(None, "PRETRAINED") is None
    cfg = AdaptiveRunConfig(pretrained="/tmp/me/pre400")
    _write_outputs(tmp_path, cfg, pd.DataFrame({"step": [0]}), pd.DataFrame({"step": [0]}), {}, {"pretrained": "x"})
    assert json.loads((tmp_path / "config.json").read_text())["config"]["pretrained"] == "PRETRAINED"


def test_the_committed_adaptive_run_records_no_machine_paths():
    from conftest import REPO

    folder = REPO / "reports" / "adaptive-drafter"
    files = [folder / "README.md", folder / "summary.json", *folder.glob("runs/*/config.json"),
             *folder.glob("runs/*/README.md"), *folder.glob("runs/*/drafter_dynamics.json")]
    assert len(files) > 2
    for path in files:
        text = path.read_text()
        assert not any(root in text for root in ("/tmp/", "/home/", "/work/", "/Users/")), path
