"""The engines' recent accept length: an EMA with weight 0.2 on the newest SD iteration, spans folded
in as that many iterations."""

from __future__ import annotations

import pytest

from tltcore.policy.recent_accept import WEIGHT, RecentAccept


def test_weight_and_values_are_pinned() -> None:
    assert WEIGHT == 0.2
    ema = RecentAccept()
    assert ema.value is None
    ema.update(4.0)
    assert ema.value == 4.0  # the first SD iteration is the estimate
    ema.update(2.0)
    assert ema.value == pytest.approx(0.2 * 2.0 + 0.8 * 4.0)
    ema.update(5.0)
    assert ema.value == pytest.approx(0.2 * 5.0 + 0.8 * 3.6)


def test_a_span_equals_that_many_single_iterations() -> None:
    one, span = RecentAccept(), RecentAccept()
    for ema in (one, span):
        ema.update(6.0)
    for _ in range(7):
        one.update(2.5)
    span.update(2.5, iterations=7)
    assert span.value == pytest.approx(one.value, rel=1e-12)
    first = RecentAccept()
    first.update(3.0, iterations=5)
    assert first.value == 3.0
    first.update(9.0, iterations=0)  # nothing ran: unchanged
    assert first.value == 3.0


def test_bad_weight() -> None:
    with pytest.raises(ValueError):
        RecentAccept(0.0)
