"""A whole plain (no-SD) phase of a rollout worker in closed form: the schedule in iteration space.

While a policy promises plain decode held until the next event at every batch size above a bound
(``plain_above``, the :mod:`tltcore.policy.base` contract), what the worker does next depends on
integers only: every live request emits one token per iteration, so a request admitted after
iteration ``A`` with ``r`` tokens left to decode finishes at iteration ``A + r``; a span runs from
one finish to the next (``n = min(rem)``); each finish frees a slot and its KV reservation, and the
waiting requests are admitted FCFS at finishes (:mod:`tltsim.rollout.scheduling`), in rounds when
some admitted request has a one-token response (done at its prefill, which frees room again at the
same iteration). :func:`fcfs_admissions` replays exactly that with a heap of live finishes, one
step per admitted request (no step per span); :func:`phase_spans` turns the finish and admission
iterations into every span's batch size, iteration count, context sum and residue histogram with
difference arrays, and cuts the phase at the first span whose batch (after that event's
admissions) is at or below the bound -- where the per-span path would ask the policy again.

Times are then the per-span cost of each span (one vectorised call on the roofline,
:func:`tltsim.rollout.span_cost.plain_phase_pricer`; one cost call per span otherwise) and the
prefill of each admission round, added in event order (``numpy.add.accumulate`` adds in order:
the same float sums as the per-span clock). :meth:`tltsim.rollout.worker.RolloutWorker._plain_phase`
applies the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heapify, heappop, heappush

import numpy as np


def fcfs_admissions(live_finish: list[int], live_reserve: list[int], reserve: list[int], resp: list[int],
                    max_batch: int, kv_capacity: int) -> tuple[list[int], list[int]] | None:
    """The iteration (relative to the phase start, 0) and round at which each waiting request is
    admitted, in queue order; the list stops at the first request never admitted (nothing live
    and it does not fit: the per-span path raises there). None when the head of the queue would
    be admitted at 0 (the phase starts after that event's admissions, so the caller declines).

    ``live_finish``/``live_reserve``: the live requests' finish iterations (their remaining tokens)
    and KV reservations; ``reserve``/``resp``: the waiting requests' reservations and response
    lengths (a request admitted at ``A`` finishes at ``A + resp - 1``: prefill emits its first
    token). At a finish every request finishing there is retired first; then the longest prefix of
    the queue that fits in the free slots and KV is admitted (one round); one-token responses are
    done after their prefill, and the next round may use their room at the same iteration."""
    heap = list(zip(live_finish, live_reserve, strict=True))
    heapify(heap)
    n_live, kv = len(heap), sum(live_reserve)
    at, rnd = 0, 0
    admitted: list[int] = []
    rounds: list[int] = []
    for r, s in zip(reserve, resp, strict=True):
        while n_live >= max_batch or kv + r > kv_capacity:
            if not heap:
                return admitted, rounds
            d = heap[0][0]
            if d > at:
                at, rnd = d, 0
            else:  # one-token responses admitted at this iteration, done at their prefill
                rnd += 1
            while heap and heap[0][0] == d:
                kv -= heappop(heap)[1]
                n_live -= 1
        if at == 0:
            return None
        admitted.append(at)
        rounds.append(rnd)
        heappush(heap, (at + s - 1, r))
        n_live += 1
        kv += r
    return admitted, rounds


@dataclass(frozen=True)
class Phase:
    """The spans of one plain phase (``S`` spans) over the phase's requests (the live ones at its
    start, in live order, then the admitted ones in queue order: the live order of every span).

    Per span ``j`` (0-based): ``start[j]``/``n[j]``: the iteration it starts at (relative) and its
    iterations; ``b[j]``: its batch; ``ctx_sum[j]``: its requests' contexts summed at its start;
    ``hist[j, r]``: how many of its requests have ``c % block == r`` (``c``: context minus
    iteration, per request). Per request: ``first``/``last`` span (1-based; ``last < first`` for a
    one-token response done at its prefill)."""

    start: np.ndarray
    n: np.ndarray
    b: np.ndarray
    ctx_sum: np.ndarray
    hist: np.ndarray | None
    first: np.ndarray
    last: np.ndarray
    end: int  # the iteration the phase ends at (relative)

    @property
    def spans(self) -> int:
        return len(self.n)


def phase_spans(admit: np.ndarray, finish: np.ndarray, c0: np.ndarray, bound: int, block: int | None) -> Phase:
    """The phase's spans until (not including) the first whose batch is at or below ``bound``.

    ``admit``/``finish``: each request's admission and finish iterations (0 for the live ones);
    ``c0``: its context minus its iteration (constant while it decodes plainly); ``block``: the KV
    block size whose residue histogram the roofline's pricer needs (None: no histogram)."""
    events = np.unique(finish)  # every span ends at a finish; admissions happen at finishes only
    k = len(events)
    ev = np.empty(k + 1, dtype=np.int64)
    ev[0], ev[1:] = 0, events
    first = np.searchsorted(ev, admit) + 1  # span index (1-based) starting at the admission
    last = np.searchsorted(ev, finish)  # span ending at the finish
    size = k + 2
    lo, hi = np.bincount(first, minlength=size), np.bincount(last + 1, minlength=size)
    b = np.cumsum(lo - hi)[1:k + 1]
    low = b <= bound
    spans = int(low.argmax()) if low.any() else k
    b = b[:spans]
    w_lo = np.bincount(first, weights=c0, minlength=size)
    w_hi = np.bincount(last + 1, weights=c0, minlength=size)
    # integer sums of integers far below 2**53: exact in float64, then back to int64
    c_sum = np.cumsum(w_lo - w_hi)[1:spans + 1].astype(np.int64)
    start, n = ev[:spans], np.diff(ev[:spans + 1])
    hist = None
    if block is not None:
        res = c0 % block
        flat = np.bincount(first * block + res, minlength=size * block) - \
            np.bincount((last + 1) * block + res, minlength=size * block)
        hist = np.cumsum(flat.reshape(size, block), axis=0)[1:spans + 1]
    return Phase(start, n, b, c_sum + b * start, hist, first, last, int(ev[spans]))
