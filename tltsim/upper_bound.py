"""A true upper bound on what any SD policy can achieve: a lower bound on the rollout makespan.

Why. The greedy oracle (``greedy-oracle``) picks the best shape per iteration and ignores every
cost that spans iterations, so other policies beat it: it bounds nothing. "No policy may beat the
bound" is only a test if the bound is a proof, so this is computed offline, per worker, from the
trace's known lengths and the true acceptance and cost models, and argued below.

The claim. Under the simulator's model with ``acceptance.mode = "expected"`` and a drafter fixed for
the step, for every policy whose draft shapes are in ``shapes``, every worker's finish time is at
least :func:`worker_lower_bound`, hence the step's makespan at least the maximum over workers
(:func:`makespan_lower_bound`). Assumption: the cost model is monotone -- an iteration over a subset
of the requests with no longer contexts never costs more (the roofline is: padded batch sizes, paged
KV and attention sums only grow with the batch and its contexts). In ``stochastic`` mode accept
lengths are draws, so a lucky run may beat the expected-value bound; it is a bound on expectations
only there.

Why it holds (one worker). Dealing is the policy-free function of the seed, so each worker's
requests are fixed. Its clock only advances by work: prefill, switch re-prefill, drafter catch-up
and decode iterations.

* Prefill: the first admission happens before any decision and is the same for every policy (FCFS
  under ``max_batch`` and the KV reservation, packed into ``prefill_budget`` passes): its time is
  counted exactly. Later admissions, switches and catch-ups cost >= 0: counted as 0 (zero switch
  cost).
* Decode, when the first admission takes every request (no queue, the common case: the bundled
  scenarios): after prefill request ``i`` has ``r_i = response_i - 1`` tokens left, and in expected
  mode every live request advances by the same ``a_c`` per iteration (the shape's expected accept
  length; 1 for plain decode), clipped only where it finishes. So with "progress" ``P`` (the sum of
  the ``a_c`` of the iterations so far) the live set is ``L(P) = {i: r_i - P > eps}`` (the engine's
  retirement rule) and contexts are ``prompt_i + 1 + floor(P)`` -- whatever the policy did. An
  iteration starting at ``P_k`` with shape ``c`` costs ``t_c(L(P_k), ctx(P_k))`` and advances ``P`` by
  ``a_c``. Let ``g(P) = min_{c in shapes + plain} t_c(L(P), ctx(P) - A) / a_c`` where ``A`` is the
  largest ``ceil(a_c)`` (contexts shifted down by at most one iteration's growth, floored at the
  prompt + 1). For ``P`` in ``[P_k, P_k + a_c)``, ``L(P)`` is a subset of ``L(P_k)`` and the shifted
  contexts are no longer than ``ctx(P_k)``, so by monotonicity ``g(P) <= t_c / a_c``: the iteration
  costs at least the integral of ``g`` over the progress it makes. Summing, decode time >= the
  integral of ``g`` from 0 to the last request's end. Between two consecutive response ends (and
  grid points every ``grid`` tokens) the live set is fixed and ``g`` is non-decreasing in ``P``
  (contexts grow), so the lower Riemann sum at the left ends is a lower bound of that integral.
* Decode with a queue (``max_batch`` or the KV cache holds some requests back): a request then starts
  decoding when it is admitted, at a progress ``s_j`` that depends on the policy only through how far
  past a response's last token the iteration that ends it runs (less than the largest accept length
  ``A``: the engine admits after that iteration). :func:`admission_progress` replays the FCFS
  admission with every retirement exactly at the last token (each ``s_j`` at its earliest) and with
  every retirement ``A`` later (at its latest; slots and KV only free later, so admissions only come
  later). Request ``j`` is then live in *every* schedule for ``latest s_j <= P < earliest s_j + r_j``,
  and the same argument runs over these sure-live sets (contexts counted from the latest start). The
  bound is also at least every decode token times the least cost per token at any batch size
  (a schedule-free bound).

Tightness (tested): on small synthetic workloads, with and without a queue, the best registered
policy is within 10% of the bound (0.1-1.5% in practice); the gap is the drafter's catch-up of the
prompts, later admissions' prefills, response ends inside an iteration, the lower Riemann sum and the
context shift ``A``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from tltcore.acceptance import AcceptanceModel
from tltcore.cost import CostModel
from tltcore.cost.protocol import CostModelBase
from tltcore.dealing import deal
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.errors import InputError
from tltcore.policy.base import NO_SD, SDConfig, SDPolicy
from tltcore.policy.spec import PolicyBase, as_spec
from tltsim.rollout.entities import EngineConfig, StepRequests
from tltsim.rollout.scheduling import admissible, prefill_passes

if TYPE_CHECKING:
    from tltsim.scenario.build import SimInputs

#: The simulator's retirement threshold (``tltsim.rollout.worker._EPS``): a request whose remaining
#: tokens fall to this is done.
EPS = 1e-9
#: Longest progress interval (tokens) over which one lower Riemann sample stands.
DEFAULT_GRID = 256


@dataclass(frozen=True)
class StepBound:
    """The bound of one step: per worker, and the makespan (their maximum); ``queued``: workers whose
    first admission left requests waiting (their bound uses the sure-live sets, module docstring)."""

    step: int
    worker_bounds: np.ndarray
    queued: np.ndarray

    @property
    def makespan(self) -> float:
        return float(self.worker_bounds.max()) if len(self.worker_bounds) else 0.0


def policy_shape_set(policies: Iterable[SDPolicy]) -> tuple[SDConfig, ...]:
    """Every draft shape the given policy objects may choose (:func:`~tltcore.policy.shapes.policy_shapes`):
    the set the bound minimises over. A policy whose shapes are unknown cannot be bounded: InputError."""
    from tltcore.policy.shapes import policy_shapes

    out: set[SDConfig] = set()
    for p in policies:
        shapes = policy_shapes(p)
        if shapes is None:
            raise InputError(f"no upper bound for policy '{p.name}': the draft shapes it may choose are unknown")
        out.update(shapes)
    return tuple(sorted(out, key=lambda c: c.name))


def spec_shape_set(specs: Iterable[PolicyBase]) -> tuple[SDConfig, ...]:
    """:func:`policy_shape_set` read from typed specs, without building their policies."""
    out: set[SDConfig] = set()
    for spec in specs:
        if spec.shapes is None:
            raise InputError(f"no upper bound for policy '{spec.name}': the draft shapes it may choose are unknown")
        out.update(spec.shapes)
    return tuple(sorted(out, key=lambda c: c.name))


def _rates(shapes: Sequence[SDConfig], accept: AcceptanceModel | None,
           drafter: DrafterState) -> list[tuple[SDConfig, float]]:
    """(shape, expected accept length) for plain decode and every speculating shape."""
    out = [(NO_SD, 1.0)]
    if accept is not None:
        out += [(c, float(accept.expected_accept_length(c, drafter))) for c in shapes if c.enabled]
    return out


def _per_progress(cost: CostModel, ctx: np.ndarray, rates: list[tuple[SDConfig, float]]) -> float:
    """``g``: the least time per unit of progress over the shapes at these contexts. The speculating
    shapes are priced in one :meth:`~tltcore.cost.protocol.CostModel.sd_times` call (each float the one
    its own ``sd_time`` gives), since the bound evaluates this at every grid cell of every worker."""
    shapes = [c for c, _ in rates if c.enabled]
    times = dict(zip(shapes, cost.sd_times(ctx, shapes), strict=True)) if shapes else {}
    return min((times[c] if c.enabled else cost.decode_time(ctx)) / a for c, a in rates)


def _per_progress_cells(cost: CostModel, cells: Sequence[np.ndarray], rates: list[tuple[SDConfig, float]]
                        ) -> list[float]:
    """:func:`_per_progress` of every context array of ``cells``, each the same float. Where the cost
    model reads contexts only through paged-KV sums (:meth:`~tltcore.cost.protocol.CostModel.paged_kv_times`)
    each speculating shape is priced over all cells in one ``sd_times_from_sums`` call (pinned bit for
    bit to ``sd_time``): the bound evaluates a few hundred cells per worker, and a dozen shapes per cell
    priced call by call was most of it. Plain decode is priced from the same sums
    (``decode_times_from_sums``, each float ``decode_time``'s)."""
    paged_kv = cost.paged_kv_times() if isinstance(cost, CostModelBase) else None
    shapes = [(c, a) for c, a in rates if c.enabled]
    if paged_kv is None or not shapes or not cells or min(len(ctx) for ctx in cells) == 0:
        return [_per_progress(cost, ctx, rates) for ctx in cells]
    block = int(paged_kv.kv_block_size)
    # every cell's paged-KV and context sums, exact integers, in one pass over the cells laid end to end
    batch = np.array([len(ctx) for ctx in cells], dtype=np.int64)
    flat = np.concatenate(cells).astype(np.int64, copy=False)
    starts = np.concatenate(([0], np.cumsum(batch)[:-1]))
    paged = block * np.add.reduceat(np.floor_divide(flat + (block - 1), block), starts)
    ctx_sum = np.add.reduceat(flat, starts)
    # one row per rate (plain decode from the same sums), each cell's least value down the rows: a
    # minimum of floats is exact whatever the order, so each equals _per_progress's min()
    rows = [paged_kv.sd_times_from_sums(paged, ctx_sum, batch, c) / a if c.enabled
            else np.array(paged_kv.decode_times_from_sums(paged, ctx_sum, batch)) / a for c, a in rates]
    return np.minimum.reduce(np.vstack(rows), axis=0).tolist()


def admission_progress(prompts: np.ndarray, responses: np.ndarray, engine: EngineConfig, delay: float) -> np.ndarray:
    """The progress at which each request starts decoding when every retirement frees its slot and
    KV reservation ``delay`` units of progress after the request's last token (its response ends
    inside an iteration; the engine admits after it) and admission is FCFS under ``max_batch`` and
    the KV cache, as :mod:`tltsim.rollout.scheduling` admits. ``delay = 0`` gives every request's
    earliest possible start, ``delay`` = the largest accept length its latest (module docstring);
    ``inf`` for a request that never fits."""
    reserve = prompts + responses
    rem = (responses - 1).astype(float)
    n = len(prompts)
    start = np.full(n, np.inf)
    heap: list[tuple[float, int]] = []
    nxt = live = used = 0

    def admit(at: float) -> None:
        nonlocal nxt, live, used
        k = admissible(reserve[nxt:], engine.max_batch - live, engine.kv_capacity_tokens - used)
        for j in range(nxt, nxt + k):
            start[j] = at
            # one-token responses end at prefill; others free their slot after their last token
            heapq.heappush(heap, (at + rem[j] + delay if rem[j] > 0 else at, j))
        nxt, live, used = nxt + k, live + k, used + int(reserve[nxt:nxt + k].sum())

    admit(0.0)
    while nxt < n and heap:
        at = heap[0][0]
        while heap and heap[0][0] <= at:
            _, j = heapq.heappop(heap)
            live, used = live - 1, used - int(reserve[j])
        admit(at)
    return start


def worker_lower_bound(prompts: np.ndarray, responses: np.ndarray, *, cost: CostModel,
                       accept: AcceptanceModel | None, engine: EngineConfig, shapes: Sequence[SDConfig],
                       drafter: DrafterState = INITIAL_DRAFTER, grid: int = DEFAULT_GRID) -> tuple[float, bool]:
    """(a lower bound on one worker's busy time, whether it had a queue), see the module docstring."""
    p = np.asarray(prompts, dtype=np.int64)
    t = np.maximum(np.asarray(responses, dtype=np.int64), 1)
    n = len(p)
    if n == 0:
        return 0.0, False
    fits = admissible(p + t, engine.max_batch, engine.kv_capacity_tokens)
    prefill = sum(cost.prefill_time(new, old)
                  for new, old in prefill_passes(p[:fits], np.zeros(fits, dtype=np.int64), engine.prefill_budget))
    rates = _rates(shapes, accept, drafter)
    shift = max(int(np.ceil(a)) for _, a in rates)
    rem = (t - 1).astype(float)
    # request j is live in every schedule while latest start <= P < earliest start + rem - eps
    first = admission_progress(p, t, engine, float(shift)) if fits < n else np.zeros(n)
    last = (admission_progress(p, t, engine, 0.0) if fits < n else np.zeros(n)) + rem - EPS
    sure = (first < last) & np.isfinite(first)
    edges = np.unique(np.concatenate(([0.0], first[sure], last[sure])))
    widths, cells = [], []
    for a, b in pairwise(edges):
        live = sure & (first <= a) & (last > a)
        if not live.any():
            continue
        lo = float(a)
        while lo < b:
            hi = min(float(b), lo + grid)
            cells.append(p[live] + 1 + np.maximum(0, np.floor(lo - first[live]).astype(np.int64) - shift))
            widths.append(hi - lo)
            lo = hi
    total = 0.0
    for width, g in zip(widths, _per_progress_cells(cost, cells, rates), strict=True):
        total += width * g  # in cell order, as one cell at a time adds them
    if fits < n:
        total = max(total, _queued_decode_bound(p, t, cost, engine, rates))
    return float(prefill) + total, fits < n


def _queued_decode_bound(p: np.ndarray, t: np.ndarray, cost: CostModel, engine: EngineConfig,
                         rates: list[tuple[SDConfig, float]]) -> float:
    """Decode tokens times the least cost per token at any batch size and shape (no schedule)."""
    shortest = int(p.min()) + 1
    sizes = range(1, min(engine.max_batch, len(p)) + 1)
    cells = [np.full(b, shortest, dtype=np.int64) for b in sizes]
    per_token = min(g / b for g, b in zip(_per_progress_cells(cost, cells, rates), sizes, strict=True))
    return float((t - 1).sum()) * per_token


def makespan_lower_bound(workload: StepRequests, *, n_workers: int, cost: CostModel,
                         accept: AcceptanceModel | None, engine: EngineConfig, shapes: Sequence[SDConfig],
                         seed: int = 0, deal_mode: str = "shuffle", drafter: DrafterState = INITIAL_DRAFTER,
                         grid: int = DEFAULT_GRID) -> StepBound:
    """The bound of one step: each worker's requests dealt as the simulator deals them."""
    prompts = np.asarray(workload.prompt_tokens, dtype=np.int64)
    responses = np.asarray(workload.response_tokens, dtype=np.int64)
    parts = deal(workload.group_ids, n_workers, deal_mode, seed, int(workload.step))
    bounds, queued = [], []
    for idx in parts:
        b, q = worker_lower_bound(prompts[idx], responses[idx], cost=cost, accept=accept, engine=engine,
                                  shapes=shapes, drafter=drafter, grid=grid)
        bounds.append(b)
        queued.append(q)
    return StepBound(int(workload.step), np.asarray(bounds, dtype=float), np.asarray(queued, dtype=bool))


def scenario_bounds(inputs: SimInputs, specs: Sequence[PolicyBase | str]) -> list[StepBound]:
    """The bound of every step of a prepared scenario over the shapes of the policies ``specs``
    (each spec's own :attr:`~tltcore.policy.spec.PolicyBase.shapes`): what ``tlt sim run`` reports
    beside the policies."""
    shapes = spec_shape_set(as_spec(spec) for spec in specs)
    s = inputs.scenario
    return [makespan_lower_bound(w, n_workers=s.n_workers, cost=inputs.cost, accept=inputs.accept,
                                 engine=inputs.engine, shapes=shapes, seed=s.seed, deal_mode=s.trace.deal,
                                 drafter=inputs.drafter)
            for w in inputs.workloads]
