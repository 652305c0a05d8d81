"""``tlt sim run --seeds N``'s per-seed sink (:class:`tltcli.sim_results.SeedSink`), shared by the policy
and strategy runs: every seed's warnings checked and events written with their seed, only the first
seed's events kept for trace.json."""

from __future__ import annotations

import pandas as pd

import tltsim.run_warnings as checks
from tltcli.sim_results import Perfetto, SeedSink


class _Sink:
    def __init__(self) -> None:
        self.frames: list[pd.DataFrame] = []

    def add(self, frame: pd.DataFrame) -> None:
        self.frames.append(frame)


def test_each_seed_is_checked_and_written_and_only_the_first_is_kept(monkeypatch):
    monkeypatch.setattr(checks, "scenario_models", lambda inputs, summary: {"cost": None, "accept": None})
    monkeypatch.setattr(checks, "run_warnings", lambda events, summary, cost, accept: [len(events)])
    sink = _Sink()
    seeds = SeedSink(inputs=None, first_seed=5, perfetto=Perfetto.on, sink=sink)  # type: ignore[arg-type]
    assert seeds.first is None
    for k, n in ((5, 2), (6, 3)):
        seeds(k, pd.DataFrame({"step": [0] * n, "t": range(n)}), pd.DataFrame())
    assert seeds.per_seed == [[2], [3]]
    assert len(seeds.first) == 2 and len(seeds.shown) == 1  # seed 5's events only
    assert [list(f["seed"].unique()) for f in sink.frames] == [[5], [6]]
    assert list(sink.frames[0].columns) == ["seed", "step", "t"]


class _PartsSink(_Sink):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[int] = []

    def add_part(self, frame: pd.DataFrame) -> None:
        self.frames.append(frame)

    def end_table(self) -> None:
        self.tables.append(len(self.frames))


def _run(policy: str, steps: list[int]) -> pd.DataFrame:
    n = len(steps)
    return pd.DataFrame({"policy": pd.array([policy] * n, dtype="string"), "step": steps,
                         "phase": pd.array(["rollout"] * n, dtype="string"),
                         "kind": pd.array(["decode"] * n, dtype="string"),
                         "sd_config": pd.array(["off"] * n, dtype="string"), "t_start": [0.0] * n,
                         "t_end": [1.0] * n, "batch_size": [1] * n, "iterations": [1] * n, "tokens": [1] * n,
                         "prefill_tokens": [0] * n, "worker": [0] * n})


def test_runs_stream_one_at_a_time_and_the_warnings_read_their_columns(monkeypatch):
    # whole RL runs: each preset's run written as a part of its seed's table, only its columns kept
    seen = []
    monkeypatch.setattr(checks, "scenario_models", lambda inputs, summary: {"cost": None, "accept": None})
    monkeypatch.setattr(checks, "run_warnings", lambda events, summary, cost, accept: seen.append(events) or [])
    sink = _PartsSink()
    seeds = SeedSink(inputs=None, first_seed=5, perfetto=Perfetto.on, sink=sink)  # type: ignore[arg-type]
    for k in (5, 6):
        seeds.add_run(k, _run("verl", [0, 0]))
        seeds.add_run(k, _run("tlt", [0, 0, 0]))
        seeds.end_seed(k, pd.DataFrame())
    assert [type(e) for e in seen] == [checks.EventColumns] * 2 and [len(e) for e in seen] == [5, 5]
    assert seen[0].policies == ("verl", "tlt")
    assert sink.tables == [2, 4] and [list(f["seed"].unique()) for f in sink.frames] == [[5], [5], [6], [6]]
    assert len(seeds.first) == 5  # seed 5's two runs, concatenated
    # auto shows one step only: a run of several steps drops the first seed's tables
    auto = SeedSink(inputs=None, first_seed=5, perfetto=Perfetto.auto, sink=_PartsSink())  # type: ignore[arg-type]
    auto.add_run(5, _run("verl", [0, 1]))
    auto.add_run(5, _run("tlt", [0]))
    auto.end_seed(5, pd.DataFrame())
    assert auto.first is None
