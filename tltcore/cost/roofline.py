"""The analytic cost model: a roofline of a model shape on a GPU.

Each forward pass is split into kernel groups (decoder matmuls, attention, LM head); each group
costs ``max(FLOPs / effective FLOP/s, bytes / effective bytes/s)``, groups add up, plus
tensor-parallel collectives and a fixed per-iteration overhead. Decode batches are padded to the
captured CUDA-graph batch sizes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tltcore.cost.lengths import as_lengths, prefill_lengths, runs
from tltcore.cost.moe import check_routing, dispatch_combine_s, expert_load, expert_placement
from tltcore.cost.protocol import CostModelBase
from tltcore.errors import InputError
from tltcore.hardware import GPUSpec
from tltcore.model_shape import BF16_BYTES, ModelShape
from tltcore.policy.base import SDConfig

_sum = np.add.reduce  # skip ndarray.sum's Python wrapper on hot paths

# ---- CUDA-graph batch padding ---------------------------------------------------------------------
# Engines capture decode CUDA graphs for a fixed list of batch sizes and pad a running batch up to
# the next captured size (vLLM's default capture list is 1, 2, 4 and multiples of 8 up to 512;
# SGLang's is similar). Above the largest size the engine runs eagerly, unpadded.
CUDA_GRAPH_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, *range(16, 513, 8))


def padded_batch(batch_size: int, buckets: Sequence[int] = CUDA_GRAPH_BATCH_SIZES) -> int:
    """The captured CUDA-graph batch size a running batch of ``batch_size`` is padded to."""
    if batch_size <= 0:
        return 0
    i = bisect.bisect_left(buckets, batch_size)
    return buckets[i] if i < len(buckets) else batch_size


# ---- defaults (documented, not fitted unless said so) ---------------------------------------------
DEFAULT_ITERATION_OVERHEAD_S = 3e-4  # scheduler + sampling + graph launch per engine iteration
# SD overheads beyond the roofline's kernels. Per draft step: top-k over the vocab, score updates,
# small-kernel launches; per SD iteration: tree construction and mask, rejection sampling, KV
# compaction, CPU bookkeeping. Fitted with fit_sd_overheads() to the paper's batch-1 table
# (sd_depth_verify_bs1.csv: Qwen2.5-32B, TP 4, taken as H100, contexts of 1024 tokens, accept
# lengths as published); tests/sim/test_cost_model.py refits them. The roofline alone (both 0)
# predicts batch-1 SD speedups of ~5-6x where the paper measures 2.4-3.7x.
DEFAULT_DRAFT_STEP_OVERHEAD_S = 2.085e-4
DEFAULT_SD_OVERHEAD_S = 3.708e-3
DEFAULT_KV_BLOCK_SIZE = 16  # vLLM's default paged-KV block size, in tokens
MAX_WEIGHT_MEMORY_FRACTION = 0.9  # weights must leave room for activations and some KV
LM_HEAD_KERNELS = 2  # final norm + LM head GEMM


@dataclass(frozen=True)
class MoETerm:
    """The routed experts of one forward on one GPU, priced by the roofline: per MoE layer
    ``roof(experts read x seconds per expert, expert-token pairs x seconds per pair)`` for the busiest
    GPU (:func:`tltcore.cost.moe.expert_load`), plus under expert parallelism the dispatch and combine
    all-to-alls. Depends on the forward's rows only, so it is memoised by rows."""

    layers: int  # MoE layers
    num_experts: int
    top_k: int
    ep: int  # GPUs the experts are placed over (1: each GPU holds a 1/tp slice of every expert)
    skew: float
    read_s_per_expert: float  # one expert's weights held by one GPU / bandwidth
    compute_s_per_pair: float  # one token through one expert's share on one GPU / FLOP/s
    hidden: int
    all_to_all_latency_s: float
    all_to_all_bytes_per_s: float | None  # the EP group's link, per GPU and direction
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    def time(self, rows: int, roof: Callable[[float, float], float]) -> float:
        """Seconds of the routed experts of all MoE layers in a forward over ``rows`` tokens."""
        hit = self.memo.get(rows)
        if hit is None:
            load = expert_load(rows, self.num_experts, self.top_k, self.ep, self.skew)
            layer = roof(load.experts * self.read_s_per_expert, load.pairs * self.compute_s_per_pair)
            layer += dispatch_combine_s(rows, self.top_k, self.hidden, self.ep, self.all_to_all_latency_s,
                                        self.all_to_all_bytes_per_s)
            hit = self.memo[rows] = self.layers * layer
        return hit

    def times(self, rows: np.ndarray, roof: Callable[[float, float], float]) -> np.ndarray:
        """:meth:`time` of every entry of ``rows`` (the same floats: one scalar call per distinct count)."""
        sizes, inv = runs(np.asarray(rows, dtype=np.int64))
        return np.array([self.time(r, roof) for r in sizes.tolist()], dtype=np.float64)[inv]

    @classmethod
    def build(cls, shape: ModelShape, gpu: GPUSpec, tp: int, flops: float, bw: float, *, expert_parallel: bool,
              skew: float) -> MoETerm | None:
        """The term of ``shape`` on a TP group of ``tp`` x ``gpu`` (None for a dense model). Under expert
        parallelism the experts are placed whole over the group's ``tp`` GPUs."""
        moe = shape.moe
        if moe is None or shape.moe_layers == 0:
            return None
        check_routing(moe.num_experts, moe.experts_per_token, skew)
        ep, share = expert_placement(tp, expert_parallel)
        expert = shape.routed_expert_params
        return cls(layers=shape.moe_layers, num_experts=moe.num_experts, top_k=moe.experts_per_token, ep=ep,
                   skew=skew, read_s_per_expert=expert * shape.weight_element_bytes / share / bw,
                   compute_s_per_pair=2 * expert / share / flops, hidden=shape.hidden_size,
                   all_to_all_latency_s=gpu.allreduce_latency_s, all_to_all_bytes_per_s=gpu.collective_bytes_per_s(ep))


