"""``deal`` by one sort gives exactly the lists of its readable rule.

``tltcore.dealing.deal`` computes every worker's requests with one stable sort (a filter per worker
scanned every response once per worker: 1 s of the 500k-response, 4,096-worker bench step). The
rule it must keep is the one below, written the slow, obvious way: groups in order of first
appearance (shuffled with the ``(seed, step)`` generator), cut into ``n_workers`` chunks with
``np.array_split``, each worker's requests group by group and, within a group, in trace order.
Any change to the order of a worker's list changes which requests a worker runs together and so
every simulated result, hence the bit-for-bit comparison (values, order and dtype).
"""

from __future__ import annotations

import numpy as np
import pytest

from tltcore.dealing import deal


def reference_deal(group_ids: np.ndarray, n_workers: int, mode: str, seed: int, step: int) -> list[np.ndarray]:
    """The dealing rule, one worker and one group at a time."""
    ids = [x.item() if hasattr(x, "item") else x for x in np.asarray(group_ids)]
    groups = list(dict.fromkeys(ids))  # order of first appearance in the trace
    if mode == "shuffle":
        rng = np.random.default_rng([seed, step, 0x6465616C])
        groups = [groups[i] for i in rng.permutation(len(groups))]
    out = []
    for chunk in np.array_split(np.arange(len(groups)), n_workers):
        mine = [i for g in chunk for i, x in enumerate(ids) if x == groups[g]]
        out.append(np.array(mine, dtype=np.int64))
    return out


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for w, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.dtype == np.int64, (w, a.dtype)
        assert np.array_equal(a, b), (w, a, b)


def random_groups(rng: np.random.Generator) -> np.ndarray:
    """Group labels with many ties: groups of uneven size, interleaved or adjacent, int or str ids
    whose sorted order differs from their order of appearance."""
    n_groups = int(rng.integers(1, 30))
    sizes = rng.integers(1, 6, size=n_groups)
    labels = rng.permutation(1000)[:n_groups]
    ids = np.repeat(labels, sizes)
    if rng.random() < 0.5:
        ids = rng.permutation(ids)  # a group's samples scattered through the trace
    return ids.astype(str) if rng.random() < 0.3 else ids


@pytest.mark.parametrize("mode", ["shuffle", "trace"])
def test_deal_matches_the_reference_on_random_inputs(mode: str) -> None:
    rng = np.random.default_rng(43)
    for _ in range(300):
        ids = random_groups(rng)
        n_workers = int(rng.integers(1, 40))  # fewer, as many and more workers than groups
        seed, step = int(rng.integers(0, 5)), int(rng.integers(0, 100))
        assert_same(deal(ids, n_workers, mode, seed, step), reference_deal(ids, n_workers, mode, seed, step))


def test_deal_matches_the_reference_for_every_worker_count() -> None:
    ids = np.repeat(np.arange(17)[::-1], 3)  # 17 groups of 3, ids descending
    for n_workers in range(1, 25):
        for mode in ("shuffle", "trace"):
            assert_same(deal(ids, n_workers, mode, 7, 2), reference_deal(ids, n_workers, mode, 7, 2))


def test_trace_mode_keeps_first_appearance_order_and_ties_in_trace_order() -> None:
    ids = np.array(["b", "a", "b", "c", "a", "c", "b"])
    assert_same(deal(ids, 2, "trace"), [np.array([0, 2, 6, 1, 4]), np.array([3, 5])])


def test_no_requests_gives_an_empty_list_per_worker() -> None:
    assert_same(deal(np.array([], dtype=np.int64), 3), [np.zeros(0, dtype=np.int64)] * 3)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="deal mode"):
        deal(np.array([1, 2]), 2, "sorted")
