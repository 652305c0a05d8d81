"""SGLang-style adaptive SD: per batch-size range, an EMA of acceptance picks the chain depth.

SGLang's adaptive speculative decoding (sgl-project/sglang PRs #21599, #24055, #28045) keeps, per
batch-size range, an exponential moving average of observed accept lengths and switches the number of
draft steps among a few candidates (default ranges ``[1,64)``, ``[64,128)``, ``[128,inf)``, default
candidates ``1, 3, 7``), with hysteresis against flapping; its cost-aware variant weighs expected
tokens against the measured cost of each step count. This module is that cost-aware variant:

* per range, an EMA of the per-position acceptance rate ``a`` implied by each observed accept length;
* per ``decide()``, the candidate depth ``k`` maximising ``tokens(a, k) / cost(batch, k)`` with the
  chain formula ``tokens(a, k) = (1 - a^(k+1)) / (1 - a)`` (bonus token included);
* a switch away from the range's current depth only when the best candidate beats it by more than
  ``hysteresis`` (relative).

Approximations, stated plainly:

* SGLang averages *accept lengths*; we average the *acceptance rate* implied by each one (inverting the
  chain formula at the depth it was measured), because the depth changes under us and an accept
  length measured at depth 3 says little directly about depth 7. For a tree config the depth alone is
  used, which over-estimates ``a`` (a tree accepts more than a chain of the same depth).
* SGLang measures what each step count costs on its hardware; the simulator's stand-in for that
  measurement is the scenario's own cost model (``cost_model``, what the engine is timed with), priced
  at the batch's per-request context lengths, as the oracle prices its candidates. Only without one
  (the real engine, or a bare policy in a test) does it fall back to ``cost`` (any
  ``(batch_size, depth) -> time``, depth 0 = plain decode, any consistent unit), by default a roofline
  proxy (:func:`chain_cost_proxy`) that knows nothing of contexts or the model: comparing it against
  policies that see the true costs would bias the comparison against it.
* If ``0`` is among the candidate depths and wins, that range gets no further observations, so its
  EMA freezes there: like SGLang (which never turns SD off), the default candidates exclude 0.

``reset(step)`` (a new rollout step) keeps the EMAs, as SGLang's server would; ``clear()`` forgets them.

Speed. The policy decides every iteration (the contexts move its prices and every SD iteration moves
its EMA), so it offers the engines the block hint :meth:`SglangEma.ahead`
(:class:`~tltcore.policy.base.DecidesAhead`): the rounds of a block of iterations in one call, every
candidate priced over the block's contexts by the cost model's row form (``sd_rows_times``, pinned bit
for bit to ``sd_time``; or by the engine, for many workers' blocks at once, where the policy prices
with the engine's own cost model: :meth:`SglangEma.ahead_shapes`), the EMA and the choice then folded
iteration by iteration with the same float operations as :meth:`SglangEma.observe` and
:meth:`SglangEma.decide`. After a request finishes (a new batch size) the engine need not ask
:meth:`SglangEma.decide` either: :meth:`SglangEma.ahead_resume` names the range's current depth,
and the block's fold does decide's arithmetic at its first row (``ahead(..., asked=False)``);
given each row's batch (``ahead(..., batches=)``) it folds a block through finishes, each row's
observation and decision at its own batch size and range.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import pairwise

import numpy as np

from tltcore.cost.protocol import CostModelBase
from tltcore.errors import InputError
from tltcore.policy.base import MAX_DEPTH, MAX_POLICY_BATCH, BatchView, Decision, Outcome, SDConfig
from tltcore.policy.oracle import OracleCost

DEFAULT_DEPTHS: tuple[int, ...] = (1, 3, 7)
DEFAULT_RANGES: tuple[int, ...] = (1, 64, 128)
DEFAULT_SMOOTHING = 0.2
DEFAULT_PRIOR_ACCEPT_RATE = 0.7
DEFAULT_HYSTERESIS = 0.02
# ahead's fold scores a block's decisions in one numpy pass from this many on (below, one by one: the pass
# costs what ~15 decisions do; at 8 the P1 step's short stochastic blocks ran no faster, at 32 the expected-mode
# AIME step's ~100-row blocks took 0.57 -> 0.52 CPU s); a decision that pass shows below _CLEAR of the switching
# bound is taken as not switching, and rates from _CLEAR_RATE on are scored one by one (their scores are
# differences of numbers near 1)
FOLD_ROWS = 32
_CLEAR = 1.0 - 1e-9
_CLEAR_RATE = 1.0 - 1e-6
_MAX_RATE = 0.999
# Upper bounds: a switch that needs a candidate more than twice as good as the current depth almost never
# happens (SGLang's default asks for 2% more); ranges are batch sizes, one EMA each, walked per decision.
MAX_HYSTERESIS = 1.0
MAX_RANGES = 64

CostFn = Callable[[int, int], float]


def chain_tokens(rate: float, depth: int) -> float:
    """Expected tokens emitted per request by a chain of ``depth`` draft tokens whose positions are
    each accepted with probability ``rate`` (bonus token included): ``sum_{i=0..depth} rate^i``."""
    if rate >= 1.0:
        return float(depth + 1)
    return (1.0 - rate ** (depth + 1)) / (1.0 - rate)


@lru_cache(maxsize=1 << 16)
def implied_rate(accept_length: float, depth: int) -> float:
    """The per-position acceptance rate at which a ``depth`` chain emits ``accept_length`` tokens on
    average (bisection on the monotone :func:`chain_tokens`), clipped to ``[0, 0.999]``.

    Cached: accept lengths are ratios of small integers (tokens / batch), so they repeat, and the
    simulator observes every iteration."""
    if depth <= 0 or accept_length <= 1.0:
        return 0.0
    if accept_length >= depth + 1:
        return _MAX_RATE
    lo, hi = 0.0, _MAX_RATE
    power, full = depth + 1, float(depth + 1)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        # chain_tokens(mid, depth), inline: a bisection is 40 of them, and an accept length the cache has
        # not seen comes every few iterations
        tokens = full if mid >= 1.0 else (1.0 - mid ** power) / (1.0 - mid)
        if tokens < accept_length:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def chain_cost_proxy(batch_size: int, depth: int, draft_ratio: float = 0.08, knee_tokens: int = 256) -> float:
    """Time of one iteration, in units of one memory-bound target forward.

    A forward over ``n`` tokens costs ``max(1, n / knee_tokens)``: flat while weight reads dominate
    (memory-bound), linear once compute dominates. 256 tokens is near the bf16 ridge point of an H100
    (~990 TFLOP/s / 3.35 TB/s ~ 300 FLOP/byte; a dense forward does ~1 FLOP per weight byte per token).
    A drafter step costs ``draft_ratio`` of a target forward (a one-layer EAGLE head over a ~28-layer
    target). KV-cache reads are ignored: this proxy knows nothing about context lengths.
    """
    per_forward = max(1.0, batch_size / knee_tokens)
    if depth <= 0:
        return per_forward
    return depth * draft_ratio * per_forward + max(1.0, batch_size * (depth + 1) / knee_tokens)


class SglangEma:
    """Cost-aware EMA depth picker, one state per batch-size range (see module docstring)."""

    def __init__(self, depths: Sequence[int] = DEFAULT_DEPTHS, ranges: Sequence[int] = DEFAULT_RANGES,
                 smoothing: float = DEFAULT_SMOOTHING, prior_accept_rate: float = DEFAULT_PRIOR_ACCEPT_RATE,
                 hysteresis: float = DEFAULT_HYSTERESIS, cost: CostFn | None = None,
                 cost_model: OracleCost | None = None, name: str = "sglang-ema") -> None:
        self.depths = tuple(int(d) for d in depths)
        if not self.depths or any(not 0 <= d <= MAX_DEPTH for d in self.depths) or len(set(self.depths)) != len(
                self.depths):
            raise InputError(f"sglang-ema depths must be distinct ints in [0, {MAX_DEPTH}], got {list(depths)}")
        if max(self.depths) == 0:
            raise InputError(f"sglang-ema depths {list(depths)} never draft (depth 0 is no SD): name a depth >= 1, "
                             "or use the policy no-sd")
        self.ranges = tuple(int(r) for r in ranges)
        if not self.ranges or any(b <= a for a, b in pairwise(self.ranges)):
            raise InputError(f"sglang-ema ranges must be strictly increasing, got {list(ranges)}")
        if len(self.ranges) > MAX_RANGES or self.ranges[0] < 1 or self.ranges[-1] > MAX_POLICY_BATCH:
            raise InputError(f"sglang-ema ranges must be at most {MAX_RANGES} batch sizes in "
                             f"[1, {MAX_POLICY_BATCH:,}], got {list(ranges)}")
        if not 0.0 < smoothing <= 1.0:
            raise InputError(f"sglang-ema smoothing must be in (0, 1], got {smoothing}")
        if not 0.0 <= prior_accept_rate <= _MAX_RATE:
            raise InputError(
                f"sglang-ema prior acceptance rate must be in [0, {_MAX_RATE}], got {prior_accept_rate}"
            )
        if not 0.0 <= hysteresis <= MAX_HYSTERESIS:
            raise InputError(f"sglang-ema hysteresis must be in [0, {MAX_HYSTERESIS:g}] (a relative gain), "
                             f"got {hysteresis}")
        self.smoothing = float(smoothing)
        self.prior_accept_rate = float(prior_accept_rate)
        self.hysteresis = float(hysteresis)
        if cost is not None and cost_model is not None:
            raise InputError("sglang-ema takes a cost callable or a cost model, not both")
        self.cost: CostFn = cost if cost is not None else chain_cost_proxy
        self.cost_model = cost_model  # not touched here: scenario validation builds policies with placeholders
        self.name = name
        # the chain each depth is priced as, built once: a decision prices every depth, and the block hint
        # prices them per block (a decision's own answer is still a fresh SDConfig: see DecidesAhead)
        self._chains = {d: SDConfig.chain(d) for d in self.depths if d > 0}
        # what the block fold reads of the depths: chain_tokens' powers and its value at rate >= 1, the index
        self._powers = [d + 1 for d in self.depths]
        self._spans = [float(d + 1) for d in self.depths]
        self._index = {d: i for i, d in enumerate(self.depths)}
        self.clear()

    def clear(self) -> None:
        """Back to the prior acceptance rate and no current depth in every range."""
        self._rate = [self.prior_accept_rate] * len(self.ranges)
        self._current: list[int | None] = [None] * len(self.ranges)

    def range_of(self, batch_size: int) -> int:
        """The index of the last range whose lower bound is at most ``batch_size`` (the first range
        below them all)."""
        return max(bisect_right(self.ranges, batch_size) - 1, 0)

    def accept_rate(self, batch_size: int) -> float:
        """The current EMA acceptance rate of ``batch_size``'s range."""
        return self._rate[self.range_of(batch_size)]

    def score(self, rate: float, batch_size: int, depth: int, context_lens: np.ndarray | None = None) -> float:
        """Expected tokens per unit cost of a ``depth`` chain: priced by ``cost_model`` at
        ``context_lens`` (empty contexts when not given) when there is one, else by ``cost``."""
        if self.cost_model is None:
            cost = float(self.cost(max(batch_size, 1), depth))
        else:
            ctx = context_lens if context_lens is not None else np.zeros(max(batch_size, 1), dtype=np.int64)
            cost = float(self.cost_model.sd_time(ctx, self._chain(depth)) if depth > 0
                         else self.cost_model.decode_time(ctx))
        return chain_tokens(rate, depth) / cost if cost > 0 else 0.0

    def decide(self, view: BatchView) -> Decision:
        r = self.range_of(view.batch_size)
        ctx = None
        if self.cost_model is not None:
            ctx = np.asarray(view.context_lens, dtype=np.int64)
            if len(ctx) == 0:  # the engine gave no context lengths: assume empty contexts, as the oracle does
                ctx = np.zeros(max(view.batch_size, 1), dtype=np.int64)
        model, rate = self.cost_model, self._rate[r]
        if ctx is not None and isinstance(model, CostModelBase):
            # score's prices, the speculating depths in one sd_times call (each sd_time's float; the
            # contexts checked and reduced once, not once per depth)
            chains = [self._chain(d) for d in self.depths if d > 0]
            priced = iter(model.sd_times(ctx, chains) if chains else [])
            scores = {}
            for d in self.depths:
                cost = float(next(priced) if d > 0 else model.decode_time(ctx))
                scores[d] = chain_tokens(rate, d) / cost if cost > 0 else 0.0
        else:
            scores = {d: self.score(rate, view.batch_size, d, ctx) for d in self.depths}
        best = max(self.depths, key=scores.__getitem__)
        current = self._current[r]
        if current is None or scores[best] > scores[current] * (1.0 + self.hysteresis):
            self._current[r] = current = best
        return Decision(SDConfig.chain(current))

    def ahead_shapes(self) -> tuple[OracleCost, tuple[SDConfig, ...]] | None:
        """The cost model and the chains :meth:`ahead` prices at every row
        (:class:`~tltcore.policy.base.DecidesAhead`): every candidate depth's chain, where there is a
        cost model and no candidate is depth 0 (plain decoding, priced by ``decode_time``)."""
        if self.cost_model is None or 0 in self.depths:
            return None
        return self.cost_model, tuple(self._chains[d] for d in self.depths)

    def ahead_resume(self, batch_size: int) -> SDConfig | None:
        """The chain :meth:`decide` answers at ``batch_size`` unless that decision switches: the
        range's current depth (:class:`~tltcore.policy.base.ResumesAhead`); None before the range's
        first decision."""
        current = self._current[self.range_of(batch_size)]
        return None if current is None else self._chain(current)

    def ahead(self, config: SDConfig, batch_size: int, emitted: list[int], ctx_rows: np.ndarray,
              prices: list[list[float]] | None = None, asked: bool = True, batches: list[int] | None = None
              ) -> tuple[int, Decision | None]:
        """The rounds of ``len(emitted)`` one-iteration spans of ``config`` in one call
        (:class:`~tltcore.policy.base.DecidesAhead`): per iteration :meth:`observe`'s EMA step, then
        :meth:`decide`'s scores at the next row's contexts, stopping at the first answer that is not
        ``config``'s depth. ``prices``: each depth's chain (:meth:`ahead_shapes`) priced at every row
        by the cost model, when the engine priced them. ``asked=False``: :meth:`decide` at row 0 comes
        first (:class:`~tltcore.policy.base.ResumesAhead`), ``(0, decision)`` where it switches.
        ``batches`` (with ``prices``): each row's batch size, where requests finish inside the block
        (:class:`~tltcore.policy.base.ResumesAhead`): iteration ``j`` observed at ``batches[j]``, each
        decision in the range of its row's batch."""
        if batches is not None and prices is None:
            raise ValueError("ahead(batches=...) needs the engine's prices: the rows' own batches price them")
        k = len(emitted)
        b = batch_size
        r = self.range_of(b)
        depth = config.depth
        depths = self.depths
        first = 0 if asked else -1  # the first iteration observed, after the decision at row first + 1
        # per row i, each depth's cost at row i, in depths order (a tuple per row; row 0 only when not asked)
        if first + 1 >= k:  # no decision to score
            per_row = []
        elif prices is not None:
            per_row = list(zip(*(p[:k] for p in prices), strict=True))
        else:
            costs = self._row_costs(ctx_rows[first + 1:k], b)
            per_row = list(zip(*(costs[d] for d in depths), strict=True))
            if asked:
                per_row.insert(0, ())
        rate = self._rate[r]
        current = self._current[r]
        at = None if current is None else self._index[current]
        smoothing, gain = self.smoothing, 1.0 + self.hysteresis
        # observe's implied rates, once per distinct emitted count
        # (Outcome(emitted_tokens=round(e), batch_size=b, iterations=1).accept_length)
        if batches is None:
            implied = {e: implied_rate(round(e) / b, depth) for e in set(emitted)}
            observed = [implied[e] for e in emitted]
        else:
            implied = {eb: implied_rate(round(eb[0]) / eb[1], depth) for eb in set(zip(emitted, batches, strict=True))}
            observed = [implied[eb] for eb in zip(emitted, batches, strict=True)]
        if (at is not None and depths[at] == depth and k - 1 - first >= FOLD_ROWS
                and (batches is None or self.range_of(min(batches)) == r == self.range_of(max(batches)))):
            return self._fold(r, rate, at, first, k, observed, per_row, depth)
        for j in range(first, k):
            if j >= 0:
                rate += smoothing * (observed[j] - rate)
                if j + 1 == k:
                    break
                if batches is not None and batches[j + 1] != batches[j]:  # requests finished: the next decide's range
                    now = self.range_of(batches[j + 1])
                    if now != r:
                        self._rate[r], self._current[r] = rate, current if at is None else depths[at]
                        r, rate, current = now, self._rate[now], self._current[now]
                        at = None if current is None else self._index[current]
            scores = self._scores(rate, per_row[j + 1])  # decide's
            top = max(scores)
            best = scores.index(top)  # the first best depth, as max(depths, key=...) picks it
            if at is None or top > scores[at] * gain:
                at = best
            if depths[at] != depth:
                self._rate[r], self._current[r] = rate, depths[at]
                return j + 1, Decision(SDConfig.chain(depths[at]))
        self._rate[r], self._current[r] = rate, current if at is None else depths[at]
        return k, None

    def _scores(self, rate: float, costs: tuple[float, ...]) -> list[float]:
        """Every depth's :meth:`score` at ``rate`` given its cost (in depths order): ``chain_tokens(rate,
        d) / cost`` with the same float operations, the powers and the rate >= 1 values made once."""
        if rate >= 1.0:
            return [x / c if c > 0 else 0.0 for x, c in zip(self._spans, costs, strict=True)]
        left = 1.0 - rate
        return [(1.0 - rate ** p) / left / c if c > 0 else 0.0 for p, c in zip(self._powers, costs, strict=True)]

    def _fold(self, r: int, rate: float, at: int, first: int, k: int, observed: list[float],
              per_row: list[tuple[float, ...]], depth: int) -> tuple[int, Decision | None]:
        """:meth:`ahead`'s fold where every decision stays in range ``r`` with ``config``'s depth (index
        ``at``) standing: the EMA folded iteration by iteration as there, and each decision's scores first
        in one numpy pass. A decision that pass shows well inside the hysteresis (its best score below
        ``(1 - 1e-9)`` times the standing depth's times the gain, where each score is a few IEEE operations
        from the same inputs, its error ~1e-13 relative whatever ``pow``) cannot switch, so only the others
        are scored exactly, with :meth:`ahead`'s own float operations; the first that switches ends the fold
        there. Decisions whose rate reaches 1 or whose costs are not positive are always scored exactly."""
        smoothing, gain, depths = self.smoothing, 1.0 + self.hysteresis, self.depths
        rates = []  # the rate each decision j = first..k-2 scores with: after iteration j's update
        for j in range(first, k - 1):
            if j >= 0:
                rate += smoothing * (observed[j] - rate)
            rates.append(rate)
        rate += smoothing * (observed[k - 1] - rate)  # the block's last iteration, observed after its decision
        rows = np.array(rates)
        costs = np.array(per_row[first + 1:k], dtype=np.float64)  # decision j prices at row j + 1
        with np.errstate(all="ignore"):
            scores = (1.0 - rows[:, None] ** np.array(self._powers, dtype=np.float64)) / (1.0 - rows)[:, None] / costs
        clear = (costs > 0).all(axis=1) & (rows < _CLEAR_RATE) & (scores.max(axis=1) < scores[:, at] * gain * _CLEAR)
        for i in np.flatnonzero(~clear).tolist():
            j, x = first + i, rates[i]
            exact = self._scores(x, per_row[j + 1])
            top = max(exact)
            if top > exact[at] * gain:
                best = exact.index(top)
                if depths[best] != depth:
                    self._rate[r], self._current[r] = x, depths[best]
                    return j + 1, Decision(SDConfig.chain(depths[best]))
        self._rate[r], self._current[r] = rate, depths[at]
        return k, None

    def _row_costs(self, rows: np.ndarray, batch_size: int) -> dict[int, list[float]]:
        """Each candidate depth's cost at every row of contexts, the floats :meth:`score` computes per
        row: the cost model's row form (equal to ``sd_time`` per row), decode time per row for depth 0;
        without a cost model, ``cost`` at the batch size (the same for every row)."""
        model = self.cost_model
        if model is None:
            return {d: [float(self.cost(max(batch_size, 1), d))] * len(rows) for d in self.depths}
        out = {}
        for d in self.depths:
            if d == 0:
                out[d] = [float(model.decode_time(row)) for row in rows]
            elif isinstance(model, CostModelBase):
                out[d] = model.sd_rows_times(rows, self._chain(d))
            else:
                out[d] = [float(model.sd_time(row, self._chain(d))) for row in rows]
        return out

    def _chain(self, depth: int) -> SDConfig:
        """The chain of ``depth`` draft tokens (``depth`` >= 1) as this policy prices it."""
        chain = self._chains.get(depth)
        return SDConfig.chain(depth) if chain is None else chain

    def observe(self, outcome: Outcome) -> None:
        """Fold the acceptance rate implied by this iteration into its range's EMA (SD iterations only)."""
        if not outcome.config.enabled or outcome.batch_size <= 0:
            return
        r = self.range_of(outcome.batch_size)
        observed = implied_rate(outcome.accept_length, outcome.config.depth)
        self._rate[r] += self.smoothing * (observed - self._rate[r])

    def reset(self, step: int) -> None:
        return None
