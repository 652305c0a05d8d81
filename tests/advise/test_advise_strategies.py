"""``tlt advise --strategies``: long-tail strategies x SD settings ranked with their staleness, and
whether SD and each strategy add or compete (:mod:`tltsim.advise_strategies`)."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import invoke_cli
from tltcore.errors import InputError
from tltsim import advise_strategies as st
from tltsim.strategy.spec import OneStepOff, Overprovision, Sync


def test_all_is_every_built_strategy_with_sync_first_and_once():
    specs = st.parse_strategies(["all", "sync", "one-step-off"])
    assert specs[0] == Sync() and OneStepOff() in specs and Overprovision(0.25) in specs
    assert {type(x).__name__ for x in specs} >= {"Sync", "OneStepOff", "Overprovision", "Async"}
    assert len(specs) == len(set(specs)) == len(st.ALL_STRATEGIES)
    assert st.parse_strategies(["overprovision:eta=0.5"]) == (Sync(), Overprovision(0.5))
    with pytest.raises(InputError, match="--strategies"):
        st.check_strategies_option(["warp-drive"])
    assert st.check_strategies_option(None) == ()


def _rows(table: dict[tuple[str, str], tuple[float, int, float]], seeds=(0, 1, 2)) -> pd.DataFrame:
    """(strategy, policy) -> (whole-run seconds at seed 0, GPUs, mean lag); seed k adds k seconds."""
    return pd.DataFrame([{"seed": k, "strategy": strat, "policy": pol, "steps": 4, "total_s": t + k, "gpus": g,
                          "mean_lag": lag, "max_lag": int(lag > 0), "idle_fraction": 0.1, "dropped_samples": 0,
                          "tokens_per_s": 1.0}
                         for (strat, pol), (t, g, lag) in table.items() for k in seeds])


def test_the_ranking_is_by_median_time_with_speedups_against_sync_without_sd_at_each_seed():
    rows = _rows({("sync", "no-sd"): (100.0, 8, 0.0), ("sync", "cost-aware"): (80.0, 8, 0.0),
                  ("one-step-off", "no-sd"): (70.0, 16, 1.0), ("one-step-off", "cost-aware"): (50.0, 16, 1.0)})
    table = st.rank_strategies(rows)
    assert list(zip(table["strategy"], table["policy"], strict=True)) == [
        ("one-step-off", "cost-aware"), ("one-step-off", "no-sd"), ("sync", "cost-aware"), ("sync", "no-sd")]
    top = table.iloc[0]
    assert top["total_s_median"] == 51.0 and top["speedup_max"] == pytest.approx(100 / 50)  # seed 0: 100/50
    assert top["speedup_min"] == pytest.approx(102 / 52) and top["speedup_median"] == pytest.approx(101 / 51)
    assert top["speedup_per_gpu"] == pytest.approx(101 / 51 / 2)  # twice the GPUs
    assert top["step_s_median"] == pytest.approx(51 / 4) and top["mean_lag"] == 1.0 and top["max_lag"] == 1
    assert list(table["rank"]) == [1, 2, 3, 4]


@pytest.mark.parametrize(("sd", "strategy", "together", "verdict"), [
    (1.5, 1.3, 1.95, "add"),  # the product
    (1.5, 1.3, 1.97, "add"),  # within 2% above it
    (1.5, 1.3, 1.92, "add"),  # within 2% below it
    (1.5, 1.3, 2.2, "reinforce"),  # beyond it
    (1.5, 1.3, 1.7, "partly compete"),  # beats each alone, not the product
    (1.5, 1.3, 1.5, "compete"),  # no better than SD alone
    (1.5, 0.97, 1.45, "add"),  # a strategy that costs a little: still the product
])
def test_the_verdict_compares_the_combination_with_the_product_of_each_alone(sd, strategy, together, verdict):
    c = st.Composition("one-step-off", "cost-aware", sd, strategy, together)
    assert c.verdict == verdict
    assert verdict.split()[-1] in c.line() and c.short().startswith(f"one-step-off + cost-aware: {verdict} (")


def test_compositions_read_the_medians_of_the_ranking():
    rows = _rows({("sync", "no-sd"): (100.0, 8, 0.0), ("sync", "cost-aware"): (50.0, 8, 0.0),
                  ("one-step-off", "no-sd"): (50.0, 8, 1.0), ("one-step-off", "cost-aware"): (50.0, 8, 1.0)},
                 seeds=(0,))
    (c,) = st.composition(st.rank_strategies(rows))
    assert (c.strategy, c.policy, c.sd_alone, c.strategy_alone, c.together) == ("one-step-off", "cost-aware",
                                                                                 2.0, 2.0, 2.0)
    assert c.verdict == "compete"


SMALL = ["--trace", "intern_s1_math", "--set", "trace.prompts_per_step=4", "--set", "trace.cap=3000",
         "--set", "trace.num_steps=3", "--gpus", "4", "--tp", "2", "--quick", "--workers", "1"]


def test_advise_ranks_strategies_writes_their_table_and_figure(tmp_path):
    out = tmp_path / "adv"
    res = invoke_cli("advise", *SMALL, "--strategies", "one-step-off", "--out", str(out))
    assert res.returncode == 0, res.output
    assert "Long-tail strategies x SD over" in res.stdout
    table = pd.read_csv(out / "strategies.csv")
    assert set(table["strategy"]) == {"sync", "one-step-off"}
    assert {"no-sd", "elastic:32+beg-mab"} <= set(table["policy"])
    assert (table.loc[table["strategy"] == "sync", "max_lag"] == 0).all()
    assert (table.loc[table["strategy"] == "one-step-off", "max_lag"] == 1).all()
    sync_nosd = table[(table["strategy"] == "sync") & (table["policy"] == "no-sd")].iloc[0]
    assert sync_nosd["speedup_median"] == 1.0
    assert (out / "strategies.png").stat().st_size > 0 and (out / "strategies_runs.csv").exists()
    assert "## Long-tail strategies composed with SD" in (out / "README.md").read_text()


def test_one_step_is_not_compared_and_says_why(tmp_path):
    res = invoke_cli("advise", "--trace", "intern_s1_math", "--set", "trace.cap=3000", "--gpus", "4", "--tp", "2",
                     "--quick", "--workers", "1", "--strategies", "all", "--out", str(tmp_path / "a"))
    assert res.returncode == 0, res.output
    assert "Strategies: not run: the workload gives 1 RL step" in res.stdout
    assert not (tmp_path / "a" / "strategies.csv").exists()


def test_a_bad_strategy_is_one_line_before_anything_runs(tmp_path):
    res = invoke_cli("advise", *SMALL, "--strategies", "overprovision:eta=9", "--out", str(tmp_path / "b"))
    assert res.returncode == 2 and "--strategies" in res.stderr and "eta" in res.stderr
    assert not (tmp_path / "b").exists()
