"""Mixture-of-experts cost terms: which experts a forward's tokens touch, and what moving them costs.

A dense layer reads all its MLP weights once per forward, whatever the number of tokens. An MoE layer
reads only the experts its tokens are routed to, and that number grows with the tokens: one decode
token of Qwen3-30B-A3B touches 8 of 128 experts, an SD verify of 8 requests x 5 tokens touches ~93.
That is why SD pays less on an MoE target at small batch than on a dense model of the same active
size: the (k+1)-token verify forward reads several times the expert weights a decode step reads,
while a dense model's verify reads the same weights as its decode step.

The law, for ``n`` routed tokens choosing ``top_k`` of ``E`` experts, with the per-token marginal
probability ``pi_e`` that expert ``e`` is among a token's choices (``sum_e pi_e = top_k``):

    E[experts touched] = sum_e 1 - (1 - pi_e)^n         (tokens routed independently)
    expert-token pairs  = n * top_k                     (what the expert GEMMs compute)

Uniform routing (``skew = 0``, the default) has ``pi_e = top_k / E`` and gives the familiar
``E * (1 - (1 - k/E)^n)``. Imbalanced routing takes expert popularity Zipf-like,
``p_r ~ (r + 1)^-skew`` over the popularity rank ``r``, and ``pi_r = min(1, c * p_r)`` with ``c`` set so
the marginals sum to ``top_k`` (no expert is chosen twice by one token); skew makes fewer distinct
experts carry more tokens. Neither is fitted: real routers are neither uniform nor Zipf, so the skew
is an input to vary (``model.routing_skew``), not a measurement.

**Expert parallelism** (``ep`` GPUs holding whole experts, :func:`expert_load`): experts are placed
round-robin by popularity rank (the hottest on GPU 0, the next on GPU 1, ...), as a balancing placement
would, and a forward waits for the busiest GPU, which is GPU 0 in both experts touched and
expert-token pairs. Tokens are dispatched to their experts' GPUs and their outputs combined by two
all-to-alls per MoE layer (:func:`all_to_all_bytes`), as DeepEP-style deployments run it. Without EP
(``ep = 1``) every GPU of the TP group holds a ``1/tp`` slice of every expert and reads its slice of
each touched expert; the MLP output is all-reduced like a dense layer's.

Each cost model prices these loads with its own kernel law (the roofline's max of bytes and FLOPs,
the calibrated model's fitted matmul law); the loads themselves are computed here only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tltcore.errors import InputError

#: Largest routing skew accepted (Zipf exponent): beyond ~3 one expert takes nearly every token.
MAX_SKEW = 8.0


@lru_cache(maxsize=256)
def _inclusion(num_experts: int, top_k: int, skew: float) -> tuple[float, ...]:
    """Per-token marginal probability that each expert (by popularity rank) is among a token's
    ``top_k`` choices: water-filled ``min(1, c * p_r)`` summing to ``top_k``."""
    if skew == 0.0:
        return (top_k / num_experts,) * num_experts
    p = np.arange(1, num_experts + 1, dtype=np.float64) ** -skew
    p /= p.sum()
    capped = np.zeros(num_experts, dtype=bool)
    pi = np.zeros(num_experts)
    for _ in range(num_experts):  # each round caps at least one more expert at 1, or ends
        free = ~capped
        c = (top_k - capped.sum()) / p[free].sum()
        pi = np.where(capped, 1.0, c * p)
        over = free & (pi > 1.0)
        if not over.any():
            break
        capped |= over
    return tuple(float(x) for x in np.minimum(pi, 1.0))


def check_routing(num_experts: int, top_k: int, skew: float) -> None:
    """InputError unless the routing parameters describe a router."""
    if not (1 <= top_k <= num_experts):
        raise InputError(f"top_k {top_k} must be in [1, {num_experts}]", field="num_experts_per_tok")
    if not (math.isfinite(skew) and 0.0 <= skew <= MAX_SKEW):
        raise InputError(f"must be in [0, {MAX_SKEW:g}], got {skew}", field="routing_skew")


def expected_distinct_experts(tokens: float, num_experts: int, top_k: int, skew: float = 0.0) -> float:
    """Expected number of distinct experts ``tokens`` routed tokens touch (module docstring)."""
    check_routing(num_experts, top_k, skew)
    if tokens <= 0:
        return 0.0
    return float(sum(1.0 - (1.0 - pi) ** tokens for pi in _inclusion(num_experts, top_k, skew)))


@dataclass(frozen=True)
class ExpertLoad:
    """What the busiest GPU of an MoE layer does for one forward: the experts it reads (counted in
    whole experts of the GPU's own holding: a ``1/tp`` slice each without EP) and the expert-token pairs
    it computes (in the same units)."""

    experts: float
    pairs: float


def expert_load(tokens: int, num_experts: int, top_k: int, ep: int = 1, skew: float = 0.0) -> ExpertLoad:
    """The busiest GPU's :class:`ExpertLoad` for ``tokens`` routed tokens.

    ``ep = 1``: each GPU holds a slice of every expert, so it reads every touched expert's slice and
    computes every pair's slice: the whole-layer numbers. ``ep > 1``: experts are placed round-robin by
    popularity rank over ``ep`` GPUs; GPU 0 holds ranks 0, ep, 2 ep, ... and is the busiest."""
    check_routing(num_experts, top_k, skew)
    if ep < 1:
        raise InputError(f"must be >= 1, got {ep}", field="expert_parallel")
    if tokens <= 0:
        return ExpertLoad(0.0, 0.0)
    pis = _inclusion(num_experts, top_k, skew)[::ep]  # GPU 0's experts (all of them when ep == 1)
    return ExpertLoad(float(sum(1.0 - (1.0 - pi) ** tokens for pi in pis)), float(tokens * sum(pis)))


def expert_placement(tp: int, expert_parallel: bool) -> tuple[int, int]:
    """``(ep, slices)`` for a TP group of ``tp`` GPUs: the GPUs its experts are placed over (whole experts
    under expert parallelism, else 1) and how many GPUs share each expert (a ``1/tp`` slice each without
    it, else 1)."""
    return (tp, 1) if expert_parallel else (1, tp)


def dispatch_combine_s(tokens: int, top_k: int, hidden: int, ep: int, latency_s: float,
                       bytes_per_s: float | None) -> float:
    """Seconds of one MoE layer's two all-to-alls (dispatch and combine) over an EP group of ``ep`` GPUs
    whose link moves ``bytes_per_s`` per GPU and direction, each paying ``latency_s``; 0 without EP."""
    if ep <= 1 or tokens <= 0:
        return 0.0
    if not bytes_per_s:
        raise InputError(f"expert parallelism over {ep} GPUs needs their link's bandwidth", field="expert_parallel")
    return 2 * (latency_s + all_to_all_bytes(tokens, top_k, hidden, ep) / bytes_per_s)


def all_to_all_bytes(tokens: int, top_k: int, hidden: int, ep: int, element_bytes: int = 2) -> float:
    """Bytes one GPU sends in one all-to-all (dispatch or combine) of an EP group of ``ep`` GPUs: its
    ``tokens / ep`` share of the tokens, each sent to its ``top_k`` experts, the ``(ep - 1) / ep`` of them
    on other GPUs, one hidden state each."""
    if ep <= 1 or tokens <= 0:
        return 0.0
    return tokens / ep * top_k * hidden * element_bytes * (ep - 1) / ep
