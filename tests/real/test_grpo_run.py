"""`tlt real grpo`: GRPO against a shuffled-reward control (issue 26, item 1), its pieces and its CI size.

The long runs that show learning are commands (reports/grpo-learning/); these tests pin the pieces a
wrong control, band or summary would silently break: the control keeps each group's rewards and loses
who earned them, the band keeps only the rates asked for, the summary's gains are last minus first
evaluation, a run repeats exactly, and the CLI's --tiny size takes seconds.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from tltcore.errors import InputError  # noqa: E402
from tltreal.rl.grpo_run import (  # noqa: E402
    Evaluation,
    GRPORunConfig,
    band_problems,
    choose_band,
    eval_overlap,
    evaluation_problems,
    gains,
    run_arm,
    shuffle_within_groups,
    summarise,
    training_problems,
)
from tltreal.rl.pretrain import PretrainConfig, greedy_generate, pretrain, sample_batch  # noqa: E402
from tltreal.rl.pretrain import training_problems as pretraining_problems  # noqa: E402
from tltreal.rl.task import TaskConfig, held_out  # noqa: E402


def test_the_control_permutes_rewards_within_each_group_only():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.5]
    groups = [0, 0, 0, 0, 1, 1, 1, 1, 2]
    seen = set()
    for seed in range(20):
        got = shuffle_within_groups(rewards, groups, random.Random(seed))
        for g in set(groups):
            idx = [i for i, x in enumerate(groups) if x == g]
            assert Counter(got[i] for i in idx) == Counter(rewards[i] for i in idx)
        seen.add(tuple(got))
    assert len(seen) > 5  # it does permute (not the identity)
    assert shuffle_within_groups(rewards, groups, random.Random(3)) == shuffle_within_groups(
        rewards, groups, random.Random(3))


def test_the_band_keeps_the_rates_asked_for_and_names_them_when_empty():
    rates = pd.DataFrame({"difficulty": [1, 2, 3, 4, 5], "pass_rate": [0.95, 0.8, 0.5, 0.2, 0.1]})
    assert choose_band(rates, 0.2, 0.8) == [2, 3, 4]
    with pytest.raises(InputError, match=r"band.*1: 0.95"):
        choose_band(rates, 0.96, 0.99)


def test_band_problems_are_drawn_from_the_band_and_repeat():
    task = TaskConfig()
    a = band_problems(50, [3, 5], 7, "x", task)
    assert {p.steps for p in a} == {3, 5}
    assert a == band_problems(50, [3, 5], 7, "x", task)
    assert a != band_problems(50, [3, 5], 8, "x", task)


BAND = list(range(4, 13))  # the committed run's band, step counts 4-12


def test_evaluation_problems_are_disjoint_from_training_problems_by_construction():
    """Issue 44 item 4: the committed run drew its 64 evaluation problems and its 640 training problems
    independently from a 900-problem-per-step-count space, and they shared 8, 5 and 9 across seeds 0-2.
    Evaluation now comes from the held-out split and training from the rest: no overlap, at the
    committed size and at a long run's, while the same draws from the whole space do overlap."""
    for steps in (40, 200):
        cfg = GRPORunConfig(steps=steps, prompts_per_step=16, eval_problems=64)
        for seed in (0, 1, 2):
            evaluation = evaluation_problems(cfg, BAND, seed)
            trained = [p for step in range(steps) for p in training_problems(cfg, BAND, seed, step)]
            assert len(evaluation) == 64 and all(held_out(p) for p in evaluation)
            assert not any(held_out(p) for p in trained)
            assert not {p.prompt for p in evaluation} & {p.prompt for p in trained}
            assert eval_overlap(cfg, BAND, seed) == 0
            assert {p.steps for p in evaluation} <= set(BAND) and {p.steps for p in trained} == set(BAND)
    cfg = GRPORunConfig(steps=40)
    whole = [len({p.prompt for p in band_problems(64, BAND, seed, "held-out", cfg.task)}
                 & {p.prompt for step in range(40) for p in band_problems(16, BAND, seed, f"step-{step}", cfg.task)})
             for seed in (0, 1, 2)]
    assert sum(whole) > 0  # without the split the same sizes overlap: the test can see an overlap


