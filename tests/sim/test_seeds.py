"""`tlt sim run --seeds N`: N = 1 is a plain run byte for byte; seed k of N is `--seed k`; every speedup
and makespan is a median with min–max; the ranking-flip line; hostile `--seeds`."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import invoke_cli, needs_shared_traces
from tltsim.seeds import MAX_SEEDS, aggregate, check_seeds, fmt_range, ranking_flip, seed_values

#: A fast scenario: 8 AIME prompt groups x 8 samples on 16 workers, one SD policy.
FAST = ("--scenario", "aime_qwen7b_64xh100", "--set", "trace.prompts_per_step=8", "--policy", "elastic+beg-mab",
        "--perfetto", "off")


def _err_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---- aggregation on a constructed case ---------------------------------------------------------------
def _constructed() -> pd.DataFrame:
    """Three seeds; policy a's speedups 1.0, 1.1, 1.9 (median 1.1, mean 1.333), b's 1.2, 1.2, 1.3."""
    return pd.DataFrame({"seed": [0, 1, 2, 0, 1, 2],
                         "policy": ["a", "a", "a", "b", "b", "b"],
                         "step": [0] * 6,
                         "speedup": [1.0, 1.1, 1.9, 1.2, 1.2, 1.3],
                         "makespan_s": [30.0, 10.0, 20.0, 5.0, 7.0, np.nan]})


def check_constructed_aggregate() -> None:
    agg = aggregate(_constructed(), ["policy", "step"], ["makespan_s", "speedup"]).set_index("policy")
    assert list(agg.index) == ["a", "b"]
    assert agg.at["a", "speedup_median"] == pytest.approx(1.1)
    assert agg.at["a", "speedup_min"] == pytest.approx(1.0)
    assert agg.at["a", "speedup_max"] == pytest.approx(1.9)
    assert agg.at["a", "makespan_s_median"] == pytest.approx(20.0)
    assert (agg.at["a", "makespan_s_min"], agg.at["a", "makespan_s_max"]) == (10.0, 30.0)
    assert agg.at["b", "speedup_median"] == pytest.approx(1.2)
    assert agg.at["b", "makespan_s_median"] == pytest.approx(6.0)  # the NaN seed left out
    assert agg.at["a", "seeds"] == 3 and agg.at["b", "seeds"] == 3


def test_aggregate_median_min_max_on_a_constructed_case() -> None:
    check_constructed_aggregate()


def test_break_it_mean_instead_of_median_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutant: aggregation that takes the mean (1.333 for policy a) instead of the median (1.1)."""
    import tltsim.seeds as seeds

    class MeanNumpy:
        def __getattr__(self, name: str):
            return np.mean if name == "median" else getattr(np, name)

    monkeypatch.setattr(seeds, "np", MeanNumpy())
    with pytest.raises(AssertionError):
        check_constructed_aggregate()


def test_fmt_range() -> None:
    assert fmt_range(1.42, 1.31, 1.55, ".2f", "x") == "1.42x (1.31–1.55)"
    assert fmt_range(float("nan"), 1.0, 2.0) == "–"


# ---- ranking flips -------------------------------------------------------------------------------------
def test_flip_line_when_a_seed_orders_differently() -> None:
    per_seed = _constructed()  # medians a 1.1 < b 1.2, but seed 2 has a (1.9) ahead of b (1.3)
    line = ranking_flip(per_seed)
    assert line is not None and line.startswith("ranking flips across seeds")
    assert "b (1.200x) is ahead of a (1.100x)" in line and "seed 2 put a ahead" in line
    assert "\n" not in line


def test_no_flip_when_every_seed_agrees_and_ties_never_flip() -> None:
    agree = pd.DataFrame({"seed": [0, 1, 0, 1], "policy": ["a", "a", "b", "b"], "speedup": [1.5, 1.6, 1.2, 1.2]})
    assert ranking_flip(agree) is None
    ties = pd.DataFrame({"seed": [0, 1, 0, 1], "policy": ["a", "a", "b", "b"], "speedup": [1.5, 1.2, 1.2, 1.2]})
    assert ranking_flip(ties) is None  # a's median 1.35 > b's 1.2; seed 1 ties, which is not b ahead


