"""The times of a block of SD iterations, and of a long chunked prefill, from one vectorised pass,
bit for bit what :class:`~tltcore.cost.roofline.RooflineCostModel` gives call by call.

Why: the simulator's SD spans run in blocks (:meth:`~tltsim.rollout.worker.RolloutWorker._speculate_blocks`)
whose context rows are known before any is priced; calling ``sd_time`` once per row costs about
10 us of Python plumbing (validation, three reductions, the draft-step loop) per iteration, most of
the SD tail's simulation time (issue 24). Priced together, the per-request reductions are two 2-D
integer reductions (exact, so equal to the per-row sums) and every floating-point step is the same
IEEE operation on the same operands in the same order as the scalar code, applied element-wise
(int64 -> float64 conversion, products, sums in the same order, ``a if a > b else b`` as
``numpy.maximum``), so
each row's time is the scalar's to the last bit. ``tests/sim/test_speed_span_cost.py`` pins that
for random blocks, every batch size class and tree shape, and both roofline classes.

The same for prefills (:func:`prefill_pricer`): the elastic switch re-prefills every live context
through target and drafter at a quarter of the prefill budget, about 200 passes per worker and step,
each priced by two scalar calls after :func:`~tltsim.rollout.scheduling.prefill_passes` built two
small arrays for it. The passes are consecutive windows of ``budget`` tokens over the requests'
new tokens laid end to end, so their chunks are the segments between request starts and window
starts; every per-pass quantity the roofline's ``_prefill`` sums (rows, live requests, paged KV
read, causal positions) is an exact integer reduction over segments, and the floating-point part
(``fixed_time``, ``attention_time``, the per-iteration overhead, the running total) is still called
and added per pass in the same order.

And for plain spans (:func:`plain_pricer`): ``decode_span_time`` is one call per span already, but
its exact paged-KV sum goes through a residue histogram, a list and a Python ``map`` (about 13 us a
span, a third of a no-SD run); a per-residue numpy table turns that into one gather and one sum,
and the batch's fixed per-iteration time is memoised per batch size. Integers throughout, then the
same two float operations.

Only the roofline's own ``sd_time``, ``_prefill`` and ``decode_span_time`` are mirrored: each
pricer is None for any other cost model, or a subclass that overrides a piece of it, and the worker
then makes one cost call per row, pass or span. These mirrors belong next to the formulas in
:mod:`tltcore.cost.roofline` (one place for each); they live here only until that module's owner
takes them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tltcore.cost.roofline import RooflineCostModel, _ForwardCosts
from tltcore.policy.base import SDConfig

SpanPricer = Callable[..., list[float]]
PrefillPricer = Callable[[np.ndarray, np.ndarray, int, bool, bool], tuple[float, int]]
_PARTS = ("sd_time", "_sd_at", "_sd_constants", "_draft_attention", "_sums", "padded")
_PREFILL_PARTS = ("prefill_time", "drafter_prefill_time", "_prefill")
_PLAIN_PARTS = ("decode_span_time", "_paged_span_sum", "padded")
PlainPricer = Callable[[np.ndarray, int], float]
PlainPhasePricer = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _mirrors(cost: object, parts: tuple[str, ...]) -> bool:
    """True when ``cost`` is a roofline whose methods ``parts`` are the roofline's own (a subclass
    that overrides one prices differently, so the mirror stands aside)."""
    return isinstance(cost, RooflineCostModel) and all(
        getattr(type(cost), p) is getattr(RooflineCostModel, p) for p in parts)


def _model_free(cost: object) -> tuple[RooflineCostModel, float] | None:
    """(roofline, lookup seconds) of the n-gram drafter's cost model
    (:class:`~tltcore.drafter.kinds.ModelFreeDraftCost`: the roofline's target, a verify-only SD
    iteration, free drafter prefills), or None."""
    from tltcore.drafter.kinds import ModelFreeDraftCost

    if type(cost) is not ModelFreeDraftCost:
        return None
    return cost.base, cost.lookup_s


def _verify_only(cost: object) -> tuple[RooflineCostModel, float] | None:
    """The model-free cost's roofline and lookup where its verify forward is the roofline's own."""
    mf = _model_free(cost)
    if mf is None or not _mirrors(mf[0], ("verify_time", "_verify", "_sums", "padded")):
        return None
    t = mf[0]._target
    if not isinstance(t, _ForwardCosts) or type(t).attention_time is not _ForwardCosts.attention_time:
        return None
    return mf


def block_size(cost: object) -> int:
    """The paged-KV block size the pricers of ``cost`` use (its roofline's; 1 when none)."""
    mf = _model_free(cost)
    roof = mf[0] if mf is not None else cost
    return int(roof.kv_block_size) if isinstance(roof, RooflineCostModel) else 1


def span_pricer(cost: object) -> SpanPricer | None:
    """``price(ctx_rows, config)``: the SD time of every row of ``ctx_rows`` (iterations x requests,
    int64, at least one request), or None where ``cost`` is not a roofline this module mirrors (or
    the n-gram drafter's model-free cost over one)."""
    if _verify_only(cost) is not None:
        rows_price = sd_rows_pricer(cost)
        base = cost.base
        bsz = base.kv_block_size

        def price_free(ctx_rows: np.ndarray, config: SDConfig, ctx_sum: np.ndarray | None = None) -> list[float]:
            k, b = ctx_rows.shape
            paged = np.add.reduce(-(-ctx_rows // bsz), axis=1) * bsz
            if ctx_sum is None:
                ctx_sum = np.add.reduce(ctx_rows, axis=1)
            return rows_price(paged, ctx_sum, np.full(k, b, dtype=np.int64), config).tolist()

        return price_free
    if not _mirrors(cost, _PARTS):
        return None
    target, draft = cost._target, cost._draft
    # the measured model's forwards replace fixed_time only (reached through _sd_constants, called as is)
    if any(not isinstance(f, _ForwardCosts) or type(f).attention_time is not _ForwardCosts.attention_time
           for f in (target, draft)):
        return None
    bs = cost.kv_block_size
    kv_d, att_d = draft.kv_read_s_per_token, draft.attention_s_per_position
    kv_t, att_t = target.kv_read_s_per_token, target.attention_s_per_position
    tail0, tail1 = cost.sd_overhead_s, cost.iteration_overhead_s
    consts: dict[tuple[int, SDConfig], tuple] = {}  # (batch, shape) -> what does not depend on the contexts

    def constants(b: int, config: SDConfig) -> tuple:
        depth, topk, verify_tokens = config.depth, config.topk, config.verify_tokens
        draft_fixed, draft_overhead, verify_fixed = cost._sd_constants(b, depth, topk, verify_tokens)
        tokens = verify_tokens + 1
        drafted = np.arange(1, depth + 1, dtype=np.int64) * b  # b * (step + 1) for step < depth
        # rows 0..depth-1: the draft steps, row depth: the verify forward. KV read: (paged + kv_add) * kv_s;
        # attention: (per_ctx * ctx_sum + att_add) * att_s, i.e. topk * (ctx_sum + drafted) and
        # tokens * (ctx_sum + b * tokens) as exact integers before the one float product
        kv_add = np.append(topk * drafted, b * tokens)[:, None]
        per_ctx = np.append(np.full(depth, topk, dtype=np.int64), tokens)[:, None]
        att_add = np.append(topk * drafted, tokens * (b * tokens))[:, None]
        kv_s = np.append(np.full(depth, kv_d), kv_t)[:, None]
        att_s = np.append(np.full(depth, att_d), att_t)[:, None]
        return depth, draft_fixed, draft_overhead, verify_fixed, kv_add, per_ctx, att_add, kv_s, att_s

    shift = bs.bit_length() - 1 if bs & (bs - 1) == 0 else None  # x // bs as x >> shift (x >= 0)

    def price(ctx_rows: np.ndarray, config: SDConfig, ctx_sum: np.ndarray | None = None) -> list[float]:
        k, b = ctx_rows.shape
        c = consts.get((b, config))
        if c is None:
            c = consts[(b, config)] = constants(b, config)
        depth, draft_fixed, draft_overhead, verify_fixed, kv_add, per_ctx, att_add, kv_s, att_s = c
        # RooflineCostModel._sums per row: b * sum(ceil(x / b)) and sum(x), exact integers (``ctx_sum``:
        # the row sums when the caller has them)
        up = ctx_rows + (bs - 1)
        paged = np.add.reduce(np.right_shift(up, shift, out=up) if shift is not None else up // bs, axis=1) * bs
        if ctx_sum is None:
            ctx_sum = np.add.reduce(ctx_rows, axis=1)
        terms = np.empty((depth + 2, k))
        terms[0] = draft_fixed
        # max(kv, att) per draft step and for the verify forward (`att if att > kv else kv`: no NaNs,
        # no signed zeros here)
        np.maximum((paged + kv_add) * kv_s, (per_ctx * ctx_sum + att_add) * att_s, out=terms[1:])
        # _draft_attention: total starts at draft_fixed, each step adds its max in step order
        # (add.accumulate down the rows is that sequential sum, element-wise)
        out = np.add.accumulate(terms[:depth + 1], axis=0)[depth]
        out += draft_overhead
        out += verify_fixed + terms[depth + 1]  # the verify forward: fixed + attention_time
        out += tail0
        out += tail1
        return out.tolist()

    return price


def sd_rows_pricer(cost: object) -> Callable[[np.ndarray, np.ndarray, np.ndarray, SDConfig], np.ndarray] | None:
    """``price(paged, ctx_sum, batch, config)``: the SD time of iterations whose batches differ, each
    given by its paged KV sum (``kv_block_size * sum(ceil(ctx / kv_block_size))``), its context sum
    and its batch size (int64 arrays, one entry per iteration): :func:`span_pricer`'s formula with
    the per-batch constants gathered per row (the integer terms are linear in the batch). None
    where :func:`span_pricer` is."""
    free = _verify_only(cost)
    if free is not None:
        return _verify_rows_pricer(*free)
    if span_pricer(cost) is None:
        return None
    target, draft = cost._target, cost._draft
    kv_d, att_d = draft.kv_read_s_per_token, draft.attention_s_per_position
    kv_t, att_t = target.kv_read_s_per_token, target.attention_s_per_position
    tail0, tail1 = cost.sd_overhead_s, cost.iteration_overhead_s
    shapes: dict[SDConfig, tuple] = {}

    def shape(config: SDConfig) -> tuple:
        depth, topk, tokens = config.depth, config.topk, config.verify_tokens + 1
        steps = np.arange(1, depth + 1, dtype=np.int64)
        kv_per_b = np.append(topk * steps, tokens)[:, None]  # kv_add / b: topk * (step + 1), tokens
        per_ctx = np.append(np.full(depth, topk, dtype=np.int64), tokens)[:, None]
        att_per_b = np.append(topk * steps, tokens * tokens)[:, None]  # att_add / b
        kv_s = np.append(np.full(depth, kv_d), kv_t)[:, None]
        att_s = np.append(np.full(depth, att_d), att_t)[:, None]
        return depth, kv_per_b, per_ctx, att_per_b, kv_s, att_s, {}

    def price(paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray, config: SDConfig) -> np.ndarray:
        c = shapes.get(config)
        if c is None:
            c = shapes[config] = shape(config)
        depth, kv_per_b, per_ctx, att_per_b, kv_s, att_s, by_batch = c
        sizes, inv = np.unique(batch, return_inverse=True)
        consts = []
        for b in sizes.tolist():
            k = by_batch.get(b)
            if k is None:
                k = by_batch[b] = cost._sd_constants(b, depth, config.topk, config.verify_tokens)
            consts.append(k)
        draft_fixed, draft_overhead, verify_fixed = (np.array(x, dtype=np.float64)[inv]
                                                     for x in zip(*consts, strict=True))
        k = len(paged)
        terms = np.empty((depth + 2, k))
        terms[0] = draft_fixed
        np.maximum((paged + kv_per_b * batch) * kv_s, (per_ctx * ctx_sum + att_per_b * batch) * att_s, out=terms[1:])
        out = np.add.accumulate(terms[:depth + 1], axis=0)[depth]
        out += draft_overhead
        out += verify_fixed + terms[depth + 1]
        out += tail0
        out += tail1
        return out

    return price


def _verify_rows_pricer(base: RooflineCostModel, lookup: float):
    """:func:`sd_rows_pricer` for the model-free cost: ``base.verify_time`` (the fixed part of a
    forward over ``verify_tokens + 1`` tokens per request, plus its attention) + the SD and
    iteration overheads + the lookup, added in that order."""
    t = base._target
    kv_t, att_t = t.kv_read_s_per_token, t.attention_s_per_position
    sd_oh, it_oh = base.sd_overhead_s, base.iteration_overhead_s
    fixed: dict[tuple[int, int], float] = {}

    def price(paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray, config: SDConfig) -> np.ndarray:
        tokens = config.verify_tokens + 1
        sizes, inv = np.unique(batch, return_inverse=True)
        vals = []
        for b in sizes.tolist():
            f = fixed.get((b, tokens))
            if f is None:
                rows = base.padded(b) * tokens
                f = fixed[(b, tokens)] = t.fixed_time(rows, rows)
            vals.append(f)
        kv = (paged + batch * tokens) * kv_t
        att = (tokens * (ctx_sum + batch * tokens)) * att_t
        out = np.array(vals, dtype=np.float64)[inv] + np.where(att > kv, att, kv)  # fixed + max(kv, att)
        out += sd_oh
        out += it_oh
        out += lookup
        return out

    return price


def prefill_pricer(cost: object) -> PrefillPricer | None:
    """``price(new, cached, budget, target, drafter)``: ``(time, passes)`` of a chunked prefill of
    ``new`` tokens per request on top of ``cached`` ones, packed into passes of at most ``budget``
    new tokens, through the target and/or the drafter, as
    :meth:`tltsim.rollout.worker.RolloutWorker._prefill` adds it up pass by pass (target, then
    drafter); None where ``cost`` is not a roofline whose ``_prefill`` this mirrors. The model-free
    cost's drafter prefill is free: its passes add 0.0, which leaves a non-negative total as it is."""
    mf = _model_free(cost)
    if mf is not None:
        inner = prefill_pricer(mf[0])
        if inner is None:
            return None

        def price_free(new: np.ndarray, cached: np.ndarray, budget: int, target: bool, drafter: bool
                       ) -> tuple[float, int]:
            return inner(new, cached, budget, target, False)

        return price_free
    if not _mirrors(cost, _PREFILL_PARTS):
        return None
    bs, overhead = cost.kv_block_size, cost.iteration_overhead_s
    t_fixed, t_att = cost._target.fixed_time, cost._target.attention_time
    d_fixed, d_att = cost._draft.fixed_time, cost._draft.attention_time
    t_vec, d_vec = _forward_mirror(cost._target), _forward_mirror(cost._draft)

    def price(new: np.ndarray, cached: np.ndarray, budget: int, target: bool, drafter: bool) -> tuple[float, int]:
        keep = new > 0  # prefill_passes skips empty requests
        if not keep.all():
            new, cached = new[keep], cached[keep]
        if len(new) == 0:
            return 0.0, 0
        ends = np.cumsum(new)
        tokens = int(ends[-1])
        starts = ends - new  # each request's first new token in the stream
        n_pass = -(-tokens // budget)
        cuts = np.union1d(starts, np.arange(0, tokens, budget, dtype=np.int64))  # segment starts, increasing
        seg = np.diff(np.append(cuts, tokens))  # every segment non-empty: one chunk of one request in one pass
        req = np.searchsorted(starts, cuts, side="right") - 1
        old = cached[req] + (cuts - starts[req])  # tokens of that request before the chunk
        first = np.searchsorted(cuts // budget, np.arange(n_pass, dtype=np.int64))  # each pass's first chunk
        rows = np.add.reduceat(seg, first)
        live = np.diff(np.append(first, len(cuts)))
        kv = np.add.reduceat(-(-old // bs) * bs, first) + rows
        pos = np.add.reduceat(seg * old + seg * (seg + 1) // 2, first)
        if (t_vec is not None or not target) and (d_vec is not None or not drafter):
            # every pass's terms element-wise, then the running total added in pass order
            terms = []
            if target:
                terms.append(t_vec(rows, live, kv, pos) + overhead)
            if drafter:
                terms.append(d_vec(rows, None, kv, pos) + overhead)
            seq = np.empty(len(terms) * n_pass + 1)
            seq[0] = 0.0
            for i, x in enumerate(terms):
                seq[1 + i::len(terms)] = x
            return float(np.add.accumulate(seq)[-1]), n_pass
        rows, live, kv, pos = rows.tolist(), live.tolist(), kv.tolist(), pos.tolist()
        total = 0.0
        for r, n_live, k, q in zip(rows, live, kv, pos, strict=True):
            if target:
                total += t_fixed(r, n_live) + t_att(k, q) + overhead
            if drafter:
                total += d_fixed(r, 0) + d_att(k, q) + overhead
        return total, n_pass

    return price


def _forward_mirror(f: object) -> Callable[[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray], np.ndarray] | None:
    """``terms(rows, logit_rows, kv, pos)``: ``f.fixed_time(r, l) + f.attention_time(k, q)`` per pass,
    element-wise (``logit_rows`` None: ``fixed_time(r, 0)``, hidden states only), for rows > 0: the
    same IEEE operations in the same order (``a if a > b else b`` and ``max`` as ``numpy.where``;
    no NaNs or signed zeros arise). None unless ``f`` is exactly the sharp roofline's forward."""
    if type(f) is not _ForwardCosts or f.smoothness != np.inf:
        return None
    weight_s, mm, layers, lat, ar = f.weight_s, f.matmul_s_per_token, f.layers, f.collective_latency_s, \
        f.allreduce_s_per_token
    lm_w, lm, lg, launch = f.lm_head_weight_s, f.lm_head_s_per_token, f.logits_gather_s_per_token, f.launch_s
    kv_s, att_s = f.kv_read_s_per_token, f.attention_s_per_position

    def terms(rows: np.ndarray, logit_rows: np.ndarray | None, kv: np.ndarray, pos: np.ndarray) -> np.ndarray:
        compute = rows * mm
        matmul = np.where(weight_s > compute, weight_s, compute)  # _roof: memory if memory > compute else compute
        comm = 2 * layers * (lat + rows * ar)
        if logit_rows is None:
            fixed = matmul + comm + launch
        else:
            head = logit_rows * lm
            lm_head = np.where(lm_w > head, lm_w, head)
            gather = lat + logit_rows * lg
            fixed = matmul + lm_head + comm + gather + launch
        a, b = kv * kv_s, pos * att_s
        return fixed + np.where(b > a, b, a)  # max(a, b): b only when strictly larger

    return terms


def plain_pricer(cost: object) -> PlainPricer | None:
    """``price(ctx, n)``: ``cost.decode_span_time(ctx, n)`` for ``n >= 1`` plain iterations of a
    non-empty batch, or None where ``cost`` is not a roofline whose memory-bound closed form
    (paged KV read >= attention positions at every step) this mirrors."""
    parts = _plain_parts(cost)
    if parts is None:
        return None
    bs, tables, cycle, step_of, kv_per_token = parts

    def price(ctx: np.ndarray, n: int) -> float:
        size = ctx.size
        step = step_of(size)
        pad = (n // bs) * cycle * size
        if n % bs:
            pad += int(np.add.reduce(tables[n % bs][ctx % bs]))
        paged = n * int(np.add.reduce(ctx)) + size * (n * (n - 1) // 2) + pad  # RooflineCostModel._paged_span_sum
        return n * step + (paged + n * size) * kv_per_token

    return price


def plain_phase_pricer(cost: object) -> PlainPhasePricer | None:
    """``price(n, b, ctx_sum, hist, start)``: the times of many plain spans at once, each what
    :func:`plain_pricer` gives for its batch (a plain phase, :mod:`tltsim.rollout.plain_phase`).
    Span ``j`` runs ``n[j]`` iterations over ``b[j]`` requests whose contexts sum to ``ctx_sum[j]``;
    the batch's contexts are ``c + start[j]`` for the ``c`` counted by residue in ``hist[j]``
    (``hist[j, r]``: how many have ``c % kv_block_size == r``). The padding sum is the same exact
    integer (a residue's table entry times its count), then the same two float operations per span,
    element-wise. None where :func:`plain_pricer` is."""
    parts = _plain_parts(cost)
    if parts is None:
        return None
    bs, tables, cycle, step_of, kv_per_token = parts
    res = np.arange(bs, dtype=np.int64)
    known = [np.full(0, np.nan)]  # known[0][size]: step_of(size), NaN where not asked yet

    def steps(b: np.ndarray) -> np.ndarray:
        table = known[0]
        top = int(b.max())
        if top >= len(table):
            table = known[0] = np.concatenate([table, np.full(top + 1 - len(table) + 64, np.nan)])
        step = table[b]
        missing = np.isnan(step)
        if missing.any():
            for size in np.unique(b[missing]).tolist():
                table[size] = step_of(size)
            step = table[b]
        return step

    def price(n: np.ndarray, b: np.ndarray, ctx_sum: np.ndarray, hist: np.ndarray, start: np.ndarray) -> np.ndarray:
        step = steps(b)
        entry = tables[(n % bs)[:, None], (res[None, :] + start[:, None]) % bs]  # tables[n % bs][(r + start) % bs]
        pad = (n // bs) * cycle * b + np.add.reduce(entry * hist, axis=1)
        paged = n * ctx_sum + b * (n * (n - 1) // 2) + pad
        return n * step + (paged + n * b) * kv_per_token

    return price


def _plain_parts(cost: object):
    """What both plain pricers share: (block size, padding tables, a whole block's padding, the
    memoised per-iteration fixed time of a batch size, KV read seconds per token), or None. The
    model-free cost's plain decode is its roofline's."""
    mf = _model_free(cost)
    if mf is not None:
        cost = mf[0]
    if not _mirrors(cost, _PLAIN_PARTS):
        return None
    t = cost._target
    kv_per_token = t.kv_read_s_per_token
    if not isinstance(t, _ForwardCosts) or t.attention_s_per_position > kv_per_token:
        return None
    bs, overhead, fixed_time, padded = cost.kv_block_size, cost.iteration_overhead_s, t.fixed_time, cost.padded
    # tables[m][r] = sum_{j < m} (-(r + j)) mod bs: the padding of m steps from a context of residue r
    # (built with numpy: a pricer is made per worker and step, so a Python double loop would show)
    r = np.arange(bs, dtype=np.int64)
    tables = np.zeros((bs, bs), dtype=np.int64)
    np.cumsum((-(r[None, :] + r[:-1, None])) % bs, axis=0, out=tables[1:])  # row m: sum over j < m
    cycle = bs * (bs - 1) // 2  # the padding of a whole block of steps, whatever the residue
    per_iter: dict[int, float] = {}

    def step_of(size: int) -> float:
        step = per_iter.get(size)
        if step is None:
            rows = padded(size)
            step = per_iter[size] = fixed_time(rows, rows) + overhead
        return step

    return bs, tables, cycle, step_of, kv_per_token