def test_the_held_out_split_is_a_fixed_share_of_every_step_count():
    """The split is a property of the problem (its prompt), about HELD_OUT_SHARE of each step count's
    problems, and the same in every process (no Python hash randomisation)."""
    import random

    from tltreal.rl.task import HELD_OUT_SHARE, make_problem

    task = TaskConfig()
    for d in (1, 6, 12):
        problems = {make_problem(random.Random(i), d, task).prompt: make_problem(random.Random(i), d, task)
                    for i in range(3000)}
        share = sum(held_out(p) for p in problems.values()) / len(problems)
        assert abs(share - HELD_OUT_SHARE) < 0.05, (d, share)
    p = make_problem(random.Random(0), 5, task)
    assert held_out(p) == held_out(make_problem(random.Random(0), 5, task, fmt="terse"))  # the format is not a key


def test_pretraining_can_exclude_the_held_out_split_and_keeps_its_old_stream_otherwise():
    import random

    cfg = PretrainConfig()
    excluded = PretrainConfig(exclude_held_out=True)
    rng_a, rng_b = random.Random(1), random.Random(1)
    plain = [p for _ in range(60) for p in pretraining_problems(rng_a, cfg)]
    split = [p for _ in range(60) for p in pretraining_problems(rng_b, excluded)]
    assert any(held_out(p) for p in plain) and not any(held_out(p) for p in split)
    old = random.Random(1)  # the default stream is the one runs made before the split existed
    from tltreal.rl.task import make_problem, sample_difficulty

    assert plain[:16] == [make_problem(old, sample_difficulty(old, cfg.task), cfg.task) for _ in range(16)]


def _steps(values: dict[tuple[int, str], list[float]]) -> pd.DataFrame:
    rows = []
    for (seed, arm), vals in values.items():
        for step, v in zip((0, 5, 10), vals, strict=True):
            rows.append({"seed": seed, "arm": arm, "step": step, "eval_reward_t1": v, "greedy_accuracy": v / 2})
        rows.append({"seed": seed, "arm": arm, "step": 1, "eval_reward_t1": float("nan"),
                     "greedy_accuracy": float("nan")})
    return pd.DataFrame(rows)


def test_summary_gains_are_last_minus_first_evaluation_and_every_seed_must_beat_its_control():
    steps = _steps({(0, "grpo"): [0.3, 0.9, 0.5], (0, "control"): [0.3, 0.2, 0.25], (0, "no-update"): [0.3] * 3,
                    (1, "grpo"): [0.4, 0.1, 0.45], (1, "control"): [0.4, 0.6, 0.5], (1, "no-update"): [0.4] * 3})
    assert gains(steps).set_index(["seed", "arm"]).at[(0, "grpo"), "gain"] == pytest.approx(0.2)
    s = summarise(steps, GRPORunConfig(seeds=(0, 1)))
    assert s["reward_gain_mean"] == pytest.approx((0.2 + 0.05) / 2)
    assert s["control_reward_gain_mean"] == pytest.approx((-0.05 + 0.1) / 2)
    assert s["no_update_reward_gain_mean"] == 0.0
    assert s["greedy_gain_mean"] == pytest.approx((0.1 + 0.025) / 2)
    assert s["margin_over_control_mean"] == pytest.approx((0.25 - 0.05) / 2)
    assert s["margin_over_no_update_mean"] == pytest.approx((0.2 + 0.05) / 2)
    assert s["margin_over_no_update_sd"] == pytest.approx(0.15 / 2**0.5)
    assert [r["above_control"] for r in s["per_seed"]] == [True, False]
    assert [r["above_no_update"] for r in s["per_seed"]] == [True, True]
    assert not s["above_control_every_seed"] and not s["meets_bar"]


