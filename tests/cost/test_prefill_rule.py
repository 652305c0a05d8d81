"""A table's ``prefill_rule`` prices a target prefill pass of mixed lengths, and only that: on a small
hand-computed table, ``padded_attention`` is the ``max`` reading less the per-token work of the
padding (the rows' flattest secant), ``sum`` and ``max`` read as the context rules do, and a table
without the key keeps its context rule (so every table written before it prices as it did)."""

from __future__ import annotations

import numpy as np
import pytest

from tltcore.cost.table import TableCostModel, table_frame
from tltcore.errors import InputError

# seconds at batch x new tokens per request; secants per batch row: b=1 0.1, 0.15; b=4 0.2, 0.3
ROWS = {1: (1.0, 2.0, 5.0), 4: (2.0, 4.0, 10.0)}
CONTEXTS = (0, 10, 30)


def _table(meta: dict[str, str]) -> TableCostModel:
    rows = [{"kind": kind, "batch_size": b, "context": c, "seconds": s}
            for kind in ("decode", "prefill", "drafter_prefill")
            for b, values in ROWS.items() for c, s in zip(CONTEXTS, values, strict=True)]
    return TableCostModel.from_frame(table_frame(rows), meta)


def _prefill(table: TableCostModel, new: list[int]) -> float:
    n = np.asarray(new, dtype=np.int64)
    return table.prefill_time(n, np.zeros_like(n))


def test_padded_attention_is_the_max_reading_less_the_skipped_padding() -> None:
    table = _table({"context_rule": "max", "prefill_rule": "padded_attention"})
    # b=4, longest 30, mean 15: T(4, 30) - 0.2 * (30 - 15)
    assert _prefill(table, [30, 10, 10, 10]) == pytest.approx(10.0 - 0.2 * 15)
    # b=2 (a third of the way from row 1 to row 4; the request with nothing to prefill is not in the
    # pass): T(2, 30) = 5 + (10 - 5) / 3, slope 0.1 + (0.2 - 0.1) / 3, mean 20
    assert _prefill(table, [30, 0, 10]) == pytest.approx(5.0 + 5.0 / 3 - (0.1 + 0.1 / 3) * 10)
    assert table.prefill_time_at(2, 30, 40) == _prefill(table, [30, 0, 10])
    assert _prefill(table, [10] * 4) == 4.0  # a uniform pass reads its row
    # the drafter's catch-up pads every request (the context rule), and decode is untouched
    n = np.array([30, 10, 10, 10])
    assert table.drafter_prefill_time(n, n) == 10.0 and table.decode_time(n) == 10.0


def test_without_a_prefill_rule_a_table_keeps_its_context_rule() -> None:
    mixed = [30, 10, 10, 10]
    assert _prefill(_table({"context_rule": "max"}), mixed) == 10.0
    # sum: T(4, 0) + sum_i [T(4, n_i) - T(4, 0)] / 4 = 2 + (8 + 2 + 2 + 2) / 4
    assert _prefill(_table({"context_rule": "sum"}), mixed) == pytest.approx(5.5)
    assert _prefill(_table({"context_rule": "max", "prefill_rule": "sum"}), mixed) == pytest.approx(5.5)
    assert _prefill(_table({"context_rule": "sum", "prefill_rule": "max"}), mixed) == 10.0


def test_an_unknown_prefill_rule_is_refused_naming_the_field() -> None:
    with pytest.raises(InputError) as err:
        _table({"context_rule": "max", "prefill_rule": "padded"})
    assert err.value.field == "prefill_rule" and "padded_attention" in str(err.value)
