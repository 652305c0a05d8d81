"""Fitting the simulator's drafter dynamics to measured per-step accept lengths: the inversion of
accept length to per-position acceptance, and a round trip through the simulator's own curves."""

from __future__ import annotations

import numpy as np
import pytest

from tltcore.drafter.dynamics import DrafterConfig
from tltreal.validation.dynamics_fit import (
    adaptive_curve,
    expected_accept_length,
    fit_dynamics,
    per_position_rate,
    scenario_section,
    static_curve,
)


@pytest.mark.parametrize("depth", [1, 3, 4, 7])
def test_rate_inverts_the_chain_accept_length(depth):
    for rate in (0.0, 0.1, 0.55, 0.9, 1.0):
        assert per_position_rate(expected_accept_length(rate, depth), depth) == pytest.approx(rate, abs=1e-9)
    assert expected_accept_length(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert per_position_rate(0.7, 4) == 0.0 and per_position_rate(9.0, 4) == 1.0


def _accepts(qualities: np.ndarray, base_rate: float, depth: int) -> list[float]:
    return [expected_accept_length(base_rate * q, depth) for q in qualities]


def test_fit_recovers_the_parameters_that_generated_the_curves():
    truth = DrafterConfig(stale_quality=0.8, drift=0.25, recovery_samples=300.0)
    samples = [0, 150, 320, 200, 500, 90, 260, 400, 310, 220, 180, 350]
    n, depth, base = len(samples), 4, 0.8
    static = _accepts(static_curve(0.8, 0.25, n), base, depth)
    adaptive = _accepts(adaptive_curve(truth, samples), base, depth)
    fit = fit_dynamics(static, adaptive, samples, depth=depth)
    assert fit.stale_quality == pytest.approx(0.8, abs=0.01)
    assert fit.drift == pytest.approx(0.25, abs=0.02)
    assert fit.recovery_samples == pytest.approx(300.0, rel=0.1)
    assert fit.static_rms < 1e-3 and fit.adaptive_rms < 1e-3
    assert fit.static_quality[0] == pytest.approx(1.0)
    section = scenario_section(fit)
    DrafterConfig(**section)  # a scenario's [drafter] section takes it as it is
    assert section["quality"] == 1.0


def test_a_drafter_that_never_goes_stale_fits_no_drift():
    flat = [3.2] * 6
    fit = fit_dynamics(flat, flat, [100] * 6, depth=4)
    assert fit.drift == 0.0 or fit.stale_quality == pytest.approx(1.0)
    assert np.allclose(fit.static_quality, 1.0)


def test_fit_refuses_too_short_or_ragged_input():
    with pytest.raises(ValueError):
        fit_dynamics([3.0], [3.0], [1], depth=4)
    with pytest.raises(ValueError):
        fit_dynamics([3.0, 2.9], [3.0], [1, 2], depth=4)
    with pytest.raises(ValueError, match="accepts nothing"):
        fit_dynamics([1.0, 1.0], [1.0, 1.0], [1, 1], depth=4)
