"""Run warnings (:mod:`tltsim.run_warnings`): each fires on a small simulated case built to show it, names
the worker, batch or share it is about, and stays silent on a neighbouring case where nothing went wrong.
The cases use the bundled ``intern_s1_math`` length profile (no trace file) on 8 GPUs, TP 2 (4 workers)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

from tltcli import app
from tltsim.rl.run import compare_presets
from tltsim.run_warnings import (
    WARNING_COLUMNS,
    RunWarning,
    batch_ranges,
    merge_warnings,
    rl_warnings,
    scenario_warnings,
    slow_span,
    typical_context,
    warnings_frame,
)
from tltsim.scenario import compare_policies, prepare, resolve

SMALL = (("trace.name", "intern_s1_math"), ("cluster.gpus", 8), ("cluster.tp", 2))


def _warnings(*sets: tuple[str, object], presets: bool = False) -> list[RunWarning]:
    s = resolve(None, [(k, v, "--set") for k, v in (*SMALL, *sets)]).scenario
    inputs = prepare(s)
    if presets:
        events, _, summary = compare_presets(s, inputs)
    else:
        events, summary = compare_policies(s, inputs)
    return scenario_warnings(inputs, events, summary)


def _kinds(ws: list[RunWarning], subject: str) -> set[str]:
    return {w.kind for w in ws if w.subject == subject}


def test_switch_never_fired_names_the_worker_its_batch_and_the_threshold() -> None:
    # capped at 256 tokens, every worker's 16 responses finish together: the batch never falls to 8
    ws = _warnings(("trace.prompts_per_step", 8), ("trace.cap", 256),
                   ("policies", "elastic:8+beg-mab,elastic:32+beg-mab"))
    never = [w for w in ws if w.kind == "switch_never_fired"]
    assert [w.subject for w in never] == ["elastic:8+beg-mab"]  # threshold 32 fires at once: no warning
    w = never[0]
    assert w.workers == (0, 1, 2, 3) and w.worker in w.workers
    assert re.search(rf"never fired on 4 of 4 workers \(worker {w.worker}: [\d,]+ decode iterations, none "
                     r"speculative; its smallest running batch was 16, the switch needs 10 iterations in a row at "
                     r"batch <= 8\), though SD would have paid: 8_4_\d+ gives \d\.\d\dx", w.message), w.message
    assert _kinds(ws, "elastic:32+beg-mab") == set()


def test_switch_late_fires_when_the_tail_started_long_before_the_switch_and_not_when_it_fires_at_once() -> None:
    ws = _warnings(("trace.prompts_per_step", 32), ("policies", "elastic+beg-mab,elastic:512+beg-mab"))
    late = [w for w in ws if w.kind == "switch_late"]
    assert [w.subject for w in late] == ["elastic+beg-mab"]
    assert "threshold 32) fired late on 4 of 4 workers" in late[0].message
    assert re.search(r"SD came on [\d.]+ s into its rollout; before that, SD at the batch sizes where it pays >= "
                     r"1\.10x would have saved about [\d.]+ s, \d+% of the worker's rollout", late[0].message)
    assert _kinds(ws, "elastic:512+beg-mab") == set()


def test_switch_cost_fires_on_h20_and_not_on_h100() -> None:
    h20 = _warnings(("trace.prompts_per_step", 32), ("cluster.gpu", "H20"), ("policies", "elastic+beg-mab"))
    cost = [w for w in h20 if w.kind == "switch_cost"]
    assert len(cost) == 1 and cost[0].worker in cost[0].workers
    m = re.search(r"the switch cost more than SD gained on \d of 4 workers \(worker \d: paid ([\d.]+) s "
                  r"re-prefilling/catching up [\d,]+ tokens, SD's iterations (saved|lost) ([\d.]+) s\)",
                  cost[0].message)
    assert m, cost[0].message
    assert m.group(2) == "lost" or float(m.group(1)) > float(m.group(3))
    h100 = _warnings(("trace.prompts_per_step", 32), ("cluster.gpu", "H100"), ("policies", "elastic+beg-mab"))
    assert "switch_cost" not in _kinds(h100, "elastic+beg-mab")


def test_sd_slower_names_the_batch_range_on_h20_and_is_silent_at_small_batch_on_h100() -> None:
    h20 = _warnings(("trace.prompts_per_step", 16), ("cluster.gpu", "H20"), ("policies", "static:8_4_32"))
    assert [w.kind for w in h20] == ["sd_slower"]  # its drafter catch-up at the start costs milliseconds
    slow = h20
    m = re.search(r"static:8_4_32: SD is slower than no-SD on H20 at batch >= (\d+) for 8_4_32: 0\.\d\dx per "
                  r"iteration at batch \1, 0\.\d\dx at 32 .*the policy ran SD there for [\d.]+ s, (\d+)% of its SD "
                  r"decode time", slow[0].message)
    assert m, slow[0].message
    assert 1 < int(m.group(1)) <= 16 and int(m.group(2)) >= 50
    # the loss as the run had it, not only at the one typical context the per-iteration figures use
    rate = re.search(r"emitting tokens at ([\d.]+)x the rate of plain iterations at the same batch sizes",
                     slow[0].message)
    assert rate and 0 < float(rate.group(1)) < 1, slow[0].message
    h100 = _warnings(("trace.prompts_per_step", 2), ("policies", "static:8_4_32,elastic+beg-mab"))
    assert h100 == []  # batch <= 4 per worker: SD pays, the switch fires at once and is cheap


def test_reward_dominated_gives_amdahls_bound_and_not_for_a_rollout_dominated_step() -> None:
    slow_reward = _warnings(("trace.prompts_per_step", 8), ("presets", "tlt"), ("rl.reward_s_per_sample", 100),
                            presets=True)
    assert [w.kind for w in slow_reward] == ["rl_dominated"]
    m = re.search(r"the RL step is reward-dominated: rollout is (\d+)% of veRL's step, reward (\d+)%, actor update "
                  r"\d+%, so tlt's ([\d.]+)x rollout speedup gives at most ([\d.]+)x end to end",
                  slow_reward[0].message)
    assert m, slow_reward[0].message
    share, rs, bound = int(m.group(1)) / 100, float(m.group(3)), float(m.group(4))
    assert int(m.group(2)) > 25 and bound == pytest.approx(1 / (1 - share + share / rs), abs=0.02)
    assert _warnings(("trace.prompts_per_step", 8), ("presets", "tlt"), presets=True) == []


def test_sd_slower_ignores_a_few_exploring_iterations_but_not_a_long_slow_span() -> None:
    s = resolve(None, [(k, v, "--set") for k, v in (*SMALL, ("trace.prompts_per_step", 32),
                                                     ("policies", "elastic+beg-mab"))]).scenario
    inputs = prepare(s)
    events, summary = compare_policies(s, inputs)
    assert scenario_warnings(inputs, events, summary) != [] and "sd_slower" not in {
        w.kind for w in scenario_warnings(inputs, events, summary)}
    mine = events[(events["policy"] == "elastic+beg-mab") & (events["kind"] == "decode")
                  & (events["sd_config"] != "off")]
    sd_s = float((mine["t_end"] - mine["t_start"]).sum())

    def with_slow_row(seconds: float) -> list[str]:
        row = mine.iloc[[0]].copy()
        row["batch_size"], row["sd_config"] = 512, "8_4_48"  # a big tree at batch 512: far below 1x on H100
        row["t_end"] = row["t_start"] + seconds
        more = pd.concat([events, row], ignore_index=True)
        return [w.kind for w in scenario_warnings(inputs, more, summary) if w.kind == "sd_slower"]

    assert with_slow_row(0.01 * sd_s) == []  # 1% of its SD time: a bandit exploring, no finding
    assert with_slow_row(0.5 * sd_s) == ["sd_slower"]


def test_rl_warnings_training_dominated_from_a_summary() -> None:
    summary = pd.DataFrame([
        {"preset": "verl", "status": "ok", "total_s": 100.0, "rollout_s": 30.0, "rollout_share": 0.3,
         "reward_s": 5.0, "actor_update_s": 50.0, "rollout_speedup": 1.0},
        {"preset": "tlt", "status": "ok", "total_s": 85.0, "rollout_s": 15.0, "rollout_share": 0.18,
         "reward_s": 5.0, "actor_update_s": 50.0, "rollout_speedup": 2.0}])
    (w,) = rl_warnings(summary)
    assert "training-dominated" in w.message and "at most 1.18x end to end" in w.message
    assert "free rollout gives at most 1.43x" in w.message
    summary.loc[0, "rollout_share"] = 0.6
    summary.loc[0, ["reward_s", "actor_update_s"]] = 30.0, 5.0  # rollout dominates, but reward is 30% of it
    (w,) = rl_warnings(summary)
    assert "reward-dominated: rollout is 60% of veRL's step, reward 30%" in w.message
    summary.loc[0, "reward_s"] = 10.0
    assert rl_warnings(summary) == []


def test_cli_prints_and_writes_warnings_both_paths_and_the_report_lists_them(tmp_path) -> None:
    args = ["sim", "run", "--trace", "intern_s1_math", "--gpus", "8", "--tp", "2", "--set", "trace.prompts_per_step=8",
            "--set", "trace.cap=256", "--policy", "elastic:8+beg-mab", "--perfetto", "off"]
    one, two = tmp_path / "one", tmp_path / "two"
    res = CliRunner().invoke(app, [*args, "--seeds", "1", "--out", str(one)])
    assert res.exit_code == 0, res.output
    assert "warning: elastic:8+beg-mab: the elastic switch never fired on 4 of 4 workers" in res.output
    table = pd.read_csv(one / "warnings.csv")
    assert tuple(table.columns) == WARNING_COLUMNS and list(table["kind"]) == ["switch_never_fired"]
    res = CliRunner().invoke(app, [*args, "--seeds", "2", "--out", str(two)])
    assert res.exit_code == 0, res.output
    assert re.search(r"warning: elastic:8\+beg-mab: the elastic switch never fired .*"
                     r"\(at 2 of 2 seeds; numbers from seed 0\)", res.output.replace("\n", " "))
    assert list(pd.read_csv(two / "warnings.csv")["held"]) == ["at 2 of 2 seeds; numbers from seed 0"]
    rep = CliRunner().invoke(app, ["report", str(two), "--out", str(tmp_path / "rep")])
    assert rep.exit_code == 0, rep.output
    text = (tmp_path / "rep" / "README.md").read_text()
    assert "## Warnings\n\n- elastic:8+beg-mab: the elastic switch never fired" in text


def test_merge_over_seeds_says_where_each_holds() -> None:
    a = RunWarning("switch_cost", "p", 0, 1, (1,), "first")
    b = RunWarning("switch_cost", "p", 0, 2, (2,), "second")
    c = RunWarning("sd_slower", "q", 0, None, (), "slow")
    merged = merge_warnings([[a], [c], [b, c]], ["seed 0", "seed 1", "seed 2"], "seeds")
    assert [(w.message, w.held) for w in merged] == [
        ("first", "at 2 of 3 seeds: seed 0, seed 2; numbers from seed 0"),
        ("slow", "at 2 of 3 seeds: seed 1, seed 2; numbers from seed 1")]
    assert merged[0].line() == "first (at 2 of 3 seeds: seed 0, seed 2; numbers from seed 0)"
    steps = merge_warnings([[a], [a]], ["step 0", "step 1"], "steps")
    (again,) = merge_warnings([steps, []], ["seed 0", "seed 1"], "seeds")
    assert again.held == "at 2 of 2 steps; numbers from step 0; at 1 of 2 seeds: seed 0; numbers from seed 0"
    frame = warnings_frame(merged)
    assert list(frame["workers"]) == ["1", ""] and frame["worker"].isna().tolist() == [False, True]


def test_batch_ranges_and_typical_context() -> None:
    used = [1, 2, 4, 8, 16, 32, 64]
    assert batch_ranges([8, 16, 32, 64], used) == "batch >= 8"
    assert batch_ranges([2, 4, 32], used) == "batch 2-4, batch 32"
    assert batch_ranges(used, used) == "every batch size (1-64)"
    wide = list(range(50, 80))
    assert slow_span([b for b in wide if b not in (62, 63)], wide) == "most batch sizes >= 50"
    assert slow_span([50, 51, 70], wide) == "batch 50-51, batch 70"
    w = SimpleNamespace(prompt_tokens=[100, 100], response_tokens=[100, 300])
    assert typical_context([w]) == round((100 * 150 + 300 * 250) / 400)


def test_presets_are_checked_under_their_sd_policy_and_steps_merge() -> None:
    ws = _warnings(("trace.prompts_per_step", 32), ("cluster.gpu", "H20"), ("presets", "tlt"),
                   ("trace.num_steps", 2), presets=True)
    cost = [w for w in ws if w.kind == "switch_cost"]
    assert len(cost) == 1 and cost[0].subject == "tlt" and cost[0].step is None
    assert cost[0].message.startswith("tlt (elastic+beg-mab): the switch cost more than SD gained")
    assert cost[0].held == "at 2 of 2 steps; numbers from step 0"
    assert ws[0].kind == "rl_dominated" and "training-dominated" in ws[0].message
    assert "speedup gives at most" not in ws[0].message  # tlt's rollout is slower here: no bound to quote


def test_report_section_for_a_folder_without_warnings_or_with_none(tmp_path) -> None:
    from analysis.report import _warning_sections

    assert "No `warnings.csv` in this folder" in _warning_sections(tmp_path)[1]
    warnings_frame([]).to_csv(tmp_path / "warnings.csv", index=False)
    assert _warning_sections(tmp_path)[1].startswith("None: every elastic switch fired where SD paid")
