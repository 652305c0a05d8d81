"""Acceptance model: how many tokens one speculative iteration emits per request.

Positional model (DESIGN §2.2). Given that the path to a draft node at depth ``d`` was accepted, the
target's next token equals that node's child of sibling rank ``r`` with probability ``p(d, r)``;
siblings are mutually exclusive, so ``sum_r p(d, r) <= 1``. A draft node is then accepted with the
product of ``p`` along its path, and because at most one node per depth can be accepted, the
expected number of accepted draft tokens is exactly the sum of those products over the tree.

The tree for ``SDConfig(depth, topk, verify_tokens)`` is built as EAGLE-2 builds it: the drafter
expands the ``topk`` best nodes of each level into ``topk`` children each, and the ``verify_tokens``
nodes of highest cumulative draft probability are verified. The drafter's draft probability is taken
to be calibrated (= ``p``), which EAGLE-2 reports is close to true for its drafters.

- :class:`ChainAcceptance` — per-position ``alphas`` for chain drafts (only rank 1 ever accepted):
  ``E = 1 + sum_k prod_{i<=k} alpha_i``, ``(1 - a^(k+1)) / (1 - a)`` for a constant ``a``.
- :class:`TreeAcceptance` — ``p(d, r) = coverage * exp(-depth_decay * (d-1)^depth_power) *
  (1 - rank_ratio) * rank_ratio^(r-1)``: the target token falls in the drafter's support with
  probability ``coverage``, shrinking with depth as drafter errors compound, and its drafter rank is
  geometric. :func:`paper_qwen32b_tp4` is fitted to the paper's depth x verify table.

The drafter the engine holds now (:class:`~tltcore.drafter.state.DrafterState`: version, quality,
optional per-position scales) is an argument of every query: its scale multiplies every
per-position probability. A stale drafter builds the same tree (its own confidences are unchanged)
but the target accepts less of it. Accept lengths count the bonus token: no SD gives exactly 1, a
depth-``D`` draft at most ``D + 1``.

Sampling (:class:`AcceptSampler`) draws per-request accept lengths from the exact length
distribution of the tree by inverse CDF; it is the one sampling path the simulator uses.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.errors import InputError
from tltcore.policy.base import SDConfig


@runtime_checkable
class AcceptanceModel(Protocol):
    """Tokens emitted per request per SD iteration, bonus token included (>= 1), for a draft shape
    and the drafter the engine holds."""

    def expected_accept_length(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> float:
        """Expected accept length for this draft shape (1.0 for no SD)."""
        ...

    def accept_length_probs(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> np.ndarray:
        """P(accept length = 1 + k) for k = 0..depth (sums to 1)."""
        ...


class AcceptSampler:
    """Per-request accept lengths drawn from a model's exact length distribution.

    One inverse-CDF table per (config, drafter), cached: the distribution is fixed while the drafter
    is, and recomputing it dominated the simulator's per-iteration cost. A draw is an int in
    ``[1, depth + 1]``: the bonus token is always emitted.

    The inverse CDF is ``numpy.searchsorted`` of ``u * total`` among the CDF's inner edges. Most draws
    are read from a lookup table instead, the same ints (:class:`_Buckets`): a stochastic P1 step draws
    ~9M accept lengths, and a binary search per draw (~25 ns) was a fifth of cost-aware's step."""

    def __init__(self, model: AcceptanceModel) -> None:
        self.model = model
        self._tables: dict[tuple[SDConfig, DrafterState], _Buckets] = {}

    def draw(self, config: SDConfig, n: int, rng: np.random.Generator,
             drafter: DrafterState = INITIAL_DRAFTER) -> np.ndarray:
        key = (config, drafter)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _Buckets(np.cumsum(self.model.accept_length_probs(config, drafter)))
        return table.lengths(rng.random(int(n)))