def test_the_bar_is_the_margin_over_no_update_not_over_the_control():
    """A control that degrades makes GRPO look good: 0.05 of gain is 0.35 over a control that lost 0.30,
    but not the 0.10 of learning the bar asks for; a run without its no-update arm is refused."""
    values = {(0, "grpo"): [0.5, 0.5, 0.55], (0, "control"): [0.5, 0.3, 0.2], (0, "no-update"): [0.5] * 3}
    s = summarise(_steps(values), GRPORunConfig(seeds=(0,)))
    assert s["margin_over_control_mean"] == pytest.approx(0.35)
    assert s["margin_over_no_update_mean"] == pytest.approx(0.05)
    assert s["above_control_every_seed"] and s["above_no_update_every_seed"] and not s["meets_bar"]
    values[(0, "grpo")] = [0.5, 0.6, 0.65]
    assert summarise(_steps(values), GRPORunConfig(seeds=(0,)))["meets_bar"]
    del values[(0, "no-update")]
    with pytest.raises(InputError, match="no-update"):
        summarise(_steps(values), GRPORunConfig(seeds=(0,)))


@pytest.fixture(scope="module")
def tiny_policy():
    model, tokenizer, _ = pretrain(PretrainConfig(steps=5, layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64,
                                                  sequences=4, row_len=128))
    return model, tokenizer


def test_greedy_sampling_equals_the_pretraining_greedy_decoder(tiny_policy):
    """greedy_generate is sample_batch at temperature 0; the batch (prompts of different lengths,
    right-padded) decodes as each prompt alone does."""
    model, tok = tiny_policy
    texts = ["start 12 add 3 repeat 02\n", "start 99 add 9 repeat 01\n", "start 7 add 12 repeat 3\n"]
    outs = sample_batch(model, tok, [tok.encode(t, bos=True) for t in texts], 20, 0.0, None)
    assert [tok.decode(o) for o in outs] == greedy_generate(model, tok, texts, 20)
    assert outs == [sample_batch(model, tok, [tok.encode(t, bos=True)], 20, 0.0, None)[0] for t in texts]


def test_the_cached_decoder_follows_a_cache_free_forward(tiny_policy):
    """Every greedy token of the cached decoder is the argmax of a full cache-free forward over the
    prompt and the tokens so far (positions and cache lengths right, not only self-consistent)."""
    import copy

    model, tok = tiny_policy
    model = copy.deepcopy(model).to(torch.float64)  # float64: no near-tie flips between the two paths
    prompt = tok.encode("start 7 add 12 repeat 3\n", bos=True)
    (out,) = sample_batch(model, tok, [prompt], 12, 0.0, None)
    seq = list(prompt)
    with torch.no_grad():
        for token in out:
            logits = model.forward_train(torch.tensor([seq]))[0]
            assert int(logits[0, -1].argmax()) == token
            seq.append(token)


def test_a_run_repeats_and_the_control_updates_on_other_rewards(tiny_policy, monkeypatch):
    """A stand-in reward with spread (even response length) so both arms learn from something: the
    first step samples the same responses (same weights, same generator), so the rewards as scored
    are equal, and the control's shuffled rewards give another update (another loss)."""
    import tltreal.rl.grpo_run as grpo_run
    import tltreal.rl.task as task

    def stand_in(problem, text):
        return float(len(text) % 2 == 0)

    monkeypatch.setattr(task, "reward", stand_in)  # what rollouts are paid (tltreal.rl.task.paid)
    monkeypatch.setattr(grpo_run, "reward", stand_in)  # what evaluations score
    model, tok = tiny_policy
    cfg = GRPORunConfig(seeds=(0,), steps=2, prompts_per_step=3, eval_every=5, eval_draws=6, eval_problems=3,
                        pretrain=PretrainConfig(steps=5))
    ev = Evaluation(evaluation_problems(cfg, [1], 0), 5, 12)
    a = pd.DataFrame(run_arm(model, tok, cfg, 0, "grpo", [1], ev, log=lambda _: None)).drop(columns="cpu_s")
    b = pd.DataFrame(run_arm(model, tok, cfg, 0, "grpo", [1], ev, log=lambda _: None)).drop(columns="cpu_s")
    c = pd.DataFrame(run_arm(model, tok, cfg, 0, "control", [1], ev, log=lambda _: None)).drop(columns="cpu_s")
    still = pd.DataFrame(run_arm(model, tok, cfg, 0, "no-update", [1], ev, log=lambda _: None)).drop(columns="cpu_s")
    pd.testing.assert_frame_equal(a, b)
    # the no-update arm samples the same first rollouts, takes no step, and so evaluates as it started
    assert still.loc[0, "train_reward"] == a.loc[0, "train_reward"] and "loss" not in still
    assert still["eval_reward_t1"].dropna().nunique() == 1 and still["greedy_accuracy"].dropna().nunique() == 1
    assert a.loc[0, "learning_responses"] > 0
    assert a.loc[0, "train_reward"] == c.loc[0, "train_reward"]
    assert a.loc[0, "loss"] != pytest.approx(c.loc[0, "loss"], abs=1e-9)
    # evaluated at step 0 and after the last update (eval_every 5 > steps)
    assert list(a["step"]) == [0, 1, 2] and a["eval_reward_t1"].notna().tolist() == [True, False, True]
    assert a["eval_draws"].dropna().tolist() == [6, 6]


