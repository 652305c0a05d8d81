"""One SD span without the reference's per-iteration loop: a one-iteration span, or a span in blocks.

Each function leaves what :meth:`RolloutWorker.speculate <tltsim.rollout.worker.RolloutWorker.speculate>`
leaves -- clock, live set, recent-accept estimate, iteration count, the span's Outcome and row --
with the same floating-point operations in the same order. The recent-accept estimate is folded
inline (:meth:`RecentAccept.update <tltcore.policy.recent_accept.RecentAccept.update>` of one
iteration, the same operations).
"""

from __future__ import annotations

import numpy as np

from tltcore.policy.base import Outcome, SDConfig
from tltsim.rollout.entities import LiveRequests
from tltsim.rollout.fast.state import FastWorker
from tltsim.rollout.worker import _EPS, RolloutWorker, _min, _sum

_PRICE_ROWS = 4  # SD blocks of at least this many iterations are priced in one call (below, per row is cheaper)
_BLOCK_DRAWS = 4096  # accept lengths drawn at once by a block (iterations x requests)


def speculate_one(w: RolloutWorker, config: SDConfig) -> None:
    """A one-iteration SD span (BEG-MAB decides every iteration), without the span loop's
    accumulators; the same numbers, operation for operation."""
    live = w.live
    b, t0 = len(live), w.t
    dt = w.cost.sd_time(live.ctx, config)
    drawn = w.draw(config, b)
    step = np.minimum(live.rem, drawn)
    emitted = float(_sum(step))
    # np.zeros(b) + (drawn - 1), as the span loop accumulates it: float64 per request
    accepted = np.full(b, drawn - 1, dtype=np.float64) if w.expected else drawn - 1.0
    w.recent.update(emitted / b)
    w.t = t0 + dt
    live.advance(step, _EPS)
    if w.lag_dirty:  # else every lag is already 0
        live.lag[:] = 0
        w.lag_dirty = False
    w.iteration += 1
    acc = float(_sum(accepted))
    drafted = config.verify_tokens * b
    w.policy.observe(Outcome(config, b, round(emitted), w.t - t0, drafted, round(acc), w.t, w.idx, 1,
                             tuple(accepted.tolist())))
    if w.log.decode(w.idx, t0, w.t, 1, b, config, emitted, drafted, acc):
        w.row_closed = True


def speculate_blocks(fast: FastWorker, config: SDConfig, hold: int) -> None:
    """A stochastic SD span drawing the accept lengths of several iterations at once
    (:func:`stochastic_span`), then the span's Outcome and row."""
    w = fast.worker
    live = w.live
    b, t0 = len(live), w.t
    if w.accept is None or w.sampler is None:
        w.draw(config, b)  # raises: no acceptance model
    n, t, ema, emitted_total, drawn_total = stochastic_span(fast, config, hold, t0, w.recent.value)
    w.recent.value = ema
    w.t = t
    if w.lag_dirty:  # else every lag is already 0
        live.lag[:] = 0
        w.lag_dirty = False
    w.iteration += n
    accepted = (drawn_total - n).astype(np.float64)  # whole numbers: the per-iteration float sums exactly
    w.close_sd_span(config, b, n, t0, emitted_total, accepted)


def draw_block(ctx: np.ndarray, end: np.ndarray, k: int, draws: np.ndarray
               ) -> tuple[np.ndarray, int, bool, np.ndarray]:
    """``k`` iterations of accept-length ``draws`` (``k * b`` of them, iteration-major) from contexts
    ``ctx``, cut at the first iteration in which a request reaches its ``end``: ``(rows, used, finish,
    sums)`` where ``rows[j]`` are the contexts after ``j`` iterations, unclipped (row 0: now), ``used``
    the iterations kept (``k`` without a finish), ``finish`` whether the last kept one ends a request,
    and ``sums`` the contexts' sum over ``rows[:used + 1]`` (their differences are the tokens drawn per
    iteration, whole numbers, exact). The caller clips the last row and rewinds the stream."""
    b = len(ctx)
    rows = np.empty((k + 1, b), dtype=np.int64)
    rows[0] = ctx
    rows[1:] = draws.reshape(k, b)
    np.cumsum(rows, axis=0, out=rows)
    hit = np.logical_or.reduce(rows[1:] >= end, axis=1)
    used = int(hit.argmax()) + 1
    finish = bool(hit[used - 1])
    if not finish:
        used = k
    return rows, used, finish, np.add.reduce(rows[:used + 1], axis=1)


