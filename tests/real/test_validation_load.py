"""Validation robust to load (issue 44, item 3): one balanced order of runs and profile points, the
stopping rule on the headline's interval, and no error claimed below the machine's noise.

The rules are checked on given numbers (injected noise, made-up errors): nothing here times anything.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tltreal.validation.rounds import (
    StoppingRule,
    claim,
    headline_interval,
    headline_of,
    round_schedule,
    run_noise,
    spread_among,
    williams_order,
)

RUNS = [f"run{i}" for i in range(14)]  # 2 steps x 7 policies
POINTS = [f"point{i}" for i in range(48)]  # 6 batch sizes x (4 prompt lengths + 4 contexts)
PRICED = ["priced0", "priced1"]


def test_every_round_runs_everything_once_and_no_item_always_first_or_last():
    orders = [round_schedule(RUNS, POINTS, PRICED, r, priced_table_ready=r > 0) for r in range(6)]
    for order in orders:
        assert sorted(order) == sorted([*RUNS, *POINTS, *PRICED])
    assert len({o[0] for o in orders}) == len(orders)  # another first item every round
    assert len({o[-1] for o in orders[1:]}) == len(orders) - 1  # and another last one
    for name in (*RUNS, *POINTS, *PRICED):  # each item's position moves from round to round
        assert len({o.index(name) for o in orders[1:]}) > 1


@pytest.mark.parametrize("repeat", range(4))
def test_runs_and_profile_points_are_interleaved_not_in_blocks(repeat: int):
    """The real runs are spread over the whole round (a slow spell hits runs and table alike): none of
    the round's thirds goes without runs, and no more than a few runs ever follow each other."""
    order = round_schedule(RUNS, POINTS, PRICED, repeat, priced_table_ready=True)
    runs = [i for i, x in enumerate(order) if not x.startswith("point")]
    third = len(order) / 3
    assert all(any(k * third <= i < (k + 1) * third for i in runs) for k in range(3))
    longest, current = 0, 0
    for x in order:
        current = current + 1 if not x.startswith("point") else 0
        longest = max(longest, current)
    assert longest <= 3


def test_priced_runs_wait_for_the_first_rounds_table_then_join_the_order():
    first = round_schedule(RUNS, POINTS, PRICED, 0, priced_table_ready=False)
    assert sorted(first[-len(PRICED):]) == PRICED  # after every point of the round they are priced by
    later = round_schedule(RUNS, POINTS, PRICED, 1, priced_table_ready=True)
    assert min(later.index(p) for p in PRICED) < len(later) - len(PRICED)


def test_spread_among_spaces_the_few_evenly():
    assert spread_among(["a", "b"], [1, 2, 3, 4]) == [1, "a", 2, 3, "b", 4]
    assert spread_among([], [1, 2]) == [1, 2]
    assert williams_order(["x", "y", "z", "w"], 1)[0] == "y"


# ---- the stopping rule, with injected noise ---------------------------------------------------------
def _rounds(errors: np.ndarray) -> pd.DataFrame:
    """Makespan rows from an array of errors, (step, policy) pairs x rounds."""
    rows = [{"step": 0, "policy": f"p{i}", "repeat": r, "real_s": 1.0, "calibrated_measured_err": float(e)}
            for i, row in enumerate(errors) for r, e in enumerate(row)]
    return pd.DataFrame(rows)


def _run_until_stopped(noise: float, rule: StoppingRule, seed: int = 1) -> int:
    """Rounds drawn one at a time (a true error of 3% per pair plus ``noise``) until ``rule`` stops."""
    from tltreal.validation.validate import stopping_row

    rng = np.random.default_rng(seed)
    true = np.full(14, 0.03) * rng.choice([-1, 1], size=14)
    drawn = np.empty((14, 0))
    while True:
        drawn = np.hstack([drawn, (true + rng.normal(0, noise, 14))[:, None]])
        row = stopping_row(_rounds(drawn), ["measured"], rule)
        if row["stop"]:
            return drawn.shape[1]


def test_quiet_rounds_stop_at_the_minimum_and_noisy_ones_at_the_cap():
    rule = StoppingRule(width=0.02, min_rounds=3, max_rounds=8)
    assert _run_until_stopped(0.002, rule) == 3
    assert _run_until_stopped(0.2, rule) == 8
    middle = _run_until_stopped(0.03, rule)
    assert 3 <= middle <= 8


def test_the_rule_never_stops_before_the_minimum_and_always_at_the_cap():
    rule = StoppingRule(width=0.02, min_rounds=3, max_rounds=5)
    assert rule.reason(2, [(0.03, 0.031)]) is None
    assert "within" in rule.reason(3, [(0.03, 0.031)])
    assert rule.reason(4, [(0.01, 0.10)]) is None
    assert "cap of 5" in rule.reason(5, [(0.01, 0.10)])
    assert rule.reason(3, [(float("nan"), float("nan"))]) is None  # no interval: go on


def test_headline_interval_is_seeded_holds_the_headline_and_narrows_with_agreeing_rounds():
    rng = np.random.default_rng(0)
    wide = rng.normal(0.05, 0.05, (14, 4))
    tight = 0.05 + rng.normal(0, 0.002, (14, 4))
    m = _rounds(wide)
    lo, hi = headline_interval(m, "calibrated_measured_err")
    assert (lo, hi) == headline_interval(m, "calibrated_measured_err")
    assert lo <= headline_of(wide) <= hi
    tlo, thi = headline_interval(_rounds(tight), "calibrated_measured_err")
    assert thi - tlo < (hi - lo) / 5
    assert np.isnan(headline_interval(_rounds(wide[:, :1]), "calibrated_measured_err")[0])


# ---- the machine's noise and the refusal -------------------------------------------------------------
def test_run_noise_is_the_median_distance_of_identical_runs_from_their_centre():
    m = pd.DataFrame({"step": 0, "policy": ["a"] * 4 + ["b"] * 4, "repeat": [0, 1, 2, 3] * 2,
                      "real_s": [1.0, 1.0, 1.1, 3.0, 2.0, 2.0, 2.0, 2.0]})
    noise = run_noise(m)
    assert noise[(0, "a")] == pytest.approx(np.median(np.abs(np.array([1.0, 1.0, 1.1, 3.0]) / 1.05 - 1)))
    assert noise[(0, "b")] == 0.0


def test_no_error_is_claimed_below_the_noise_and_the_exit_message_says_so():
    from tltcli.validate import headline_message

    assert claim(0.04, 0.02) == "4.0%" and claim(0.02, 0.04) is None
    errors = np.array([[0.02, 0.021, 0.019]] * 6)
    quiet = _rounds(errors).assign(real_s=1.0)
    noisy = quiet.assign(real_s=np.tile([1.0, 1.1, 0.9], 6))  # identical runs 10% apart: noise 10% > 2%
    stopping = pd.DataFrame([{"rounds": 3, "stop": "test"}])
    said = headline_message(SimpleNamespace(makespans=quiet, acceptance_sources=["measured"], stopping=stopping))
    assert "measured acceptance: 2.0%" in said and "NOT CLAIMED" not in said
    said = headline_message(SimpleNamespace(makespans=noisy, acceptance_sources=["measured"], stopping=stopping))
    assert "NOT CLAIMED" in said and "noise of 10.0%" in said