@needs_shared_traces()
def test_flip_line_on_a_real_trace(tmp_path: Path) -> None:
    """Found, not constructed: on the first polytrace step TLT's policy (elastic+beg-mab) and
    sglang-ema swap places across seeds 0-4 (sglang-ema ahead by the median, elastic+beg-mab at seeds 2, 3),
    priced by the data-sheet roofline (where it was found)."""
    r = invoke_cli("sim", "run", "--trace", "polytrace_rl_rollouts", "--policy", "elastic+beg-mab", "--policy",
                   "sglang-ema", "--seeds", "5", "--perfetto", "off", "--set", "cost.model=roofline",
                   "--out", str(tmp_path / "flip"))
    assert r.returncode == 0, r.stderr
    flips = [x for x in r.stdout.splitlines() if x.startswith("ranking flips across seeds")]
    assert len(flips) == 1, r.stdout
    assert "sglang-ema" in flips[0] and "elastic+beg-mab" in flips[0] and flips[0].rstrip().endswith(")")


def test_seed_values_and_bounds() -> None:
    assert seed_values(5, 3) == [5, 6, 7]
    assert check_seeds(1) == 1 and check_seeds(MAX_SEEDS) == MAX_SEEDS


# ---- the command ---------------------------------------------------------------------------------------
@needs_shared_traces()
def test_seeds_1_is_a_plain_run_byte_for_byte(tmp_path: Path) -> None:
    plain, one = tmp_path / "plain", tmp_path / "one"
    assert invoke_cli("sim", "run", *FAST, "--seeds", "1", "--out", str(plain)).returncode == 0
    r = invoke_cli("sim", "run", *FAST, "--seeds", "1", "--out", str(one))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in plain.iterdir()) == sorted(p.name for p in one.iterdir())
    for name in ("events.parquet", "summary.csv", "scenario.resolved.toml"):
        assert (plain / name).read_bytes() == (one / name).read_bytes(), name


@needs_shared_traces()
def test_seeds_3_each_seed_is_the_plain_run_at_that_seed(tmp_path: Path) -> None:
    out = tmp_path / "s3"
    r = invoke_cli("sim", "run", *FAST, "--seed", "4", "--seeds", "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    for name in ("events.parquet", "summary.csv", "seeds_summary.csv", "seeds.png", "seeds.pdf",
                 "scenario.resolved.toml"):
        assert (out / name).is_file(), name
    summary = pd.read_csv(out / "summary.csv")
    assert summary.columns[0] == "seed" and sorted(summary["seed"].unique()) == [4, 5, 6]
    plain = tmp_path / "plain5"
    assert invoke_cli("sim", "run", *FAST, "--seed", "5", "--seeds", "1", "--out", str(plain)).returncode == 0
    mine = summary[summary["seed"] == 5].drop(columns="seed").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, pd.read_csv(plain / "summary.csv"))
    agg = pd.read_csv(out / "seeds_summary.csv").set_index("policy")
    sd = summary[summary["policy"] == "elastic+beg-mab"]["speedup"]
    assert agg.at["elastic+beg-mab", "speedup_median"] == pytest.approx(float(np.median(sd)))
    assert agg.at["elastic+beg-mab", "speedup_min"] == pytest.approx(sd.min())
    assert agg.at["elastic+beg-mab", "speedup_max"] == pytest.approx(sd.max())
    assert agg.at["no-sd", "seeds"] == 3
    for col in ("makespan_s_median", "makespan_s_min", "makespan_s_max"):
        assert col in agg
    # the one-seed table's accept and tok/s columns, median (min–max), after the earlier columns (issue 39)
    assert list(agg.columns[:8]) == ["step", "seeds", "makespan_s_median", "makespan_s_min", "makespan_s_max",
                                     "speedup_median", "speedup_min", "speedup_max"]
    for metric, spec in (("mean_accept_length", ".2f"), ("tokens_per_s", ",.0f")):
        per_seed = summary[summary["policy"] == "elastic+beg-mab"][metric]
        assert agg.at["elastic+beg-mab", f"{metric}_median"] == pytest.approx(float(np.median(per_seed)))
        assert agg.at["elastic+beg-mab", f"{metric}_max"] == pytest.approx(per_seed.max())
        cell = fmt_range(agg.at["elastic+beg-mab", f"{metric}_median"], per_seed.min(), per_seed.max(), spec)
        assert cell.split(" (")[0] in r.stdout, (metric, cell)
    assert "accept" in r.stdout and "tok/s" in r.stdout
    # the upper bound printed, per seed in bound.csv: the rows of a one-seed run at that seed (issue 39)
    bound = pd.read_csv(out / "bound.csv")
    assert list(bound.columns) == ["seed", "step", "bound_makespan_s", "bound_speedup", "queued_workers"]
    assert sorted(bound["seed"]) == [4, 5, 6]
    pd.testing.assert_frame_equal(bound[bound["seed"] == 5].drop(columns="seed").reset_index(drop=True),
                                  pd.read_csv(plain / "bound.csv"))
    totals = bound.groupby("seed")["bound_makespan_s"].sum()
    assert fmt_range(float(np.median(totals)), totals.min(), totals.max()) in r.stdout
    events = pd.read_parquet(out / "events.parquet")
    assert sorted(events["seed"].unique()) == [4, 5, 6]
    assert "median (min–max)" in r.stdout and "ranking" in r.stdout and "trace.seed 0 fixed" in r.stdout
    med = agg.at["elastic+beg-mab", "speedup_median"]
    assert f"{med:.3f}x (" in r.stdout