def test_tiny_cli_run_writes_its_folder_in_seconds(tmp_path):
    from typer.testing import CliRunner

    from tltcli import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["real", "grpo", "--tiny", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    for key in ("reward_gain_mean", "control_reward_gain_mean", "margin_over_no_update_mean", "seeds", "band",
                "one_line_accuracy", "cpu_s",
                "versions"):
        assert key in summary
    assert summary["command"].startswith("tlt real grpo --tiny")
    assert summary["cpu_s"] < 30
    steps = pd.read_csv(out / "steps.csv")
    assert set(steps["arm"]) == {"grpo", "control", "no-update"} and steps["step"].max() == 2
    assert summary["eval_overlap"] == {"0": 0} and summary["pretraining_excluded_held_out"] is True
    assert (out / "reward.png").is_file() and (out / "band.csv").is_file()
    again = CliRunner().invoke(app, ["real", "grpo", "--tiny", "--out", str(tmp_path / "user"), "--lr", "2"])
    assert isinstance(again.exception, InputError) and again.exception.field == "--lr"
    assert not (tmp_path / "user").exists()


def test_tiny_keeps_every_flag_given_beside_it(tmp_path, monkeypatch):
    """--tiny's sizes replace the defaults only: explicit flags reach the run and its recorded command."""
    from types import SimpleNamespace

    from typer.testing import CliRunner

    import tltreal.rl.grpo_run
    from tltcli import app

    seen = {}

    def run_grpo(cfg, out, *, command, **_):
        seen.update(cfg=cfg, command=command)
        summary = {"reward_gain_mean": 0.0, "control_reward_gain_mean": 0.0, "no_update_reward_gain_mean": 0.0,
                   "margin_over_no_update_mean": 0.0, "margin_over_control_mean": 0.0,
                   "above_control_every_seed": True, "above_no_update_every_seed": True}
        return SimpleNamespace(summary=summary, folder=out)

    monkeypatch.setattr(tltreal.rl.grpo_run, "run_grpo", run_grpo)
    given = ["--steps", "1", "--seed", "3", "--eval-draws", "5", "--band-low", "0.1", "--band-high", "0.9"]
    result = CliRunner().invoke(app, ["real", "grpo", "--tiny", *given, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    cfg = seen["cfg"]
    assert (cfg.steps, cfg.seeds, cfg.eval_draws, cfg.band_low, cfg.band_high) == (1, (3,), 5, 0.1, 0.9)
    assert (cfg.prompts_per_step, cfg.eval_problems, cfg.pretrain.steps, cfg.pretrain.layers) == (2, 4, 40, 2)
    assert seen["command"].startswith("tlt real grpo --tiny --seed 3 --steps 1 --prompts 2 ")
    assert "--eval-draws 5 " in seen["command"] and "--band-low 0.1 --band-high 0.9 " in seen["command"]