def stochastic_span(fast: FastWorker, config: SDConfig, hold: int, t: float, ema: float | None
                    ) -> tuple[int, float, float | None, float, np.ndarray]:
    """One stochastic SD span from the live state, in blocks of iterations: ``(iterations, clock,
    recent-accept EMA, tokens emitted, accept draws per request)`` after it.

    Until the first request finishes nothing is clipped, so the iterations of a block are cumulative
    sums of its draws; the block ends the span at its first iteration in which a request finishes
    (or at ``hold``), and the uniform stream is rewound to exactly the draws the iterations used
    (the draws of ``k`` iterations of ``b`` requests are the next ``k * b`` numbers of the
    per-iteration stream, in order: :class:`~tltsim.rollout.fast.uniforms.UniformStream`). A block
    never spans more iterations than the shortest remaining response, since every iteration emits
    at least one token per request, and is sized to about the iterations that response needs at the
    expected accept length (the rest would be drawn and rewound; a span longer than its first block
    takes another). Times, the recent-accept estimate and the emitted totals are still added one
    iteration at a time, in the same order."""
    w = fast.worker
    live = w.live
    b = len(live)
    cost, price = w.cost, w.pricers.sd
    uniforms = fast.stream
    draw, drafter = w.sampler.draw, w.drafter
    mean = w.mean_accept(config)
    keep = 1.0 - w.recent.weight
    emitted_total = 0.0
    drawn_total = None
    n = 0
    cap = max(2, _BLOCK_DRAWS // b)
    rem, ctx = live.rem, live.ctx
    end = rem + ctx  # prompt + response: a request is done when its context reaches it
    while True:
        shortest = int(_min(rem))
        k = min(hold - n, shortest, cap, int(shortest / mean * 1.25) + 2)
        rows, used, finish, sums = draw_block(ctx, end, k, draw(config, k * b, uniforms, drafter))
        if used < k:  # rewind: only the draws of the iterations that ran
            uniforms.pos -= (k - used) * b
        emitted = (sums[1:] - sums[:-1]).tolist()  # tokens of each iteration (whole numbers, exact)
        span_drawn = rows[used] - ctx
        drawn_total = span_drawn if drawn_total is None else drawn_total + span_drawn
        if finish:  # the last iteration clipped at each request's end
            np.minimum(rows[used], end, out=ctx)
            emitted[-1] = int(_sum(ctx)) - int(sums[used - 1])
        else:
            ctx[:] = rows[used]
        np.subtract(end, ctx, out=rem)
        dts = price(rows[:used], config, sums[:used]) if price is not None and used >= _PRICE_ROWS else \
            [cost.sd_time(c, config) for c in rows[:used]]
        for dt, e in zip(dts, emitted, strict=True):
            e = float(e)
            emitted_total += e
            a = e / b
            ema = a if ema is None else a + keep * (ema - a)
            t += dt
        n += used
        if finish or n >= hold:
            return n, t, ema, emitted_total, drawn_total


def expected_rows(live: LiveRequests, a: float, k: int
                  ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None, np.ndarray]:
    """Up to ``k`` expected-mode iterations of accept length ``a`` from the live state, cut at the first
    in which a request finishes: ``(r, g, used, step, ctx_rows)`` where ``r[j]``/``g[j]`` are every
    request's remaining/generated tokens after ``j`` unclipped iterations (running sums: ``numpy.cumsum``
    adds in order, the per-iteration path's operations), ``used`` the iterations kept, ``step`` the
    finishing iteration's clipped tokens per request (None without a finish) and ``ctx_rows[j]`` the
    contexts before iteration ``j``. The SD spans and the block hint's blocks both cut their blocks so;
    :func:`expected_advance` leaves the live state after them."""
    b = len(live)
    r = np.empty((k + 1, b))
    r[0], r[1:] = live.rem, -a
    np.cumsum(r, axis=0, out=r)  # r[j]: remaining after j unclipped iterations
    g = np.empty((k + 1, b))
    g[0], g[1:] = live.gen, a
    np.cumsum(g, axis=0, out=g)  # g[j]: generated after j unclipped iterations
    hit = np.minimum.reduce(r[1:], axis=1) <= _EPS
    used = int(hit.argmax()) + 1
    step = np.minimum(r[used - 1], a) if hit[used - 1] else None  # the finishing iteration, clipped
    if step is None:
        used = k
    ctx_rows = np.empty((used, b), dtype=np.int64)
    ctx_rows[0] = live.ctx
    if used > 1:
        np.add(np.floor(g[1:used] + _EPS).astype(np.int64), live.prompt, out=ctx_rows[1:])
    return r, g, used, step, ctx_rows


def expected_advance(live: LiveRequests, r: np.ndarray, g: np.ndarray, m: int, step: np.ndarray | None) -> None:
    """The live state after ``m`` of :func:`expected_rows`' iterations: the ``m``-th clipped by ``step``
    (its finishing iteration), else unclipped; contexts from the generated tokens."""
    if step is not None:
        live.rem[:] = r[m - 1] - step
        live.gen[:] = g[m - 1] + step
    else:
        live.rem[:] = r[m]
        live.gen[:] = g[m]
    np.add(live.prompt, np.floor(live.gen + _EPS).astype(np.int64), out=live.ctx)


def speculate_expected_blocks(fast: FastWorker, config: SDConfig, hold: int) -> None:
    """An expected-mode SD span over blocks of iterations.

    Every request emits the expected accept length ``a`` per iteration until the iteration in
    which one finishes (a request with less than ``a`` left finishes as it is clipped), so a
    block's remaining and emitted tokens are running sums (``numpy.cumsum`` adds in order: the
    same floating-point operations as the per-iteration path) and only the finishing iteration
    is clipped. The emitted total of an unclipped iteration is the sum of ``b`` copies of ``a``,
    computed once; the accepted-token accumulator is the same float for every request."""
    w = fast.worker
    live = w.live
    b, t0 = len(live), w.t
    cost, recent, price = w.cost, w.recent, w.pricers.sd
    a = w.draw(config, b)
    full = float(_sum(np.full(b, a)))  # one unclipped iteration's emitted tokens, summed as numpy does
    per_request = full / b
    less = a - 1
    acc_each = 0.0
    emitted_total = 0.0
    keep = 1.0 - recent.weight
    ema = recent.value
    t = t0
    n = 0
    cap = max(2, _BLOCK_DRAWS // b)
    while True:
        k = min(hold - n, int(float(_min(live.rem)) / a) + 1, cap)
        r, g, used, step, ctx_rows = expected_rows(live, a, k)
        dts = price(ctx_rows, config) if price is not None and used >= _PRICE_ROWS else \
            [cost.sd_time(c, config) for c in ctx_rows]
        last = used - 1 if step is not None else -1
        for j, dt in enumerate(dts):
            if j == last:
                emitted = float(_sum(step))
                x = emitted / b
            else:
                emitted, x = full, per_request
            acc_each += less
            emitted_total += emitted
            ema = x if ema is None else x + keep * (ema - x)
            t += dt
        n += used
        expected_advance(live, r, g, used, step)
        if step is not None or n >= hold:
            break
    recent.value = ema
    w.t = t
    live.lag[:] = 0
    w.lag_dirty = False
    w.iteration += n
    accepted = np.full(b, acc_each)
    w.close_sd_span(config, b, n, t0, emitted_total, accepted)
