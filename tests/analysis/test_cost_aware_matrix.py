"""The cost-aware matrix report: the four claims computed per setting from per-seed makespans, and a
one-setting report written end to end (issue 25's done-when table)."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.cost_aware_matrix import BOUND, KNOWN, Setting, checks, headline, write_report
from conftest import needs_shared_traces
from tltcore.errors import InputError


def _rows(makespans: dict[str, list[float]], trace: str = "t") -> pd.DataFrame:
    rows = [{"trace": trace, "model": "m", "gpu": "H100", "gpus": 16, "responses": 10, "policy": p, "seed": k,
             "makespan_s": v, "cpu_s": 0.0} for p, vs in makespans.items() for k, v in enumerate(vs)]
    return pd.DataFrame(rows)


def test_claims_follow_the_medians_and_every_seed():
    # cost-aware 10% under elastic (median over 3 seeds), at or under no-SD at every seed, bound below all.
    good = checks(_rows({"no-sd": [100, 100, 100], "elastic+beg-mab": [90, 91, 89], "cost-aware": [81, 82, 80],
                         BOUND: [70, 70, 70]}))
    row = good.iloc[0]
    assert row["gain_vs_elastic"] == pytest.approx(1 - 81 / 90)
    assert row["headroom"] == pytest.approx(1 - 70 / 90)
    assert row[["gain", "gain_possible", "near_best", "not_slower", "bounded"]].all()
    # one seed slower than no-SD fails `not_slower` though the median is fine; a policy under the
    # bound at one seed fails `bounded`; a 2% loss against the better baseline fails `near_best`.
    bad = checks(_rows({"no-sd": [100, 100, 100], "elastic+beg-mab": [99, 98, 99], "cost-aware": [101, 100, 100.5],
                        BOUND: [97, 99, 90]}))
    row = bad.iloc[0]
    assert not row["not_slower"] and not row["bounded"] and not row["gain"]
    assert row["over_best"] == pytest.approx(100.5 / 99 - 1) and not row["near_best"]
    assert not row["gain_possible"]  # the bound is < 5% under elastic: no policy could gain 5%


def test_the_known_lengths_policy_gets_its_own_claims_and_counts_for_the_bound():
    both = checks(_rows({"no-sd": [100, 100], "elastic+beg-mab": [90, 90], "cost-aware": [101, 99],
                         KNOWN: [80, 80], BOUND: [79, 79]}))
    row = both.iloc[0]
    assert not row["not_slower"] and row["known_not_slower"] and row["known_gain"]
    assert row["known_over_best"] == pytest.approx(80 / 90 - 1)
    assert row["gain_vs_elastic"] == pytest.approx(1 - 100 / 90)  # cost-aware's own, not the known one's
    under = checks(_rows({"no-sd": [100], "elastic+beg-mab": [90], "cost-aware": [85], KNOWN: [70], BOUND: [75]}))
    assert not under.iloc[0]["bounded"]  # the known-lengths policy under the bound fails it too
    assert "known_gain" not in checks(_rows({"no-sd": [100], "elastic+beg-mab": [90], "cost-aware": [85],
                                             BOUND: [75]}))  # tables without it still check


def test_held_out_traces_run_apart_and_a_bad_trace_name_is_refused(tmp_path, capsys):
    from analysis.cost_aware_matrix import HELD_OUT, TRACES, grid, main

    assert not set(HELD_OUT) & set(TRACES)  # the grid stays the traces the reports use
    assert {s.trace for s in grid(traces=list(HELD_OUT))} == set(HELD_OUT)
    with pytest.raises(SystemExit):
        main(["--traces", "search-r1,nope", "--out", str(tmp_path / "x")])
    assert "unknown nope" in capsys.readouterr().err and not (tmp_path / "x").exists()
    with pytest.raises(SystemExit):
        main(["--gpus", "A40,V100", "--out", str(tmp_path / "x")])
    assert "--gpus: unknown V100" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_headline_counts_the_claims_and_separates_impossible_gains():
    table = pd.concat([checks(_rows({"no-sd": [100], "elastic+beg-mab": [90], "cost-aware": [80], BOUND: [70]}, "a")),
                       checks(_rows({"no-sd": [100], "elastic+beg-mab": [99], "cost-aware": [98], BOUND: [97]}, "b"))])
    text = "\n".join(headline(table))
    assert ">= 5% shorter than elastic+beg-mab's in **1 of 2**" in text
    assert "(1 settings) cost-aware gains >= 5% in 1; in the other 1 even the upper bound" in text


@needs_shared_traces()
def test_a_one_setting_report_is_written_whole_and_a_foreign_folder_refused(tmp_path):
    out = write_report(tmp_path / "ca", seeds=1, settings=[Setting("deepcoder-14b", "Qwen2.5-7B", "H20", 16)],
                       command="test", log=lambda _: None)
    table = pd.read_csv(out / "matrix.csv")
    assert len(table) == 1 and table["bounded"].all()
    # the grid's worst miss before the response cap reached the policy: a blind first decision rented SD to
    # the end of the step (9% slower than no SD); with the cap it sees SD never pays at the whole batch
    assert table.loc[0, "not_slower"] and table.loc[0, "near_best"] and table.loc[0, "known_not_slower"]
    per_seed = pd.read_csv(out / "per_seed.csv")
    assert set(per_seed["policy"]) == {"no-sd", "elastic+beg-mab", "cost-aware", KNOWN, BOUND}
    readme = (out / "README.md").read_text()
    assert "Reproduce: `test`" in readme and "![speedups](speedups.png)" in readme
    assert "| claims, known lengths |" in readme and f"With the trace's lengths (`{KNOWN}`" in readme
    assert (out / "speedups.png").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(InputError):
        write_report(foreign, seeds=1, settings=[Setting("deepcoder-14b", "Qwen2.5-7B", "H20", 16)], log=lambda _: None)
    assert (foreign / "notes.txt").read_text() == "keep"
