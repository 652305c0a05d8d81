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

In expected acceptance mode :func:`run_expected_block` does the same with the rows
:func:`~tltsim.rollout.fast.spans.speculate_expected_blocks` computes: every request emits the expected
accept length until the iteration in which one finishes, which alone is clipped, so the block's
remaining and generated tokens are running sums (``numpy.cumsum`` adds in order, the per-iteration
path's float operations) and nothing is drawn or given back.

In stochastic mode the blocks of every worker of a step whose next unit is such a block advance
together (:class:`AheadBlocks`, one block per worker per round), as the held tails of
:mod:`~tltsim.rollout.fast.tails` do: each block costs a few dozen small numpy calls whatever its
size, so one padded ``(workers, iterations, requests)`` array per round does the draws (each
worker's own stream, one sampler call per shape), cumulative sums, first finishes and, once every
worker's policy has folded its block, the prices of the kept iterations (per row with its own batch,
:meth:`~tltcore.cost.protocol.PagedKVTimes.sd_times_from_sums`). Per worker everything else is what
:func:`run_block` does, in the same order.

A worker stays in the rounds from block to block where its own loop would only admit nothing and ask
the policy (:meth:`AheadBlocks._resume`): the next block runs the policy's different answer, or, after
a finish (a new batch size), its standing answer there
(:class:`~tltcore.policy.base.ResumesAhead`), unasked: the fold first does what ``decide`` at the
block's first row would have done, and where that answer switches the block is given back whole
(``m == 0``: the draws rewound, nothing committed) and the new answer runs next round.

In expected mode such a worker's block also runs on through finishes (:meth:`AheadBlocks._through`:
nothing waits, the engine prices the policy's shapes): every request emits the expected accept length
until the iteration it finishes in, whatever the batch, so the running sums computed for the block hold
for the survivors after each finish, and a finished request drops out of the later rows (its context
0, the row's batch one less). The policy folds the whole block at each row's batch
(``ahead(..., batches=)``), and the kept iterations' finishes are replayed in order: each the state
``speculate_one`` leaves after its finishing iteration, the clock there and the retirement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tltcore.acceptance import AcceptSampler
from tltcore.drafter.state import DrafterState
from tltcore.policy.base import DecidesAhead, Decision, ResumesAhead, SDConfig, resumes_ahead
from tltsim.rollout.fast.spans import _BLOCK_DRAWS, _PRICE_ROWS, draw_block, expected_advance, expected_rows
from tltsim.rollout.fast.state import FastWorker
from tltsim.rollout.fast.tails import _FAR, _Given, first_finishes
from tltsim.rollout.worker import _EPS

_sum, _min = np.add.reduce, np.minimum.reduce
# padded request-iterations of an expected-mode block that runs through finishes (any size gives the same
# result): on aime_qwen7b_64xh100, CPU s of sglang-ema at 1, 4, 8, 16 and 64 x _BLOCK_DRAWS: 0.85, 0.70, 0.70,
# 0.82, 1.2
_THROUGH_ROWS = 4 * _BLOCK_DRAWS


def run_block(fast: FastWorker, decision: Decision, policy: DecidesAhead) -> None:
    """One block of ``decision``'s one-iteration SD spans (module docstring). The caller retires the
    finished requests, as after ``speculate_one``."""
    w = fast.worker
    config = decision.config
    live = w.live
    b = len(live)
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
    shapes, price = fast.shapes, w.pricers.sd
    prices = [price(rows[:used], s, sums[:used]) for s in shapes] if shapes is not None and price is not None \
        else None
    m, pending = policy.ahead(config, b, emitted, rows[:used], prices)
    fast.stream.pos -= (k - m) * b  # only the draws of the iterations that ran
    if m == used and finish:
        np.minimum(rows[m], end, out=ctx)
    else:
        ctx[:] = rows[m]
    np.subtract(end, ctx, out=rem)
    if prices is not None and config in shapes:
        dts = prices[shapes.index(config)]
    else:
        dts = price(rows[:m], config, sums[:m]) if price is not None and m >= _PRICE_ROWS else \
            [w.cost.sd_time(c, config) for c in rows[:m]]
    _close(fast, config, b, m, dts, emitted, emitted, np.array(drawn[:m], dtype=np.int64) - b, pending)


def run_expected_block(fast: FastWorker, decision: Decision, policy: DecidesAhead) -> None:
    """One block of ``decision``'s one-iteration SD spans in expected acceptance mode (module
    docstring): per kept iteration what :func:`~tltsim.rollout.fast.spans.speculate_one` leaves --
    the remaining and generated tokens, the contexts, the clock, the recent-accept estimate, the
    iteration count and one event row (its tokens and accepted floats rounded as the frame rounds
    them) -- with the same float operations in the same order. The caller retires the finished
    requests, as after ``speculate_one``."""
    w = fast.worker
    config = decision.config
    live = w.live
    b = len(live)
    a = w.draw(config, b)  # the expected accept length (raises without an acceptance model)
    full = float(_sum(np.full(b, a)))  # an unclipped iteration's emitted tokens, summed as speculate_one sums them
    k = min(int(float(_min(live.rem)) / a) + 1, max(2, _BLOCK_DRAWS // b))
    r, g, used, step, ctx_rows = expected_rows(live, a, k)
    emitted = [full] * used
    if step is not None:  # the finishing iteration: every request clipped at what it has left
        emitted[-1] = float(_sum(step))
    tokens = [round(e) for e in emitted]  # as the Outcomes and the frame round them
    shapes, price = fast.shapes, w.pricers.sd
    prices = [price(ctx_rows, s) for s in shapes] if shapes is not None and price is not None else None
    m, pending = policy.ahead(config, b, tokens, ctx_rows, prices)
    expected_advance(live, r, g, m, step if m == used else None)
    if w.lag_dirty:  # else every lag is already 0
        live.lag[:] = 0
        w.lag_dirty = False
    if prices is not None and config in shapes:
        dts = prices[shapes.index(config)]
    else:
        dts = price(ctx_rows[:m], config) if price is not None and m >= _PRICE_ROWS else \
            [w.cost.sd_time(c, config) for c in ctx_rows[:m]]
    acc = round(float(_sum(np.full(b, a - 1.0))))  # each row's accepted tokens, as speculate_one sums them
    _close(fast, config, b, m, dts, emitted, tokens, np.full(m, acc, dtype=np.int64), pending)


@dataclass
class _Drafted:
    """One round's blocks before the policies answer: ``ctx[i, j]`` member ``i``'s contexts before
    iteration ``j`` of its block (padded requests 0), ``sums`` their sums, ``used`` the iterations
    each block ran (to its first finish), ``emitted`` each iteration's emitted tokens (what the
    recent-accept estimate reads), ``tokens`` their whole numbers (what the policy and the rows
    read), and ``commit(i, m)`` leaves member ``i``'s live state after ``m`` iterations and returns
    their rows' accepted tokens."""

    ctx: np.ndarray
    sums: np.ndarray
    used: list[int]
    emitted: list[list[float]] | list[list[int]]
    tokens: list[list[int]]
    commit: Callable[[int, int], np.ndarray]
    batches: list[list[int]] | None = None
    replay: Callable[[int, int, np.ndarray], None] | None = None
    rows_b: np.ndarray | None = None


class AheadBlocks:
    """The workers of one step whose next unit is a block of the block hint, one block per worker
    per round (module docstring): stochastic blocks, or, in expected mode, the rows
    :func:`run_expected_block` computes."""

    def __init__(self, rows_price: Callable[..., np.ndarray], block: int, sampler: AcceptSampler,
                 drafter: DrafterState) -> None:
        self.rows_price, self.block, self.sampler, self.drafter = rows_price, block, sampler, drafter
        self.shift = block.bit_length() - 1 if block & (block - 1) == 0 else None
        self.members: list[tuple[FastWorker, Decision, DecidesAhead]] = []
        self.asked: list[bool] = []  # per member: its decision is the policy's answer (else its standing one)
        self.resumes: dict[int, ResumesAhead | None] = {}  # by id of the policy: the hint, checked once
        self.standing: dict[int, Decision] = {}  # by id of the shape: a standing answer's Decision, made once
        # the policies' priced shapes (ahead_shapes), equal tuples in one group: by value, the first one's
        # id; by id, that group
        self.groups: dict[tuple[SDConfig, ...], int] = {}
        self.group_of: dict[int, int] = {}

    def enter(self, fast: FastWorker, decision: Decision, policy: DecidesAhead, asked: bool = True) -> None:
        """``fast.worker``'s next unit is a block of ``decision`` (SD, hold 1, no switch), run next round;
        ``asked=False``: the policy was not asked, ``decision`` is its standing answer
        (:class:`~tltcore.policy.base.ResumesAhead`)."""
        fast.in_block = True
        self.members.append((fast, decision, policy))
        self.asked.append(asked)

    def round(self) -> list[FastWorker]:
        """One block for every member, each then retiring its finished requests, as after
        :func:`run_block` (:func:`run_expected_block`); returns the members back to their own loop, and
        keeps for the next round those whose next unit is again a block (:meth:`_resume`)."""
        members, self.members = self.members, []
        asked_l, self.asked = self.asked, []
        expected = members[0][0].worker.expected
        if len(members) == 1:  # nothing to stack
            fast, decision, policy = members[0]
            fast.in_block = False
            if not asked_l[0]:  # the worker's own loop asks the policy
                return [fast]
            (run_expected_block if expected else run_block)(fast, decision, policy)
            _after(fast)
            return [fast]
        w_n = len(members)
        configs = [d.config for _, d, _ in members]
        b_l = [len(f.worker.live) for f, _, _ in members]
        for f, _, _ in members:
            w = f.worker
            if w.lag_dirty:  # else every lag is already 0
                w.live.lag[:] = 0
                w.lag_dirty = False
        if expected:
            through = [self._through(f, p) for f, _, p in members]
            blocks = _expected(members, configs, b_l, through)
        else:
            through = [False] * w_n
            blocks = self._stochastic(members, configs, b_l)
        used_l, ctx = blocks.used, blocks.ctx
        # every row a block used: its paged sum, context sum and batch (what the row pricer reads)
        top = max(used_l)
        up = ctx[:, :top, :] + (self.block - 1)
        pages = np.right_shift(up, self.shift, out=up) if self.shift is not None else up // self.block
        paged = np.add.reduce(pages, axis=2) * self.block
        ctx_sum = blocks.sums[:, :top]
        batch = blocks.rows_b[:, :top] if blocks.rows_b is not None else \
            np.broadcast_to(np.array(b_l, dtype=np.int64)[:, None], (w_n, top))
        # the shapes the members' policies price at every row of their blocks, priced here for all of them
        # (the members asking for the same shapes together: equal tuples, one per policy, by the first's id)
        prices: list[list[list[float]] | None] = [None] * w_n
        asked: dict[int, tuple[tuple[SDConfig, ...], list[int]]] = {}
        group_of = self.group_of
        for i, (fast, _, _) in enumerate(members):
            shapes = fast.shapes
            if shapes is not None:
                key = group_of.get(id(shapes))
                if key is None:
                    key = group_of[id(shapes)] = self.groups.setdefault(shapes, id(shapes))
                asked.setdefault(key, (shapes, []))[1].append(i)
        for shapes, idx in asked.values():
            for i, got in zip(idx, self._price(shapes, idx, used_l, paged, ctx_sum, batch), strict=True):
                prices[i] = got
        kept, pendings, accepted, dts = [], [], [], []
        later: list[int] = []  # members whose kept iterations are priced after the policies answered
        for i, (fast, _, policy) in enumerate(members):
            b, n = b_l[i], used_l[i]
            if through[i]:
                m, pending = policy.ahead(configs[i], b, blocks.tokens[i], ctx[i, :n, :b], prices[i],
                                          asked=asked_l[i], batches=blocks.batches[i][:n])
            elif asked_l[i]:
                m, pending = policy.ahead(configs[i], b, blocks.tokens[i], ctx[i, :n, :b], prices[i])
            else:
                m, pending = policy.ahead(configs[i], b, blocks.tokens[i], ctx[i, :n, :b], prices[i], asked=False)
            accepted.append(blocks.commit(i, m))
            kept.append(m)
            pendings.append(pending)
            shapes = fast.shapes
            if prices[i] is not None and configs[i] in shapes:
                dts.append(prices[i][shapes.index(configs[i])])
            else:
                dts.append([])
                if m:
                    later.append(i)
        # the other members' kept iterations, priced with their own batch and shape
        by_shape: dict[SDConfig, list[int]] = {}
        for i in later:
            by_shape.setdefault(configs[i], []).append(i)
        for c, idx in by_shape.items():
            for i, got in zip(idx, self._price((c,), idx, kept, paged, ctx_sum, batch), strict=True):
                dts[i] = got[0]
        back = []
        for i, (fast, _, policy) in enumerate(members):
            if kept[i]:
                ts = _close(fast, configs[i], b_l[i], kept[i], dts[i], blocks.emitted[i], blocks.tokens[i],
                            accepted[i], pendings[i], blocks.batches[i] if through[i] else None)
                if blocks.replay is not None:
                    blocks.replay(i, kept[i], ts)
                _after(fast)
            else:
                fast.pending = pendings[i]
            fast.in_block = False
            if not self._resume(fast, policy):
                back.append(fast)
        return back

    def _through(self, fast: FastWorker, policy: DecidesAhead) -> bool:
        """Whether ``fast``'s expected-mode block may run on through finishes: its worker's own loop
        would only retire, admit nothing and ask the policy, which takes the rows' batches
        (:class:`~tltcore.policy.base.ResumesAhead`) and is priced by the engine (its shapes)."""
        w = fast.worker
        return (fast.shapes is not None and w.deadline is None and fast.plain_bound is None
                and w.next_waiting >= len(w.q_reserve) and self._resumes(policy) is not None)

    def _resumes(self, policy: DecidesAhead) -> ResumesAhead | None:
        """``policy``'s :class:`~tltcore.policy.base.ResumesAhead`, checked once per policy."""
        key = id(policy)
        got = self.resumes.get(key, False)
        if got is False:
            got = self.resumes[key] = resumes_ahead(policy)
        return got

    def _resume(self, fast: FastWorker, policy: DecidesAhead) -> bool:
        """Enter ``fast``'s next block for the next round where the worker's own loop would: nothing
        waits to be admitted (admission only clears its flag), no deadline, requests left, no
        plain-phase hint, and its next decision a block's -- the policy's different answer
        (``fast.pending``), else, where the policy offers it, its standing answer at the new batch
        size (:class:`~tltcore.policy.base.ResumesAhead`), which the block's fold checks first.
        False: the worker's loop takes the next unit."""
        w = fast.worker
        if w.deadline is not None or fast.plain_bound is not None or w.next_waiting < len(w.q_reserve):
            return False
        while w.need_admit:  # nothing waits: what the loop's admission does
            w.admit()
        if len(w.live) == 0:
            return False
        pending = fast.pending
        asked = pending is not None
        if asked:
            decision = pending
        else:
            resume = self._resumes(policy)
            config = resume.ahead_resume(len(w.live)) if resume is not None else None
            if config is None:
                return False
            decision = self.standing.get(id(config))
            if decision is None or decision.config is not config:
                decision = self.standing[id(config)] = Decision(config)
        if not decision.config.enabled or w.hold(decision) != 1 or decision.switch_on:
            return False
        fast.pending = None
        w.prepare_sd(decision)
        self.enter(fast, decision, policy, asked)
        return True

    def _stochastic(self, members: list[tuple[FastWorker, Decision, DecidesAhead]], configs: list[SDConfig],
                    b_l: list[int]) -> _Drafted:
        """The members' stochastic blocks, as :func:`run_block` draws them: each worker's next draws
        from its own stream (one sampler call per shape), cumulative sums, cut at the first finish."""
        w_n = len(members)
        lives = [f.worker.live for f, _, _ in members]
        width = max(b_l)
        ctx_p = np.zeros((w_n, width), dtype=np.int64)
        end_p = np.full((w_n, width), _FAR, dtype=np.int64)
        ends, k_l = [], []
        for i, ((f, _, _), live, b) in enumerate(zip(members, lives, b_l, strict=True)):
            end = live.rem + live.ctx  # prompt + response: a request is done when its context reaches it
            ends.append(end)
            ctx_p[i, :b] = live.ctx
            end_p[i, :b] = end
            shortest = int(_min(live.rem))
            k_l.append(min(shortest, max(2, _BLOCK_DRAWS // b),
                           int(shortest / f.worker.mean_accept(configs[i]) * 1.25) + 2))
        k_l = _cut(k_l)
        depth = max(k_l)
        # each worker's next k * b uniforms, mapped to accept lengths by the sampler (one call per shape)
        u = [f.stream.random(k * b) for (f, _, _), k, b in zip(members, k_l, b_l, strict=True)]
        shapes: dict[SDConfig, list[int]] = {}
        for i, c in enumerate(configs):
            shapes.setdefault(c, []).append(i)
        draw, drafter = self.sampler.draw, self.drafter
        drawn: list[np.ndarray] = [u[0]] * w_n
        for c, idx in shapes.items():
            got = draw(c, sum(len(u[i]) for i in idx), _Given(np.concatenate([u[i] for i in idx])), drafter)
            at = 0
            for i in idx:
                drawn[i] = got[at:at + len(u[i])]
                at += len(u[i])
        # rows[w, j]: worker w's contexts after j iterations of its block, unclipped (row 0: now)
        rows = np.zeros((w_n, depth + 1, width), dtype=np.int64)
        rows[:, 0, :] = ctx_p
        for i, (k, b) in enumerate(zip(k_l, b_l, strict=True)):
            rows[i, 1:k + 1, :b] = drawn[i].reshape(k, b)
        np.cumsum(rows, axis=1, out=rows)
        used, finish, sums = first_finishes(rows, end_p, np.array(k_l, dtype=np.int64))
        used_l, finish_l = used.tolist(), finish.tolist()
        drawn_a = sums[:, 1:] - sums[:, :-1]  # tokens drawn per iteration (whole numbers, exact)
        drawn_l = drawn_a.tolist()
        emitted_l = []
        for i in range(w_n):
            b, n = b_l[i], used_l[i]
            emitted = drawn_l[i][:n]
            if finish_l[i]:  # the last iteration clipped at each request's end
                emitted[-1] = int(_sum(np.minimum(rows[i, n, :b], ends[i]))) - int(sums[i, n - 1])
            emitted_l.append(emitted)

        def commit(i: int, m: int) -> np.ndarray:
            b = b_l[i]
            members[i][0].stream.pos -= (k_l[i] - m) * b  # only the draws of the iterations that ran
            live, end = lives[i], ends[i]
            if m == used_l[i] and finish_l[i]:
                np.minimum(rows[i, m, :b], end, out=live.ctx)
            else:
                live.ctx[:] = rows[i, m, :b]
            np.subtract(end, live.ctx, out=live.rem)
            return drawn_a[i, :m] - b

        return _Drafted(rows, sums, used_l, emitted_l, emitted_l, commit)

    def _price(self, configs: tuple[SDConfig, ...], idx: list[int], rows_of: list[int], paged: np.ndarray,
               ctx_sum: np.ndarray, batch: np.ndarray) -> list[list[list[float]]]:
        """Each of ``configs``' time at the first ``rows_of[i]`` rows of each member ``i`` in ``idx``,
        one call of the row pricer per shape (each row with its own batch): per member, one list per
        shape."""
        counts = [rows_of[i] for i in idx]
        sel = np.array(idx, dtype=np.intp)
        valid = np.arange(paged.shape[1])[None, :] < np.array(counts, dtype=np.int64)[:, None]
        rows = paged[sel][valid], ctx_sum[sel][valid], batch[sel][valid]
        out: list[list[list[float]]] = [[] for _ in idx]
        for config in configs:
            got = self.rows_price(*rows, config).tolist()
            at = 0
            for got_i, n in zip(out, counts, strict=True):
                got_i.append(got[at:at + n])
                at += n
        return out


def _cut(k_l: list[int]) -> list[int]:
    """Block sizes of one round: a long block waits for the next rounds (any size gives the same result;
    the padded arrays are as deep as the longest)."""
    cut = max(16, 4 * sorted(k_l)[len(k_l) // 2])
    return [min(x, cut) for x in k_l]


def _expected(members: list[tuple[FastWorker, Decision, DecidesAhead]], configs: list[SDConfig], b_l: list[int],
              through: list[bool]) -> _Drafted:
    """The members' expected-mode blocks, as :func:`run_expected_block` computes them: remaining and
    generated tokens as running sums (padded requests: infinitely many left, none generated), cut
    at the first iteration in which a request finishes, which alone is clipped -- or, for a member
    that runs ``through`` finishes, at the block's length (or its last finish): the survivors' sums go
    on as the next block's would (every request emits ``a`` until the iteration it finishes in, whatever
    the batch), and each finished request leaves the rows after its finish."""
    w_n = len(members)
    ws = [f.worker for f, _, _ in members]
    lives = [w.live for w in ws]
    width = max(b_l)
    a_l = [w.draw(c, b) for w, c, b in zip(ws, configs, b_l, strict=True)]  # the expected accept lengths
    # a block through finishes as deep as _THROUGH_ROWS over the round's widest batch (the padded arrays
    # are that wide), one to the first finish as deep as its rows need
    deep = max(2, _THROUGH_ROWS // width)
    k_l = _cut([deep if on else min(int(float(_min(live.rem)) / a) + 1, max(2, _BLOCK_DRAWS // b))
                for live, a, b, on in zip(lives, a_l, b_l, through, strict=True)])
    depth = max(k_l)
    a = np.array(a_l)[:, None, None]
    r = np.empty((w_n, depth + 1, width))
    g = np.zeros((w_n, depth + 1, width))
    ctx_p = np.zeros((w_n, width), dtype=np.int64)
    prompt_p = np.zeros((w_n, width), dtype=np.int64)
    r[:, 0, :] = np.inf
    for i, (live, b) in enumerate(zip(lives, b_l, strict=True)):
        r[i, 0, :b] = live.rem
        g[i, 0, :b] = live.gen
        ctx_p[i, :b] = live.ctx
        prompt_p[i, :b] = live.prompt
    r[:, 1:, :] = -a
    g[:, 1:, :] = a
    np.cumsum(r, axis=1, out=r)  # r[i, j]: remaining after j unclipped iterations (rem - a, iteration by iteration)
    np.cumsum(g, axis=1, out=g)  # g[i, j]: generated after j unclipped iterations
    k = np.array(k_l, dtype=np.int64)
    # fin[i, q]: the iteration (1-based) in which request q finishes, depth + 1 when not within the block
    done = r[:, 1:, :] <= _EPS
    fin = np.where(done.any(axis=1), done.argmax(axis=1) + 1, depth + 1)
    fin[np.arange(width)[None, :] >= np.array(b_l)[:, None]] = depth + 1  # padded requests never finish
    first_fin = np.minimum.reduce(fin, axis=1)
    real = np.arange(width)[None, :] < np.array(b_l)[:, None]
    last_fin = np.maximum.reduce(np.where(real, fin, 0), axis=1)  # every request done by then (or not within)
    # through finishes: to the block's length, or to the last request's finish before it; else the first finish
    ends = np.where(np.array(through), np.minimum(last_fin, k), np.minimum(first_fin, k))
    used_l = ends.tolist()
    fin_l = fin.tolist()
    top = max(used_l)
    ctx = np.empty((w_n, top, width), dtype=np.int64)  # the contexts before each iteration
    ctx[:, 0, :] = ctx_p
    alive = fin[:, None, :] > np.arange(top)[None, :, None]  # alive[i, j, q]: q runs iteration j + 1 (padded: 0)
    alive &= (np.arange(width)[None, :] < np.array(b_l)[:, None])[:, None, :]
    if top > 1:
        np.add(np.floor(g[:, 1:top, :] + _EPS).astype(np.int64), prompt_p[:, None, :], out=ctx[:, 1:, :])
        ctx[:, 1:, :] *= alive[:, 1:, :]  # padded and finished requests: 0
    sums = np.add.reduce(ctx, axis=2)
    rows_b = np.add.reduce(alive, axis=2)  # each row's batch
    emitted_l, tokens_l, batches_l, finishes = [], [], [], []
    for i in range(w_n):
        b, n, fast = b_l[i], used_l[i], members[i][0]
        bs = rows_b[i, :n].tolist() if through[i] else [b] * n
        # unclipped iterations' emitted tokens, as speculate_one sums them (batch by batch)
        if through[i]:
            full = {x: _sum_of(fast, a_l[i], x) for x in set(bs)}
            emitted = [full[x] for x in bs]
        else:
            emitted = [_sum_of(fast, a_l[i], b)] * n
        # the finishing iterations: every running request clipped at what it has left
        at = sorted({f for f in fin_l[i][:b] if f <= n})
        steps = {}
        for f in at:
            cols = alive[i, f - 1, :b]
            steps[f] = np.minimum(r[i, f - 1, :b], a_l[i])  # every column; the running ones summed
            emitted[f - 1] = float(_sum(steps[f][cols]))
        finishes.append((at, steps))
        emitted_l.append(emitted)
        tokens_l.append([round(e) for e in emitted])  # as the Outcomes and the frame round them
        batches_l.append(bs)

    def commit(i: int, m: int) -> np.ndarray:
        """The live state after ``m`` iterations where no request finished inside them (else
        ``replay`` leaves it); each row's accepted tokens."""
        live, b = lives[i], b_l[i]
        bs = batches_l[i][:m]
        if through[i]:
            each = {x: round(_sum_of(members[i][0], a_l[i] - 1.0, x)) for x in set(bs)}
            acc = np.array([each[x] for x in bs], dtype=np.int64)
        else:
            acc = np.full(m, round(_sum_of(members[i][0], a_l[i] - 1.0, b)), dtype=np.int64)
        if m == 0 or (finishes[i][0] and finishes[i][0][0] <= m):
            return acc  # nothing ran, or the replay leaves the state
        live.rem[:] = r[i, m, :b]
        live.gen[:] = g[i, m, :b]
        np.add(live.prompt, np.floor(live.gen + _EPS).astype(np.int64), out=live.ctx)
        return acc

    def replay(i: int, m: int, ts: np.ndarray) -> None:
        """The finishes inside member ``i``'s ``m`` kept iterations, in order: the live requests' state
        after each finishing iteration, the clock there, the retirement; then the survivors' state
        after iteration ``m``."""
        at, steps = finishes[i]
        if not at or at[0] > m:
            return
        fast = members[i][0]
        w, live, b = fast.worker, lives[i], b_l[i]
        cols = np.arange(b)
        last = 0
        for f in at:
            if f > m:
                break
            step = steps[f][cols]
            live.rem[:] = r[i, f - 1, cols] - step
            live.gen[:] = g[i, f - 1, cols] + step
            np.add(live.prompt, np.floor(live.gen + _EPS).astype(np.int64), out=live.ctx)
            w.t = float(ts[f])
            w.retire()
            cols = cols[fin[i, cols] != f]
            last = f
        if last < m:  # the survivors after the kept iterations (after the last finish: as left there)
            live.rem[:] = r[i, m, cols]
            live.gen[:] = g[i, m, cols]
            np.add(live.prompt, np.floor(live.gen + _EPS).astype(np.int64), out=live.ctx)
        w.t = float(ts[m])

    return _Drafted(ctx, sums, used_l, emitted_l, tokens_l, commit, batches_l, replay, rows_b)


def _sum_of(fast: FastWorker, value: float, b: int) -> float:
    """``float(numpy.add.reduce(numpy.full(b, value)))``, kept in the run's table of such sums
    (``FastWorker.sums``: they recur every round at the same batch sizes)."""
    of = fast.sums.get(value)
    if of is None:
        of = fast.sums[value] = {}
    got = of.get(b)
    if got is None:
        got = of[b] = float(_sum(np.full(b, value)))
    return got


def _close(fast: FastWorker, config: SDConfig, b: int, m: int, dts: list[float], emitted: list[float] | list[int],
           tokens: list[int], accepted: np.ndarray, pending: Decision | None, batches: list[int] | None = None
           ) -> np.ndarray:
    """The ``m`` kept iterations of a block: clock, recent-accept estimate (from each iteration's
    ``emitted`` tokens) and iteration count one iteration at a time, as ``speculate_one`` adds them,
    their rows as one column block (``tokens`` and ``accepted``: each row's whole numbers), and the
    policy's different answer to run next; ``batches``: each iteration's batch where requests finished
    inside the block (else ``b``). Returns the clock before each iteration and after the last."""
    w = fast.worker
    recent = w.recent
    keep = 1.0 - recent.weight
    ema = recent.value
    if batches is None:
        for e in emitted[:m]:
            a = float(e) / b
            ema = a if ema is None else a + keep * (ema - a)  # RecentAccept.update of one iteration
        batch = np.full(m, b, dtype=np.int64)
    else:
        for e, x in zip(emitted[:m], batches[:m], strict=True):
            a = float(e) / x
            ema = a if ema is None else a + keep * (ema - a)
        batch = np.array(batches[:m], dtype=np.int64)
    recent.value = ema
    # the clock, t += dt iteration by iteration: numpy's accumulate adds in order, the same float additions
    ts = np.empty(m + 1)
    ts[0] = w.t
    ts[1:] = dts[:m]
    np.add.accumulate(ts, out=ts)
    w.t = float(ts[m])
    w.iteration += m
    fast.log.block(w.idx, np.zeros(m, dtype=np.int8), ("decode",), ts[:m], ts[1:],
                   np.ones(m, dtype=np.int64), batch, np.array(tokens[:m], dtype=np.int64),
                   np.zeros(m, dtype=np.int64), config=config, drafted=batch * config.verify_tokens, accepted=accepted)
    w.row_closed = True
    fast.pending = pending
    return ts


def _after(fast: FastWorker) -> None:
    """What the worker's door does after a block: retire the finished requests."""
    w = fast.worker
    if len(w.live) and _min(w.live.rem) <= _EPS:  # (a block run through finishes may have retired them all)
        w.retire()
