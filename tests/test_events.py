"""The event log is one schema for simulated and real runs, and survives a Parquet round trip."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tltsim.events import EVENT_COLUMNS, check_event_log, event_frame, read_event_log


def test_event_frame_defaults_and_round_trip(tmp_path: Path) -> None:
    df = event_frame([{"source": "real", "policy": "no-sd", "step": 0, "instance": 0, "kind": "decode",
                       "t_start": 0.0, "t_end": 0.01, "batch_size": 4, "tokens": 4}])
    check_event_log(df)
    assert df.loc[0, "sd_config"] == "off" and df.loc[0, "iterations"] == 1
    df.to_parquet(tmp_path / "e.parquet")
    back = read_event_log(tmp_path / "e.parquet")
    check_event_log(back)
    pd.testing.assert_frame_equal(df, back)


def test_schema_is_enforced() -> None:
    with pytest.raises(ValueError, match="unknown columns"):
        event_frame([{"kind": "decode", "latency": 1.0}])
    bad = event_frame([{"source": "sim", "policy": "p", "step": 0, "instance": 0, "kind": "nap",
                        "t_start": 0.0, "t_end": 1.0, "batch_size": 1}])
    with pytest.raises(ValueError, match="unknown kinds"):
        check_event_log(bad)
    with pytest.raises(ValueError, match="columns"):
        check_event_log(bad.drop(columns=["tokens"]))
    assert list(EVENT_COLUMNS)[:2] == ["source", "policy"]
