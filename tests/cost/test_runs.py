"""``tltcore.cost.lengths.runs``: the (keys, inverse) pair the batched cost forms gather per-key prices
with, in place of ``numpy.unique`` on the simulator's short, run-sorted batch-size arrays."""

from __future__ import annotations

import numpy as np
import pytest

from tltcore.cost import RooflineCostModel
from tltcore.cost.lengths import runs
from tltcore.hardware import get_gpu
from tltcore.model_shape import get_model
from tltcore.policy.base import SDConfig


@pytest.mark.parametrize("values", [[], [7], [5, 5, 5], [9, 9, 8, 8, 8, 3], [4, 2, 4, 4, 1, 2, 2]])
def test_runs_give_back_the_values(values) -> None:
    v = np.array(values, dtype=np.int64)
    keys, inverse = runs(v)
    assert keys[inverse].tolist() == values
    assert len(keys) == sum(1 for i, x in enumerate(values) if i == 0 or values[i - 1] != x)  # one key per run
    assert inverse.tolist() == sorted(inverse.tolist())  # runs in order


def test_batched_prices_over_runs_equal_the_per_iteration_prices() -> None:
    """A shrinking batch and one that comes back to a size it had (a key repeated): each iteration's
    price is the scalar form's, to the bit."""
    cost = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("h100"), tp=4)
    paged = cost.paged_kv_times()
    assert paged is not None
    rng = np.random.default_rng(0)
    batch = np.array([64, 64, 63, 63, 63, 40, 63, 1, 1], dtype=np.int64)
    ctx = [rng.integers(100, 9000, b) for b in batch.tolist()]
    bs = cost.kv_block_size
    pg = np.array([int((-(-c // bs) * bs).sum()) for c in ctx], dtype=np.int64)
    cs = np.array([int(c.sum()) for c in ctx], dtype=np.int64)
    config = SDConfig(6, 8, 32)
    want = [cost.sd_time(c, config) for c in ctx]
    assert cost.sd_times_from_sums(pg, cs, batch, config).tolist() == want
    assert cost.decode_times_from_sums(pg, cs, batch) == [cost.decode_time(c) for c in ctx]
    assert cost.sd_many_from_sums(pg, cs, batch, (config,))[:, 0].tolist() == want
