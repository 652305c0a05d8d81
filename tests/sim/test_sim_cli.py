"""`tlt sim run` on a real trace step, and its bad-input path."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
from typer.testing import CliRunner

from conftest import hang_seconds, needs_shared_traces
from tltcli import app
from tltcore.events import check_event_log
from tltsim.scenario import load_scenario, policy_names


@needs_shared_traces()
def test_run_on_polytrace_step_writes_results_and_elastic_beats_no_sd(tmp_path):
    out = tmp_path / "res"
    result = CliRunner().invoke(app, ["sim", "run", "--trace", "polytrace_rl_rollouts", "--step", "0",
                                      "--policy", "elastic+beg-mab", "--seeds", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "no-sd" in result.output and "elastic+beg-mab" in result.output and "speedup" in result.output
    assert "one simulation seed (--seeds 1): no spread" in result.output
    assert sorted(p.name for p in out.iterdir()) == [".tlt-results.json", "bound.csv", "events.parquet",
                                                     "scenario.resolved.toml", "summary.csv", "trace.json",
                                                     "warnings.csv"]
    bound = pd.read_csv(out / "bound.csv")  # the upper bound printed, in a file (issue 39)
    assert list(bound.columns) == ["step", "bound_makespan_s", "bound_speedup", "queued_workers"]
    assert f"in under {bound['bound_makespan_s'].sum():.2f} s (speedup <= {bound['bound_speedup'][0]:.3f}x)" \
        in result.output
    summary = pd.read_csv(out / "summary.csv").set_index("policy")
    assert summary.loc["no-sd", "speedup"] == 1.0
    assert summary.loc["elastic+beg-mab", "speedup"] > 1.05
    assert summary.loc["elastic+beg-mab", "makespan_s"] < summary.loc["no-sd", "makespan_s"]
    events = pd.read_parquet(out / "events.parquet")
    check_event_log(events)
    assert set(events["kind"]) >= {"prefill", "decode", "switch", "switch_reprefill", "idle", "stage"}
    trace = json.loads((out / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(events) and {"decode off", "switch_reprefill", "stage rollout"} <= {
        e["name"] for e in spans}
    again = load_scenario(out / "scenario.resolved.toml")
    assert again.trace.step == 0 and policy_names(again.policies) == ("no-sd", "elastic+beg-mab")


def _tlt(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", "from tltcli import main; main()", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=hang_seconds(24))


def test_bad_scenario_exits_2_with_one_line_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster]\ngpus = 10\ntp = 4\n")
    out = tmp_path / "never"
    proc = _tlt("sim", "run", "--scenario", str(bad), "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cluster.gpus" in lines[0] and str(bad) in lines[0]
    assert not out.exists() and not (tmp_path / "results").exists()


def test_bad_flag_value_and_unknown_trace_exit_2(tmp_path):
    proc = _tlt("sim", "run", "--tp", "8", "--out", str(tmp_path / "x"), cwd=tmp_path)
    assert proc.returncode == 2 and "--tp" in proc.stderr and "cluster.tp" in proc.stderr
    proc = _tlt("sim", "run", "--trace", "no_such_trace", "--out", str(tmp_path / "y"), cwd=tmp_path)
    assert proc.returncode == 2 and "trace.name" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


@needs_shared_traces()
def test_multi_step_run_progress_off_terminal_and_perfetto_switch(tmp_path, monkeypatch):
    """Several steps back to back: a per-step table and whole-run totals; off a terminal the progress
    is plain lines within each policy; --perfetto off skips trace.json, auto skips it when too big."""
    from conftest import invoke_cli

    out = tmp_path / "three"
    proc = invoke_cli("sim", "run", "--scenario", "dapo_qwen32b_polytrace", "--steps", "3", "--policy",
                      "elastic+beg-mab", "--perfetto", "off", "--seeds", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "3 RL steps" in proc.stdout and "Whole run" in proc.stdout
    assert "simulating elastic+beg-mab (2/2)" in proc.stdout and "50% (" in proc.stdout
    assert "trace.json" not in {p.name for p in out.iterdir()}
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["step"].unique()) == [0, 1, 2] and "capped_responses" in summary.columns
    events = pd.read_parquet(out / "events.parquet")
    stages = events[events["kind"] == "stage"].sort_values(["policy", "step"])
    assert len(stages) == 6 and (stages.groupby("policy")["t_start"].diff().dropna() > 0).all()
    import tltcli.sim_results as sim_results

    monkeypatch.setattr(sim_results, "PERFETTO_AUTO_MAX_BYTES", 10)
    proc = invoke_cli("sim", "run", "--scenario", "dapo_qwen32b_polytrace", "--policy", "no-sd", "--seeds", "1",
                      "--out", str(tmp_path / "auto"))
    assert proc.returncode == 0 and "trace.json not written" in proc.stdout
    assert not (tmp_path / "auto" / "trace.json").exists()


@needs_shared_traces()
def test_bundled_scenarios_are_listed_and_capped_responses_reported(tmp_path):
    from conftest import invoke_cli

    listed = invoke_cli("sim", "scenarios")
    assert listed.returncode == 0 and "dapo_qwen32b_polytrace" in listed.stdout
    proc = invoke_cli("sim", "run", "--set", "trace.prompts_per_step=40", "--gpus", "8", "--policy", "no-sd",
                      "--out", str(tmp_path / "aime"))
    assert proc.returncode == 0, proc.stderr
    assert "hit the length cap; simulated at the cap" in proc.stdout


def test_validation_scenarios_are_described_as_what_tlt_validate_runs():
    """The CPU validation scenarios used to be listed as "Qwen2.5-7B, 64 x H100, TP 4": the simulator
    defaults tlt validate never uses."""
    from conftest import invoke_cli
    from tltcli.sim import scenario_row
    from tltsim.scenario import bundled_scenarios, load_scenario

    for name, steps in (("validation_dapo_cpu", "steps 0-1"), ("validation_vllm_cpu", "steps 0-1"),
                        ("validation_partial_cpu", "steps 0-3")):
        row = scenario_row(name, load_scenario(bundled_scenarios()[name]))
        assert row[1] == "tlt validate" and "H100" not in " ".join(row) and "Qwen2.5-7B" not in " ".join(row)
        assert "small random model" in row[3] and "CPU" in row[4] and f"{steps}, 16 prompts" in row[2]
    row = scenario_row("dapo_qwen32b_polytrace", load_scenario(bundled_scenarios()["dapo_qwen32b_polytrace"]))
    assert row[1:5] == ("tlt sim run", "polytrace/verl_dapo_qwen2.5-32b (step 0)", "Qwen2.5-32B",
                        "32 x H100, TP 4 (8 rollout workers)")
    listed = invoke_cli("sim", "scenarios")
    assert listed.returncode == 0 and listed.stdout.count("tlt validate") == 3


def test_warnings_are_one_line_each_before_the_run(tmp_path):
    """Valid settings that change nothing run, with one warning line each (the trace ships with tlt)."""
    from conftest import invoke_cli

    res = invoke_cli("sim", "run", "--set", "rl.ppo_epochs=2", "--set", "trace.seed=3", "--trace",
                     "tlt_grpo_arith_seed0", "--gpus", "8", "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    lines = res.stderr.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["warning", "warning"], lines
    assert "rl.ppo_epochs is used only by whole RL runs" in lines[0] and "trace.seed" in lines[1]


def test_sim_schema_prints_and_writes_the_scenario_json_schema(tmp_path):
    """``tlt sim schema`` prints ``Scenario.model_json_schema()`` (every section, ranges, choices) for
    editors; ``--out`` writes it, rewrites a file it wrote, and refuses any other file."""
    from tltsim.scenario import Scenario

    runner = CliRunner()
    res = runner.invoke(app, ["sim", "schema"])
    assert res.exit_code == 0, res.output
    schema = json.loads(res.stdout)
    assert schema["$comment"].startswith("written by tlt sim schema")
    assert {k: v for k, v in schema.items() if k != "$comment"} == Scenario.model_json_schema()
    assert set(schema["properties"]) == set(Scenario.model_fields)
    defs = schema["$defs"]
    assert defs["RLPhaseConfig"]["properties"]["ppo_epochs"]["minimum"] == 1
    assert defs["EngineSection"]["properties"]["switch"]["enum"] == ["reprefill", "catch_up", "in_step"]
    assert defs["ClusterSection"]["additionalProperties"] is False
    out = tmp_path / "scenario.schema.json"
    for _ in range(2):  # the second run overwrites its own file
        res = runner.invoke(app, ["sim", "schema", "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert json.loads(out.read_text()) == schema
    other = tmp_path / "mine.json"
    other.write_text('{"keep": true}\n')
    res = runner.invoke(app, ["sim", "schema", "--out", str(other)])
    assert "not written by tlt sim schema" in str(res.exception) and "field '--out'" in str(res.exception)
    assert other.read_text() == '{"keep": true}\n'


def test_switch_in_step_runs_and_prices_no_switch(tmp_path):
    """issue 39: ``tlt sim run --switch in_step`` was refused while ``tlt advise --switch in_step``
    took it. The simulator prices it (vLLM's drafter runs every iteration: no re-prefill, no catch-up),
    so an elastic policy's switch is cheaper than TLT's re-prefill (the trace ships with tlt)."""
    from conftest import invoke_cli

    makespan, kinds = {}, {}
    for mode in ("reprefill", "catch_up", "in_step"):
        out = tmp_path / mode
        res = invoke_cli("sim", "run", "--trace", "tlt_grpo_arith_seed0", "--gpus", "8", "--policy",
                         "elastic:16:1+static:4_1_4", "--switch", mode, "--seeds", "1", "--out", str(out))
        assert res.returncode == 0, res.stderr
        assert f"switch {mode}" in res.stdout
        assert load_scenario(out / "scenario.resolved.toml").engine.switch == mode
        summary = pd.read_csv(out / "summary.csv").set_index("policy")
        makespan[mode] = summary.loc["elastic:16:1+static:4_1_4", "makespan_s"]
        events = pd.read_parquet(out / "events.parquet")
        kinds[mode] = set(events.loc[events["policy"] != "no-sd", "kind"])
    assert "switch" in kinds["in_step"] and "switch_reprefill" in kinds["reprefill"]
    assert not kinds["in_step"] & {"switch_reprefill", "catch_up"}
    assert makespan["in_step"] < makespan["reprefill"]
    assert makespan["in_step"] <= makespan["catch_up"]
