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
