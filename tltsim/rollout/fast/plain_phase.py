"""A whole plain (no-SD) phase of a rollout worker in closed form: the schedule in iteration space.

While a policy promises plain decode held until the next event at every batch size above a bound
(``plain_above``, an optional hint: :mod:`tltsim.rollout.fast`), what the worker does next depends
on integers only: every live request emits one token per iteration, so a request admitted after
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
:meth:`~tltcore.cost.protocol.PagedKVTimes.decode_spans_time`; one cost call per span otherwise) and the
prefill of each admission round, added in event order (``numpy.add.accumulate`` adds in order:
the same float sums as the per-span clock). :func:`run_phase` applies the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from heapq import heapify, heappop, heappush

import numpy as np

from tltcore.policy.base import NO_SD, Outcome
from tltsim.rollout.fast.state import FastWorker
from tltsim.rollout.worker import _sum


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
    events = np.sort(finish)  # every span ends at a finish; admissions happen at finishes only
    if len(events):
        events = events[np.concatenate(([True], events[1:] != events[:-1]))]  # each once (numpy.unique)
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


def run_phase(fast: FastWorker, bound: int) -> bool:
    """Every plain span from here until the batch, after an event's admissions, is at or below
    ``bound`` (the policy's ``plain_above``), in closed form (module docstring):
    the event rows, clock, retirements, admissions with their prefills, live set and queue the
    per-span path leaves, bit for bit. The policy is asked nothing (its hint) and told the
    phase's last span. False, having done nothing, where it does not apply (fractional progress
    in expected mode, after SD)."""
    w = fast.worker
    live = w.live
    n_old = len(live)
    if w.expected:
        if not all(np.array_equal(c, np.floor(c)) for c in (live.rem, live.gen, live.lag)):
            return False
        finish0 = live.rem.astype(np.int64)
    else:
        finish0 = live.rem
    lo, eng = w.next_waiting, w.eng
    admitted: list[int] = []
    rounds: list[int] = []
    if lo < len(w.q_resp):
        sched = fcfs_admissions(finish0.tolist(), (live.prompt + live.target).tolist(),
                                w.q_reserve[lo:].tolist(), w.q_resp[lo:].tolist(), eng.max_batch,
                                eng.kv_capacity_tokens)
        if sched is None:  # cannot happen after the admission loop; the per-span path then
            fast.plain_bound = None
            return False
        admitted, rounds = sched
    adm = np.array(admitted, dtype=np.int64)
    na = len(adm)
    a_prompt, a_resp = w.q_prompt[lo:lo + na], w.q_resp[lo:lo + na]
    admit = np.concatenate([np.zeros(n_old, dtype=np.int64), adm])
    finish = np.concatenate([finish0, adm + a_resp - 1])
    c0 = np.concatenate([live.ctx, a_prompt + 1 - adm])
    price = w.pricers.phase
    ph = phase_spans(admit, finish, c0, bound, w.pricers.block if price is not None else None)
    spans = ph.spans
    if spans == 0:
        fast.plain_bound = None
        return False
    if price is not None:
        dts = price(ph.n, ph.b, ph.ctx_sum, ph.hist, ph.start)
    else:  # one cost call per span, over the span's contexts in live order
        dts = np.array([w.cost.decode_span_time(c0[(ph.first <= j) & (ph.last >= j)] + int(ph.start[j - 1]),
                                                   int(ph.n[j - 1])) for j in range(1, spans + 1)],
                       dtype=np.float64)
    # admission rounds within the phase (at its last event too): consecutive runs of equal (iteration, round)
    n_in = int(np.searchsorted(adm, ph.end, side="right"))
    if n_in:
        key = adm[:n_in] * (n_in + 1) + np.array(rounds[:n_in], dtype=np.int64)
        g_first = np.flatnonzero(np.diff(key, prepend=-1))
        g_end = np.append(g_first[1:], n_in)
        g_span = ph.first[n_old + g_first] - 1  # the span each round follows (1-based)
    else:
        g_first = g_end = g_span = np.zeros(0, dtype=np.int64)
    n_rounds = len(g_first)
    # the order of it all: span j, then the rounds at its end
    span_pos = np.arange(spans) + np.searchsorted(g_span, np.arange(1, spans + 1), side="left")
    round_pos = g_span + np.arange(n_rounds)
    inc = np.empty(spans + n_rounds + 1)
    inc[0] = w.t
    inc[1 + span_pos] = dts
    r_rows: list[tuple[int, int, int]] = []  # (passes, batch, prompt tokens) per round
    if n_rounds:
        r_t = []
        mixed = eng.mixed_prefill
        for g0, g1, g in zip(g_first.tolist(), g_end.tolist(), (g_first + n_old).tolist(), strict=True):
            prompts = a_prompt[g0:g1]
            at = int(adm[g0])
            n_live = int(np.count_nonzero(finish[:g] > at)) if mixed else 0  # live before this prefill
            t, passes = w.admission_prefill(prompts, n_live)
            r_t.append(t)
            r_rows.append((passes, g1 - g0, int(_sum(prompts))))
        inc[1 + round_pos] = r_t
    clock = np.add.accumulate(inc)  # the clock after each span and prefill, added in order
    _log_phase(fast, spans, n_rounds, span_pos, round_pos, clock, ph, r_rows)
    # retirements: at the end of their span, or (one-token responses) after their round's prefill
    ids = np.arange(n_old + n_in)
    first, last = ph.first[:n_old + n_in], ph.last[:n_old + n_in]
    plain_done = (last >= first) & (last <= spans)
    when = np.full(n_old + n_in, -1, dtype=np.int64)
    when[plain_done] = span_pos[last[plain_done] - 1]
    if n_rounds:
        gid = np.repeat(np.arange(n_rounds), g_end - g_first)
        quick = last[n_old:] < first[n_old:]
        when[n_old:][quick] = round_pos[gid[quick]]
    done = ids[when >= 0]
    order = done[np.argsort(when[done], kind="stable")]
    if len(order):
        targets = np.concatenate([live.target, a_resp[:n_in]])
        w.done_tokens.append(targets[order])
        at = when[order]  # sorted: each retirement position's first entry, and how many share it
        cut = np.flatnonzero(at[1:] != at[:-1]) + 1
        at_pos = at[np.concatenate(([0], cut))]
        counts = np.diff(np.concatenate(([0], cut, [len(at)])))
        w.done_t.extend(clock[at_pos + 1].tolist())
        counts_l = counts.tolist()
        w.done_n.extend(counts_l)
        if w.on_finish_many is not None:
            w.on_finish_many(counts_l)
    # the policy hears the last span (its hint: the same state as hearing every one)
    j = spans - 1
    n_last, b_last = int(ph.n[j]), int(ph.b[j])
    w.policy.observe(Outcome(NO_SD, b_last, n_last * b_last, float(dts[j]), time=float(clock[span_pos[j] + 1]),
                                worker=w.idx, iterations=n_last))
    # the live set and queue at the phase's end
    end = ph.end
    keep = np.flatnonzero(last[:n_old] > spans)
    new = n_old + np.flatnonzero(last[n_old:] > spans)
    live.after_plain(keep, end, a_prompt[new - n_old], a_resp[new - n_old], end - adm[new - n_old])
    w.next_waiting = lo + n_in
    w.t = float(clock[-1])
    w.iteration += end
    w.lag_dirty = True
    w.need_admit = True  # admissions at the last event are done; asking again admits nothing (or raises)
    return True


def _log_phase(fast: FastWorker, spans: int, n_rounds: int, span_pos: np.ndarray, round_pos: np.ndarray,
               clock: np.ndarray, ph: Phase, r_rows: list[tuple[int, int, int]]) -> None:
    """A plain phase's decode and prefill rows, in the order the per-span path closes them."""
    log, w = fast.log, fast.worker.idx
    n, b = ph.n, ph.b
    skip = 0
    if log.continues(w, int(b[0]), NO_SD):
        # the first span continues an open plain row of the same batch (coalesced, as log.decode does)
        log.decode(w, float(clock[0]), float(clock[1]), int(n[0]), int(b[0]), NO_SD, float(n[0] * b[0]))
        skip = 1
    log.flush(w)
    total = spans + n_rounds
    kinds = np.zeros(total, dtype=np.int8)  # 0: decode, 1: prefill
    iters = np.empty(total, dtype=np.int64)
    batch = np.empty(total, dtype=np.int64)
    tokens = np.empty(total, dtype=np.int64)
    prefill = np.zeros(total, dtype=np.int64)
    iters[span_pos], batch[span_pos], tokens[span_pos] = n, b, n * b
    if n_rounds:
        kinds[round_pos] = 1
        r = np.array(r_rows, dtype=np.int64).reshape(-1, 3)
        iters[round_pos], batch[round_pos], prefill[round_pos] = r[:, 0], r[:, 1], r[:, 2]
        tokens[round_pos] = r[:, 1]  # prefill emits each admitted request's first token
    sl = slice(skip, total)
    log.block(w, kinds[sl], ("decode", "prefill"), clock[:-1][sl], clock[1:][sl], iters[sl], batch[sl],
              tokens[sl], prefill[sl])

