"""The adaptive-drafter report over several `tlt real rl` runs (analysis/drafter_report.py, `tlt real
rl-report`), on synthetic run folders: no model is trained, the numbers are chosen so every measure
has one right value.

What must hold: the drifted steps start where the measured text first reaches 50% terse (a no-drift
run compares its second half); the ratio is the mean of per-step ratios over those steps; the upper
bound is compared only where it was measured; the simulator is fitted on one drift run and its error
measured on another; the folder holds the runs' copies, summary.json with the issue's keys and the
figures; bad --run values are one line naming --run; a foreign --out is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis.drafter_report import comparison_steps, drifted_from, ratios, read_run, simulator_check
from tltcli import app
from tltcore.errors import InputError

STEPS = 12


def _steps(drift: bool, seed: int) -> pd.DataFrame:
    step = np.arange(STEPS)
    share = np.clip((step - 3) / 6, 0, 1) if drift else np.zeros(STEPS)  # 0.5 first reached at step 6
    static = 8.0 - (2.0 * share if drift else 0.0) - 0.01 * seed
    adaptive = 8.0 - (0.5 * share if drift else 0.0) - 0.01 * seed  # equal to static at step 0, as measured
    upper = np.where(step % 3 == 0, 8.1 - (0.2 * share if drift else 0.0), np.nan)
    return pd.DataFrame({
        "step": step, "reward": 0.4, "answer_reward": 0.5, "terse_share": share, "eval_reward": 0.6,
        "eval_terse_share": share, "eval_text_identical": True, "hidden_drift": 0.01 * step,
        "accept_static": static, "accept_adaptive": adaptive, "accept_upper": upper, "train_windows": 40,
        "rollout_s": 1.5, "bubble_train_s": 0.2, "train_overrun_s": 2.0, "update_s": 1.0, "eval_s": 3.0,
        "step_s": 7.0,
        "speedup_static": np.where(step % 6 == 0, 1.5, np.nan), "speedup_static_min": 1.4,
        "speedup_static_max": 1.6, "speedup_static_repeats": "1.4 1.5 1.6", "padded_accept_static": 7.0,
        "speedup_adaptive": np.where(step % 6 == 0, 1.7, np.nan), "speedup_adaptive_min": 1.6,
        "speedup_adaptive_max": 1.8, "speedup_adaptive_repeats": "1.6 1.7 1.8", "padded_accept_adaptive": 7.5})


def _run(folder: Path, drift: bool, seed: int, static_temperature: float = 0.0) -> Path:
    folder.mkdir(parents=True)
    _steps(drift, seed).to_csv(folder / "steps.csv", index=False)
    cfg = {"seed": seed, "depth": 8, "eval_prompts": 48, "reward_kind": "format" if drift else "answer",
           "speedup_batch": 4, "speedup_repeats": 3, "initial_temperature": static_temperature,
           "prompts_per_step": 16}
    (folder / "config.json").write_text(json.dumps({"config": cfg, "command": f"tlt real rl --seed {seed} --out X",
                                                    "versions": {"torch": "t"}}))
    (folder / "drafter_dynamics.json").write_text("{}")
    return folder


@pytest.fixture()
def runs(tmp_path):
    return {"drift-s0": _run(tmp_path / "d0", True, 0), "drift-s1": _run(tmp_path / "d1", True, 1),
            "nodrift-s0": _run(tmp_path / "n0", False, 0), "side-s0": _run(tmp_path / "t0", True, 2, 1.0)}


def test_drifted_steps_start_where_the_measured_text_turns_terse(runs):
    d = read_run("drift-s0", runs["drift-s0"])
    assert drifted_from(d.steps) == 6
    part, why = comparison_steps(d)
    assert part["step"].tolist() == list(range(6, STEPS)) and "from step 6" in why
    n = read_run("nodrift-s0", runs["nodrift-s0"])
    part, why = comparison_steps(n)
    assert part["step"].tolist() == list(range(6, STEPS)) and "no drift by design" in why


def test_ratios_are_means_of_per_step_ratios_over_the_drifted_steps(runs):
    d = read_run("drift-s1", runs["drift-s1"])
    r = ratios(d)
    s = _steps(True, 1)
    late = s[s["step"] >= 6]
    assert r["adaptive_over_static"] == pytest.approx(float((late["accept_adaptive"] / late["accept_static"]).mean()))
    up = late.dropna(subset=["accept_upper"])  # steps 6 and 9 only: where it was measured
    assert r["upper_steps"] == 2
    assert r["upper_over_static"] == pytest.approx(float((up["accept_upper"] / up["accept_static"]).mean()))
    assert r["upper_above_both"] is True
    assert ratios(read_run("nodrift-s0", runs["nodrift-s0"]))["adaptive_over_static"] == pytest.approx(1.0)


def test_the_simulator_is_checked_on_a_run_it_was_not_fitted_on(runs):
    fit, other = read_run("drift-s0", runs["drift-s0"]), read_run("drift-s1", runs["drift-s1"])
    summary, table = simulator_check(fit, [other])
    assert summary["fitted_on"] == "drift-s0" and summary["checked_on"] == ["drift-s1"]
    held = table[~table["fitted_on_it"]]
    assert set(held["run"]) == {"drift-s1"} and len(held) == 2 * STEPS
    want = float((held["predicted"] - held["measured"]).abs()[held["drafter"] == "static"].mean())
    assert summary["checked_mae_tokens"]["static"] == pytest.approx(want)
    # step 0: the checked run's own initial acceptance, quality 1 -> predicted equals measured
    first = held[held["step"] == 0]
    assert np.allclose(first["predicted"], first["measured"], atol=1e-6)


def test_the_report_folder_has_the_issue_keys_copies_and_figures(runs, tmp_path):
    grpo = tmp_path / "grpo" / "summary.json"
    grpo.parent.mkdir()
    grpo.write_text(json.dumps({"reward_gain_mean": 0.18, "control_reward_gain_mean": -0.27, "seeds": [0, 1, 2],
                                "command": "tlt real grpo --out G", "meets_bar": True}))
    out = tmp_path / "report"
    args = ["real", "rl-report", *(x for n, f in runs.items() for x in ("--run", f"{n}={f}")),
            "--grpo-summary", str(grpo), "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    for key in ("reward_gain_mean", "control_reward_gain_mean", "adaptive_over_static_accept", "seeds", "commands"):
        assert key in s, key
    # the side run (static trained on samples, not greedy text) is reported beside the seeds, not among them
    assert s["seeds"] == [0, 1] and s["reward_gain_mean"] == 0.18
    assert list(s["side_runs_adaptive_over_static_accept"]) == ["side-s0"]
    per = [ratios(read_run(n, runs[n]))["adaptive_over_static"] for n in ("drift-s0", "drift-s1")]
    assert s["adaptive_over_static_accept"] == pytest.approx(float(np.mean(per)))
    assert s["adaptive_15pct_above_static_every_seed"] is (min(per) >= 1.15)
    assert s["commands"] == [f"tlt real rl --seed {x} --out X" for x in (0, 1, 0, 2)]
    # the GRPO run's own drift (the no-drift runs) is reported as its own headline, whatever it reads
    natural = ratios(read_run("nodrift-s0", runs["nodrift-s0"]))
    assert s["natural_drift_runs"] == ["nodrift-s0"]
    assert s["natural_drift_adaptive_over_static_accept"] == pytest.approx(natural["adaptive_over_static"])
    assert s["natural_drift_15pct_above_static_every_run"] is (natural["adaptive_over_static"] >= 1.15)
    assert "Under the drift the GRPO run itself produces" in (out / "README.md").read_text()
    for name in runs:
        assert (out / "runs" / name / "steps.csv").is_file()
    for fig in ("accept", "drift", "steptime", "simulator", "speedup-drift-s0"):
        assert (out / f"{fig}.png").is_file() and (out / f"{fig}.pdf").is_file(), fig
    readme = (out / "README.md").read_text()
    assert "tlt real rl-report --run" in readme and "not fitted on" in readme and "+0.180" in readme
    # a second report replaces the first (same kind); a folder tlt did not write is refused
    assert CliRunner().invoke(app, args).exit_code == 0
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    res = CliRunner().invoke(app, [*args[:-1], str(foreign)])
    assert res.exit_code != 0 and (foreign / "notes.txt").read_text() == "keep"


def test_a_report_beside_its_grpo_summary_is_written_and_one_holding_it_refused(runs, tmp_path, monkeypatch):
    """The input is the summary file, not its folder: ``--grpo-summary summary.json --out report`` in
    the folder that holds it is fine; an --out that is the file or would hold it is still refused."""
    monkeypatch.chdir(tmp_path)
    Path("summary.json").write_text(json.dumps({"reward_gain_mean": 0.1, "control_reward_gain_mean": 0.0}))
    (tmp_path / "g").mkdir()
    Path("g/summary.json").write_text(Path("summary.json").read_text())
    run = ["real", "rl-report", "--run", f"d={runs['drift-s0']}"]
    res = CliRunner().invoke(app, [*run, "--grpo-summary", "summary.json", "--out", "report"])
    assert res.exit_code == 0, res.output
    assert json.loads(Path("report/summary.json").read_text())["reward_gain_mean"] == 0.1
    for summary, out, why in (("summary.json", "summary.json", "is the input"), ("g/summary.json", "g", "contains"),
                              ("g/summary.json", "g/summary.json/r", "lies inside")):
        res = CliRunner().invoke(app, [*run, "--grpo-summary", summary, "--out", out])
        assert isinstance(res.exception, InputError) and why in str(res.exception), (out, res.output)


@pytest.mark.parametrize("bad", ["noequals", "=dir", "a b=dir", "x=/nonexistent/folder"])
def test_bad_run_values_name_the_option(bad, tmp_path):
    res = CliRunner().invoke(app, ["real", "rl-report", "--run", bad, "--out", str(tmp_path / "o")])
    assert res.exit_code != 0
    assert isinstance(res.exception, InputError) and res.exception.field == "--run"
    assert not (tmp_path / "o").exists()


def test_a_report_without_a_drift_run_is_refused(runs, tmp_path):
    res = CliRunner().invoke(app, ["real", "rl-report", "--run", f"n={runs['nodrift-s0']}", "--out",
                                   str(tmp_path / "o")])
    assert isinstance(res.exception, InputError) and "no drift run" in str(res.exception)


def test_each_runs_upper_bound_recipe_is_stated_never_one_runs_for_all() -> None:
    from analysis.drafter_report import Run, upper_recipes

    def run(name: str, steps: int, samples: int) -> Run:
        cfg = {"upper_every": 3, "upper_steps": steps, "initial_lr": 0.003, "upper_samples": samples}
        return Run(name, pd.DataFrame(), {"config": cfg}, Path(name))

    same = upper_recipes([run("a", 600, 384), run("b", 600, 384)])
    assert same == ("Upper bound: every 3 steps, the static drafter fine-tuned 600 steps at lr 0.003 on the step's "
                    "rollouts plus 384 fresh temperature-1 responses of the step's policy.")
    mixed = upper_recipes([run("a", 1500, 896), run("b", 600, 384), run("c", 1500, 896)])
    assert "Upper bound (a, c): every 3 steps, the static drafter fine-tuned 1500 steps" in mixed
    assert "Upper bound (b): every 3 steps, the static drafter fine-tuned 600 steps" in mixed and "896" in mixed
