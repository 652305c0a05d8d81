"""`tlt sim sensitivity`: the low/high of each unmeasured input, the ranking by swing, the tornado
chart sorted by effect, the results folder (atomic, never over another command's results)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import invoke_cli, needs_shared_traces
from tltsim.scenario import resolve
from tltsim.sensitivity import FACTORS, factors_for, low_high, sensitivity

FAST_SETS = [("trace.prompts_per_step", 8, "test"), ("policies", ("elastic+beg-mab",), "test")]


def _scenario(*extra: tuple[str, object, str]):
    sets = FAST_SETS[:1] if any(k == "presets" for k, _, _ in extra) else FAST_SETS  # presets name their policy
    return resolve("aime_qwen7b_64xh100", [*sets, *extra]).scenario


def test_factors_rollout_only_without_presets_and_all_with_them() -> None:
    rollout = [f.field for f in factors_for(_scenario())]
    assert rollout == ["trace.prompts_per_step", "cluster.tp", "drafter.quality", "trace.cap"]
    whole = [f.field for f in factors_for(_scenario(("presets", ("tlt",), "test")))]
    assert whole == [f.field for f in FACTORS] and "rl.train_mfu" in whole and "rl.reward_s_per_sample" in whole
    assert all(f.why and f.rule for f in FACTORS)


@needs_shared_traces()
def test_low_high_values() -> None:
    from tltsim.scenario import prepare

    s = _scenario(("presets", ("tlt",), "test"))
    inputs = prepare(s)
    by = {f.field: low_high(f, s, inputs) for f in FACTORS}
    assert by["trace.prompts_per_step"] == (8, 4, 16)
    assert by["cluster.tp"] == (4, 2, 8)
    base, low, high = by["drafter.quality"]
    assert base == 1.0 and low == pytest.approx(0.89) and 1.0 < high <= 1.15
    assert by["rl.train_mfu"] == (0.35, pytest.approx(0.245), pytest.approx(0.5))
    assert by["rl.reward_s_per_sample"] == (0.01, pytest.approx(0.001), 1.0)
    cap_base, cap_low, cap_high = by["trace.cap"]
    longest = max(int(w.response_tokens.max()) for w in inputs.workloads)
    assert cap_base is None and cap_high is None and cap_low == longest // 2


@needs_shared_traces()
def test_sensitivity_ranks_by_swing() -> None:
    table, facts = sensitivity(_scenario(), 1)
    assert facts["best"] == "elastic+beg-mab" and facts["baseline"] == "no-sd"
    assert list(table["rank"]) == list(range(1, len(table) + 1))
    swings = table["swing"].to_numpy(float)
    assert np.all(np.diff(swings[np.isfinite(swings)]) <= 0)
    for r in table.to_dict("records"):
        meds = [m for m in (r["answer_low"], r["answer_base"], r["answer_high"]) if np.isfinite(m)]
        assert r["swing"] == pytest.approx(max(meds) - min(meds))
    tp = table.set_index("field").loc["cluster.tp"]
    assert str(tp["note_high"]).startswith("not run") and "28 attention heads" in tp["note_high"]


def test_tornado_is_sorted_by_effect(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A table handed over out of order is drawn largest swing on top (the last y position)."""
    import analysis.uncertainty_plots as up

    rows = []
    for name, lo, hi in (("small", 1.45, 1.52), ("large", 1.0, 2.0), ("middle", 1.3, 1.6)):
        rows.append({"factor": name, "low_value": "l", "high_value": "h", "base_value": "b", "answer_low": lo,
                     "answer_low_min": lo, "answer_low_max": lo, "answer_high": hi, "answer_high_min": hi,
                     "answer_high_max": hi, "swing": max(hi, 1.5) - min(lo, 1.5)})
    table = pd.DataFrame(rows)
    seen = {}

    def capture(fig, stem):
        ax = fig.axes[0]
        seen["labels"] = [t.get_text().split("\n")[0] for t in ax.get_yticklabels()]
        seen["xlabel"], seen["ylabel"] = ax.get_xlabel(), ax.get_ylabel()
        seen["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
        return []

    monkeypatch.setattr(up, "save_figure", capture)
    up.tornado_figure(table, {"answer": 1.5, "best": "tlt", "metric": "end-to-end speedup over verl", "seeds": 3},
                      tmp_path / "t")
    assert seen["labels"] == ["small", "middle", "large"]  # bottom to top: the largest swing on top
    assert "(x)" in seen["xlabel"] and seen["ylabel"]
    assert {"low value", "high value"} <= set(seen["legend"])


@needs_shared_traces()
def test_cli_writes_the_folder_and_never_replaces_a_run(tmp_path: Path) -> None:
    out = tmp_path / "sens"
    args = ("sim", "sensitivity", "--scenario", "aime_qwen7b_64xh100", "--set", "trace.prompts_per_step=8",
            "--policy", "elastic+beg-mab", "--out", str(out))
    r = invoke_cli(*args)
    assert r.returncode == 0, r.stderr
    for name in ("sensitivity.csv", "tornado.png", "tornado.pdf", "README.md", "scenario.resolved.toml"):
        assert (out / name).is_file(), name
    csv = pd.read_csv(out / "sensitivity.csv")
    assert list(csv["rank"]) == list(range(1, len(csv) + 1))
    readme = (out / "README.md").read_text()
    assert "prompts per step" in readme and "RL recipes use 32-512 prompts" in readme and "4 / 8 / 16" in readme
    assert "elastic+beg-mab" in r.stdout and "swing" in r.stdout
    # a second run replaces its own folder; a tlt sim run folder is another command's results
    assert invoke_cli(*args).returncode == 0
    run = tmp_path / "run"
    assert invoke_cli("sim", "run", "--scenario", "aime_qwen7b_64xh100", "--set", "trace.prompts_per_step=8",
                      "--policy", "elastic+beg-mab", "--perfetto", "off", "--out", str(run)).returncode == 0
    before = sorted(p.name for p in run.iterdir())
    r = invoke_cli("sim", "sensitivity", "--set", "trace.prompts_per_step=8", "--out", str(run))
    assert r.returncode == 2 and r.stderr.startswith("tlt: error:") and "tlt sim run" in r.stderr
    assert sorted(p.name for p in run.iterdir()) == before


@needs_shared_traces()
def test_a_point_where_the_best_does_not_run_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A side where every preset but the baseline fails (out of memory) is a note, not a crash."""
    import tltsim.sensitivity as sens

    def fake(s, n_seeds, inputs=None, progress=None):
        tlt = float("nan") if s.drafter.quality != 1.0 else 1.3 + 0.1 * (s.cluster.tp == 2)
        return pd.DataFrame({"seed": [0, 0], "name": ["verl", "tlt"], "speedup": [1.0, tlt]})

    monkeypatch.setattr(sens, "per_seed_speedups", fake)
    table, facts = sens.sensitivity(_scenario(("presets", ("tlt",), "test")), 1)
    assert facts["best"] == "tlt" and facts["answer"] == pytest.approx(1.3)
    q = table.set_index("field").loc["drafter.quality"]
    assert not np.isfinite(q["answer_low"]) and "tlt did not run there" in q["note_low"]
    assert q["swing"] == 0.0
    assert table.iloc[0]["field"] == "cluster.tp" and table.iloc[0]["swing"] == pytest.approx(0.1)
