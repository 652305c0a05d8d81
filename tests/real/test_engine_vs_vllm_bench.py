"""``benchmarks/engine_vs_vllm.py`` under load (issue 44, item 3): cells interleaved in one balanced order
per round, tokens/s on CPU time, the ours / vLLM ratio paired per round with its interval, and a ranking
claimed only where that interval excludes 1. Fake workers stand in for the engines (no vLLM, no timing).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_vs_vllm.py"


def _bench():
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("engine_vs_vllm_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


class _FakeWorker:
    """A worker whose CPU seconds per token are its engine's speed times the load of the moment (the same
    for every engine: the slow spell the interleaving must spread). Records the order it was asked in."""

    asked: ClassVar[list[tuple[str, int, str]]] = []
    load = iter(())

    def __init__(self, name, args, argv, model_dir) -> None:
        self.name = name

    def ask(self, batch: int, sd: str) -> dict:
        _FakeWorker.asked.append((self.name, batch, sd))
        speed = 1.0 if self.name == "ours" else 1.25  # vLLM 25% slower per token
        cpu = speed * next(_FakeWorker.load) * 1e-3 * 64
        return {"cpu_s": cpu, "wall_s": 3 * cpu, "tokens": 64, "accept": 1.0, "threads": 1, "outputs": [[1, 2]]}

    def close(self) -> None:
        pass


def _args(bench, rounds: int):
    return bench.Bench(bench.TinyTarget(), "1,8", 32, 64, 4, 1, 3, 3, rounds, 1, 0, 1.0, "ours,vllm", False, None)


def test_cells_are_interleaved_in_a_shifting_order_and_the_ranking_survives_a_slow_spell(monkeypatch):
    bench = _bench()
    monkeypatch.setattr(bench, "Worker", _FakeWorker)
    rng = np.random.default_rng(0)
    # a load that doubles for a third of the runs, in a block (a neighbour's job), plus jitter
    loads = np.concatenate([np.ones(40), np.full(40, 2.0), np.ones(48)]) * rng.uniform(0.98, 1.02, 128)
    _FakeWorker.asked, _FakeWorker.load = [], iter(loads)
    runs = bench.interleaved(_args(bench, rounds=8), [], Path("."), log=lambda _: None)
    assert len(runs) == 8 * 8 and set(runs.groupby("round").size()) == {8}  # every cell once per round
    firsts = runs[runs["position"] == 0][["engine", "batch", "sd"]].apply(tuple, axis=1)
    assert firsts.nunique() == 8  # another cell first in every round
    assert {a[0] for a in _FakeWorker.asked} == {"ours", "vllm-off", "vllm-ngram"}  # one worker per vLLM mode
    table = bench.summary(runs).set_index(["batch", "sd"])
    assert (table["faster"] == "ours").all()  # 1.25x, whatever the slow spell
    assert table["ours/vllm"].to_numpy() == pytest.approx(1.25, rel=0.05)
    assert (table["lo"] <= 1.25).all() and (table["hi"] >= 1.25).all()
    assert bench.noise_of(runs) > 0.0


def test_the_ranking_is_claimed_only_where_the_interval_excludes_one():
    bench = _bench()
    assert bench.ranking(1.05, 1.3) == "ours"
    assert bench.ranking(0.7, 0.95) == "vLLM"
    assert bench.ranking(0.9, 1.1) == "not resolved"


def test_a_worker_reply_is_one_prefixed_json_line(monkeypatch, capsys):
    bench = _bench()
    monkeypatch.setattr(sys, "stdin", iter([json.dumps({"batch": 2, "sd": "off"}) + "\n", "\n"]))
    import pandas as pd

    events = pd.DataFrame({"kind": ["decode"], "drafted": [0], "tokens": [2], "batch_size": [2]})
    bench.serve(lambda batch, sd: (batch * 3, events, {0: [1], 1: [2]}))
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith(bench.REPLY)]
    got = json.loads(line[len(bench.REPLY):])
    assert got["tokens"] == 6 and got["outputs"] == [[1], [2]] and got["cpu_s"] >= 0
