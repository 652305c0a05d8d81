"""The long-tail strategies report: per cell the ranking and the SD x strategy verdicts, and the
headline's counts of where SD pays more or less than each strategy (issue 45's report)."""

from __future__ import annotations

import pandas as pd

from analysis.long_tail_strategies import headline, tables


def _rows(cell: str, totals: dict[tuple[str, str], float], gpus: int = 8) -> list[dict]:
    return [{"trace": cell, "model": "m", "gpu": "H100", "seed": 0, "strategy": st, "policy": p, "steps": 4,
             "total_s": t, "gpus": gpus * (2 if st == "one-step-off" else 1), "mean_lag": float(st != "sync"),
             "max_lag": int(st != "sync"), "idle_fraction": 0.1, "dropped_samples": 0, "tokens_per_s": 1.0,
             "cpu_s": 1.0} for (st, p), t in totals.items()]


def test_each_cell_is_ranked_and_judged_and_the_headline_counts_cells():
    # cell a: SD 2x under sync, one-step-off 1.25x alone, 2.5x with SD (the product: add);
    # cell b: SD 1.1x, one-step-off 1.6x alone and 1.6x with SD (no better than alone: compete)
    per_seed = pd.DataFrame([
        *_rows("a", {("sync", "no-sd"): 100.0, ("sync", "cost-aware"): 50.0, ("one-step-off", "no-sd"): 80.0,
                     ("one-step-off", "cost-aware"): 40.0}),
        *_rows("b", {("sync", "no-sd"): 110.0, ("sync", "cost-aware"): 100.0, ("one-step-off", "no-sd"): 68.75,
                     ("one-step-off", "cost-aware"): 68.75}),
    ])
    ranking, verdicts = tables(per_seed)
    a = ranking[ranking["trace"] == "a"]
    assert list(a["rank"]) == [1, 2, 3, 4] and a.iloc[0]["speedup_median"] == 2.5
    assert a.iloc[0]["speedup_per_gpu"] == 1.25  # twice the GPUs
    assert dict(zip(verdicts["trace"], verdicts["verdict"], strict=True)) == {"a": "add", "b": "compete"}
    sd_line, line = headline(ranking, verdicts)
    assert "**SD alone**" in sd_line and "1.55x median over the 2 cells (1.10-2.00x)" in sd_line
    # SD (2x) pays more than one-step-off alone (1.25x) in a; less (1.1x vs 1.6x) in b
    assert "**more** than it in 1 cells" in line and "**less** in 1 of 2 (per GPU held, more in 2)" in line
    assert "1 add" in line and "1 compete" in line


def test_tail_lines_count_long_rounds_deferred_groups_and_discarded_tokens():
    from analysis.long_tail_strategies import STEPS, tail_lines

    rows = pd.DataFrame(_rows("a", {("sync", "no-sd"): 100.0, ("tail-batching", "no-sd"): 50.0,
                                    ("tail-batching", "cost-aware"): 40.0}))
    tail = rows["strategy"] == "tail-batching"
    rows.loc[tail, ["long_rounds", "deferred_groups", "discarded_tokens"]] = [1, 32, 25.0]
    (line,) = tail_lines(rows)
    # no SD: 25 tokens discarded for 1 tok/s x 50 s trained
    assert f"1 long round(s) of {STEPS} in every cell" in line and "32 prompt groups deferred" in line
    assert "throw away 50% as many tokens" in line
    assert tail_lines(rows.drop(columns=["long_rounds"])) == []
