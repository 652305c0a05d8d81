"""analysis.attention_cpu: the fit recovers the form's constants and scores held-out contexts; the
measurement runs (tiny) on the CPU engine."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.attention_cpu import FIT_MAX_CONTEXT, fit, measure, scored


def _exact(floor: float, per_token: float, bump: float = 0.0) -> pd.DataFrame:
    rows = []
    for b in (1, 4):
        for ctx in (64, 256, FIT_MAX_CONTEXT, 4 * FIT_MAX_CONTEXT):
            kv = b * (ctx + 1)
            extra = bump if ctx > FIT_MAX_CONTEXT else 0.0
            rows.append({"round": 0, "batch_size": b, "context": ctx, "kv_tokens": kv,
                         "attention_s": (floor + per_token * kv) * (1 + extra)})
    return pd.DataFrame(rows)


def test_the_fit_recovers_an_exact_form_and_scores_held_out_contexts() -> None:
    df = _exact(2e-5, 1e-7)
    assert fit(df) == pytest.approx((2e-5, 1e-7), rel=1e-9)
    rows, summary = scored(df)
    assert summary["held_out_median_abs_error"].iloc[0] == pytest.approx(0.0, abs=1e-9)
    # held-out points 25% slower than the form: predicted / measured - 1 = 1 / 1.25 - 1 = -20%
    rows, summary = scored(_exact(2e-5, 1e-7, bump=0.25))
    assert summary["held_out_median_abs_error"].iloc[0] == pytest.approx(0.2, abs=1e-9)
    assert rows.loc[rows["held_out"], "error"].to_numpy() == pytest.approx(-0.2, abs=1e-9)
    assert (rows.loc[~rows["held_out"], "error"].abs() < 1e-9).all()  # fitted on the short contexts only


def test_the_measurement_runs_on_the_cpu_engine() -> None:
    df = measure(rounds=1, batches=(1, 2), contexts=(16, 32), iterations=2)
    assert len(df) == 4 and (df["attention_s"] > 0).all() and (df["decode_s"] > 0).all()
    assert ((df["attention_share"] > 0) & (df["attention_share"] < 1.5)).all()
