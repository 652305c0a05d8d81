"""Sweep reports with a ``seed`` axis: seeds are replicates of a setting, never a setting.

Pure functions on a small hand-made results frame (no simulation): :func:`replicate_stats` and
:meth:`SweepView.settings` give each setting the median over its seeds with the min and the max
(each seed first reduced to the median over its own steps), the report's tables show
``median (min–max)`` and say how many seeds, and the curves draw a min–max band. A version that
dropped the seed grouping (medians over every row, or seed as a dimension) fails.
"""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from analysis.report import Report, _sweep_figures, _sweep_tables, sweep_settings_table, sweep_view
from analysis.sweep_plots import replicate_stats, response_curves

#: speedup per (gpu, threshold, seed, step). Seed 2 has two steps whose median (3.0) is not the
#: median of all of that setting's rows, so a median over rows instead of over seeds is caught.
SPEEDUPS = {
    ("H100", 8): {0: [1.5], 1: [1.7], 2: [1.0, 5.0]},
    ("H100", 64): {0: [2.0], 1: [2.4], 2: [2.2]},
    ("H20", 8): {0: [0.9], 1: [1.1], 2: [0.8]},   # median below 1x, max above: straddles
    ("H20", 64): {0: [1.05], 1: [0.95], 2: [1.2]},  # pays by the median but not at seed 1
}


def _results() -> pd.DataFrame:
    """What ``SweepStore.read`` gives for a grid over cluster.gpu x policies x seed (one no-sd row per point)."""
    rows = []
    for (gpu, threshold), per_seed in SPEEDUPS.items():
        for seed, steps in per_seed.items():
            key = f"{gpu}-{threshold}-{seed}"
            for step, v in enumerate(steps):
                for policy, speedup in (("no-sd", 1.0), (f"elastic:{threshold}+beg-mab", v)):
                    rows.append({"key": key, "status": "ok", "error": "", "cluster.gpu": gpu,
                                 "policies": f"elastic:{threshold}+beg-mab", "seed": seed, "policy": policy,
                                 "step": step, "speedup": speedup})
    return pd.DataFrame(rows)


def _expected() -> dict[tuple[str, int], tuple[float, float, float]]:
    """Per setting: (median, min, max) over the seeds of each seed's median over its steps, by hand."""
    out = {}
    for setting, per_seed in SPEEDUPS.items():
        values = [statistics.median(steps) for steps in per_seed.values()]
        out[setting] = (statistics.median(values), min(values), max(values))
    return out


def test_seed_is_a_replicate_not_a_dimension():
    view = sweep_view(_results(), ["cluster.gpu", "policies", "seed"])
    assert view.dims == ["elastic_threshold", "cluster.gpu"] and view.seeds == [0, 1, 2]
    assert "seed" not in view.dims


def test_settings_are_median_min_max_over_seeds_of_each_seeds_median_over_steps():
    view = sweep_view(_results(), ["cluster.gpu", "policies", "seed"])
    table = view.settings()
    assert len(table) == len(SPEEDUPS) and (table["seeds"] == 3).all()
    for r in table.itertuples(index=False):
        got = (r.speedup, r.speedup_min, r.speedup_max)
        assert got == pytest.approx(_expected()[(r[1], int(r[0]))]), r
    # H100 at 8: seeds give 1.5, 1.7 and median(1.0, 5.0) = 3.0, so the median is 1.7; a median
    # over every row (1.0, 1.5, 1.7, 5.0) would be 1.6 and a seed-less max would be 5.0
    h100 = table[(table["cluster.gpu"] == "H100") & (table["elastic_threshold"] == 8)].iloc[0]
    assert (h100["speedup"], h100["speedup_max"]) == (pytest.approx(1.7), pytest.approx(3.0))


def test_replicate_stats_without_a_seed_column_is_the_median_over_rows():
    rows = _results().drop(columns="seed")
    table = replicate_stats(rows, ["cluster.gpu", "policy"], replicate="seed")
    one = table[(table["cluster.gpu"] == "H100") & (table["policy"] == "elastic:8+beg-mab")].iloc[0]
    assert one["seeds"] == 1 and one["speedup"] == one["speedup_min"] == one["speedup_max"] == pytest.approx(1.6)


def test_report_tables_show_median_min_max_and_how_many_seeds():
    view = sweep_view(_results(), ["cluster.gpu", "policies", "seed"])
    rep = Report("t")
    _sweep_tables(rep, view)
    text = "\n\n".join(rep.sections)
    assert "median (min–max) over 3 seeds" in text
    for (gpu, threshold), (med, lo, hi) in _expected().items():
        assert f"| {threshold} | {gpu} | 3 | {med:.3f} ({lo:.3f}–{hi:.3f}) |" in text, (gpu, threshold)
    below, doubt = text.split("## Where SD does not pay")[1].split("pay by the median but not at every seed")
    assert "1 of 4 settings are below 1x by the median" in below and "| 8 | H20 |" in below
    assert "1 more setting(s)" in below and "| 64 | H20 |" in doubt and "| 8 | H20 |" not in doubt
    table = sweep_settings_table(view)
    assert table.sort_values("speedup", ascending=False)["speedup (min–max)"].iloc[0] == "2.200 (2.000–2.400)"


def test_curves_draw_the_seeds_min_max_band_and_the_surface_the_median():
    view = sweep_view(_results(), ["cluster.gpu", "policies", "seed"])
    rep = Report("t")
    _sweep_figures(rep, view)
    assert set(rep.figures) == {"response_surface", "response_curves"}
    assert any("band: min–max over the 3 seeds" in s for s in rep.sections)
    fig = rep.figures["response_curves"]()
    bands = [c for c in fig.axes[0].collections if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")]
    assert len(bands) == 2  # one band per GPU line
    lines = {line.get_label(): line for line in fig.axes[0].get_lines() if line.get_label() in ("H100", "H20")}
    assert list(lines["H20"].get_ydata()) == pytest.approx([0.9, 1.05])  # the medians over the seeds
    ys = bands[list(lines).index("H20")].get_paths()[0].vertices[:, 1]  # bands are drawn in line order
    assert min(ys) == pytest.approx(0.8) and max(ys) == pytest.approx(1.2)
    surface = rep.figures["response_surface"]()
    cells = sorted(float(t.get_text()) for t in surface.axes[0].texts)
    assert cells == pytest.approx(sorted(round(v[0], 2) for v in _expected().values()), abs=0.006)
    plt.close("all")


def test_curves_without_a_band_are_unchanged():
    table = replicate_stats(_results()[lambda d: d["policy"] != "no-sd"].assign(
        elastic_threshold=lambda d: d["policies"].str.extract(r"elastic:(\d+)")[0].astype(float)),
        ["elastic_threshold", "cluster.gpu"])
    fig = response_curves(table, "elastic_threshold", "cluster.gpu")
    assert not [c for c in fig.axes[0].collections if "Poly" in type(c).__name__]
    plt.close("all")
