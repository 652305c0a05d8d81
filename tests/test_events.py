"""The event log (v2) is one schema for simulated and real runs, built by one row builder, and
survives a Parquet round trip."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tltcore.events import CLUSTER, EVENT_COLUMNS, EventLog, check_event_log, read_event_log
from tltcore.policy.base import NO_SD, SDConfig


def sample_log(coalesce: bool = True) -> EventLog:
    log = EventLog(run_id="abc", source="sim", policy="static:4_2_6", coalesce=coalesce)
    log.step, log.drafter_version = 3, 2
    cfg = SDConfig(4, 2, 6)
    log.span(0, "prefill", 10.0, 10.5, batch=4, tokens=4, prefill_tokens=400)
    log.decode(0, 10.5, 10.6, 1, 4, NO_SD, 4)
    log.decode(0, 10.6, 10.7, 1, 4, NO_SD, 4)  # coalesces with the previous one
    log.span(0, "switch", 10.7, 10.7, batch=4, config=cfg)
    log.decode(0, 10.7, 10.8, 1, 4, cfg, 12, drafted=24, accepted=8)
    log.span(0, "train", 11.0, 12.0, phase="drafter_train", batch=8)
    log.span(CLUSTER, "stage", 10.0, 10.8, batch=4, tokens=20)
    return log


def test_row_builder_coalesces_decode_spans_and_keeps_run_fields(tmp_path: Path) -> None:
    df = sample_log().frame()
    check_event_log(df)
    assert list(df.columns) == list(EVENT_COLUMNS)
    assert (df["run_id"] == "abc").all() and (df["step"] == 3).all() and (df["drafter_version"] == 2).all()
    rows = df[df["worker"] == 0]
    assert rows["kind"].tolist() == ["prefill", "decode", "switch", "decode", "train"]
    plain = rows.iloc[1]
    assert (plain["iterations"], plain["tokens"], plain["t_start"], plain["t_end"]) == (2, 8, 10.5, 10.7)
    assert rows.iloc[0]["prefill_tokens"] == 400 and rows.iloc[0]["tokens"] == 4
    assert rows.iloc[4]["phase"] == "drafter_train"
    assert df.iloc[0]["worker"] == CLUSTER and df.iloc[0]["kind"] == "stage"
    assert len(sample_log(coalesce=False).frame()) == len(df) + 1
    df.to_parquet(tmp_path / "e.parquet")
    back = read_event_log(tmp_path / "e.parquet")
    check_event_log(back)
    pd.testing.assert_frame_equal(df, back)


def test_schema_is_enforced() -> None:
    log = EventLog(run_id="", source="sim", policy="p")
    with pytest.raises(ValueError, match="unknown event kind"):
        log.span(0, "nap", 0.0, 1.0)
    with pytest.raises(ValueError, match="unknown event kind/phase"):
        log.span(0, "stage", 0.0, 1.0, phase="coffee")
    good = sample_log().frame()
    bad = good.assign(kind=good["kind"].where(good["kind"] != "train", "nap"))
    with pytest.raises(ValueError, match="unknown kinds"):
        check_event_log(bad)
    with pytest.raises(ValueError, match="unknown phases"):
        check_event_log(good.assign(phase=pd.Series(["lunch"] * len(good), dtype="string")))
    with pytest.raises(ValueError, match="columns"):
        check_event_log(good.drop(columns=["tokens"]))
    with pytest.raises(ValueError, match="ending before"):
        check_event_log(good.assign(t_end=good["t_start"] - 1))
    assert list(EVENT_COLUMNS)[:3] == ["run_id", "source", "policy"]
