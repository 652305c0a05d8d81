"""A chunk of expected-mode SD iterations of one live set at one shape, computed at once: the shared
first half of :func:`~tltsim.rollout.fast.expected_tail.run_tail` (decisions held until an event)
and :func:`~tltsim.rollout.fast.held_spans.run_held` (finite holds), which then walk its spans.

In expected mode every live request emits the expected accept length ``a`` per iteration whatever
the spans around it, so its remaining and emitted tokens are running sums of ``-a`` and ``a``: one
``numpy.cumsum`` per quantity over the chunk's iterations gives every request's finishing
iteration, every iteration's contexts and batch (priced in one call) and the clock after each
iteration (the iteration times added in order), the same floats the per-span path computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate, repeat

import numpy as np

from tltcore.policy.base import SDConfig
from tltsim.rollout.worker import _EPS, RolloutWorker, _sum

CELLS = 1 << 18  # iterations x requests of one chunk: a bound on its arrays
# The fewest iterations x requests where the row sums over every request (less those finished inside the
# chunk, at most a quarter of them) beat the masked form: measured on this project's 2-core box, 32 x 1,000
# cells took 197 against 238 us, 128 x 200 took 125 against 159 us, and below ~16k cells the masked form won.
WHOLE_ROWS_CELLS = 1 << 14


@dataclass(frozen=True)
class ExpectedChunk:
    """Up to ``rows`` iterations from the worker's live state; only the iterations up to the chunk's
    last finish (``last_end``) are priced."""

    r: np.ndarray  # (rows + 1, b): remaining tokens after j iterations
    g: np.ndarray  # (rows + 1, b): emitted tokens after j iterations
    fin: np.ndarray  # (b,): each request's finishing iteration (1-based), rows + 1 past the chunk
    ends: np.ndarray  # the distinct finishing iterations within the chunk, ascending
    batch: np.ndarray  # (last_end,): every iteration's batch size
    clock: np.ndarray  # (last_end + 1,): the worker's clock after j iterations
    prompt: np.ndarray  # (b,): the prompts' lengths
    # (last_end,) each: every iteration's contexts summed, and rounded up to whole KV blocks and summed (int64;
    # None where the cost model prices call by call)
    ctx_sum: np.ndarray | None
    paged: np.ndarray | None

    @property
    def last_end(self) -> int:
        return int(self.ends[-1])

    def contexts(self, rows: int | np.ndarray) -> np.ndarray:
        """Every request's context (int64) before iteration ``rows + 1`` (one row, or a row per index):
        the prompt plus the whole tokens emitted, as the worker's live state computes them."""
        return self.prompt + np.floor(self.g[rows] + _EPS).astype(np.int64)


class EqualSums:
    """numpy's sums of equal values that an expected-mode walk reads per span, kept for the run's
    workers (their dicts are :class:`~tltsim.rollout.fast.state.FastWorker`'s ``sums`` and ``accepted``,
    by accept length ``a``): one unclipped iteration's tokens at ``b`` requests (``b`` copies of ``a``),
    and the accepted tokens of ``n`` iterations at ``b`` requests (``b`` copies of ``n`` increments of
    ``a - 1`` added one by one)."""

    def __init__(self, sums: dict[float, dict[int, float]], accepted: dict[float, dict[tuple[int, int], float]],
                 a: float) -> None:
        self.a, self.less = a, a - 1
        self._full = sums.setdefault(a, {})
        self._accepted = accepted.setdefault(a, {})
        self._each = [0.0]  # _each[n]: n accepted-token increments added one by one

    def full(self, b: int) -> float:
        """One unclipped iteration's tokens at ``b`` requests, summed as numpy sums them."""
        full = self._full.get(b)
        if full is None:
            full = self._full[b] = float(_sum(np.full(b, self.a)))
        return full

    def accepted(self, b: int, n: int) -> tuple[float, float]:
        """(each request's accepted tokens over ``n`` iterations, the ``b`` requests' sum as numpy sums it)."""
        each = self._each
        running(each, self.less, n)
        total = self._accepted.get((b, n))
        if total is None:
            total = self._accepted[(b, n)] = float(_sum(np.full(b, each[n])))
        return each[n], total


