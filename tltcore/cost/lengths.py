"""Validation of per-request length arrays, shared by every cost model's public entry points."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tltcore.errors import InputError

_min = np.minimum.reduce  # skip ndarray.min's Python wrapper (called on every cost query)


def as_lengths(values: np.ndarray | Sequence[int], what: str) -> np.ndarray:
    """Validated 1-D int64 lengths. Kept at every public entry point, but cheap for what the
    simulator passes (already a 1-D int64 array: no copy, one C-level reduce)."""
    if type(values) is np.ndarray and values.dtype == np.int64 and values.ndim == 1:
        arr = values
    else:
        arr = np.asarray(values, dtype=np.int64).reshape(-1)
    if arr.size and _min(arr) < 0:
        raise InputError(f"{what} must be non-negative", field=what)
    return arr


def prefill_lengths(new_tokens: np.ndarray, cached_tokens: np.ndarray) -> tuple[list[int], list[int]]:
    """Validated per-request (new, cached) prefill lengths as Python ints, for both prefill costs."""
    new = as_lengths(new_tokens, "new_tokens")
    cached = as_lengths(cached_tokens, "cached_tokens")
    if new.shape != cached.shape:
        raise InputError(f"new_tokens ({new.size}) and cached_tokens ({cached.size}) differ in length",
                         field="cached_tokens")
    return new.tolist(), cached.tolist()


def runs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, inverse)`` with ``keys[inverse] == values``: each run of equal entries of a 1-D array
    (first to last) is one key, so a key may repeat where its value comes back after another. Cost
    models price one key at a time and gather with ``inverse``, as after ``numpy.unique(values,
    return_inverse=True)``, and their per-key prices are memoised, so a repeated key costs a lookup and
    never a different float. Why not ``numpy.unique``: the simulator's per-iteration batch sizes come
    in runs (a batch shrinks as its requests finish) and the arrays are short, where ``unique``'s sort
    and bookkeeping were most of a pricing call (~15-40 us against ~4-19 us here)."""
    n = len(values)
    inverse = np.zeros(n, dtype=np.intp)
    if n <= 1:
        return values[:n], inverse
    change = values[1:] != values[:-1]
    np.cumsum(change, out=inverse[1:])
    return values[np.flatnonzero(np.concatenate(([True], change)))], inverse
