"""A trace file parsed once per process (a sweep's worker evaluates many points on one trace): the same
frame each time, a copy the caller may change, and a file changed on disk read again."""

from __future__ import annotations

import os

import pandas as pd

import tltsim.traces as traces
from tltsim.traces import load_trace, read_trace

ROWS = "step,group_id,sample_id,prompt_tokens,response_tokens,hit_cap,source\n"


def _write(path, lengths) -> None:
    path.write_text(ROWS + "".join(f"0,g{i // 2},{i % 2},10,{n},false,t\n" for i, n in enumerate(lengths)))


def test_a_trace_file_is_parsed_once_and_each_caller_gets_its_own_copy(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    _write(path, [5, 9, 14, 20])
    calls = []
    real = traces.read_trace
    monkeypatch.setattr(traces, "read_trace", lambda p, m=None: calls.append(p) or real(p, m))
    first = load_trace(path)
    first.loc[0, "response_tokens"] = 999  # a caller changing its frame changes nobody else's
    second = load_trace(path)
    assert len(calls) == 1
    pd.testing.assert_frame_equal(second, read_trace(path))


def test_a_file_changed_on_disk_is_read_again(tmp_path):
    path = tmp_path / "t.csv"
    _write(path, [5, 9, 14, 20])
    assert load_trace(path)["response_tokens"].tolist() == [5, 9, 14, 20]
    _write(path, [7, 9, 14, 20, 30, 31])
    os.utime(path, ns=(1, 10**18))  # a new mtime even on a coarse-clock file system
    assert load_trace(path)["response_tokens"].tolist() == [7, 9, 14, 20, 30, 31]
