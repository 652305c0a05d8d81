"""``tlt advise`` in the user's units: hours, GPU-hours and dollars for N RL steps without SD and with the
recommendation, the band taken from the very runs the speedup band comes from, the price's source and date,
what to pass when a GPU has no price, and a bad --price refused in one line before anything runs."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import invoke_cli
from tltcli import app
from tltsim.scenario import BASELINE_POLICY
from tltsim.units import StepsAnswer, paired_runs

SMALL = ["--trace", "intern_s1_math", "--gpus", "8", "--tp", "2", "--set", "trace.prompts_per_step=4",
         "--set", "trace.cap=4000"]
runner = CliRunner()


def _advise(*args: str):
    return runner.invoke(app, ["advise", *args], catch_exceptions=False)


def test_paired_runs_and_the_answer_on_a_hand_computed_case():
    # two seeds at the scenario's inputs, one variant; 2 simulated steps, 10 s of later phases over them
    runs = pd.DataFrame({
        "variant": ["", "", "", "", "q low", "q low"],
        "seed": [0, 0, 1, 1, 0, 0],
        "label": [BASELINE_POLICY, "sd", BASELINE_POLICY, "sd", BASELINE_POLICY, "sd"],
        "rollout_s": [110.0, 50.0, 130.0, 70.0, 110.0, 90.0],
        "gpu_idle_s": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]})
    paired = paired_runs(runs, "sd", 10.0, sim_steps=2, gpus=16)
    assert paired["step_s_base"].tolist() == [60.0, 70.0, 60.0]  # (110 + 10) / 2, (130 + 10) / 2
    assert paired["step_s_sd"].tolist() == [30.0, 40.0, 50.0]
    ans = StepsAnswer(360, "--steps", 16, "H100-SXM", "sd", True, None, "no price", None, None, True, paired)
    # GPU-hours = 16 x step s x 360 / 3600: no SD 96 / 112 / 96, SD 48 / 64 / 80, saving 48 / 48 / 16
    assert ans.triple("gpu_hours_base") == pytest.approx((104.0, 96.0, 112.0))  # median over the nominal seeds
    assert ans.triple("gpu_hours_saving") == pytest.approx((48.0, 16.0, 48.0))  # band over every run
    assert ans.triple("hours_saving") == pytest.approx((3.0, 1.0, 3.0))
    assert ans.triple("usd_base")[0] != ans.triple("usd_base")[0]  # NaN: no price, no dollars
    assert ans.lines()[0].startswith("SD saves 3.0 h over 360 steps (band 1.0-3.0 h; 3 runs")
    assert ans.lines()[2] == "  prices: no price"


@pytest.fixture(scope="module")
def assessed(tmp_path_factory):
    """Not --quick: the unmeasured inputs are varied, so the band spans seeds x variants."""
    out = tmp_path_factory.mktemp("units") / "r"
    res = _advise(*SMALL, "--policy", "static:8_4_32", "--seeds", "2", "--rl-steps", "0", "--steps", "500",
                  "--price", "H100-SXM=2.50", "--usd-per-kwh", "0.1", "--out", str(out))
    return res, out


def test_advise_prints_hours_gpu_hours_and_dollars_with_the_band_and_the_price(assessed):
    res, out = assessed
    assert res.exit_code == 0, res.output
    text = res.stdout
    head = re.search(r"^SD saves ([\d.]+) h and \$([\d.,]+) over 500 steps \(band ([\d.]+)-([\d.]+) h, "
                     r"\$([\d.,]+)-\$([\d.,]+); (\d+) runs \(seeds x unmeasured inputs\)\)$", text, re.M)
    assert head is not None, text
    assert re.search(r"^  500 steps \(--steps\) on 8 x H100-SXM, whole RL steps \(rollout \+ the phases after it\), "
                     r"median: no SD [\d.]+ h, [\d.]+ GPU-h, \$[\d.]+, [\d.]+ kWh, \$[\d.]+ of energy; ", text, re.M)
    assert "  prices: H100-SXM $2.50/GPU-h, your price (--price)" in text
    assert "idle ones at 0.1 of it (our assumption)" in text and "electricity $0.1/kWh" in text
    table = pd.read_csv(out / "units.csv").set_index("setting")
    runs = pd.read_csv(out / "units_runs.csv")
    # the arithmetic, row by row: GPU-hours = 8 x step s x 500 / 3600, dollars = GPU-h x 2.50
    for side in ("base", "sd"):
        assert runs[f"gpu_hours_{side}"].to_numpy() == pytest.approx(8 * runs[f"step_s_{side}"] * 500 / 3600)
        assert runs[f"usd_{side}"].to_numpy() == pytest.approx(runs[f"gpu_hours_{side}"] * 2.5)
    assert table.loc["saving", "hours_min"] == pytest.approx(runs["hours_saving"].min())
    assert table.loc["saving", "hours_max"] == pytest.approx(runs["hours_saving"].max())
    assert int(head[7]) == len(runs)
    readme = (out / "README.md").read_text()
    assert "## In hours, GPU-hours and dollars" in readme and head[0] in readme


def test_the_hours_band_comes_from_the_same_runs_as_the_speedup_band(assessed):
    res, out = assessed
    band = re.search(r"\(rollout speedup ([\d.]+)-([\d.]+)x over those runs", res.stdout)
    assert band is not None
    runs = pd.read_csv(out / "units_runs.csv", keep_default_na=False)
    robust = pd.read_csv(out / "robustness.csv")
    seeds = runs["seed"].nunique()
    assert seeds == 2 and len(runs) == seeds * (1 + len(robust))  # the scenario's inputs + each variant
    assert set(runs["variant"]) - {""} == {f"{i} {v}" for i, v in zip(robust["input"], robust["value"], strict=True)}
    assert f"{runs['rollout_speedup'].min():.3f}" == band[1] and f"{runs['rollout_speedup'].max():.3f}" == band[2]


def test_a_gpu_without_a_price_says_what_to_pass(tmp_path):
    res = _advise(*SMALL, "--gpu", "H20", "--policy", "static:8_4_32", "--quick", "--out", str(tmp_path / "r"))
    assert res.exit_code == 0, res.output
    assert "  prices: no price for GPU H20: pass --price H20=USD_PER_GPU_HOUR" in res.stdout
    assert "no energy: H20 has no board power (board_power_w)" in res.stdout
    assert re.search(r"^(SD|the best SD setting .*) (saves|costs) [\d.]+ h over 1 step \(one run", res.stdout, re.M)


@pytest.mark.parametrize("args, line", [
    (["--price", "H100-SXM"], "--price: 'H100-SXM' is not GPU=USD_PER_GPU_HOUR (e.g. H100-SXM=2.49)"),
    (["--price", "H100=-1"], "--price: -1 in 'H100=-1' must be in (0, 1000] dollars per GPU-hour"),
    (["--usd-per-kwh", "50"], "--usd-per-kwh: must be in (0, 10] dollars per kWh, got 50.0"),
    (["--steps", "0"], "--steps: must be in [1, 10,000,000], got 0"),
])
def test_bad_units_input_is_one_line_exit_2_before_anything_runs(tmp_path, args, line):
    out = tmp_path / "r"
    res = invoke_cli("advise", *SMALL, "--quick", *args, "--out", str(out))
    assert res.returncode == 2
    assert line in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not out.exists()


def test_the_scenario_fields_price_it_and_leave_hashes_alone():
    from tltsim.scenario import Scenario, scenario_toml, with_values

    s = Scenario()
    assert "usd_per" not in scenario_toml(s)  # None is not written: existing hashes unchanged
    priced = with_values(s, {"cluster.usd_per_gpu_hour": 1.25, "cluster.usd_per_kwh": 0.2})
    assert "usd_per_gpu_hour = 1.25" in scenario_toml(priced)
