"""``tlt advise`` end to end: the answer in under a screen, the report folder and its exports (the
recommended TOML reruns the recommendation exactly), the one-writer rule for ``--out``, and one clear
line for bad input. Small cases use the ``intern_s1_math`` length profile; the bundled scenarios need
the real traces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import invoke_cli, needs_shared_traces
from tltcli import app
from tltsim.advise_export import SGLANG_SPECULATIVE_ARGS, VLLM_SPECULATIVE_KEYS
from tltsim.scenario import load_scenario, policy_names, run_policy

SMALL = ["--trace", "intern_s1_math", "--gpus", "8", "--tp", "2", "--set", "trace.prompts_per_step=4",
         "--set", "trace.cap=4000"]
runner = CliRunner()


def _advise(*args: str):
    return runner.invoke(app, ["advise", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("advise") / "report"
    res = _advise(*SMALL, "--seeds", "2", "--threshold", "32", "--shape", "4_1_4", "--shape", "8_4_32",
                  "--rl-steps", "2", "--out", str(out))
    return res, out


def test_the_answer_fits_a_screen_and_names_the_recommendation_and_runners_up(small):
    res, out = small
    assert res.exit_code == 0, res.output
    lines = res.stdout.rstrip("\n").splitlines()  # progress lines go to stderr
    assert len(lines) <= 40
    text = res.stdout
    # tasks finish in any order on parallel workers: one progress line per task, counted
    for k in range(1, 5):
        assert re.search(rf"^advise \[\s*[\d.]+ s\] simulated (reprefill|catch_up)-seed[01] \({k}/4\)$", res.stderr,
                         re.M)
    # how sure: the unmeasured inputs, and the defaults the answer rests on
    assert re.search(r"^  how sure: .*(holds across|flips to) .*\(rollout speedup [\d.]+-[\d.]+x over those runs\)",
                     text, re.M)
    assert "assumes (not measured for your run): " in text and "rl.* phase setting at tlt's defaults" in text
    assert re.search(r"^On every step of the workload \(.*\): recommended [\d.]+x", text, re.M) or \
        "Recommended: no SD" in text
    assert re.search(r"^Recommended: ", text, re.M)
    assert re.search(r"rollout \d\.\d{3}x \(\d\.\d{3}–\d\.\d{3}\) vs no SD", text)
    assert "upper bound:" in text and "Runners-up:" in text
    assert "Drafter upkeep over 2 RL steps" in text
    rec = re.search(r"rollout (\d\.\d{3})x \(\d\.\d{3}–(\d\.\d{3})\)x? ?.*?; end to end (\d\.\d{3})x", text)
    cap = re.search(r"speedup <= (\d\.\d{3})x", text)
    assert rec is not None and cap is not None
    assert float(rec[2]) <= float(cap[1]) + 1e-3  # expected acceptance: no seed beats the bound
    assert 1.0 < float(rec[3]) < float(rec[1])  # end to end: the later phases dilute the rollout gain
    assert "vLLM: " in text and "SGLang: " in text and f"report: {out / 'README.md'}" in text
    assert "gpu: H100-SXM (NVIDIA H100 data sheet (SXM5); calibrated on its own measured profiles)" in text


def test_the_report_folder_holds_the_tables_figures_and_exports(small):
    _, out = small
    for name in ("README.md", "ranking.csv", "runs.csv", "freshness.csv", "findings.csv", "warnings.csv",
                 "robustness.csv", "exports_by_step.csv",
                 "ranking.png", "ranking.pdf", "scenario.resolved.toml", "recommended.toml",
                 "vllm_speculative_config.json", "sglang_flags.txt", ".tlt-results.json"):
        assert (out / name).exists(), name
    ranking = pd.read_csv(out / "ranking.csv")
    assert list(ranking["rank"]) == list(range(1, len(ranking) + 1))
    assert ranking["rollout_s_median"].is_monotonic_increasing
    assert (ranking["rollout_s_min"] <= ranking["rollout_s_median"]).all()
    readme = (out / "README.md").read_text()
    assert "## Every setting, ranked by median rollout makespan" in readme
    assert "GPU: H100-SXM (NVIDIA H100 data sheet (SXM5); calibrated on its own measured profiles)." in readme
    written = next(line for line in readme.splitlines() if line.startswith("Written by `tlt advise"))
    assert written.startswith("Written by `tlt advise --trace intern_s1_math --gpus 8 --tp 2 --threshold 32")
    assert "--workers" not in written and "--no-" not in written  # only what was given
    fresh = pd.read_csv(out / "freshness.csv").set_index("preset")
    assert set(fresh.index) == {"tlt", "tlt-no-spot", "tlt-periodic", "static-drafter", "tlt-base"}
    # the default 10-step cadence in a 3-step comparison: it says it never retrained, and it is the frozen drafter
    assert fresh.loc["tlt-periodic", "upkeep"] == "retrained every 10 steps, as a serial stage (never within these " \
                                                  "steps: the frozen drafter)"
    assert fresh.loc["tlt-periodic", "speedup_median"] == fresh.loc["static-drafter", "speedup_median"]
    assert "tlt sim run --scenario recommended.toml --seeds 2" in readme
    config = json.loads((out / "vllm_speculative_config.json").read_text())
    assert config is None or set(config) <= set(VLLM_SPECULATIVE_KEYS)
    flags = (out / "sglang_flags.txt").read_text().splitlines()[1].split()
    assert all(f in SGLANG_SPECULATIVE_ARGS for f in flags if f.startswith("--"))


def test_the_recommended_toml_reruns_the_recommendation_exactly(small):
    from tltcore.summary import summary_table

    _, out = small
    s = load_scenario(out / "recommended.toml")
    runs = pd.read_csv(out / "runs.csv")
    spec = ([p.name for p in s.policies if p.name != "no-sd"] or ["no-sd"])[0]
    mine = runs[(runs["policy"] == spec) & (runs["switch"].isna() | (runs["switch"] == s.engine.switch))]
    assert sorted(mine["seed"]) == [0, 1]
    for seed in (0, 1):
        sk = s.model_copy(update={"seed": seed})
        events = run_policy(sk, spec)
        rollout = float(summary_table(events, gpus=s.cluster.gpus, tp=s.cluster.tp)["makespan_s"].sum())
        want = float(mine[mine["seed"] == seed]["rollout_s"].iloc[0])
        assert rollout == pytest.approx(want, rel=1e-12)


def test_a_second_run_replaces_its_own_folder_but_never_a_users(tmp_path):
    out = tmp_path / "ours"
    first = runner.invoke(app, ["advise", *SMALL, "--quick", "--threshold", "16", "--out", str(out)])
    assert first.exit_code == 0, first.output
    (out / "extra.txt").unlink(missing_ok=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    res = invoke_cli("advise", *SMALL, "--quick", "--out", str(mine))
    assert res.returncode == 2 and "--out" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert (mine / "notes.txt").read_text() == "keep" and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    again = runner.invoke(app, ["advise", *SMALL, "--quick", "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert "--quick" in (out / "README.md").read_text()  # replaced whole by the second run
    assert "--threshold 16" not in (out / "README.md").read_text()


@pytest.mark.parametrize(("args", "where"), [
    (["--seeds", "0"], "--seeds"), (["--policy", "bogus"], "--policy"), (["--switch", "sideways"], "--switch"),
    (["--executor", "slurm"], "--executor"), (["--threshold", "0"], "--threshold"),
    (["--rl-steps", "-1"], "--rl-steps"),
    (["--shape", "8_4_999"], "--shape"), (["--gpu", "H2O"], "cluster.gpu"), (["--address", "x:1"], "--address")])
def test_bad_input_is_one_line_naming_the_option(args, where):
    res = invoke_cli("advise", *SMALL, "--quick", *args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tlt: error:") and where in lines[0]


@needs_shared_traces()
def test_a_bundled_scenario_answers_quickly(tmp_path):
    res = _advise("--scenario", "dapo_qwen32b_polytrace", "--quick", "--out", str(tmp_path / "r"))
    assert res.exit_code == 0, res.output
    assert "Recommended: " in res.output and len(res.output.splitlines()) <= 40


@needs_shared_traces()
def test_a_validation_scenario_is_advised_on_its_simulated_reading_and_says_so(tmp_path):
    res = _advise("--scenario", "validation_vllm_cpu", "--quick", "--out", str(tmp_path / "r"))
    assert res.exit_code == 0, res.output
    assert "is a `tlt validate` scenario for the real CPU engine" in res.output
    assert "`tlt validate` scenario" in (tmp_path / "r" / "README.md").read_text()


def test_no_cli_path_is_left_half_written_on_error(tmp_path):
    out = tmp_path / "never"
    res = invoke_cli("advise", *SMALL, "--quick", "--policy", "bogus", "--out", str(out))
    assert res.returncode == 2 and not out.exists()
    assert not any(p.name.startswith(".") for p in Path(tmp_path).iterdir())


def test_where_sd_only_loses_no_sd_is_recommended_and_nothing_speculative_is_exported(tmp_path):
    out = tmp_path / "r"
    res = _advise(*SMALL, "--gpu", "H20", "--policy", "static:8_4_32", "--quick", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "Recommended: no SD (no-sd)" in res.output
    assert re.search(r"- static:8_4_32 0\.\d{3}x .*SD is slower than no-SD on H20", res.output)
    assert "- GPU: on H20" in res.output
    assert re.search(r"2\. static:8_4_32: rollout 0\.\d{3}x \(.*\), end to end 0\.\d{3}x", res.output)
    assert json.loads((out / "vllm_speculative_config.json").read_text()) is None
    assert "--speculative" not in (out / "sglang_flags.txt").read_text().splitlines()[-1]
    assert policy_names(load_scenario(out / "recommended.toml").policies) == ("no-sd",)


def test_each_engine_gets_the_fastest_setting_it_can_run(small):
    """The vLLM export is the recommendation when vLLM can run it, else the best-ranked setting it can run
    (the recommendation's own decisions as a batch-size table among them), and its config is that setting's."""
    from tltsim.advise_export import batch_table, vllm_expressible, vllm_speculative_config

    _, out = small
    ranking = pd.read_csv(out / "ranking.csv")
    s = load_scenario(out / "scenario.resolved.toml")
    expressible = [p for p in ranking["policy"] if vllm_expressible(p, s.engine.max_batch)[0] is not None]
    best = expressible[0]
    config = json.loads((out / "vllm_speculative_config.json").read_text())
    assert config == vllm_speculative_config(batch_table(best, s.engine.max_batch), drafter=s.drafter.kind) \
        or (best == "no-sd" and config is None)
    readme = (out / "README.md").read_text()
    rec = load_scenario(out / "recommended.toml").policies[-1].name
    if vllm_expressible(rec, s.engine.max_batch)[0] is None:
        assert f"the fastest setting it can run is `{best}`" in readme
        derived = re.search(r"`([^`]+)` is the per-batch-size chain table the best per-iteration policy's", readme)
        assert derived is not None and derived[1] in set(ranking["policy"])  # simulated at every seed like the rest
        assert (pd.read_csv(out / "runs.csv")["policy"] == derived[1]).sum() == 2


def test_a_quick_look_writes_readable_tables_and_reruns_from_anywhere(tmp_path, monkeypatch):
    # a relative trace path and --quick: recommended.toml reruns from another folder, and freshness.csv
    # (no upkeep runs) is a header pandas reads
    import shutil

    from tltsim.traces import load_trace

    here = tmp_path / "work"
    here.mkdir()
    load_trace("intern_s1_math", seed=0).head(64).to_csv(here / "mine.csv", index=False)
    monkeypatch.chdir(here)
    res = _advise("--trace", "mine.csv", "--gpus", "8", "--tp", "2", "--set", "trace.cap=4000",
                  "--set", "trace.prompts_per_step=4", "--quick", "--out", "r")
    assert res.exit_code == 0, res.output
    assert pd.read_csv(here / "r" / "freshness.csv").empty
    other = tmp_path / "elsewhere"
    other.mkdir()
    shutil.copy(here / "r" / "recommended.toml", other / "recommended.toml")
    monkeypatch.chdir(other)
    s = load_scenario(other / "recommended.toml")
    assert Path(s.trace.name).is_absolute() and Path(s.trace.name).exists()


def test_a_newline_in_an_argument_stays_inside_the_toml_comment(tmp_path):
    from analysis.advise_report import recommended_toml
    from tltcli.advise import _one_line
    from tltcore.config_files import load_toml_text
    from tltsim.scenario import resolve

    s = resolve(None, [("trace.name", "intern_s1_math", "t")]).scenario
    text = recommended_toml(s, "static:4_1_4", None, "tlt advise --set " + _one_line("'a=1\nb'"))
    assert "\\n" in text.splitlines()[0]
    load_toml_text(text, path="recommended.toml")  # raises on invalid TOML


def test_without_ray_the_error_names_advises_own_option(tmp_path, monkeypatch):
    # the sweep runner's message names its --backend; advise's option is --executor
    import tltsim.sweep.runner as runner_mod
    from tltcore.errors import InputError

    def no_ray():
        raise InputError("Ray is not installed; pip install 'tlt[ray]' (or pip install ray), or use --backend local",
                         path="--backend")

    monkeypatch.setattr(runner_mod, "import_ray", no_ray)
    res = runner.invoke(app, ["advise", *SMALL, "--quick", "--executor", "ray", "--out", str(tmp_path / "r")])
    assert res.exit_code != 0
    exc = res.exception
    assert isinstance(exc, InputError) and exc.path == "--executor" and "--executor local" in exc.message
    assert not (tmp_path / "r").exists()


def test_a_measured_acceptance_profile_changes_the_answer_and_is_named(tmp_path):
    poor, good = tmp_path / "poor.toml", tmp_path / "good.csv"
    poor.write_text("rates = [0.05, 0.0]\nnote = 'an n-gram drafter on fresh reasoning'\n")
    # the good drafter as a W&B run history of per-position rates (alphas 0.95, 0.95, 0.9, 0.9)
    good.write_text("_step,rollout/draft_acceptance_rate_pos_0,rollout/draft_acceptance_rate_pos_1,"
                    "rollout/draft_acceptance_rate_pos_2,rollout/draft_acceptance_rate_pos_3\n"
                    "7,0.95,0.9025,0.81225,0.731025\n")
    answer = {}
    for name, profile in (("poor", poor), ("good", good)):
        out = tmp_path / name
        res = _advise(*SMALL, "--quick", "--acceptance", str(profile), "--out", str(out))
        assert res.exit_code == 0, res.output
        answer[name] = re.search(r"^Recommended: (.*)$", res.output, re.M)[1]
        assert f"acceptance measured profile {profile}" in (out / "README.md").read_text()
        assert "assumes (not measured for your run): " in res.output
        assert "EAGLE-tree acceptance" not in res.output  # the profile is measured, not assumed
        s = load_scenario(out / "recommended.toml")
        assert Path(s.acceptance.profile) == profile.resolve()  # the rerun prices the same drafter
    assert answer["poor"].startswith("no SD") and not answer["good"].startswith("no SD")


def test_a_kind_an_engine_cannot_run_gets_no_export_and_a_line_saying_so(tmp_path):
    out = tmp_path / "r"
    res = _advise(*SMALL, "--quick", "--drafter", "suffix", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert re.search(r"^SGLang: no export: SGLang's --speculative-algorithm has no suffix decoding", res.output, re.M)
    assert (out / "sglang_flags.txt").read_text().startswith("# no SGLang export: ")
    config = json.loads((out / "vllm_speculative_config.json").read_text())
    assert config is None or (config["method"] == "suffix" and "model" not in config)
    assert "suffix's published vLLM suffix decoding on MT-bench" in res.output  # the assumption, with its source
