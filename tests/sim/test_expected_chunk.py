"""The expected chunk's per-iteration sums over every request (less those finished inside the chunk),
and those of requests in lockstep (one column of emitted tokens), are the masked int64 sums, integer
for integer, in every regime (few or many finishing, any size, any KV block size)."""

from __future__ import annotations

import numpy as np
import pytest

from tltsim.rollout.fast.expected_chunk import _lockstep_sums, _row_sums
from tltsim.rollout.worker import _EPS


def _masked(g: np.ndarray, fin: np.ndarray, prompt: np.ndarray, last_end: int, bs: int):
    """The readable form: every live request's context, zero where it has finished."""
    ctx = prompt + np.floor(g[:last_end] + _EPS).astype(np.int64)
    alive = fin[None, :] > np.arange(last_end)[:, None]
    masked = np.where(alive, ctx, 0)
    paged = np.add.reduce((masked + (bs - 1)) // bs, axis=1) * bs
    return paged, np.add.reduce(masked, axis=1), np.add.reduce(alive, axis=1)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("share", [0.05, 0.5, 1.5])
def test_row_sums_equal_the_masked_sums(seed, share):
    rng = np.random.default_rng(seed)
    b0, last_end = int(rng.integers(1, 400)), int(rng.integers(1, 900))
    a = float(rng.uniform(1.0, 6.0))
    bs = int(2 ** rng.integers(0, 7))
    g = np.empty((last_end + 2, b0))
    g[0], g[1:] = rng.uniform(0, 5000, b0), a
    np.cumsum(g, axis=0, out=g)
    prompt = rng.integers(1, 30000, b0)
    # finishing iterations: some inside the chunk (share of its length), the rest past it
    fin = np.minimum(rng.integers(1, max(2, int(last_end / share) + 2), b0), last_end + 2)
    fin[rng.integers(0, b0)] = last_end  # the chunk's last finish
    gone = np.flatnonzero(fin <= last_end)
    got = _row_sums(g, fin, gone, prompt, last_end, bs)
    want = _masked(g, fin, prompt, last_end, bs)
    for x, y in zip(got, want, strict=True):
        assert x.dtype == np.int64 and np.array_equal(x, y)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("share", [0.05, 0.5, 1.5])
def test_lockstep_sums_equal_the_masked_sums(seed, share):
    """Every request has emitted the same tokens: the sums from one column, per remainder of the block
    size (powers of two and not: the remainder arithmetic is not a bit trick), prompts that are whole
    blocks included."""
    rng = np.random.default_rng(100 + seed)
    b0, last_end = int(rng.integers(1, 400)), int(rng.integers(1, 900))
    a = float(rng.uniform(1.0, 6.0))
    bs = int(rng.choice([1, 2, 16, 24, 100, 128]))
    col = np.empty(last_end + 2)
    col[0], col[1:] = float(rng.choice([0.0, rng.uniform(0, 5000)])), a
    np.cumsum(col, out=col)
    g = np.broadcast_to(col[:, None], (last_end + 2, b0))
    prompt = rng.integers(1, 30000, b0)
    prompt[rng.random(b0) < 0.2] = bs * rng.integers(1, 50)  # whole blocks: remainder 0
    fin = np.minimum(rng.integers(1, max(2, int(last_end / share) + 2), b0), last_end + 2)
    fin[rng.integers(0, b0)] = last_end
    got = _lockstep_sums(col, fin, prompt, last_end, bs)
    want = _masked(g, fin, prompt, last_end, bs)
    for x, y in zip(got, want, strict=True):
        assert x.dtype == np.int64 and np.array_equal(x, y)