class _Buckets:
    """The inverse CDF of an accept-length distribution (``cdf``: its cumulative probabilities):
    ``lengths(u)`` is ``numpy.searchsorted(edges, u * total, side="right")`` of the inner edges behind a
    ``-inf`` sentinel (so it lands in ``[1, depth + 1]`` directly, the bonus token's +1 without another
    whole-array op), the same ints, mostly by a table lookup.

    Why exact: ``K`` is a power of two, so ``z = u * (total * K)`` is ``(u * total) * K`` to the bit
    (scaling by a power of two rounds nothing), and ``floor(z)`` is the bucket ``j`` with ``j / K <= u *
    total < (j + 1) / K``. In a bucket no inner edge falls strictly inside, the search's answer is the
    one at ``j / K`` (computed once, by the same search); the few buckets an edge falls in are marked and
    their draws searched as before, at ``z / K`` (``u * total`` again, exactly). A distribution that is
    not finite takes the search for every draw."""

    BITS = 14  # 16k one-byte buckets: an edge's bucket is ~1 draw in 2k
    K = float(1 << BITS)

    def __init__(self, cdf: np.ndarray) -> None:
        self.edges = np.concatenate(([-np.inf], cdf[:-1]))
        self.total = float(cdf[-1])
        inner = self.edges[1:]
        self.table: np.ndarray | None = None
        self.scaled = 0.0  # total * K, with a table
        if len(self.edges) > 127 or not (np.isfinite(inner).all() and np.isfinite(self.total) and self.total >= 0.0):
            return
        k = self.K
        size = int(self.total * k) + 2  # every bucket u * total can reach (u < 1), and one more
        table = np.searchsorted(self.edges, np.arange(size) / k, side="right").astype(np.int8)
        marked = np.floor(inner * k).astype(np.int64)
        table[marked[(marked >= 0) & (marked < size)]] = -1  # an edge inside: search these draws
        self.table, self.scaled = table, self.total * k

    def lengths(self, u: np.ndarray) -> np.ndarray:
        """The accept lengths of uniform draws ``u`` (intp, as ``numpy.searchsorted`` gives them)."""
        if self.table is None:
            return np.searchsorted(self.edges, u * self.total, side="right")
        z = u * self.scaled
        out = self.table.take(z.astype(np.intp)).astype(np.intp)
        marked = np.flatnonzero(out < 0)
        if len(marked):
            out[marked] = np.searchsorted(self.edges, z[marked] / self.K, side="right")
        return out


# ---- the tree ------------------------------------------------------------------------------------
def eagle_tree_reach(probs: np.ndarray, depth: int, topk: int, verify_tokens: int) -> np.ndarray:
    """``reach[d]`` = P(at least ``d + 1`` draft tokens accepted) for the EAGLE-2 tree.

    ``probs[d, r]`` is the acceptance probability of sibling rank ``r`` at depth ``d + 1``. Level 1
    is the root's ``topk`` children; each further level expands the ``topk`` best nodes of the level
    above. The ``verify_tokens`` best candidates overall are kept (ties go to the shallower node, so
    the kept set always contains its ancestors) and summed per depth.
    """
    layer = probs[0, :topk]
    scores, depths = [layer], [np.zeros(topk, dtype=np.int64)]
    for d in range(1, depth):
        parents = np.sort(layer)[::-1][:topk]
        layer = (parents[:, None] * probs[d, :topk][None, :]).ravel()
        scores.append(layer)
        depths.append(np.full(layer.size, d, dtype=np.int64))
    score, level = np.concatenate(scores), np.concatenate(depths)
    keep = np.lexsort((level, -score))[:verify_tokens]
    return np.bincount(level[keep], weights=score[keep], minlength=depth)


def length_distribution(reach: np.ndarray) -> np.ndarray:
    """P(accept length = 1 + k) for k = 0..depth, from the reach probabilities."""
    upper = np.concatenate(([1.0], reach))
    lower = np.concatenate((reach, [0.0]))
    return np.clip(upper - lower, 0.0, None)