@needs_shared_traces()
def test_seeds_over_several_steps_adds_whole_run_totals(tmp_path: Path) -> None:
    out = tmp_path / "steps"
    r = invoke_cli("sim", "run", *FAST, "--steps", "2", "--seeds", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    summary = pd.read_csv(out / "summary.csv")
    totals = pd.read_csv(out / "seeds_totals.csv").set_index("policy")
    for policy in ("no-sd", "elastic+beg-mab"):
        per_seed = summary[summary["policy"] == policy].groupby("seed")["makespan_s"].sum()
        assert totals.at[policy, "rollout_s_median"] == pytest.approx(float(np.median(per_seed)))
        assert totals.at[policy, "rollout_s_max"] == pytest.approx(per_seed.max())
    assert np.isnan(totals.at["no-sd", "mean_accept_length_median"])
    assert totals.at["elastic+beg-mab", "mean_accept_length_median"] > 1
    assert sorted(pd.read_csv(out / "bound.csv")[["seed", "step"]].itertuples(index=False, name=None)) == [
        (0, 0), (0, 1), (1, 0), (1, 1)]
    assert sorted(pd.read_csv(out / "seeds_summary.csv")["step"].unique()) == [0, 1]
    assert "Whole run (2 rollouts back to back)" in r.stdout


@needs_shared_traces()
def test_seeds_with_presets(tmp_path: Path) -> None:
    out = tmp_path / "presets"
    r = invoke_cli("sim", "run", "--preset", "tlt", "--set", "trace.prompts_per_step=8", "--steps", "2",
                   "--seeds", "2", "--perfetto", "off", "--out", str(out))
    assert r.returncode == 0, r.stderr
    agg = pd.read_csv(out / "seeds_summary.csv")
    assert list(agg["preset"]) == ["verl", "tlt"]
    for m in ("total_s", "rollout_s", "speedup", "rollout_speedup", "mean_accept_length"):
        for stat in ("median", "min", "max"):
            assert f"{m}_{stat}" in agg
    steps = pd.read_csv(out / "steps.csv")
    assert steps.columns[0] == "seed" and len(steps) == 2 * 2 * 2  # seeds x presets x steps
    assert (out / "seeds.png").is_file()


@pytest.mark.parametrize("value, says", [("0", ">= 1"), ("-1", ">= 1"), ("100000", "<= 1,000")])
@pytest.mark.parametrize("command", ["run", "sensitivity"])
def test_hostile_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, value: str, says: str) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    r = invoke_cli("sim", command, "--seeds", value, "--out", str(out))
    assert r.returncode == 2
    line = _err_line(r)
    assert line.startswith("tlt: error:") and "--seeds" in line and says in line
    assert not out.exists() and list(tmp_path.iterdir()) == []


@needs_shared_traces()
def test_the_default_run_has_a_spread_and_the_bound_per_seed(tmp_path):
    """`tlt sim run` without --seeds runs 3 seeds: every speedup and makespan comes as median
    (min–max), and the upper bound too (the dealing seed moves it)."""
    out = tmp_path / "default"
    r = invoke_cli("sim", "run", *FAST, "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "simulation seeds 0-2 (dealing" in r.stdout
    assert re.search(r"upper bound: at each seed no policy above finishes in under [0-9.]+ \([0-9.]+–[0-9.]+\) s",
                     r.stdout)
    assert sorted(pd.read_csv(out / "summary.csv")["seed"].unique()) == [0, 1, 2]
    assert (out / "seeds_summary.csv").exists()


@needs_shared_traces()
def test_a_seeds_run_says_how_sure_over_the_unmeasured_inputs(tmp_path: Path) -> None:
    r = invoke_cli("sim", "run", *FAST, "--seeds", "2", "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.replace("\n", " ").split("how sure (best: ")[1:2])
    assert re.search(r"(holds across|flips to) .*\(rollout speedup [\d.]+-[\d.]+x over those runs\)", line), line
    table = pd.read_csv(tmp_path / "r" / "robustness.csv")
    # H100: the calibrated model prices it, so the roofline is the cost-model variant; the drafter's two ends
    assert {"cost model", "drafter quality"} <= set(table["input"])
    assert table["speedup_median"].notna().all()
