"""SD spans of finite holds, many at once (nothing waiting, so no admission ends a span).

A policy that holds a shape for a few iterations (``cost-aware``: re-evaluated at every finish, the
batch having changed, and every ``recheck`` iterations) is asked after every span, and a span ends at
its first finish or when its hold runs out. A span boundary changes nothing of how the iterations
run while the shape stands, so a chunk of them is run first and the spans walked after:

* expected mode (:func:`run_held`): as for a decision held until an event
  (:mod:`~tltsim.rollout.fast.expected_tail`), every live request emits the expected accept length per
  iteration whatever the spans around it, so one ``numpy.cumsum`` over a chunk of iterations gives every
  request's finishing iteration, every iteration's contexts (priced in one call) and the state at any
  span boundary: each span then costs the policy's calls and a few scalars instead of a span's numpy
  passes (~150 us);
* stochastic mode (:func:`run_held_draws`): each iteration draws one accept length per live request
  from the worker's stream whatever the spans, so a chunk runs its iterations finish to finish with the
  draws taken in one call (the unused ones given back) and prices them in one call; the per-span
  pricing, retirement and dispatch go.

An answer with another shape ends a chunk and wastes the rest of it, so chunks start small and grow.

Where the policy offers the held-spans hint (:class:`~tltcore.policy.base.HoldsAhead`, ``cost-aware``),
both modes lay the rest of a chunk out in spans once it has answered (the first span held as answered,
every later one ``held_hold()`` iterations or to its finish), measure them (:class:`_Spans`,
:class:`_Drawn`) and hand their rounds to ``held_ahead`` with the paged-KV sums at each span's start; the
spans it keeps are committed, and ``decide`` is asked at the first it did not take.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tltcore.policy.base import HOLD_UNTIL_EVENT, BatchView, Decision, Outcome, SDConfig
from tltsim.rollout.fast.event_blocks import SimEventLog
from tltsim.rollout.fast.expected_chunk import CELLS, EqualSums, expected_chunk, fold_recent, running
from tltsim.rollout.fast.spans import draw_block, speculate_blocks, speculate_expected_blocks
from tltsim.rollout.fast.state import FastWorker
from tltsim.rollout.worker import _EPS, RolloutWorker, _min, _sum


def run_held(fast: FastWorker, decision: Decision, hold: int) -> None:
    """Expected-mode SD spans of ``decision`` (held ``hold`` iterations, ``1 < hold <
    HOLD_UNTIL_EVENT``) and of every later answer of the policy with the same shape and a finite
    hold, in chunks of iterations (fast path, nothing waiting).

    What the per-span path (:func:`~tltsim.rollout.fast.spans.speculate_expected_blocks`, then the
    worker's retirement and its next ``decide``) does is done per span, in the same order with the
    same values: a span runs to the first iteration in which a request finishes, clipped there, or
    to the end of its hold; its tokens are the running sum of its unclipped iterations' tokens (the
    sum of ``b`` copies of the accept length, as numpy sums them, added one by one: one list per
    batch size) plus the clipped one's; the recent-accept estimate is folded per iteration (a run
    of equal updates stops changing it once it equals the value folded in); the clock is the running
    sum of the chunk's iteration times; the policy hears the span's Outcome, the log gets its row
    (:meth:`~tltcore.events.EventLog.decode`: a span that ends at its hold merges with the next as
    the reference's rows do), the finished retire, and the policy is asked with the view it would
    get. An answer with another shape, ``switch_on``, a hold of one iteration or until an event, or
    a batch above the plain-phase hint ends the chunk there; the answer is run next."""
    config = decision.config
    w = fast.worker
    live, eps = w.live, _EPS
    a = w.draw(config, len(live))
    keep = 1.0 - w.recent.weight
    policy, log, idx, step_no = w.policy, fast.log, w.idx, w.step_no
    held = fast.held if fast.plain_bound is None else None  # the held-spans hint
    drafter, hint = w.drafter, w.hint
    spans = _Spans(fast, config, a, keep)
    ema, t, iteration = w.recent.value, w.t, w.iteration
    first = True
    chunk = 0
    while True:
        rem = live.rem
        b0 = len(live)
        if not first:  # the chunk's first span: the policy asked from the live state, before the chunk is built
            if _plain_above(fast, b0):
                return
            d = policy.decide(BatchView(b0, tuple(live.ctx.tolist()), t, iteration, ema, idx, step_no, drafter,
                                        tuple(rem.tolist()) if hint else ()))
            hold = w.hold(d)
            if not _same_shape(d, config, hold):
                fast.pending = d
                return
            first = True
        need = int(float(_min(rem)) / a) + 2  # rows that surely hold a finish
        # about the iterations of the next 16, 24, 32, ... finishes, within a bounded chunk: an answer with
        # another shape ends the chunk and wastes the rest of it (doubling wasted ~a third of the rows)
        m = min(b0, 16 + 8 * chunk)
        reach = int(float(np.partition(rem, m - 1)[m - 1]) / a) + 2
        rows = max(need, min(reach, CELLS // b0))
        chunk += 1
        made = expected_chunk(w, a, rows, t, config)
        if made is None:  # cannot happen (rows >= need); the per-span path then
            speculate_expected_blocks(fast, config, hold)
            if _min(live.rem) <= eps:
                w.retire()
            return
        r, g, fin, ends, batch, clock = made.r, made.g, made.fin, made.ends, made.batch, made.clock
        last_end = made.last_end
        times = clock.tolist()
        ends_l, batch_l = ends.tolist(), batch.tolist()
        counts = np.bincount(np.searchsorted(ends, fin[fin <= last_end]), minlength=len(ends_l)).tolist()
        pending = None
        spans.chunk(ends_l, fin, r, times)
        p = 0  # the span's first iteration in the chunk
        e = 0  # ends_l[e]: the next finish
        while p < last_end:
            b = batch_l[p]
            in_span = None
            if not first:
                if _plain_above(fast, b):
                    break
                in_span = fin > p  # the span's requests, in live order
                d = policy.decide(BatchView(b, tuple(made.contexts(p)[in_span].tolist()), times[p], iteration, ema, idx,
                                            step_no, drafter, tuple(r[p][in_span].tolist()) if hint else ()))
                hold = w.hold(d)
                if not _same_shape(d, config, hold):
                    pending = d
                    break
            first = False
            h = held.held_hold() if held is not None and made.paged is not None else None
            if h is not None and 1 < h < HOLD_UNTIL_EVENT:
                # the rest of the chunk laid out in spans (this one held `hold`, every later one h), their
                # rounds taken by the policy in one call; it keeps those up to its first other answer
                laid: list[_Span] = []
                q, hq, eq, ema_q, in_q = p, hold, e, ema, in_span
                while q < last_end:
                    span = spans.measure(q, batch_l[q], hq, eq, ema_q, in_q)
                    laid.append(span)
                    eq += span.finishing
                    q, hq, ema_q, in_q = span.s1, h, span.ema, None
                starts = np.array([span.s1 for span in laid[:-1]], dtype=np.intp)
                assert made.ctx_sum is not None
                kept = held.held_ahead(config, [span.outcome for span in laid], made.batch[starts],
                                       made.paged[starts], made.ctx_sum[starts])
                for span in laid[:kept]:
                    _commit(w, log, span, counts[e] if span.finishing else None)
                    e += span.finishing
                    iteration += span.outcome.iterations
                    ema = span.ema
                p = laid[kept - 1].s1
                continue
            span = spans.measure(p, b, hold, e, ema, in_span)
            policy.observe(span.outcome)
            _commit(w, log, span, counts[e] if span.finishing else None)
            e += span.finishing
            iteration += span.outcome.iterations
            ema = span.ema
            p = span.s1
        stop = p  # > 0: the chunk's first span always runs
        if e:  # the responses retired, span by span, each span's in live order
            done = np.flatnonzero(fin <= stop)
            w.done_tokens.append(live.target[done[np.argsort(fin[done], kind="stable")]])
            w.need_admit = True
        # the state at the boundary
        live.after_sd(np.flatnonzero(fin > stop), r[stop], g[stop], eps)
        t = times[stop]
        w.t, w.iteration, w.recent.value = t, iteration, ema
        w.lag_dirty = False
        if stop < last_end or len(live) == 0:
            fast.pending = pending
            return


class _Spans:
    """What :func:`run_held` measures spans with: the run's sums of equal values (:class:`EqualSums`),
    runs of one unclipped iteration's tokens added one by one, and the chunk at hand (:meth:`chunk`)."""

    def __init__(self, fast: FastWorker, config: SDConfig, a: float, keep: float) -> None:
        self.config, self.a, self.keep = config, a, keep
        self.verify, self.idx = config.verify_tokens, fast.worker.idx
        self.equal = EqualSums(fast.sums, fast.accepted, a)
        self.runs: dict[int, list[float]] = {}  # batch -> runs[b][n]: n unclipped iterations' tokens added one by one

    def chunk(self, ends: list[int], fin: np.ndarray, r: np.ndarray, times: list[float]) -> None:
        """The chunk's finishing iterations, each request's finish, remaining tokens and the clock."""
        self.ends, self.fin, self.r, self.times = ends, fin, r, times

    def measure(self, p: int, b: int, hold: int, e: int, ema: float | None, in_span: np.ndarray | None) -> _Span:
        """The span of ``b`` requests from iteration ``p`` held ``hold`` iterations (``ends[e]``: the next
        finish; ``in_span``: its requests, where known), the recent-accept estimate ``ema`` before it, as
        the per-span path runs it; nothing is changed but the sums kept. A span runs to the first
        iteration in which a request finishes, clipped there, or to the end of its hold; its tokens are
        the running sum of its unclipped iterations' tokens plus the clipped one's; the recent-accept
        estimate is folded per iteration (a run of equal updates stops changing it once it equals the
        value folded in)."""
        a, keep = self.a, self.keep
        end = self.ends[e]
        finishing = end <= p + hold
        s1 = end if finishing else p + hold
        n = s1 - p
        full = self.equal.full(b)
        run = self.runs.get(b)
        if run is None:
            run = self.runs[b] = [0.0]
        running(run, full, n)
        x = full / b
        whole = n - 1 if finishing else n  # the unclipped iterations
        ema = fold_recent(ema, x, keep, whole)
        total = run[whole]
        if finishing:  # the finishing iteration, clipped
            if in_span is None:
                in_span = self.fin > p
            last = float(_sum(np.minimum(self.r[s1 - 1][in_span], a)))
            total += last
            xl = last / b
            ema = xl if ema is None else xl + keep * (ema - xl)
        acc_each, acc = self.equal.accepted(b, n)
        t0, t1 = self.times[p], self.times[s1]
        outcome = Outcome(self.config, b, round(total), t1 - t0, self.verify * b * n, round(acc), t1, self.idx, n,
                          (acc_each,) * b)
        return _Span(t0, s1, finishing, total, acc, ema, outcome)


@dataclass(frozen=True)
class _Span:
    """One span of an expected chunk as :func:`run_held` measures it: where it starts (``t0``) and ends
    (iteration ``s1``), whether at a finish, its tokens and accepted tokens (numpy's sums), the
    recent-accept estimate after it, and the Outcome the policy hears."""

    t0: float
    s1: int
    finishing: bool
    total: float
    acc: float
    ema: float | None
    outcome: Outcome


class _Drawn:
    """What :func:`run_held_draws` measures and commits a stochastic chunk's spans with: its segments,
    each one's first iteration in the chunk (``offsets``) and the clock after each iteration."""

    def __init__(self, w: RolloutWorker, log: SimEventLog, config: SDConfig, keep: float, segments: list[_Segment],
                 offsets: list[int], times: list[float]) -> None:
        self.w, self.log, self.config, self.keep = w, log, config, keep
        self.segments, self.offsets, self.times = segments, offsets, times

    def measure(self, si: int, j0: int, hold: int, ema: float | None) -> _Span:
        """Segment ``si``'s span from its iteration ``j0`` held ``hold`` iterations (at most to the
        segment's end, its finish), the recent-accept estimate ``ema`` before it, as
        :func:`~tltsim.rollout.fast.spans.speculate_blocks` runs it (the estimate folded per iteration,
        the emitted and accepted tokens summed in its order); nothing is changed."""
        seg, keep = self.segments[si], self.keep
        b, length, at = len(seg.ids), seg.length, self.offsets[si]
        j1 = min(length, j0 + hold)
        n = j1 - j0
        total_e = 0.0
        for e in seg.emitted[j0:j1]:
            e = float(e)
            total_e += e
            x = e / b
            ema = x if ema is None else x + keep * (ema - x)
        accepted = (seg.rows[j1] - seg.rows[j0] - n).astype(np.float64)
        acc = float(_sum(accepted))
        t0, t1 = self.times[at + j0], self.times[at + j1]
        outcome = Outcome(self.config, b, round(total_e), t1 - t0, self.config.verify_tokens * b * n, round(acc), t1,
                          self.w.idx, n, tuple(accepted.tolist()))
        return _Span(t0, j1, j1 == length, total_e, acc, ema, outcome)

    def commit(self, si: int, span: _Span) -> None:
        """A measured span's event row, and the retirement at its segment's finishing iteration, as
        RolloutWorker.retire does."""
        w = self.w
        retired = None
        if span.finishing:
            seg = self.segments[si]
            targets = w.live.target[seg.ids[seg.done]]
            w.done_tokens.append(targets)
            w.need_admit = True
            retired = len(targets)
        _commit(w, self.log, span, retired)


def _commit(w: RolloutWorker, log: SimEventLog, span: _Span, retired: int | None) -> None:
    """A measured span's event row and, where it ends at a finish, the count of its ``retired`` requests
    (their targets are the caller's: per segment, or gathered after an expected chunk)."""
    o = span.outcome
    if log.decode(w.idx, span.t0, o.time, o.iterations, o.batch_size, o.config, span.total, o.drafted_tokens,
                  span.acc):
        w.row_closed = True
    if retired is not None:
        w.done_t.append(o.time)
        w.done_n.append(retired)
        if w.on_finish is not None:
            w.on_finish(retired)


def _plain_above(fast: FastWorker, b: int) -> bool:
    """Whether the policy's plain-phase hint holds at batch ``b`` (then the worker runs a plain phase,
    the policy not asked)."""
    if fast.plain_bound is None:
        return False
    bound = fast.plain_bound()
    return bound is not None and b > bound


def _same_shape(d: Decision, config: SDConfig, hold: int) -> bool:
    """Whether answer ``d`` (held ``hold`` iterations) runs on in the chunk: the same shape (the same
    object: the log merges a row only with its own config), no switch, a finite hold of more than one
    iteration (else another path runs it)."""
    return d.config is config and not d.switch_on and 1 < hold < HOLD_UNTIL_EVENT


@dataclass
class _Segment:
    """A stochastic chunk's iterations between two finishes, the batch fixed: ``rows[j]`` every member's
    context after ``j`` iterations, unclipped (row 0: at its start; ``rows[length]``: after the finishing
    iteration, before clipping), ``ids`` its members (indices into the chunk's first live order, in live
    order), ``end`` their contexts at completion, ``emitted[j]`` the tokens of iteration ``j + 1`` (the last
    one clipped), ``clipped`` the contexts after it, ``done`` who finished, ``pos`` the draws before it."""

    rows: np.ndarray
    ids: np.ndarray
    end: np.ndarray
    emitted: list[int]
    clipped: np.ndarray
    done: np.ndarray
    pos: int
    sums: np.ndarray  # the contexts' sum before each iteration

    @property
    def length(self) -> int:
        return len(self.rows) - 1


def run_held_draws(fast: FastWorker, decision: Decision, hold: int) -> None:
    """Stochastic-mode SD spans of ``decision`` (held ``hold`` iterations, ``1 < hold <
    HOLD_UNTIL_EVENT``) and of every later answer of the policy with the same shape and a finite hold,
    in chunks (fast path, nothing waiting): the counterpart of :func:`run_held`.

    A span boundary changes nothing of what the iterations draw (each draws one accept length per live
    request, from the worker's stream, whatever the spans), so a chunk first runs the iterations from
    finish to finish (:class:`_Segment`), its draws taken from the stream in one call and the unused
    ones given back, and prices them all in one call; then it walks the spans as
    :func:`~tltsim.rollout.fast.spans.speculate_blocks`, the worker's retirement and its next ``decide``
    would: the same clock, recent-accept estimate, emitted and accepted tokens (sums in the same order),
    Outcome, row (:meth:`~tltcore.events.EventLog.decode`), retirements and views. An answer with
    another shape ends the chunk as in :func:`run_held`."""
    config = decision.config
    w = fast.worker
    live = w.live
    stream, drafter, draw = fast.stream, w.drafter, w.sampler.draw
    mean = w.mean_accept(config)
    keep = 1.0 - w.recent.weight
    policy, log, idx, step_no, hint = w.policy, fast.log, w.idx, w.step_no, w.hint
    held = fast.held if fast.plain_bound is None else None  # the held-spans hint
    bs = w.pricers.block
    ema, t, iteration = w.recent.value, w.t, w.iteration
    if w.lag_dirty:  # the first span brings every drafter up to date
        live.lag[:] = 0
        w.lag_dirty = False
    first = True
    chunk = 0
    while True:
        b0 = len(live)
        if not first:  # the chunk's first span: the policy asked from the live state
            if _plain_above(fast, b0):
                return
            d = policy.decide(BatchView(b0, tuple(live.ctx.tolist()), t, iteration, ema, idx, step_no, drafter,
                                        tuple(live.rem.tolist()) if hint else ()))
            hold = w.hold(d)
            if not _same_shape(d, config, hold):
                fast.pending = d
                return
            first = True
        rem = live.rem
        m = min(b0, 4 + 4 * chunk)  # finishes: the work is per segment, so small chunks waste less, cost little
        chunk += 1
        need = int(int(_min(rem)) / mean * 1.25) + 2
        reach = int(int(np.partition(rem, m - 1)[m - 1]) / mean * 1.25) + 2
        total = b0 * max(need, min(reach, CELLS // b0))
        pool = draw(config, total, stream, drafter)  # the stream's next draws, given back below unused
        segments = _segments(live.ctx, live.ctx + rem, pool, mean)
        if not segments:  # the first finish lies past the pool: this span as the per-span path runs it
            stream.pos -= total
            speculate_blocks(fast, config, hold)
            if _min(live.rem) <= 0:
                w.retire()
            return
        # every iteration's time, priced at once, and the clock after each
        sizes = [s.length for s in segments]
        paged: np.ndarray | None = None
        if w.pricers.rows is not None:
            paged = np.concatenate([np.add.reduce((s.rows[:-1] + (bs - 1)) // bs, axis=1) for s in segments]) * bs
            sums = np.concatenate([s.sums for s in segments])
            batches = np.repeat([len(s.ids) for s in segments], sizes)
            dts = w.pricers.rows(paged, sums, batches, config)
        else:
            dts = np.array([w.cost.sd_time(r, config) for s in segments for r in s.rows[:-1]], dtype=np.float64)
        times = [t, *_clock(t, dts)]
        pending = stop = None  # the boundary the chunk's spans end at: (segment, iteration in it)
        offsets = np.concatenate(([0], np.cumsum(sizes))).tolist()  # each segment's first iteration in the chunk

        drawn = _Drawn(w, log, config, keep, segments, offsets, times)
        si, j0 = 0, 0
        while si < len(segments):
            seg = segments[si]
            b = len(seg.ids)
            if not first:
                if _plain_above(fast, b):
                    stop = (si, j0)
                    break
                ctx_j = seg.rows[j0]
                d = policy.decide(BatchView(b, tuple(ctx_j.tolist()), times[offsets[si] + j0], iteration, ema, idx,
                                            step_no, drafter, tuple((seg.end - ctx_j).tolist()) if hint else ()))
                hold = w.hold(d)
                if not _same_shape(d, config, hold):
                    pending, stop = d, (si, j0)
                    break
            first = False
            h = held.held_hold() if held is not None and paged is not None else None
            if h is not None and 1 < h < HOLD_UNTIL_EVENT:
                # the rest of the chunk laid out in spans (this one held `hold`, every later one h, none past
                # its segment's finish), their rounds taken by the policy in one call, kept up to its first
                # other answer (as in run_held)
                laid: list[tuple[int, _Span]] = []
                q_si, q_j0, hq, ema_q = si, j0, hold, ema
                while q_si < len(segments):
                    span = drawn.measure(q_si, q_j0, hq, ema_q)
                    laid.append((q_si, span))
                    q_si, q_j0 = (q_si + 1, 0) if span.finishing else (q_si, span.s1)
                    hq, ema_q = h, span.ema
                starts = np.array([offsets[q] + sp.s1 for q, sp in laid[:-1]], dtype=np.intp)  # the next spans'
                kept = held.held_ahead(config, [sp.outcome for _, sp in laid], batches[starts], paged[starts],
                                       sums[starts])
                for q, sp in laid[:kept]:
                    drawn.commit(q, sp)
                    iteration += sp.outcome.iterations
                    ema = sp.ema
                q, sp = laid[kept - 1]
                si, j0 = (q + 1, 0) if sp.finishing else (q, sp.s1)
                continue
            span = drawn.measure(si, j0, hold, ema)
            policy.observe(span.outcome)
            drawn.commit(si, span)
            iteration += span.outcome.iterations
            ema = span.ema
            si, j0 = (si + 1, 0) if span.finishing else (si, span.s1)
        # the live state at the boundary, the unused draws given back
        if stop is None:
            last = segments[-1]
            ids, ctx, used = last.ids[~last.done], last.clipped[~last.done], last.pos + last.length * len(last.ids)
            end = last.end[~last.done]
            t = times[-1]
        else:
            seg = segments[stop[0]]
            ids, ctx, end = seg.ids, seg.rows[stop[1]], seg.end
            used = seg.pos + stop[1] * len(seg.ids)
            t = times[sum(sizes[:stop[0]]) + stop[1]]
        stream.pos -= total - used
        kept = np.zeros(b0, dtype=bool)
        kept[ids] = True
        live.drop(kept)
        live.ctx[:] = ctx
        np.subtract(end, ctx, out=live.rem)
        w.t, w.iteration, w.recent.value = t, iteration, ema
        if stop is not None or len(live) == 0:
            fast.pending = pending
            return


def _segments(ctx: np.ndarray, end: np.ndarray, pool: np.ndarray, mean: float) -> list[_Segment]:
    """The iterations from contexts ``ctx`` (requests done at ``end``) on the accept lengths ``pool``
    (the stream's next draws, iteration-major: each iteration takes one per live request), finish to
    finish, as long as the pool lasts: a segment's iterations are cumulative sums of its draws in blocks
    (as :func:`~tltsim.rollout.fast.spans.draw_block` cuts them, a block sized to about the shortest
    request's iterations at the mean accept length), cut at the first iteration in which a request
    reaches its end, which is clipped there; a segment the pool cannot finish is dropped."""
    out: list[_Segment] = []
    ids = np.arange(len(ctx))
    off = 0
    while len(ids):
        b = len(ids)
        pos = off
        parts = []
        base = ctx
        while True:
            shortest = int(_min(end - base))
            k = min(shortest, int(shortest / mean * 1.25) + 2, (len(pool) - off) // b)
            if k <= 0:
                return out  # the pool ends inside this segment
            rows, used, finish, _ = draw_block(base, end, k, pool[off:off + k * b])
            off += used * b
            parts.append(rows[:used])
            base = rows[used]
            if finish:
                break
        parts.append(base[None, :])
        seg_rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
        length = len(seg_rows) - 1
        sums = np.add.reduce(seg_rows, axis=1)
        clipped = np.minimum(seg_rows[length], end)
        emitted = (sums[1:] - sums[:-1]).tolist()
        emitted[-1] = int(_sum(clipped)) - int(sums[length - 1])
        done = clipped >= end
        out.append(_Segment(seg_rows, ids, end, emitted, clipped, done, pos, sums[:-1]))
        live = ~done
        ids, ctx, end = ids[live], clipped[live], end[live]
    return out


def _clock(t: float, dts: np.ndarray) -> list[float]:
    """The clock after each of ``dts`` from ``t``, added in order (one ``numpy.add.accumulate``)."""
    clock = np.empty(len(dts) + 1)
    clock[0] = t
    clock[1:] = dts
    np.add.accumulate(clock, out=clock)
    return clock[1:].tolist()
