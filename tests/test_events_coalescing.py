"""Coalescing decode rows changes how many rows the event log has, never what it says.

The simulator merges consecutive decode spans of one worker into one row to keep logs small. Every
per-config figure (speedup by SD config, accept length per config, the policy comparison) groups
rows by ``sd_config``, so a merge across two configs would credit one config with the other's
iterations, tokens and acceptance while every total still adds up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from rollout_fixtures import LinearCost, Work

from tltcore.acceptance import ChainAcceptance
from tltcore.events import EventLog, check_event_log
from tltcore.policy.base import NO_SD, BatchView, Decision, Outcome, SDConfig
from tltsim.rollout import EngineConfig, simulate_step

CONFIGS = (NO_SD, SDConfig.chain(2), SDConfig(4, 2, 6))
SUMMED = ["iterations", "tokens", "drafted", "accepted", "busy_s"]


def per_config(df: pd.DataFrame) -> pd.DataFrame:
    """Decode totals by worker, batch size and SD config: what summaries and figures read."""
    dec = df[df.kind == "decode"].assign(busy_s=lambda d: d.t_end - d.t_start)
    return dec.groupby(["worker", "batch_size", "sd_config"])[SUMMED].sum().sort_index()


def test_spans_of_different_configs_stay_separate_rows_at_the_same_batch_size() -> None:
    log = EventLog(run_id="r", source="sim", policy="p", coalesce=True)
    log.decode(0, 0.0, 1.0, 1, 4, NO_SD, 4)
    log.decode(0, 1.0, 2.0, 1, 4, CONFIGS[1], 9, drafted=8, accepted=5)
    log.decode(0, 2.0, 3.0, 1, 4, CONFIGS[1], 7, drafted=8, accepted=3)  # same config: merges
    log.decode(0, 3.0, 4.0, 1, 4, NO_SD, 4)
    df = log.frame()
    check_event_log(df)
    assert df["sd_config"].tolist() == ["off", CONFIGS[1].name, "off"]
    assert df["iterations"].tolist() == [1, 2, 1]
    assert df["tokens"].tolist() == [4, 16, 4]
    assert df["accepted"].tolist() == [0, 8, 0]
    assert df["t_start"].tolist() == [0.0, 1.0, 3.0] and df["t_end"].tolist() == [1.0, 3.0, 4.0]


def test_coalesced_and_row_per_span_logs_agree_per_config_on_random_spans() -> None:
    rng = np.random.default_rng(0)
    logs = [EventLog(run_id="r", source="sim", policy="p", coalesce=c) for c in (True, False)]
    clock = [0.0, 0.0]
    for _ in range(400):
        w = int(rng.integers(2))
        cfg = CONFIGS[int(rng.integers(len(CONFIGS)))]
        batch = int(rng.choice([3, 5]))
        n = int(rng.integers(1, 4))
        dt = float(rng.uniform(0.1, 1.0))
        drafted = cfg.verify_tokens * batch * n
        accepted = int(rng.integers(0, drafted + 1)) if cfg.enabled else 0
        for log in logs:
            log.decode(w, clock[w], clock[w] + dt, n, batch, cfg, batch * n + accepted, drafted, accepted)
        clock[w] += dt
    coalesced, per_span = (log.frame() for log in logs)
    assert len(coalesced) < len(per_span)  # it does merge
    pd.testing.assert_frame_equal(per_config(coalesced), per_config(per_span))


@dataclass
class Alternating:
    """Flips between two SD configs every iteration, whatever the batch: spans of equal batch size
    and different configs follow each other."""

    name: str = "alternating"
    calls: int = 0

    def decide(self, view: BatchView) -> Decision:
        self.calls += 1
        return Decision(CONFIGS[1 + self.calls % 2], hold=1)

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        self.calls = 0


def test_simulated_log_reports_each_configs_iterations_whether_coalesced_or_not() -> None:
    work = Work(0, np.array(["a", "b", "c"]), np.array([10, 20, 30]), np.array([60, 80, 120]))

    def events(coalesce: bool) -> pd.DataFrame:
        return simulate_step(work, policies=[Alternating()], cost=LinearCost(), accept=ChainAcceptance((0.7,)),
                             engine=EngineConfig(coalesce=coalesce), seed=0).events

    coalesced, per_span = events(True), events(False)
    check_event_log(coalesced)
    totals = per_config(coalesced)
    pd.testing.assert_frame_equal(totals, per_config(per_span))
    by_config = totals.groupby("sd_config")["iterations"].sum()
    assert set(by_config.index) == {CONFIGS[1].name, CONFIGS[2].name}
    assert abs(by_config[CONFIGS[1].name] - by_config[CONFIGS[2].name]) <= 3  # alternating: about half each
