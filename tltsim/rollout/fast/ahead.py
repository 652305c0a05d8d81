"""Blocks of one-iteration SD spans for a policy that decides every iteration and offers the block hint.

A policy such as ``sglang-ema`` answers ``hold`` 1 at every iteration: its prices move with the contexts
and its estimate with every iteration it observes. The reference then runs one span per iteration
(:func:`~tltsim.rollout.fast.spans.speculate_one`): a price, a draw, an Outcome, a view and a decision,
each a few dozen microseconds of Python. Where the policy offers
:class:`~tltcore.policy.base.DecidesAhead`, :func:`run_block` instead draws a block of iterations of
the decided shape at once (as :func:`~tltsim.rollout.fast.spans.stochastic_span` does: the uniform
stream's next numbers, cumulative sums, cut at the first iteration in which a request finishes), hands
the policy the block's emitted tokens and contexts, and keeps the iterations up to the first one at
which the policy would have answered differently; the draws of the rest go back to the stream, and the
different answer is run next. Per kept iteration everything else is what ``speculate_one`` does, in
the same order: the time priced at that iteration's contexts (the cost model's row form, or per row),
the clock, the recent-accept estimate and one event row each (written as one column block).
Stochastic acceptance only; expected mode keeps the one-iteration path.
"""

from __future__ import annotations

import numpy as np

from tltcore.policy.base import DecidesAhead, Decision
from tltsim.rollout.fast.spans import _BLOCK_DRAWS, _PRICE_ROWS, draw_block
from tltsim.rollout.fast.state import FastWorker

_sum, _min = np.add.reduce, np.minimum.reduce


def run_block(fast: FastWorker, decision: Decision, policy: DecidesAhead) -> None:
    """One block of ``decision``'s one-iteration SD spans (module docstring). The caller retires the
    finished requests, as after ``speculate_one``."""
    w = fast.worker
    config = decision.config
    live = w.live
    b, t = len(live), w.t
    if w.lag_dirty:  # else every lag is already 0
        live.lag[:] = 0
        w.lag_dirty = False
    rem, ctx = live.rem, live.ctx
    end = rem + ctx  # prompt + response: a request is done when its context reaches it
    shortest = int(_min(rem))
    k = min(shortest, max(2, _BLOCK_DRAWS // b), int(shortest / w.mean_accept(config) * 1.25) + 2)
    rows, used, finish, sums = draw_block(ctx, end, k, w.sampler.draw(config, k * b, fast.stream, w.drafter))
    drawn = (sums[1:] - sums[:-1]).tolist()  # tokens drawn per iteration (whole numbers, exact)
    emitted = list(drawn)
    if finish:  # the last iteration clipped at each request's end
        emitted[-1] = int(_sum(np.minimum(rows[used], end))) - int(sums[used - 1])
    m, pending = policy.ahead(config, b, emitted, rows[:used])
    fast.stream.pos -= (k - m) * b  # only the draws of the iterations that ran
    if m == used and finish:
        np.minimum(rows[m], end, out=ctx)
    else:
        ctx[:] = rows[m]
    np.subtract(end, ctx, out=rem)
    price = w.pricers.sd
    dts = price(rows[:m], config, sums[:m]) if price is not None and m >= _PRICE_ROWS else \
        [w.cost.sd_time(c, config) for c in rows[:m]]
    recent = w.recent
    keep = 1.0 - recent.weight
    ema = recent.value
    t0s, t1s = [], []
    for j in range(m):
        a = float(emitted[j]) / b
        ema = a if ema is None else a + keep * (ema - a)  # RecentAccept.update of one iteration
        t0s.append(t)
        t += dts[j]
        t1s.append(t)
    recent.value = ema
    w.t = t
    w.iteration += m
    verify = config.verify_tokens
    fast.log.block(w.idx, np.zeros(m, dtype=np.int8), ("decode",), np.array(t0s), np.array(t1s),
                   np.ones(m, dtype=np.int64), np.full(m, b, dtype=np.int64), np.array(emitted[:m], dtype=np.int64),
                   np.zeros(m, dtype=np.int64), config=config, drafted=np.full(m, verify * b, dtype=np.int64),
                   accepted=np.array(drawn[:m], dtype=np.int64) - b)
    w.row_closed = True
    fast.pending = pending