@dataclass(frozen=True)
class _ForwardCosts:
    """Per-forward constants of one model on one TP group, in seconds (precomputed once)."""

    layers: int
    weight_s: float  # read all decoder weights (per GPU)
    matmul_s_per_token: float  # decoder matmul compute per token (per GPU)
    lm_head_weight_s: float
    lm_head_s_per_token: float
    kv_read_s_per_token: float  # KV bytes of one cached token (per GPU) / bandwidth
    attention_s_per_position: float  # attention FLOPs of one (query, key) pair / FLOP/s
    allreduce_s_per_token: float  # ring all-reduce bandwidth term of one token's hidden state
    logits_gather_s_per_token: float  # all-gather of one token's vocab-parallel logits
    collective_latency_s: float  # latency of one collective (0 when tp == 1)
    launch_s: float  # kernel-latency floor of one forward: layers x kernels per layer x latency
    smoothness: float  # p of the smooth roofline max (m^p + c^p)^(1/p); inf = the sharp max
    allreduces: int = 0  # all-reduces per forward: 2 per layer (attention, MLP), 1 in an MoE layer under EP
    moe: MoETerm | None = None  # the routed experts (None: a dense model)

    @classmethod
    def build(cls, shape: ModelShape, gpu: GPUSpec, tp: int, kernel_latency_s: float = 0.0,
              kernels_per_layer: int = 0, smoothness: float = math.inf, *, expert_parallel: bool = False,
              routing_skew: float = 0.0) -> _ForwardCosts:
        """The constants of ``shape`` on ``tp`` x ``gpu``. Weights every token reads (attention, dense MLPs,
        shared experts, routers) are one roofline term read once per forward; an MoE model's routed experts
        are :class:`MoETerm`, read by the experts its tokens touch."""
        flops, bw = gpu.effective_flops, gpu.effective_bandwidth
        mm_flops = gpu.effective_matmul_flops(shape.weight_dtype)  # weight matmuls; attention stays bf16
        kv_bytes = shape.kv_bytes_per_token_per_gpu(tp)  # KV heads replicated when fewer than tp; MLA whole
        ring = 2 * (tp - 1) / tp
        link = gpu.collective_bytes_per_s(tp)
        if tp > 1 and not link:
            across = tp > gpu.gpus_per_node
            raise InputError(f"tensor parallelism over {tp} GPUs needs "
                             + (f"a scale-out network bandwidth (the group spans nodes of {gpu.gpus_per_node})"
                                if across else "an interconnect bandwidth"),
                             path=f"gpu {gpu.name}",
                             field="inter_node_bytes_per_s" if across else "interconnect_bytes_per_s")
        decoder_bytes = (shape.always_read_params * shape.weight_element_bytes) / tp
        moe = MoETerm.build(shape, gpu, tp, mm_flops, bw, expert_parallel=expert_parallel, skew=routing_skew)
        ep_layers = moe.layers if moe is not None and moe.ep > 1 else 0
        return cls(
            layers=shape.num_hidden_layers,
            weight_s=decoder_bytes / bw,
            matmul_s_per_token=(shape.decoder_matmul_flops_per_token - shape.routed_matmul_flops_per_token)
            / tp / mm_flops,
            lm_head_weight_s=shape.lm_head_params * BF16_BYTES / tp / bw,
            lm_head_s_per_token=shape.lm_head_flops_per_token / tp / flops,
            kv_read_s_per_token=kv_bytes / bw,
            attention_s_per_position=shape.attention_flops_per_position / tp / flops,
            allreduce_s_per_token=ring * shape.hidden_size * BF16_BYTES / link if tp > 1 else 0.0,
            logits_gather_s_per_token=(tp - 1) / tp * shape.vocab_size * BF16_BYTES / link if tp > 1 else 0.0,
            collective_latency_s=gpu.allreduce_latency_s if tp > 1 else 0.0,
            launch_s=(shape.num_hidden_layers * kernels_per_layer + LM_HEAD_KERNELS) * kernel_latency_s,
            smoothness=smoothness,
            allreduces=2 * shape.num_hidden_layers - ep_layers,
            moe=moe,
        )

    def _roof(self, memory: float, compute: float) -> float:
        """max(memory, compute), or its smooth form: real GEMMs slow down gradually as rows grow
        towards the ridge point instead of staying flat and then turning steep."""
        if self.smoothness == math.inf:
            return memory if memory > compute else compute
        p = self.smoothness
        return (memory ** p + compute ** p) ** (1.0 / p)

    def fixed_time(self, rows: int, logit_rows: int) -> float:
        """Everything but attention for a forward over ``rows`` (padded) tokens with
        ``logit_rows`` of them going through the LM head: weight-bound vs compute-bound decoder
        matmuls, the LM head, and 2 all-reduces per layer + 1 logits gather under TP."""
        if rows == 0:
            return 0.0
        matmul = self._roof(self.weight_s, rows * self.matmul_s_per_token)
        if self.moe is not None:
            matmul = matmul + self.moe.time(rows, self._roof)
        comm = self.allreduces * (self.collective_latency_s + rows * self.allreduce_s_per_token)
        if logit_rows == 0:  # hidden states only (drafter prefill)
            return matmul + comm + self.launch_s
        lm_head = self._roof(self.lm_head_weight_s, logit_rows * self.lm_head_s_per_token)
        gather = self.collective_latency_s + logit_rows * self.logits_gather_s_per_token
        return matmul + lm_head + comm + gather + self.launch_s

    def attention_time(self, kv_tokens_read: float, query_positions: float) -> float:
        """One attention group: KV streamed from HBM vs QK^T/PV compute, whichever binds."""
        return max(kv_tokens_read * self.kv_read_s_per_token, query_positions * self.attention_s_per_position)

    def forward_times(self, rows: np.ndarray, logit_rows: np.ndarray | None, kv: np.ndarray,
                      pos: np.ndarray) -> np.ndarray:
        """``fixed_time(r, l) + attention_time(k, q)`` of many forwards (rows > 0) at once, element-wise
        (``logit_rows`` None: ``fixed_time(r, 0)``, hidden states only). The sharp roofline's is the same
        IEEE operations in the same order (``a if a > b else b`` and ``max`` as ``numpy.where``; no NaNs or
        signed zeros arise); the smooth one calls the scalar forms per forward."""
        if self.smoothness != math.inf:
            return self._forward_times_each(rows, logit_rows, kv, pos)
        compute = rows * self.matmul_s_per_token
        matmul = np.where(self.weight_s > compute, self.weight_s, compute)  # _roof: memory if memory > compute
        if self.moe is not None:
            matmul = matmul + self.moe.times(rows, self._roof)
        comm = self.allreduces * (self.collective_latency_s + rows * self.allreduce_s_per_token)
        if logit_rows is None:
            fixed = matmul + comm + self.launch_s
        else:
            head = logit_rows * self.lm_head_s_per_token
            lm_head = np.where(self.lm_head_weight_s > head, self.lm_head_weight_s, head)
            gather = self.collective_latency_s + logit_rows * self.logits_gather_s_per_token
            fixed = matmul + lm_head + comm + gather + self.launch_s
        a, b = kv * self.kv_read_s_per_token, pos * self.attention_s_per_position
        return fixed + np.where(b > a, b, a)  # max(a, b): b only when strictly larger

    def _forward_times_each(self, rows: np.ndarray, logit_rows: np.ndarray | None, kv: np.ndarray,
                            pos: np.ndarray) -> np.ndarray:
        """:meth:`forward_times` as one scalar call per forward: the definition it is pinned to."""
        logits = [0] * len(rows) if logit_rows is None else logit_rows.tolist()
        return np.array([self.fixed_time(r, n) + self.attention_time(k, q) for r, n, k, q
                         in zip(rows.tolist(), logits, kv.tolist(), pos.tolist(), strict=True)], dtype=np.float64)

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A forward that prices its fixed part its own way must give its batched form too (at least
        :meth:`_forward_times_each`), or :meth:`forward_times` would price the parent's formula; and
        attention's formula is restated by the roofline's batched SD and decode forms, so it is not
        overridden at all (a different attention is a different cost model)."""
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "attention_time" in own or "_roof" in own:
            raise TypeError(f"{cls.__name__}: the roofline's batched forms inline attention_time and _roof; "
                            "write a new cost model instead of overriding them")
        if "fixed_time" in own and "forward_times" not in own:
            raise TypeError(f"{cls.__name__} overrides fixed_time: define forward_times as well "
                            "(_forward_times_each calls the scalar forms per forward)")


#: The roofline's scalar formulas, each restated by a batched form of :class:`RooflineCostModel`. A
#: subclass overriding one must say how its batched forms relate (:meth:`RooflineCostModel.__init_subclass__`).
_ROOFLINE_FORMULAS = frozenset({
    "padded", "_sums", "_sd_constants", "_sd_at", "_sd_many_at", "_sd_many_constants", "_shape_set", "_decode_at",
    "_draft_attention", "_block_attention", "_drafting", "_verify", "_prefill",
    "_paged_span_sum", "_decode_step", "decode_time", "decode_span_time", "sd_time", "verify_time",
    "draft_step_time", "prefill_time", "drafter_prefill_time"})


@dataclass(frozen=True)
class RooflineCostModel(CostModelBase):
    """Analytic iteration costs of ``model`` on a tensor-parallel group of ``tp`` x ``gpu``.

    Decode of ``B`` requests: decoder matmuls over the CUDA-graph-padded batch (weights read once,
    split over tp), attention reading each request's own KV (rounded up to ``kv_block_size`` pages:
    a paged cache streams whole blocks), the LM head, TP collectives, and ``iteration_overhead_s``.
    An SD iteration adds ``depth`` drafter steps (``drafter``: by default the target's one-layer
    EAGLE drafter) over ``topk`` tokens per request, and one target verify forward over
    ``verify_tokens + 1`` tokens per request. A parallel drafter (``parallel_draft``: a block drafter,
    DFlash/DSpark, :mod:`tltcore.drafter.kinds`) drafts instead in **one** forward over ``depth + 1``
    positions per request (the anchor token and ``depth`` masks), whose logits give every position's
    candidates at once, with one draft-step overhead.

    Each formula is written once, in scalar form, with its batched form beside it (the
    :class:`~tltcore.cost.protocol.PagedKVTimes` this model is): the same IEEE operations on the same
    operands in the same order, element-wise, so every batched time is the scalar's to the last bit
    (``tests/sim/test_speed_span_cost.py`` pins each pair).
    """

    model: ModelShape
    gpu: GPUSpec
    tp: int = 1
    drafter: ModelShape | None = None
    iteration_overhead_s: float = DEFAULT_ITERATION_OVERHEAD_S
    draft_step_overhead_s: float = DEFAULT_DRAFT_STEP_OVERHEAD_S
    sd_overhead_s: float = DEFAULT_SD_OVERHEAD_S
    kv_block_size: int = DEFAULT_KV_BLOCK_SIZE
    graph_batch_sizes: tuple[int, ...] = CUDA_GRAPH_BATCH_SIZES
    kernel_latency_s: float = 0.0
    kernels_per_layer: int = 0
    smoothness: float = math.inf
    expert_parallel: bool = False
    routing_skew: float = 0.0
    parallel_draft: bool = False
    _target: _ForwardCosts = field(init=False, repr=False, compare=False)
    _draft: _ForwardCosts = field(init=False, repr=False, compare=False)
    _sd_cache: dict = field(init=False, repr=False, compare=False)
    _memo: dict = field(init=False, repr=False, compare=False)  # the batched forms' constants, by kind

    def __post_init__(self) -> None:
        if not self.gpu.analytic:
            raise InputError("the roofline needs analytic peaks; this GPU is known only through measured "
                             "tables (use TableCostModel)", path=f"gpu {self.gpu.name}", field="gpu")
        if self.tp < 1 or self.model.num_attention_heads % self.tp:
            raise InputError(f"tp={self.tp} must be >= 1 and divide num_attention_heads "
                             f"({self.model.num_attention_heads}) of {self.model.name}", field="tp")
        if self.kv_block_size < 1:
            raise InputError(f"must be >= 1, got {self.kv_block_size}", field="kv_block_size")
        for name in ("iteration_overhead_s", "draft_step_overhead_s", "sd_overhead_s"):
            if getattr(self, name) < 0:
                raise InputError("must be non-negative", field=name)
        per_gpu = self.model.weight_bytes / self.tp
        if per_gpu > MAX_WEIGHT_MEMORY_FRACTION * self.gpu.memory_bytes:
            raise InputError(
                f"{self.model.name} needs {per_gpu / 1e9:.1f} GB of weights per GPU at tp={self.tp}, "
                f"more than {MAX_WEIGHT_MEMORY_FRACTION:.0%} of {self.gpu.name}'s "
                f"{self.gpu.memory_bytes / 1e9:.0f} GB; raise tp", field="tp")
        drafter = self.drafter if self.drafter is not None else self.model.drafter()
        object.__setattr__(self, "drafter", drafter)
        floor = (self.kernel_latency_s, self.kernels_per_layer, self.smoothness)
        moe = {"expert_parallel": self.expert_parallel, "routing_skew": self.routing_skew}
        object.__setattr__(self, "_target", _ForwardCosts.build(self.model, self.gpu, self.tp, *floor, **moe))
        object.__setattr__(self, "_draft", _ForwardCosts.build(drafter, self.gpu, self.tp, *floor, **moe))
        object.__setattr__(self, "_sd_cache", {})
        object.__setattr__(self, "_memo", {"step": {}, "verify": {}, "shape": {}, "rows": {}, "sets": {},
                                           "last_set": None, "fixed": {}})

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A subclass that overrides a scalar formula would leave the batched forms pricing the
        parent's: it must define ``paged_kv_times`` (None: the simulator prices it call by call),
        ``sd_times`` (``CostModelBase.sd_times``: its own ``sd_time`` per shape) and ``iteration_times``
        (``CostModelBase.iteration_times``: its own ``sd_times`` and ``decode_time``) itself, so the choice
        is written down, not inherited by accident."""
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        changed = sorted(_ROOFLINE_FORMULAS & own.keys())
        if changed and not {"paged_kv_times", "sd_times", "iteration_times"} <= own.keys():
            raise TypeError(f"{cls.__name__} overrides {', '.join(changed)}: define paged_kv_times, sd_times and "
                            "iteration_times too (return None / CostModelBase.sd_times / "
                            "CostModelBase.iteration_times to price call by call)")

    # ---- helpers ------------------------------------------------------------------------------
    def padded(self, batch_size: int) -> int:
        """CUDA-graph batch size for a decode / SD batch of ``batch_size``."""
        return padded_batch(batch_size, self.graph_batch_sizes)

    def _paged(self, lengths: np.ndarray) -> np.ndarray:
        b = self.kv_block_size
        return (lengths + (b - 1)) // b * b

    def _sums(self, ctx: np.ndarray) -> tuple[int, int]:
        """(sum of paged lengths, sum of lengths): the only per-request reductions an SD or decode
        iteration needs. Three whole-array ops instead of five: sum(paged) = b * sum(ceil(x / b))."""
        b = self.kv_block_size
        return b * int(_sum(np.floor_divide(ctx + (b - 1), b))), int(_sum(ctx))

    def _row_sums(self, ctx_rows: np.ndarray) -> np.ndarray:
        """:meth:`_sums`' paged sum of every row of ``ctx_rows``, exact integers (``x // b`` as a shift
        where the block size is a power of two)."""
        bs = self.kv_block_size
        up = ctx_rows + (bs - 1)
        if bs & (bs - 1) == 0:
            return np.add.reduce(np.right_shift(up, bs.bit_length() - 1, out=up), axis=1) * bs
        return np.add.reduce(up // bs, axis=1) * bs

    def _sd_constants(self, b: int, depth: int, topk: int, verify_tokens: int) -> tuple[float, ...]:
        """Everything of an SD iteration that depends only on the batch size and the shape (the
        padded matmul/collective terms and the attention coefficients), memoised: the simulator
        asks for the same few (batch, shape) pairs thousands of times. A parallel drafter's draft is
        one forward over ``depth + 1`` rows per request and one draft-step overhead; a sequential
        drafter's ``depth`` forwards over ``topk`` rows and ``depth`` overheads."""
        key = (b, depth, topk, verify_tokens)
        hit = self._sd_cache.get(key)
        if hit is None:
            d, t = self._draft, self._target
            v_rows = self.padded(b) * (verify_tokens + 1)
            if self.parallel_draft:
                rows = self.padded(b) * (depth + 1)
                hit = (d.fixed_time(rows, rows), self.draft_step_overhead_s, t.fixed_time(v_rows, v_rows))
            else:
                rows = self.padded(b) * topk
                hit = (depth * d.fixed_time(rows, rows), depth * self.draft_step_overhead_s,
                       t.fixed_time(v_rows, v_rows))
            self._sd_cache[key] = hit
        return hit

    # ---- CostModel ----------------------------------------------------------------------------
    def paged_kv_times(self) -> RooflineCostModel:
        """This model: its times read the contexts only through paged-KV sums (class docstring)."""
        return self

    def decode_time(self, context_lens: np.ndarray) -> float:
        ctx = as_lengths(context_lens, "context_lens")
        b = ctx.size
        if b == 0:
            return 0.0
        return self._decode_at(b, *self._sums(ctx))

    def _decode_at(self, b: int, paged_sum: int, ctx_sum: int) -> float:
        """One plain iteration of ``b`` requests from their (paged, plain) context sums."""
        t = self._target
        rows = self.padded(b)
        kv_read = paged_sum + b  # cached pages + the new token's K/V
        positions = ctx_sum + b  # each new token attends to its context and itself
        return t.fixed_time(rows, rows) + t.attention_time(kv_read, positions) + self.iteration_overhead_s

    # ---- plain spans ----------------------------------------------------------------------------
    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        ctx = as_lengths(context_lens, "context_lens")
        b, n = ctx.size, int(n_iters)
        if b == 0 or n <= 0:
            return 0.0
        if self.memory_bound_decode:
            return self.decode_span_time_of(ctx, n)
        t = self._target
        j = np.arange(n, dtype=np.int64)
        kv_read = self._paged_sum_over_steps(ctx, j) + b
        positions = int(ctx.sum()) + b + b * j
        attention = float(np.maximum(kv_read * t.kv_read_s_per_token,
                                     positions * t.attention_s_per_position).sum())
        return n * self._decode_step(b) + attention

    @property
    def memory_bound_decode(self) -> bool:
        """Paged KV read >= attention positions for every request at every plain step (the KV read per
        token outweighs the attention per position): plain spans then have a closed form."""
        return self._target.attention_s_per_position <= self._target.kv_read_s_per_token

    def _decode_step(self, b: int) -> float:
        """A plain iteration's fixed time at batch ``b`` (padded matmuls, collectives, overhead), memoised."""
        steps = self._memo["step"]
        step = steps.get(b)
        if step is None:
            rows = self.padded(b)
            step = steps[b] = self._target.fixed_time(rows, rows) + self.iteration_overhead_s
        return step

    def _residue_tables(self) -> np.ndarray:
        """``tables[m][r] = sum_{j < m} (-(r + j)) mod kv_block_size``: the paging padding of ``m`` steps
        from a context of residue ``r`` (a whole block of steps pads ``bs * (bs - 1) / 2`` whatever the
        residue), built once with numpy."""
        tables = self._memo.get("tables")
        if tables is None:
            bs = self.kv_block_size
            r = np.arange(bs, dtype=np.int64)
            tables = np.zeros((bs, bs), dtype=np.int64)
            np.cumsum((-(r[None, :] + r[:-1, None])) % bs, axis=0, out=tables[1:])  # row m: sum over j < m
            self._memo["tables"] = tables
        return tables

    def _paged_span_sum(self, ctx: np.ndarray, n: int) -> int:
        """sum_i sum_{j<n} paged(ctx_i + j), exact in integers. paged(x) = x + (-x mod b): the x part
        is closed form, and the padding part depends on ctx_i only through ctx_i mod b (one gather
        from :meth:`_residue_tables`)."""
        bs = self.kv_block_size
        size = ctx.size
        pad = (n // bs) * (bs * (bs - 1) // 2) * size
        if n % bs:
            pad += int(_sum(self._residue_tables()[n % bs][ctx % bs]))
        return n * int(_sum(ctx)) + size * (n * (n - 1) // 2) + pad

    def decode_span_time_of(self, ctx: np.ndarray, n: int) -> float:
        """:meth:`decode_span_time` of ``n >= 1`` iterations of a non-empty, validated batch, memory-bound
        (:attr:`memory_bound_decode`): the paged KV read summed in closed form, then two float operations."""
        size = ctx.size
        paged = self._paged_span_sum(ctx, n)
        return n * self._decode_step(size) + (paged + n * size) * self._target.kv_read_s_per_token

    def decode_spans_time(self, n: np.ndarray, b: np.ndarray, ctx_sum: np.ndarray, hist: np.ndarray,
                          start: np.ndarray) -> np.ndarray:
        """:meth:`decode_span_time_of` of many plain spans at once (memory-bound). Span ``j`` runs ``n[j]``
        iterations over ``b[j]`` requests whose contexts sum to ``ctx_sum[j]``; the batch's contexts are
        ``c + start[j]`` for the ``c`` counted by residue in ``hist[j]`` (``hist[j, r]``: how many have
        ``c % kv_block_size == r``). The padding sum is the same exact integer (a residue's table entry
        times its count), then the same two float operations per span, element-wise."""
        bs = self.kv_block_size
        tables = self._residue_tables()
        res = np.arange(bs, dtype=np.int64)
        entry = tables[(n % bs)[:, None], (res[None, :] + start[:, None]) % bs]  # tables[n % bs][(r + start) % bs]
        pad = (n // bs) * (bs * (bs - 1) // 2) * b + np.add.reduce(entry * hist, axis=1)
        paged = n * ctx_sum + b * (n * (n - 1) // 2) + pad
        return n * self._decode_steps(b) + (paged + n * b) * self._target.kv_read_s_per_token

    def _decode_steps(self, b: np.ndarray) -> np.ndarray:
        """:meth:`_decode_step` of every batch size in ``b``, from a table by size (NaN: not asked yet)."""
        table = self._memo.get("steps", np.full(0, np.nan))
        top = int(b.max())
        if top >= len(table):
            table = np.concatenate([table, np.full(top + 1 - len(table) + 64, np.nan)])
            self._memo["steps"] = table
        step = table[b]
        missing = np.isnan(step)
        if missing.any():
            for size in np.unique(b[missing]).tolist():
                table[size] = self._decode_step(size)
            step = table[b]
        return step

    def _paged_sum_over_steps(self, ctx: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """sum_i paged(ctx_i + j) for every j in ``steps``: the padding term is periodic in j
        with period ``kv_block_size``, so one small residue histogram gives all of them."""
        b = self.kv_block_size
        hist = np.bincount(ctx % b, minlength=b)
        r = np.arange(b)
        pad = ((-(r[:, None] + r[None, :])) % b * hist[:, None]).sum(axis=0)  # pad[s] for j % b == s
        return int(ctx.sum()) + ctx.size * steps + pad[steps % b]

    # ---- SD iterations --------------------------------------------------------------------------
    def verify_time(self, context_lens: np.ndarray, verify_tokens: int) -> float:
        """One target forward over ``verify_tokens + 1`` tree tokens per request (no overheads)."""
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0:
            return 0.0
        return self._verify(ctx.size, *self._sums(ctx), verify_tokens)

    def forward_attention_time(self, context_lens: np.ndarray, tokens: int = 1) -> float:
        """The attention term of one target forward of ``tokens`` new tokens per request (no kernel
        floor, no matmuls): what :meth:`decode_time` (``tokens`` 1) and :meth:`verify_time` add to the
        fixed time. For comparing measured attention alone (``tlt gpu campaign``)."""
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0:
            return 0.0
        paged_sum, ctx_sum = self._sums(ctx)
        b = ctx.size
        return self._target.attention_time(paged_sum + b * tokens, tokens * (ctx_sum + b * tokens))

    def draft_step_time(self, context_lens: np.ndarray, topk: int, step: int = 0) -> float:
        """One drafter forward over ``topk`` candidate tokens per request at draft depth ``step``
        (its own KV over the context plus the draft so far), without overheads: a sequential
        drafter's step (a parallel drafter's one pass is inside :meth:`sd_time`)."""
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0:
            return 0.0
        return self._drafting(ctx.size, *self._sums(ctx), topk, step, step + 1)

    def _verify(self, b: int, paged_sum: int, ctx_sum: int, verify_tokens: int) -> float:
        tokens = verify_tokens + 1
        rows = self.padded(b) * tokens
        kv_read = paged_sum + b * tokens
        positions = tokens * (ctx_sum + b * tokens)  # tree tokens see the context and the tree
        return self._target.fixed_time(rows, rows) + self._target.attention_time(kv_read, positions)

    def verify_times_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray,
                               verify_tokens: int) -> np.ndarray:
        """:meth:`_verify` of many iterations at once, each given by its paged KV sum, context sum and
        batch size (int64 arrays): the fixed part gathered per batch size, then ``+ max(kv, att)``."""
        t = self._target
        tokens = verify_tokens + 1
        sizes, inv = runs(batch)
        fixed = self._memo["verify"]
        vals = []
        for b in sizes.tolist():
            f = fixed.get((b, tokens))
            if f is None:
                rows = self.padded(b) * tokens
                f = fixed[(b, tokens)] = t.fixed_time(rows, rows)
            vals.append(f)
        kv = (paged + batch * tokens) * t.kv_read_s_per_token
        att = (tokens * (ctx_sum + batch * tokens)) * t.attention_s_per_position
        return np.array(vals, dtype=np.float64)[inv] + np.where(att > kv, att, kv)  # fixed + max(kv, att)

    def _drafting(self, b: int, paged_sum: int, ctx_sum: int, topk: int, first: int, stop: int) -> float:
        """Draft steps ``first..stop-1``; step s reads the context plus s+1 draft levels of KV."""
        d = self._draft
        rows = self.padded(b) * topk
        return self._draft_attention((stop - first) * d.fixed_time(rows, rows), b, paged_sum, ctx_sum, topk,
                                     first, stop)

    def _draft_attention(self, total: float, b: int, paged_sum: int, ctx_sum: int, topk: int, first: int,
                         stop: int) -> float:
        """``total`` plus the attention of draft steps ``first..stop-1``, added in step order.

        Plain Python on purpose: the loop is at most ``depth`` (~8) scalar maxima, where numpy's
        per-call overhead would dominate, and adding in the same order keeps every sum bit-identical
        to ``_ForwardCosts.attention_time`` called per step."""
        d = self._draft
        kv_s, att_s = d.kv_read_s_per_token, d.attention_s_per_position
        for step in range(first, stop):
            drafted = b * (step + 1)
            kv = (paged_sum + topk * drafted) * kv_s
            att = (topk * (ctx_sum + drafted)) * att_s
            total += att if att > kv else kv  # = max(kv, att) without the builtin call
        return total

    def _block_attention(self, total: float, b: int, paged_sum: int, ctx_sum: int, depth: int) -> float:
        """``total`` plus the attention of a parallel drafter's one pass: ``depth + 1`` block positions
        per request, each reading the drafter's KV over its context and the whole block (positions
        inside a block see each other)."""
        d = self._draft
        n = depth + 1
        kv = (paged_sum + b * n) * d.kv_read_s_per_token
        att = (n * (ctx_sum + b * n)) * d.attention_s_per_position
        return total + (att if att > kv else kv)

    def sd_time(self, context_lens: np.ndarray, config: SDConfig) -> float:
        """One SD iteration (``decode_time`` when ``config`` drafts nothing). Every EAGLE-2 tree
        shape is a valid ``SDConfig``, so this is the only entry point."""
        if not config.enabled:
            return self.decode_time(context_lens)
        ctx = as_lengths(context_lens, "context_lens")
        b = ctx.size
        if b == 0:
            return 0.0
        return self._sd_at(b, *self._sums(ctx), config)

    def sd_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> list[float]:
        """:meth:`sd_time` of every config, each the same float as its own call, the contexts checked
        and reduced once (cost-aware prices a dozen shapes per decision)."""
        ctx = as_lengths(context_lens, "context_lens")
        b = ctx.size
        if b == 0:
            return [0.0 for _ in configs]
        paged_sum, ctx_sum = self._sums(ctx)
        live, per_b = self._shape_set(configs)
        if len(live) == len(configs):
            return self._sd_many_at(b, paged_sum, ctx_sum, live, per_b)
        priced = iter(self._sd_many_at(b, paged_sum, ctx_sum, live, per_b) if live else ())
        plain = self._decode_at(b, paged_sum, ctx_sum)
        return [next(priced) if c.enabled else plain for c in configs]

    def iteration_times(self, context_lens: np.ndarray, configs: Sequence[SDConfig]) -> tuple[list[float], float]:
        """(:meth:`sd_times`, :meth:`decode_time`) from one check and one reduction of the contexts (the
        same floats: both read them only through :meth:`_sums`)."""
        ctx = as_lengths(context_lens, "context_lens")
        b = ctx.size
        if b == 0:
            return [0.0 for _ in configs], 0.0
        paged_sum, ctx_sum = self._sums(ctx)
        plain = self._decode_at(b, paged_sum, ctx_sum)
        live, per_b = self._shape_set(configs)
        if len(live) == len(configs):
            return self._sd_many_at(b, paged_sum, ctx_sum, live, per_b), plain
        priced = iter(self._sd_many_at(b, paged_sum, ctx_sum, live, per_b) if live else ())
        return [next(priced) if c.enabled else plain for c in configs], plain

    def _shape_set(self, configs: Sequence[SDConfig]) -> tuple[tuple[SDConfig, ...], dict[int, tuple]]:
        """(the configs that draft, :meth:`_sd_many_at`'s constants by batch size for them), memoised by
        the configs; the tuple asked for last is recognised by identity (a policy asks with the same
        dozen at every decision, and hashing a dozen shapes was a tenth of the pricing)."""
        last = self._memo["last_set"]
        if last is not None and last[0] is configs:
            return last[1], last[2]
        key = configs if isinstance(configs, tuple) else tuple(configs)
        sets = self._memo["sets"]
        entry = sets.get(key)
        if entry is None:
            entry = sets[key] = (tuple(c for c in key if c.enabled), {})
        if type(configs) is tuple:  # immutable: identity stands for contents
            self._memo["last_set"] = (configs, *entry)
        return entry

    def _sd_many_at(self, b: int, paged_sum: int, ctx_sum: int, configs: tuple[SDConfig, ...],
                    per_b: dict[int, tuple]) -> list[float]:
        """:meth:`_sd_at` of every (enabled) config at one batch, in one numpy pass: cost-aware prices a
        dozen shapes per decision, and a Python loop per shape and draft step cost ~15 us a shape.

        Each config is a column; its rows are :meth:`_sd_at`'s terms in its order of addition: the draft's
        fixed time, each draft pass's attention (a sequential drafter's ``depth`` steps, a parallel one's
        single pass), the draft overhead, the verify forward (its fixed time plus its attention), the SD
        and the iteration overheads; one ``numpy.add.accumulate`` down the rows is that sequential sum,
        element-wise. Every row is a constant (memoised per batch size) plus ``max(kv, att)``, where the
        constant rows' coefficients are zero and a shallower config's rows past its depth are zero
        altogether: adding ``0.0`` leaves a (non-negative) float as it is, so each row is the very term
        :meth:`_sd_at` adds. The integer KV reads and attention positions are exact int64 before the one
        float product, and ``np.maximum`` of two non-NaN, non-negative floats is ``att if att > kv else
        kv``. So every float is :meth:`_sd_at`'s to the last bit (``tests/sim/test_speed_span_cost.py``
        pins it)."""
        c = per_b.get(b)
        if c is None:
            c = per_b[b] = self._sd_many_constants(b, configs)
        constant, kv_add, per_ctx, att_add, kv_s, att_s = c
        terms = np.maximum((paged_sum + kv_add) * kv_s, (per_ctx * ctx_sum + att_add) * att_s)
        terms += constant
        return np.add.accumulate(terms, axis=0)[-1].tolist()

    def _sd_many_constants(self, b: int, configs: tuple[SDConfig, ...]) -> tuple[np.ndarray, ...]:
        """:meth:`_sd_many_at`'s arrays at batch ``b``, one row per term it adds (``passes`` draft rows,
        the most of any config) and one column per config: the constant part of each term (the draft's
        fixed time, then zeros for the draft passes, the draft overhead, the verify forward's fixed time,
        the SD and iteration overheads) and the integer KV read and attention position terms (``kv =
        paged + kv_add``, ``att = per_ctx * ctx_sum + att_add``) with the seconds per unit of each, from
        :meth:`_sd_shape` (zero past a config's passes and on the constant rows)."""
        shaped = [self._sd_shape(c) for c in configs]
        passes = max(s[0] for s in shaped)
        n = len(configs)
        rows = passes + 5
        verify = passes + 2  # rows: fixed, draft passes, draft overhead, verify, SD overhead, iteration overhead
        constant = np.zeros((rows, n))
        constant[verify + 1] = self.sd_overhead_s
        constant[verify + 2] = self.iteration_overhead_s
        kv_add = np.zeros((rows, n), dtype=np.int64)
        per_ctx = np.zeros((rows, n), dtype=np.int64)
        att_add = np.zeros((rows, n), dtype=np.int64)
        kv_s = np.zeros((rows, n))
        att_s = np.zeros((rows, n))
        for j, (config, (own, kv_per_b, ctx_per, att_per_b, kv_sec, att_sec)) in enumerate(
                zip(configs, shaped, strict=True)):
            draft_fixed, draft_overhead, verify_fixed = self._sd_constants(b, config.depth, config.topk,
                                                                           config.verify_tokens)
            constant[0, j], constant[passes + 1, j], constant[verify, j] = draft_fixed, draft_overhead, verify_fixed
            at = [*range(1, own + 1), verify]  # its draft passes, then the verify forward
            kv_add[at, j] = kv_per_b[:, 0] * b
            per_ctx[at, j] = ctx_per[:, 0]
            att_add[at, j] = att_per_b[:, 0] * b
            kv_s[at, j] = kv_sec[:, 0]
            att_s[at, j] = att_sec[:, 0]
        return constant, kv_add, per_ctx, att_add, kv_s, att_s

    def _sd_at(self, b: int, paged_sum: int, ctx_sum: int, config: SDConfig) -> float:
        """One SD iteration of ``b`` requests from their (paged, plain) context sums."""
        depth, topk, verify_tokens = config.depth, config.topk, config.verify_tokens
        draft_fixed, draft_overhead, verify_fixed = self._sd_constants(b, depth, topk, verify_tokens)
        if self.parallel_draft:
            drafting = self._block_attention(draft_fixed, b, paged_sum, ctx_sum, depth)
        else:
            drafting = self._draft_attention(draft_fixed, b, paged_sum, ctx_sum, topk, 0, depth)
        tokens = verify_tokens + 1
        verify = verify_fixed + self._target.attention_time(paged_sum + b * tokens,
                                                             tokens * (ctx_sum + b * tokens))
        return drafting + draft_overhead + verify + self.sd_overhead_s + self.iteration_overhead_s

    def _sd_shape(self, config: SDConfig) -> tuple:
        """What :meth:`_sd_at`'s batched forms need of a shape, per batch-size unit (the integer terms are
        linear in the batch): ``passes`` draft rows (a sequential drafter's ``depth`` steps, a parallel
        drafter's one pass), then the verify forward's row. KV read: ``(paged + kv_per_b * b) * kv_s``;
        attention: ``(per_ctx * ctx_sum + att_per_b * b) * att_s``, i.e. ``topk * (ctx_sum + b * (step + 1))``
        per step (or ``n * (ctx_sum + b * n)`` for a parallel pass over ``n = depth + 1`` positions) and
        ``tokens * (ctx_sum + b * tokens)`` as exact integers before the one float product, as
        :meth:`_draft_attention`, :meth:`_block_attention` and :meth:`_sd_at` form them."""
        shapes = self._memo["shape"]
        hit = shapes.get(config)
        if hit is None:
            depth, topk, tokens = config.depth, config.topk, config.verify_tokens + 1
            d, t = self._draft, self._target
            if self.parallel_draft:
                n = depth + 1
                passes = 1
                kv_draft = np.array([n], dtype=np.int64)
                ctx_draft = np.array([n], dtype=np.int64)
                att_draft = np.array([n * n], dtype=np.int64)
            else:
                passes = depth
                steps = np.arange(1, depth + 1, dtype=np.int64)
                kv_draft = topk * steps
                ctx_draft = np.full(depth, topk, dtype=np.int64)
                att_draft = topk * steps
            kv_per_b = np.append(kv_draft, tokens)[:, None]
            per_ctx = np.append(ctx_draft, tokens)[:, None]
            att_per_b = np.append(att_draft, tokens * tokens)[:, None]
            kv_s = np.append(np.full(passes, d.kv_read_s_per_token), t.kv_read_s_per_token)[:, None]
            att_s = np.append(np.full(passes, d.attention_s_per_position), t.attention_s_per_position)[:, None]
            hit = shapes[config] = (passes, kv_per_b, per_ctx, att_per_b, kv_s, att_s)
        return hit

    def _sd_total(self, terms: np.ndarray, passes: int, draft_overhead: np.ndarray | float) -> np.ndarray:
        """:meth:`_sd_at`'s sum over ``terms`` (row 0: the draft's fixed time; rows 1..passes: each draft
        pass's attention; row passes + 1: the verify forward's fixed time plus attention): the draft
        passes added in order (``add.accumulate`` down the rows is that sequential sum, element-wise),
        then the overheads in :meth:`_sd_at`'s order."""
        out = np.add.accumulate(terms[:passes + 1], axis=0)[passes]
        out += draft_overhead
        out += terms[passes + 1]
        out += self.sd_overhead_s
        out += self.iteration_overhead_s
        return out

    def sd_rows_times(self, ctx_rows: np.ndarray, config: SDConfig, ctx_sum: np.ndarray | None = None
                      ) -> list[float]:
        """:meth:`sd_time` of every row of ``ctx_rows`` (iterations x requests, int64, at least one
        request, ``config`` enabled) in one vectorised pass: the simulator's SD blocks know their rows
        before pricing any, and a call per row cost ~10 us of Python plumbing (``ctx_sum``: the row
        sums when the caller has them)."""
        k, b = ctx_rows.shape
        key = (b, config)
        known = self._memo["rows"]
        c = known.get(key)
        if c is None:
            passes, kv_per_b, per_ctx, att_per_b, kv_s, att_s = self._sd_shape(config)
            draft_fixed, draft_overhead, verify_fixed = self._sd_constants(b, config.depth, config.topk,
                                                                           config.verify_tokens)
            c = known[key] = (passes, draft_fixed, draft_overhead, verify_fixed, kv_per_b * b, per_ctx,
                                         att_per_b * b, kv_s, att_s)
        passes, draft_fixed, draft_overhead, verify_fixed, kv_add, per_ctx, att_add, kv_s, att_s = c
        paged = self._row_sums(ctx_rows)
        if ctx_sum is None:
            ctx_sum = np.add.reduce(ctx_rows, axis=1)
        terms = np.empty((passes + 2, k))
        terms[0] = draft_fixed
        # max(kv, att) per draft pass and for the verify forward (`att if att > kv else kv`: no NaNs,
        # no signed zeros here)
        np.maximum((paged + kv_add) * kv_s, (per_ctx * ctx_sum + att_add) * att_s, out=terms[1:])
        terms[passes + 1] += verify_fixed  # the verify forward: fixed + attention_time
        return self._sd_total(terms, passes, draft_overhead).tolist()

    def decode_times_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray) -> list[float]:
        """:meth:`decode_time` of iterations given by their paged KV sum, context sum and batch size (int64
        arrays, one entry per iteration, batch >= 1): the plain counterpart of :meth:`sd_times_from_sums`
        for callers that already hold the sums (the upper bound prices a few hundred grid cells per
        worker, and summing each cell's contexts again per call was a third of its time)."""
        t = self._target
        fixed_of = self._memo["fixed"]
        fixed = []
        for b in batch.tolist():
            f = fixed_of.get(b)
            if f is None:
                rows = self.padded(b)
                f = fixed_of[b] = t.fixed_time(rows, rows)
            fixed.append(f)
        # _decode_at's (fixed + attention) + overhead, element-wise; attention's max(kv, att) as numpy's maximum
        # (no NaNs or signed zeros here)
        out = np.maximum((paged + batch) * t.kv_read_s_per_token, (ctx_sum + batch) * t.attention_s_per_position)
        out += fixed
        out += self.iteration_overhead_s
        return out.tolist()

    def sd_many_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray,
                          configs: tuple[SDConfig, ...]) -> np.ndarray:
        """:meth:`_sd_at` of every config (all drafting) at iterations given by their paged KV sum, context
        sum and batch size (int64 arrays, one entry per iteration): ``(iterations, configs)``. Each row is
        :meth:`_sd_many_at` of its batch (its constants, memoised per batch size, gathered per row; the
        same element-wise operations and the same sequential sum down the terms), so every float is
        :meth:`_sd_at`'s: a policy that prices a dozen shapes at many iterations pays one pass, not a
        call per iteration or per shape."""
        live, per_b = self._shape_set(configs)
        sizes, inv = runs(batch)
        consts = []
        for b in sizes.tolist():
            c = per_b.get(b)
            if c is None:
                c = per_b[b] = self._sd_many_constants(b, live)
            consts.append(c)
        _, _, per_ctx, _, kv_s, att_s = consts[0]  # the same at every batch size
        constant, kv_add, att_add = (np.stack([c[k] for c in consts])[inv] for k in (0, 1, 3))
        terms = np.maximum((paged[:, None, None] + kv_add) * kv_s,
                           (per_ctx * ctx_sum[:, None, None] + att_add) * att_s)
        terms += constant
        return np.add.accumulate(terms, axis=1)[:, -1]

    def sd_times_from_sums(self, paged: np.ndarray, ctx_sum: np.ndarray, batch: np.ndarray,
                           config: SDConfig) -> np.ndarray:
        """:meth:`_sd_at` of iterations whose batches differ, each given by its paged KV sum
        (``kv_block_size * sum(ceil(ctx / kv_block_size))``), its context sum and its batch size (int64
        arrays, one entry per iteration): :meth:`sd_rows_times` with the per-batch constants gathered
        per row."""
        passes, kv_per_b, per_ctx, att_per_b, kv_s, att_s = self._sd_shape(config)
        sizes, inv = runs(batch)
        consts = [self._sd_constants(b, config.depth, config.topk, config.verify_tokens) for b in sizes.tolist()]
        draft_fixed, draft_overhead, verify_fixed = (np.array(x, dtype=np.float64)[inv]
                                                     for x in zip(*consts, strict=True))
        terms = np.empty((passes + 2, len(paged)))
        terms[0] = draft_fixed
        np.maximum((paged + kv_per_b * batch) * kv_s, (per_ctx * ctx_sum + att_per_b * batch) * att_s, out=terms[1:])
        terms[passes + 1] = verify_fixed + terms[passes + 1]
        return self._sd_total(terms, passes, draft_overhead)

    # ---- prefill --------------------------------------------------------------------------------
    def prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        return self._prefill(self._target, *prefill_lengths(new_tokens, cached_tokens), with_logits=True)

    def drafter_prefill_time(self, new_tokens: np.ndarray, cached_tokens: np.ndarray) -> float:
        """Prefill of the drafter's own KV (SD switch-on re-prefills prompt + generated tokens
        through the drafter too); no LM head (hidden states only)."""
        return self._prefill(self._draft, *prefill_lengths(new_tokens, cached_tokens), with_logits=False)

    def _prefill(self, f: _ForwardCosts, new: list[int], cached: list[int], with_logits: bool) -> float:
        """One prefill pass over validated Python ints. A pass holds a few chunks (prompts are
        packed into a token budget), so scalar Python beats a dozen numpy calls; integer sums are
        exact either way, so the result is the same."""
        rows = sum(new)
        if rows == 0:
            return 0.0
        b = self.kv_block_size
        live = 0  # one logits row per request (its last prompt token)
        kv_read = rows
        positions = 0
        for n, c in zip(new, cached, strict=True):
            if n > 0:
                live += 1
                kv_read += -(-c // b) * b
            positions += n * c + n * (n + 1) // 2  # causal
        fixed = f.fixed_time(rows, live) if with_logits else f.fixed_time(rows, 0)
        return fixed + f.attention_time(kv_read, positions) + self.iteration_overhead_s

    def prefill_passes_time(self, new: np.ndarray, cached: np.ndarray, budget: int, target: bool,
                            drafter: bool) -> tuple[float, int]:
        """``(time, passes)`` of a chunked prefill of ``new`` tokens per request on top of ``cached``
        ones, packed into passes of at most ``budget`` new tokens (consecutive windows over the requests'
        new tokens laid end to end, empty requests skipped), through the target and/or the drafter,
        added pass by pass (target, then drafter) as :meth:`_prefill` prices each pass: the passes'
        chunks are the segments between request starts and window starts, so every per-pass quantity
        :meth:`_prefill` sums (rows, live requests, paged KV read, causal positions) is an exact integer
        reduction over segments, and the float part is :meth:`_ForwardCosts.forward_times` plus the
        overhead per pass, then the running total in pass order (the elastic switch re-prefills every
        live context, ~200 passes per worker and step)."""
        keep = new > 0
        if not keep.all():
            new, cached = new[keep], cached[keep]
        if len(new) == 0:
            return 0.0, 0
        bs, overhead = self.kv_block_size, self.iteration_overhead_s
        ends = np.cumsum(new)
        tokens = int(ends[-1])
        starts = ends - new  # each request's first new token in the stream
        n_pass = -(-tokens // budget)
        # segment starts, increasing: the union of two increasing arrays (numpy.union1d's sort and
        # de-duplication without its wrapper, a third of a small prefill's time)
        cuts = np.concatenate((starts, np.arange(0, tokens, budget, dtype=np.int64)))
        cuts.sort()
        cuts = cuts[np.concatenate(([True], cuts[1:] != cuts[:-1]))]
        seg = np.diff(np.append(cuts, tokens))  # every segment non-empty: one chunk of one request in one pass
        req = np.searchsorted(starts, cuts, side="right") - 1
        old = cached[req] + (cuts - starts[req])  # tokens of that request before the chunk
        first = np.searchsorted(cuts // budget, np.arange(n_pass, dtype=np.int64))  # each pass's first chunk
        rows = np.add.reduceat(seg, first)
        live = np.diff(np.append(first, len(cuts)))
        kv = np.add.reduceat(-(-old // bs) * bs, first) + rows
        pos = np.add.reduceat(seg * old + seg * (seg + 1) // 2, first)
        terms = []
        if target:
            terms.append(self._target.forward_times(rows, live, kv, pos) + overhead)
        if drafter:
            terms.append(self._draft.forward_times(rows, None, kv, pos) + overhead)
        seq = np.empty(len(terms) * n_pass + 1)
        seq[0] = 0.0
        for i, x in enumerate(terms):
            seq[1 + i::len(terms)] = x
        return float(np.add.accumulate(seq)[-1]), n_pass