def running(run: list[float], step: float, n: int) -> None:
    """Extend the running sum ``run`` (``run[i + 1] = run[i] + step``, added one by one as a loop adds
    them) until ``run[n]`` exists: ``itertools.accumulate`` does the same additions in C."""
    if len(run) <= n:
        more = accumulate(repeat(step, n + 1 - len(run)), initial=run[-1])
        next(more)  # run[-1] itself
        run.extend(more)


def fold_recent(ema: float | None, x: float, keep: float, count: int) -> float | None:
    """The recent-accept estimate after ``count`` SD iterations that each emitted ``x`` tokens per
    request, folded one iteration at a time as the per-span path folds them (``x + keep * (ema - x)``;
    the first iteration of a run sets it to ``x``). A run of equal updates stops changing it once it
    equals the value folded in, so the loop ends at that fixed point."""
    if count < 1:
        return ema
    if ema is None:
        ema, count = x, count - 1
    for _ in range(count):
        nxt = x + keep * (ema - x)
        if nxt == ema:  # a fixed point: the remaining updates leave it as it is
            break
        ema = nxt
    return ema


def expected_chunk(w: RolloutWorker, a: float, rows: int, t: float, config: SDConfig) -> ExpectedChunk | None:
    """``rows`` iterations of ``w``'s live requests at accept length ``a`` and shape ``config`` from
    clock ``t``; None when no request finishes within them (the caller then runs a span its own way)."""
    live, eps = w.live, _EPS
    b0 = len(live)
    r = np.empty((rows + 1, b0))
    r[0], r[1:] = live.rem, -a
    np.cumsum(r, axis=0, out=r)  # r[j]: remaining after j iterations (the per-iteration sums)
    gen = live.gen
    lockstep = b0 > 0 and bool((gen == gen[0]).all())
    if lockstep:  # every request has emitted as many: one column, the same floats in every column
        col = np.empty(rows + 1)
        col[0], col[1:] = gen[0], a
        np.cumsum(col, out=col)
        g = np.broadcast_to(col[:, None], (rows + 1, b0))
    else:
        g = np.empty((rows + 1, b0))
        g[0], g[1:] = gen, a
        np.cumsum(g, axis=0, out=g)
    hit = r[1:] <= eps
    fin = hit.argmax(axis=0) + 1  # each request's finishing iteration (1-based) ...
    fin[~hit[fin - 1, np.arange(b0)]] = rows + 1  # ... or beyond this chunk
    ends = np.unique(fin[fin <= rows])
    if len(ends) == 0:
        return None
    last_end = int(ends[-1])
    rows_price, bs = w.pricers.rows, w.pricers.block
    large = rows_price is not None and bs & (bs - 1) == 0 and last_end * b0 >= WHOLE_ROWS_CELLS
    gone = np.flatnonzero(fin <= last_end) if large and not lockstep else None  # finished inside the chunk
    if lockstep and rows_price is not None:
        paged, ctx_sum, batch = _lockstep_sums(col, fin, live.prompt, last_end, bs)
        dts = rows_price(paged, ctx_sum, batch, config)
    elif gone is not None and 4 * len(gone) <= b0:
        paged, ctx_sum, batch = _row_sums(g, fin, gone, live.prompt, last_end, bs)
        dts = rows_price(paged, ctx_sum, batch, config)
    else:
        ctx = live.prompt + np.floor(g[:last_end] + eps).astype(np.int64)  # (iterations, requests)
        alive = fin[None, :] > np.arange(last_end)[:, None]  # in the batch of iteration j + 1
        batch = np.add.reduce(alive, axis=1)
        masked = np.where(alive, ctx, 0)
        ctx_sum = np.add.reduce(masked, axis=1)
        if rows_price is not None:
            paged = np.add.reduce((masked + (bs - 1)) // bs, axis=1) * bs
            dts = rows_price(paged, ctx_sum, batch, config)
        else:
            dts = np.array([w.cost.sd_time(ctx[j][alive[j]], config) for j in range(last_end)], dtype=np.float64)
            ctx_sum = paged = None
    clock = np.empty(last_end + 1)
    clock[0] = t
    clock[1:] = dts
    np.add.accumulate(clock, out=clock)  # the clock after each iteration, added in order
    return ExpectedChunk(r, g, fin, ends, batch, clock, live.prompt, ctx_sum, paged)


def _row_sums(g: np.ndarray, fin: np.ndarray, gone: np.ndarray, prompt: np.ndarray, last_end: int,
              bs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(paged context sum, context sum, batch size) of the live requests at each of the first
    ``last_end`` iterations, block size ``bs`` a power of two: the integers the masked int64 form
    (``prompt + floor(g + eps)`` where ``fin > j``, else 0) gives, from a third of its passes.

    Every row is summed over all requests and the few that finished inside the chunk are taken off
    again: a request's context and its page count are whole numbers, held exactly as floats (``floor``
    of a float is exact, so is adding an integer below 2**53 and scaling by a power of two), and their
    row sums stay far below 2**53, so every sum is exact in any order and equals the int64 one.
    It pays where the chunk is large and few of its requests finish in it (:data:`WHOLE_ROWS_CELLS`);
    elsewhere its extra calls and the finished requests' own pass cost more than they save."""
    f = g[:last_end] + _EPS
    np.floor(f, out=f)
    f += prompt  # the contexts, exact
    whole = np.add.reduce(f, axis=1)
    f += bs - 1
    f *= 1.0 / bs
    np.floor(f, out=f)  # the pages, exact
    pages = np.add.reduce(f, axis=1)
    fin_gone = fin[gone]  # finished inside the chunk: off from their finishing iterations on
    ctx_gone = prompt[gone] + np.floor(g[:last_end, gone] + _EPS).astype(np.int64)
    ctx_gone[fin_gone[None, :] > np.arange(last_end)[:, None]] = 0  # still live there: counted in whole
    ctx_sum = whole.astype(np.int64) - np.add.reduce(ctx_gone, axis=1)
    paged = (pages.astype(np.int64) - np.add.reduce((ctx_gone + (bs - 1)) // bs, axis=1)) * bs
    batch = len(fin) - np.searchsorted(np.sort(fin_gone), np.arange(last_end), side="right")
    return paged, ctx_sum, batch


def _lockstep_sums(col: np.ndarray, fin: np.ndarray, prompt: np.ndarray, last_end: int,
                   bs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(paged context sum, context sum, batch size) of the live requests at each of the first
    ``last_end`` iterations when every request has emitted the same tokens (``col``: that one column
    of emitted tokens; a step whose requests were admitted together decodes in lockstep), in exact
    integers equal to the masked int64 form's, from work that does not grow with iterations x requests.

    In order of finishing, the requests live at iteration ``j + 1`` are a suffix (those with
    ``fin > j``), and each one's context is its prompt plus the same ``G = floor(col[j] + eps)``: the
    context sum is the suffix's prompt sum plus ``batch * G``. Pages: with ``prompt = q * bs + p`` and
    ``G = Q * bs + R`` (``0 <= p, R < bs``) a request holds ``q + Q + ceil((p + R) / bs)`` blocks, the last
    term 0 when ``p + R == 0``, 2 when ``p + R > bs``, else 1; so the suffix's ``q`` sum, its count of
    ``p == 0`` and, per remainder ``R`` the chunk reaches (at most ``bs``), its count of ``p > bs - R``:
    suffix sums of integers, exact."""
    n = len(fin)
    order = np.argsort(fin, kind="stable")
    gone = np.searchsorted(fin[order], np.arange(last_end), side="right")  # finished before iteration j + 1
    batch = n - gone
    whole = np.floor(col[:last_end] + _EPS).astype(np.int64)  # G per iteration
    blocks, rest = np.divmod(whole, bs)
    by_fin = prompt[order]
    q, p = np.divmod(by_fin, bs)
    rests, at = np.unique(rest, return_inverse=True)
    # suffix sums (from each position to the end) of: prompts, q, p == 0, and p > bs - R per remainder R
    cols = np.zeros((3 + len(rests), n + 1), dtype=np.int64)
    cols[0, :n], cols[1, :n], cols[2, :n] = by_fin, q, p == 0
    cols[3:, :n] = p[None, :] > (bs - rests)[:, None]
    suffix = np.cumsum(cols[:, ::-1], axis=1)[:, ::-1]
    ctx_sum = suffix[0, gone] + batch * whole
    some = batch - np.where(rest == 0, suffix[2, gone], 0)  # p + R >= 1
    pages = suffix[1, gone] + batch * blocks + some + suffix[3 + at, gone]
    return pages * bs, ctx_sum, batch