class _PositionalAcceptance:
    """Shared machinery: tree reach per (draft shape, drafter) (cached) and the length distribution."""

    _cache: dict

    def position_probs(self, depth: int, topk: int) -> np.ndarray:
        """``(depth, topk)`` array of p(d, r) as the drafter believes them (its own confidences)."""
        raise NotImplementedError

    def max_row_mass(self) -> float:
        """The largest acceptance mass of one depth at scale 1 (a drafter scale must keep
        ``scale * mass <= 1``)."""
        raise NotImplementedError

    def check_drafter(self, drafter: DrafterState, depth: int = 64) -> None:
        """InputError unless the drafter's scales keep every depth's acceptance mass <= 1."""
        mass = self.max_row_mass()
        worst = max(drafter.scales(depth), default=1.0)
        if worst * mass > 1 + 1e-12:
            raise InputError(f"drafter quality x position scale {worst:g} would make the acceptance mass of "
                             f"one depth {worst * mass:.3f} > 1 (it is {mass:.3f} at quality 1)",
                             field="drafter.quality")

    def reach(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> np.ndarray:
        """P(at least k+1 draft tokens accepted), k = 0..depth-1, with the drafter's scales applied
        along each path. ``SDConfig`` admits every EAGLE-2 shape (verify up to
        ``max_tree_nodes``), so (config, drafter) is the whole key."""
        key = (config, drafter)
        hit = self._cache.get(key)
        if hit is None:
            if config.depth == 0:
                hit = np.zeros(0)
            else:
                self.check_drafter(drafter, config.depth)
                base = eagle_tree_reach(self.position_probs(config.depth, config.topk), config.depth,
                                        config.topk, config.verify_tokens)
                hit = base * np.cumprod(drafter.scales(config.depth))
            hit.setflags(write=False)
            self._cache[key] = hit
        return hit

    def expected_accept_length(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> float:
        """Mean tokens emitted per request per iteration, bonus included (1.0 for no SD)."""
        return 1.0 + float(self.reach(config, drafter).sum())

    def accept_length_probs(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> np.ndarray:
        """P(accept length = 1 + k), k = 0..depth."""
        return length_distribution(self.reach(config, drafter))


@dataclass(frozen=True)
class ChainAcceptance(_PositionalAcceptance):
    """Chain acceptance: ``alphas[i]`` = P(accept draft position i+1 | positions <= i accepted).
    Positions past the end of ``alphas`` reuse its last value. Only the drafter's top-1 token is
    ever accepted, so widening the tree (topk > 1) adds nothing; a shape drafts
    ``min(depth, verify_tokens)`` useful tokens."""

    alphas: tuple[float, ...]
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        alphas = tuple(float(a) for a in self.alphas)
        if not alphas or any(not 0.0 <= a <= 1.0 for a in alphas):
            raise InputError(f"alphas must be a non-empty list of probabilities, got {self.alphas}",
                             field="alphas")
        object.__setattr__(self, "alphas", alphas)

    def max_row_mass(self) -> float:
        return max(self.alphas)

    def position_probs(self, depth: int, topk: int) -> np.ndarray:
        per_depth = np.array([self.alphas[min(d, len(self.alphas) - 1)] for d in range(depth)])
        probs = np.zeros((depth, topk))
        probs[:, 0] = per_depth
        return probs


@dataclass(frozen=True)
class TreeAcceptance(_PositionalAcceptance):
    """Rank-decaying positional acceptance for EAGLE-2 trees (see module docstring for p(d, r))."""

    coverage: float
    rank_ratio: float
    depth_decay: float
    depth_power: float = 1.0
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        checks = {"coverage": 0 < self.coverage <= 1, "rank_ratio": 0 <= self.rank_ratio < 1,
                  "depth_decay": self.depth_decay >= 0, "depth_power": self.depth_power > 0}
        for name, ok in checks.items():
            if not ok:
                raise InputError(f"out of range: {getattr(self, name)}", field=name)

    def max_row_mass(self) -> float:
        return self.coverage

    def position_probs(self, depth: int, topk: int) -> np.ndarray:
        d = np.arange(depth, dtype=float)
        at_depth = self.coverage * np.exp(-self.depth_decay * d ** self.depth_power)
        by_rank = (1 - self.rank_ratio) * self.rank_ratio ** np.arange(topk, dtype=float)
        return at_depth[:, None] * by_rank[None, :]

    @property
    def params(self) -> tuple[float, float, float, float]:
        return (self.coverage, self.rank_ratio, self.depth_decay, self.depth_power)


# ---- fitting -------------------------------------------------------------------------------------
PAPER_TOPK = 8  # sd_depth_verify_bs1.csv: Qwen2.5-32B, TP 4, batch 1, top-k 8

# Fitted by fit_tree_acceptance(load_depth_verify_table(<shared>/paper/sd_depth_verify_bs1.csv)).
# To refit (e.g. for a new table): run that call and paste `fit.model.params` here;
# tests/sim/test_acceptance.py checks that a refit reproduces these and every row is within 5 %.
PAPER_QWEN32B_TP4_PARAMS = (0.971233, 0.0791135, 0.00140549, 1.58981)


def paper_qwen32b_tp4() -> TreeAcceptance:
    """The adapted EAGLE drafter of Qwen2.5-32B (TP 4) from the paper's depth x verify table."""
    return TreeAcceptance(*PAPER_QWEN32B_TP4_PARAMS)


@dataclass(frozen=True)
class TreeFit:
    """Result of :func:`fit_tree_acceptance`: the model and its relative error per table row."""

    model: TreeAcceptance
    rows: tuple[tuple[int, int, float], ...]  # (depth, verify_tokens, accept_length)
    predicted: tuple[float, ...]

    @property
    def rel_errors(self) -> np.ndarray:
        measured = np.array([r[2] for r in self.rows])
        return np.array(self.predicted) / measured - 1

    @property
    def max_rel_error(self) -> float:
        return float(np.abs(self.rel_errors).max())

    @property
    def rms_rel_error(self) -> float:
        return float(np.sqrt((self.rel_errors ** 2).mean()))


def load_depth_verify_table(path: str | Path) -> list[tuple[int, int, float]]:
    """Rows ``(depth, verify_tokens, accept_length)`` of a CSV with those columns."""
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            rows = []
            for i, rec in enumerate(reader, start=2):
                for col in ("depth", "verify_tokens", "accept_length"):
                    if rec.get(col) in (None, ""):
                        raise InputError("missing value", path=path, row=i, field=col)
                try:
                    rows.append((int(rec["depth"]), int(rec["verify_tokens"]), float(rec["accept_length"])))
                except ValueError as exc:
                    raise InputError(f"not a number ({exc})", path=path, row=i) from None
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    if not rows:
        raise InputError("no rows", path=path)
    return rows


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _unpack(x: np.ndarray) -> tuple[float, float, float, float]:
    """Unconstrained -> (coverage in (0,1), rank_ratio in (0,1), decay > 0, power > 0)."""
    return (_sigmoid(x[0]), _sigmoid(x[1]), math.exp(x[2]), math.exp(x[3]))


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.3,
                iters: int = 600, tol: float = 1e-10) -> tuple[np.ndarray, float]:
    """Plain Nelder-Mead simplex minimiser (reflection 1, expansion 2, contraction and shrink 1/2)."""
    n = len(x0)
    simplex = [np.asarray(x0, dtype=float)] + [np.asarray(x0, dtype=float) + step * np.eye(n)[i]
                                                for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = np.argsort(values, kind="stable")
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        f_r = f(reflected)
        if f_r < values[0]:
            expanded = centroid + 2 * (centroid - simplex[-1])
            f_e = f(expanded)
            simplex[-1], values[-1] = (expanded, f_e) if f_e < f_r else (reflected, f_r)
        elif f_r < values[-2]:
            simplex[-1], values[-1] = reflected, f_r
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            f_c = f(contracted)
            if f_c < values[-1]:
                simplex[-1], values[-1] = contracted, f_c
            else:
                simplex = [simplex[0]] + [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    best = int(np.argmin(values))
    return simplex[best], values[best]


def _predict(params: Sequence[float], rows: Sequence[tuple[int, int, float]], topk: int) -> np.ndarray:
    model = TreeAcceptance(*params)
    return np.array([model.expected_accept_length(SDConfig(d, topk, v)) for d, v, _ in rows])


def fit_tree_acceptance(table: Iterable[tuple[int, int, float]], topk: int = PAPER_TOPK,
                        iters: int = 600) -> TreeFit:
    """Fit :class:`TreeAcceptance` to ``(depth, verify_tokens, accept_length)`` rows at batch 1.

    Objective: RMS + max of the relative errors (the max keeps every row close, the RMS keeps the
    surface smooth for the simplex). A coarse grid picks the start, Nelder-Mead in an unconstrained
    parameterisation refines it. Deterministic: same table, same parameters.
    """
    rows = tuple((int(d), int(v), float(a)) for d, v, a in table)
    measured = np.array([a for _, _, a in rows])

    def objective(params: Sequence[float]) -> float:
        rel = _predict(params, rows, topk) / measured - 1
        return float(np.sqrt((rel ** 2).mean()) + np.abs(rel).max())

    grid = [(c, q, lam, gam) for c in (0.9, 0.95, 0.98) for q in (0.05, 0.1, 0.2, 0.4)
            for lam in (0.005, 0.02, 0.08) for gam in (0.5, 1.0, 1.5)]
    start = min(grid, key=objective)
    x0 = np.array([_logit(start[0]), _logit(start[1]), math.log(start[2]), math.log(start[3])])
    x, _ = nelder_mead(lambda x: objective(_unpack(x)), x0, iters=iters)
    params = _unpack(x)
    return TreeFit(TreeAcceptance(*params), rows, tuple(_predict(params, rows, topk)))


# ---- presets -------------------------------------------------------------------------------------
ACCEPTANCE_NAMES: tuple[str, ...] = ("paper-qwen32b", "chain-<alpha>")


def get_acceptance(name: str) -> ChainAcceptance | TreeAcceptance:
    """``paper-qwen32b`` (the fitted tree preset) or ``chain-<alpha>`` (constant-alpha chain,
    e.g. ``chain-0.8``); unknown names raise :class:`InputError`."""
    key = name.strip().lower()
    if key in ("paper-qwen32b", "paper-qwen32b-tp4", "paper"):
        return paper_qwen32b_tp4()
    if key.startswith("chain-"):
        try:
            alpha = float(key.removeprefix("chain-"))
        except ValueError:
            alpha = -1.0
        if 0.0 <= alpha <= 1.0:
            return ChainAcceptance((alpha,))
    raise InputError(f"unknown acceptance model '{name}'; known: {', '.join(ACCEPTANCE_NAMES)} "
                     "(alpha in [0, 1])", field="acceptance")
