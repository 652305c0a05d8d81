"""analysis.paper_fidelity: errors.csv's schema and the benchmark script's closed-loop reading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.paper_fidelity import (
    ERRORS_COLUMNS,
    Constants,
    _script_speedup,
    closed_loop_speedup,
    errors_frame,
    rms,
)
from tltcore.policy.base import SDConfig

REPO = Path(__file__).resolve().parents[2]
TABLES = {"gpu_speedup", "gpu_tokens_per_s", "batch_speedup"}
SEMANTICS = {"constant", "one_wave", "script", "script_settings", "-"}
SHAPE = SDConfig(4, 2, 8)


def _fake(scale: float, script: bool) -> dict[str, pd.DataFrame]:
    batch = pd.DataFrame({"verify_tokens": [16, 16], "batch_size": [1, 32], "speedup": [2.0, 1.0],
                          "predicted_constant_batch": [2.0 * scale, 1.0], "predicted_benchmark": [2.0, 1.0 * scale]})
    if script:
        batch["predicted_script"] = [2.0, 1.0]
    gpu = pd.DataFrame({"gpu": ["H100"], "tokens_per_s_no_sd": [100.0], "speedup": [2.5],
                        "predicted_tokens_per_s_no_sd": [100.0 * scale], "predicted_speedup": [2.5]})
    return {"batch": batch, "gpu": gpu, "depth_verify": pd.DataFrame()}


def test_errors_frame_schema_and_values() -> None:
    df = errors_frame({"roofline": _fake(1.1, script=False), "measured": _fake(0.8, script=True)})
    assert tuple(df.columns) == ERRORS_COLUMNS == ("table", "cost_model", "semantics", "rms", "max", "rms_min",
                                                   "rms_max")
    assert set(df["table"]) <= TABLES and set(df["cost_model"]) == {"roofline", "measured"}
    assert set(df["semantics"]) <= SEMANTICS
    assert not ((df["table"] != "batch_speedup") & (df["semantics"] != "-")).any()
    # the roofline has no script column: no script row; the measured model has all five rows
    assert len(df[df["cost_model"] == "roofline"]) == 4 and len(df[df["cost_model"] == "measured"]) == 5
    row = df[(df["cost_model"] == "roofline") & (df["semantics"] == "constant")].iloc[0]
    assert row["rms"] == pytest.approx(np.sqrt(0.1 ** 2 / 2)) and row["max"] == pytest.approx(0.1)
    row = df[(df["cost_model"] == "measured") & (df["table"] == "gpu_tokens_per_s")].iloc[0]
    assert row["rms"] == pytest.approx(0.2) and row["max"] == pytest.approx(0.2)  # fractions, max of |error|
    assert df[(df["cost_model"] == "measured") & (df["semantics"] == "script")].iloc[0]["rms"] == 0.0


def test_committed_errors_csv_has_the_schema() -> None:
    path = REPO / "reports" / "paper-fidelity" / "errors.csv"
    df = pd.read_csv(path)
    assert tuple(df.columns) == ERRORS_COLUMNS
    assert set(df["table"]) == TABLES and set(df["cost_model"]) <= {"roofline", "measured"}
    assert set(df["semantics"]) <= SEMANTICS
    assert ((df["rms"] >= 0) & (df["max"] >= df["rms"] - 1e-12)).all()
    batch = df[df["table"] == "batch_speedup"]
    assert set(batch["semantics"]) == {"constant", "one_wave", "script", "script_settings"}
    drawn = batch[batch["semantics"] != "constant"]  # readings that draw lengths carry their spread over draws
    assert drawn[["rms_min", "rms_max"]].notna().all().all()
    assert ((drawn["rms_min"] <= drawn["rms_max"]) & (drawn["rms_min"] >= 0)).all()
    assert df[df["semantics"].isin(["constant", "-"])][["rms_min", "rms_max"]].isna().all().all()


@pytest.fixture(scope="module")
def cm():
    return Constants().model("Qwen2.5-7B", "h100", 1)


def test_script_with_equal_lengths_is_waves_of_b(cm) -> None:
    """32 equal requests, at most 8 running: four identical full waves, so the same speedup as one wave of 8."""
    four = closed_loop_speedup(cm, np.full(32, 96), 8, SHAPE)
    one = closed_loop_speedup(cm, np.full(8, 96), 8, SHAPE)
    assert four == pytest.approx(one, rel=1e-9)


def test_script_refills_as_requests_finish(cm) -> None:
    """One long request and many short ones at b = 2: refilling keeps the batch full while the long one
    runs, so the script's SD speedup differs from running the same requests as one wave of all."""
    lengths = np.array([400] + [20] * 15)
    refilled = closed_loop_speedup(cm, lengths, 2, SHAPE)
    one_wave = closed_loop_speedup(cm, lengths, len(lengths), SHAPE)
    assert refilled > 1.0 and one_wave > 1.0 and refilled != pytest.approx(one_wave, rel=1e-3)


def test_script_reading_is_the_median_of_32_prompt_runs(cm) -> None:
    """The script reading draws 32 response lengths per run (seeded by prompts, b and verify budget) and
    takes the median speedup over runs."""
    lengths = np.arange(10, 200, 7)
    rng = np.random.default_rng([0, 32, 32, SHAPE.verify_tokens])
    draws = [rng.choice(lengths, 32) for _ in range(3)]
    expected = float(np.median([closed_loop_speedup(cm, d, 32, SHAPE) for d in draws]))
    assert _script_speedup(cm, 32, SHAPE, lengths, waves=3) == pytest.approx(expected, rel=1e-12)


def test_the_spread_is_the_rms_over_draws_and_constant_rows_have_none() -> None:
    main, other = _fake(1.1, script=True), _fake(1.1, script=True)
    other["batch"]["predicted_benchmark"] = [2.0, 1.5]  # the second draw reads b32 50% high
    df = errors_frame({"measured": main}, {"measured": [main, other]})
    one_wave = df[df["semantics"] == "one_wave"].iloc[0]
    assert one_wave["rms_min"] == pytest.approx(rms(np.array([0.0, 0.1])))
    assert one_wave["rms_max"] == pytest.approx(rms(np.array([0.0, 0.5])))
    assert np.isnan(df[df["semantics"] == "constant"].iloc[0]["rms_min"])


def test_the_published_script_cuts_responses_at_its_cap(cm) -> None:
    """Responses all beyond the cap run as if they were exactly the cap long."""
    long = np.full(64, 9_000)
    capped = _script_speedup(cm, 8, SHAPE, long, waves=1, cap=2048, prompt_tokens=300)
    exact = closed_loop_speedup(cm, np.full(32, 2048), 8, SHAPE, 300)
    assert capped == pytest.approx(exact, rel=1e-12)
    assert _script_speedup(cm, 8, SHAPE, long, waves=1) != pytest.approx(capped, rel=1e-3)
