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
