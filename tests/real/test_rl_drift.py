"""The designed drift's pieces (issue 26, item 2): two solution formats, their classifier, the format
reward, pre-training on a mix, and the learning run paying and recording the format.

Why pinned: the drift run's claim is "GRPO moved the policy from verbose to terse text"; a format
that is not what it says, a classifier that calls mixed text terse, a reward that pays the wrong
format, or a mix that is not the share asked for would each make the measured drift mean nothing.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from tltcore.errors import InputError  # noqa: E402
from tltreal.rl.pretrain import PretrainConfig, training_problems  # noqa: E402
from tltreal.rl.task import (  # noqa: E402
    TaskConfig,
    format_reward,
    make_problem,
    reward,
    sample_problems,
    solution_format,
)


def test_the_two_formats_by_hand():
    """start 37 add 8 repeat 3 (max_steps 64: two-digit counter), in each format."""

    class Fixed(random.Random):  # randrange -> start, randint -> increment
        def randrange(self, *_):  # type: ignore[override]
            return 37

        def randint(self, *_):  # type: ignore[override]
            return 8

    v = make_problem(Fixed(), 3, TaskConfig())
    t = make_problem(Fixed(), 3, TaskConfig(), fmt="terse")
    assert v.prompt == t.prompt == "start 37 add 8 repeat 03\n"
    assert v.solution == "03 37+8=45\n02 45+8=53\n01 53+8=61\nanswer 61"
    assert t.solution == "03 +8=45\n02 +8=53\n01 +8=61\nanswer 61"
    assert v.answer == t.answer == "61"
    with pytest.raises(InputError, match="fmt"):
        make_problem(Fixed(), 3, fmt="chatty")


def test_the_default_format_leaves_the_problem_stream_unchanged():
    a = sample_problems(20, 4)
    rng = random.Random("tlt-rl-task:4")
    from tltreal.rl.task import sample_difficulty

    b = [make_problem(rng, sample_difficulty(rng), fmt="verbose") for _ in range(20)]
    assert a == b


@pytest.mark.parametrize(("text", "fmt"), [
    ("03 37+8=45\n02 45+8=53\nanswer 53", "verbose"),
    ("03 +8=45\n02 +8=53\nanswer 53", "terse"),
    ("03 +8=45\n02 +8=53\nanswer 99", "terse"),     # a wrong answer still has a format
    ("03 37+8=45\n02 +8=53\nanswer 53", "other"),   # mixed
    ("03 45\n02 53\nanswer 53", "other"),           # neither layout
    ("answer 53", "other"),                         # no step lines
    ("03 +8=45\nhello\nanswer 53", "other"),
    ("", "other"),
    (None, "other"),
])
def test_solution_format_by_hand(text, fmt):
    assert solution_format(text) == fmt


def test_format_reward_pays_the_right_answer_in_full_only_in_the_preferred_format():
    p = make_problem(random.Random(1), 2)
    terse = make_problem(random.Random(1), 2, fmt="terse")
    assert reward(p, p.solution) == reward(p, terse.solution) == 1.0
    assert format_reward(p, terse.solution) == 1.0
    assert format_reward(p, p.solution) == 0.0
    assert format_reward(p, p.solution, other_weight=0.25) == 0.25
    assert format_reward(p, p.solution, prefer="verbose") == 1.0
    assert format_reward(p, terse.solution.replace(f"answer {p.answer}", "answer 100")) == 0.0
    with pytest.raises(InputError, match="prefer"):
        format_reward(p, p.solution, prefer="short")


def test_pretraining_mixes_the_formats_at_the_share_asked_for():
    cfg = PretrainConfig(sequences=1000, terse_share=0.2)
    problems = training_problems(random.Random(0), cfg)
    share = sum(solution_format(p.solution) == "terse" for p in problems) / len(problems)
    assert 0.17 < share < 0.23
    assert {solution_format(p.solution) for p in problems} == {"verbose", "terse"}
    plain = training_problems(random.Random(0), PretrainConfig(sequences=50))
    assert all(solution_format(p.solution) == "verbose" for p in plain)
    with pytest.raises(InputError, match="terse_share"):
        PretrainConfig(terse_share=1.5)


def test_the_learning_run_pays_the_format_reward_and_records_the_share(monkeypatch):
    """``reward_kind = "terse"`` scores rollouts with the format reward (a stand-in paying 0.5 here) and
    every row records the rollouts' terse share; an unknown kind is refused."""
    import tltreal.rl.task as task
    from tltreal.rl.grpo_run import Evaluation, GRPORunConfig, band_problems, run_arm
    from tltreal.rl.pretrain import pretrain

    model, tok, _ = pretrain(PretrainConfig(steps=3, layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64,
                                            sequences=4, row_len=128))
    monkeypatch.setattr(task, "format_reward", lambda problem, text: 0.5)  # paid("terse") reads it
    cfg = GRPORunConfig(seeds=(0,), steps=1, prompts_per_step=2, eval_draws=2, eval_problems=2,
                        pretrain=PretrainConfig(steps=3), reward_kind="terse")
    ev = Evaluation(band_problems(2, [1], 0, "held-out", cfg.task), 5, 8)
    rows = pd.DataFrame(run_arm(model, tok, cfg, 0, "grpo", [1], ev, log=lambda _: None))
    assert rows.loc[0, "train_reward"] == 0.5
    assert 0 <= rows.loc[0, "terse_share"] <= 1 and rows["eval_terse_share"].notna().all()
    with pytest.raises(InputError, match="reward_kind"):
        GRPORunConfig(reward_kind="short")


def test_the_summary_reports_the_terse_share_at_the_first_and_last_evaluation():
    from tltreal.rl.grpo_run import GRPORunConfig, summarise

    rows = []
    for arm, shares in (("grpo", [0.2, 0.5, 0.9]), ("control", [0.2, 0.25, 0.1]), ("no-update", [0.2] * 3)):
        for step, share in zip((0, 10, 20), shares, strict=True):
            rows.append({"seed": 0, "arm": arm, "step": step, "eval_reward_t1": 0.5, "greedy_accuracy": 0.5,
                         "eval_terse_share": share})
    s = summarise(pd.DataFrame(rows), GRPORunConfig(seeds=(0,), reward_kind="terse"))
    assert (s["terse_share_first_mean"], s["terse_share_last_mean"]) == (0.2, 0.9)
    assert (s["control_terse_share_first_mean"], s["control_terse_share_last_mean"]) == (0.2, 0.1)
    assert s["reward_kind"] == "terse"
