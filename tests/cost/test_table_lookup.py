"""The cost table's scalar lookup (``_Grid.at_one``, what a policy's ~100 lookups per decision use) is
the vectorised interpolation (``_Grid.at``) bit for bit: inside the grid, past both ends, on one-row
and one-column grids."""

from __future__ import annotations

import numpy as np
import pytest

from tltcore.cost.table import _Grid


@pytest.mark.parametrize(("nb", "nc"), [(1, 1), (1, 4), (5, 1), (6, 7)])
def test_scalar_lookup_is_the_vectorised_one_bit_for_bit(nb: int, nc: int) -> None:
    rng = np.random.default_rng(nb * 10 + nc)
    grid = _Grid(np.sort(rng.choice(np.arange(1, 600), nb, replace=False)).astype(float),
                 np.sort(rng.choice(np.arange(0, 40_000), nc, replace=False)).astype(float),
                 rng.uniform(-1e-3, 5e-2, (nb, nc)))
    bs = np.concatenate([rng.uniform(0, 700, 200), grid.batches, [0.0, 1e4]])
    cs = np.concatenate([rng.uniform(-100, 50_000, 200), grid.contexts, [0.0, 1e6]])
    for b in bs:
        for c in cs[rng.choice(len(cs), 12)]:
            assert grid.at_one(float(b), float(c)) == float(grid.at(float(b), float(c))[()])


def _table(rule: str, rng: np.random.Generator, prefill_rule: str | None = None):
    """A table with every kind a shape can be priced from: whole ``sd`` rows for two shapes, draft-step
    and verify rows (and a per-iteration SD overhead) for the rest; and both prefills."""
    from tltcore.cost.table import TableCostModel, table_frame

    rows = []
    for b in (1, 4, 16, 64):
        for c in (0, 512, 4096):
            kinds = [("decode", {}), ("prefill", {}), ("drafter_prefill", {}),
                     ("sd", {"depth": 8, "topk": 4, "verify_tokens": 48}),
                     ("sd", {"depth": 3, "topk": 1, "verify_tokens": 3}),
                     *(("draft_step", {"topk": k}) for k in (1, 4)),
                     *(("verify", {"verify_tokens": v}) for v in range(1, 33))]
            rows += [{"kind": kind, "batch_size": b, "context": c, "seconds": float(rng.uniform(1e-3, 9e-2)), **shape}
                     for kind, shape in kinds]
        rows.append({"kind": "sd_overhead", "batch_size": b, "context": 0, "seconds": float(rng.uniform(0, 1e-3))})
    meta = {"context_rule": rule} | ({} if prefill_rule is None else {"prefill_rule": prefill_rule})
    return TableCostModel.from_frame(table_frame(rows), meta)


@pytest.mark.parametrize("rule", ["sum", "max"])
def test_batched_sd_times_are_each_shapes_own_lookup_bit_for_bit(rule: str) -> None:
    """``sd_times`` (one contexts check, one lookup per shared grid) gives every shape exactly its own
    ``sd_time``: whole SD rows, composed shapes sharing a draft-step grid, the overhead, plain decoding,
    an empty batch, and contexts inside and beyond the grid."""
    from tltcore.policy.base import NO_SD, SDConfig

    rng = np.random.default_rng(7)
    table = _table(rule, rng)
    shapes = [SDConfig(8, 4, 48), SDConfig(3, 1, 3), *(SDConfig.chain(k) for k in range(1, 9)), SDConfig(6, 4, 16),
              NO_SD, SDConfig(5, 4, 32)]
    for b in (1, 2, 5, 16, 40, 64, 100):
        ctx = rng.integers(0, 9000, b)
        assert table.sd_times(ctx, shapes) == [table.sd_time(ctx, c) for c in shapes]
    assert table.sd_times(np.zeros(0, dtype=np.int64), shapes) == [0.0] * len(shapes)


def test_shapes_with_whole_rows_are_priced_in_one_stacked_pass_bit_for_bit() -> None:
    """Under the ``max`` rule, shapes whose times are whole ``sd`` rows (a CPU profile's, cost-aware's
    dozen) are read from one stack of their grids: the same floats as each shape's own lookup, inside
    and beyond the grid; a list with a composed shape is looked up shape by shape."""
    from tltcore.policy.base import NO_SD, SDConfig

    rng = np.random.default_rng(11)
    table = _table("max", rng)
    whole = (SDConfig(8, 4, 48), NO_SD, SDConfig(3, 1, 3), SDConfig(8, 4, 48))
    assert table._stack(whole) is not None and table._stack((*whole, SDConfig.chain(5))) is None
    for b in (1, 2, 3, 5, 16, 40, 64, 100, 300):
        for top in (0, 1, 300, 512, 2000, 4096, 9000, 70_000):
            ctx = np.minimum(rng.integers(0, top + 1, b), top)
            ctx[0] = top
            assert table.sd_times(ctx, whole) == [table.sd_time(ctx, c) for c in whole]
            assert table.sd_times(ctx, list(whole)) == [table.sd_time(ctx, c) for c in whole]


def test_a_max_rule_table_reads_a_batch_by_its_size_and_longest_context_bit_for_bit() -> None:
    """Under the ``max`` rule every time is a function of the batch size and the longest context, and the
    ``*_at`` readings are those times to the bit: plain and SD iterations (whole rows, composed shapes),
    prefills (requests with nothing to prefill are not in the pass; by the ``padded_attention`` prefill
    rule also through their tokens in all), an empty batch. Under ``sum`` (context or prefill rule) a
    table offers no such readings."""
    rng = np.random.default_rng(5)
    assert _table("sum", rng).longest_context_times() is None
    assert _table("max", rng, "sum").longest_context_times() is None
    for prefill_rule in (None, "padded_attention"):
        table = _table("max", rng, prefill_rule)
        assert table.longest_context_times() is table
        _read_at(table, rng)


def _read_at(table, rng: np.random.Generator) -> None:
    from tltcore.policy.base import NO_SD, SDConfig

    shapes = [SDConfig(8, 4, 48), SDConfig(3, 1, 3), SDConfig.chain(5), SDConfig(6, 4, 16), NO_SD]
    for b in (1, 2, 5, 16, 40, 64, 100):
        for top in (0, 1, 300, 4096, 9000):
            ctx = np.minimum(rng.integers(0, top + 1, b), top)
            ctx[0] = top
            assert table.decode_time(ctx) == table.decode_time_at(b, top)
            assert table.sd_times(ctx, shapes) == table.sd_times_at(b, top, shapes)
            new = ctx[ctx > 0]
            zero = np.zeros(b, dtype=np.int64)
            assert table.prefill_time(ctx, zero) == table.prefill_time_at(new.size, int(new.max()) if new.size else 0,
                                                                          int(new.sum()))
            assert table.drafter_prefill_time(ctx, ctx) == table.drafter_prefill_time_at(
                new.size, int(new.max()) if new.size else 0)
    assert table.decode_time_at(0, 5) == 0.0 and table.sd_times_at(0, 5, shapes) == [0.0] * len(shapes)
