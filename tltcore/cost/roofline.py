"""The analytic cost model: a roofline of a model shape on a GPU.

Each forward pass is split into kernel groups (decoder matmuls, attention, LM head); each group
costs ``max(FLOPs / effective FLOP/s, bytes / effective bytes/s)``, groups add up, plus
tensor-parallel collectives and a fixed per-iteration overhead. Decode batches are padded to the
captured CUDA-graph batch sizes.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tltcore.cost.lengths import as_lengths, prefill_lengths
from tltcore.cost.protocol import PerConfigSDTimes
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

    @classmethod
    def build(cls, shape: ModelShape, gpu: GPUSpec, tp: int, kernel_latency_s: float = 0.0,
              kernels_per_layer: int = 0, smoothness: float = math.inf) -> _ForwardCosts:
        flops, bw = gpu.effective_flops, gpu.effective_bandwidth
        kv_heads_per_gpu = -(-shape.num_key_value_heads // tp)  # replicated when kv heads < tp
        kv_bytes = 2 * shape.num_hidden_layers * kv_heads_per_gpu * shape.head_dim * BF16_BYTES
        ring = 2 * (tp - 1) / tp
        link = gpu.interconnect_bytes_per_s
        if tp > 1 and not link:
            raise InputError("tensor parallelism needs an interconnect bandwidth",
                             path=f"gpu {gpu.name}", field="interconnect_bytes_per_s")
        decoder_bytes = (shape.decoder_params * BF16_BYTES) / tp
        return cls(
            layers=shape.num_hidden_layers,
            weight_s=decoder_bytes / bw,
            matmul_s_per_token=shape.decoder_matmul_flops_per_token / tp / flops,
            lm_head_weight_s=shape.lm_head_params * BF16_BYTES / tp / bw,
            lm_head_s_per_token=shape.lm_head_flops_per_token / tp / flops,
            kv_read_s_per_token=kv_bytes / bw,
            attention_s_per_position=shape.attention_flops_per_position / tp / flops,
            allreduce_s_per_token=ring * shape.hidden_size * BF16_BYTES / link if tp > 1 else 0.0,
            logits_gather_s_per_token=(tp - 1) / tp * shape.vocab_size * BF16_BYTES / link if tp > 1 else 0.0,
            collective_latency_s=gpu.allreduce_latency_s if tp > 1 else 0.0,
            launch_s=(shape.num_hidden_layers * kernels_per_layer + LM_HEAD_KERNELS) * kernel_latency_s,
            smoothness=smoothness,
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
        comm = 2 * self.layers * (self.collective_latency_s + rows * self.allreduce_s_per_token)
        if logit_rows == 0:  # hidden states only (drafter prefill)
            return matmul + comm + self.launch_s
        lm_head = self._roof(self.lm_head_weight_s, logit_rows * self.lm_head_s_per_token)
        gather = self.collective_latency_s + logit_rows * self.logits_gather_s_per_token
        return matmul + lm_head + comm + gather + self.launch_s

    def attention_time(self, kv_tokens_read: float, query_positions: float) -> float:
        """One attention group: KV streamed from HBM vs QK^T/PV compute, whichever binds."""
        return max(kv_tokens_read * self.kv_read_s_per_token, query_positions * self.attention_s_per_position)


@dataclass(frozen=True)
class RooflineCostModel(PerConfigSDTimes):
    """Analytic iteration costs of ``model`` on a tensor-parallel group of ``tp`` x ``gpu``.

    Decode of ``B`` requests: decoder matmuls over the CUDA-graph-padded batch (weights read once,
    split over tp), attention reading each request's own KV (rounded up to ``kv_block_size`` pages:
    a paged cache streams whole blocks), the LM head, TP collectives, and ``iteration_overhead_s``.
    An SD iteration adds ``depth`` drafter steps (``drafter``: by default the target's one-layer
    EAGLE drafter) over ``topk`` tokens per request, and one target verify forward over
    ``verify_tokens + 1`` tokens per request.
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
    _target: _ForwardCosts = field(init=False, repr=False, compare=False)
    _draft: _ForwardCosts = field(init=False, repr=False, compare=False)
    _sd_cache: dict = field(init=False, repr=False, compare=False)
    _span_cache: dict = field(init=False, repr=False, compare=False)

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
        object.__setattr__(self, "_target", _ForwardCosts.build(self.model, self.gpu, self.tp, *floor))
        object.__setattr__(self, "_draft", _ForwardCosts.build(drafter, self.gpu, self.tp, *floor))
        object.__setattr__(self, "_sd_cache", {})
        object.__setattr__(self, "_span_cache", {})

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

    def _sd_constants(self, b: int, depth: int, topk: int, verify_tokens: int) -> tuple[float, ...]:
        """Everything of an SD iteration that depends only on the batch size and the shape (the
        padded matmul/collective terms and the attention coefficients), memoised: the simulator
        asks for the same few (batch, shape) pairs thousands of times."""
        key = (b, depth, topk, verify_tokens)
        hit = self._sd_cache.get(key)
        if hit is None:
            d, t = self._draft, self._target
            rows = self.padded(b) * topk
            v_rows = self.padded(b) * (verify_tokens + 1)
            hit = (depth * d.fixed_time(rows, rows), depth * self.draft_step_overhead_s,
                   t.fixed_time(v_rows, v_rows))
            self._sd_cache[key] = hit
        return hit

    # ---- CostModel ----------------------------------------------------------------------------
    def decode_time(self, context_lens: np.ndarray) -> float:
        ctx = as_lengths(context_lens, "context_lens")
        b = ctx.size
        if b == 0:
            return 0.0
        t = self._target
        rows = self.padded(b)
        paged_sum, ctx_sum = self._sums(ctx)
        kv_read = paged_sum + b  # cached pages + the new token's K/V
        positions = ctx_sum + b  # each new token attends to its context and itself
        return t.fixed_time(rows, rows) + t.attention_time(kv_read, positions) + self.iteration_overhead_s

    def decode_span_time(self, context_lens: np.ndarray, n_iters: int) -> float:
        ctx = as_lengths(context_lens, "context_lens")
        b, n = ctx.size, int(n_iters)
        if b == 0 or n <= 0:
            return 0.0
        t = self._target
        rows = self.padded(b)
        per_iter = t.fixed_time(rows, rows) + self.iteration_overhead_s
        kv_per_block_pos = t.kv_read_s_per_token
        if t.attention_s_per_position <= kv_per_block_pos:
            # Memory-bound for every request at every step (paged KV >= positions): closed form.
            kv_read = self._paged_span_sum(ctx, n) + n * b
            attention = kv_read * kv_per_block_pos
        else:
            j = np.arange(n, dtype=np.int64)
            kv_read = self._paged_sum_over_steps(ctx, j) + b
            positions = int(ctx.sum()) + b + b * j
            attention = float(np.maximum(kv_read * kv_per_block_pos,
                                         positions * t.attention_s_per_position).sum())
        return n * per_iter + attention

    def _paged_span_sum(self, ctx: np.ndarray, n: int) -> int:
        """sum_i sum_{j<n} paged(ctx_i + j), exact in integers. paged(x) = x + (-x mod b): the x
        part is closed form, and the padding part depends on ctx_i only through ctx_i mod b, so a
        residue histogram and a memoised per-(n mod b) table take three whole-array ops (the
        per-element prefix-sum formula took ~12)."""
        bs = self.kv_block_size
        size = ctx.size
        hist = np.bincount(ctx % bs, minlength=bs).tolist()
        table = self._span_cache.get(n % bs)
        if table is None:  # table[r] = sum_{j < n mod b} (-(r + j)) mod b
            table = [sum(-(r + j) % bs for j in range(n % bs)) for r in range(bs)]
            self._span_cache[n % bs] = table
        pad = (n // bs) * (bs * (bs - 1) // 2) * size + sum(map(operator.mul, hist, table))
        return n * int(_sum(ctx)) + size * (n * (n - 1) // 2) + pad

    def _paged_sum_over_steps(self, ctx: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """sum_i paged(ctx_i + j) for every j in ``steps``: the padding term is periodic in j
        with period ``kv_block_size``, so one small residue histogram gives all of them."""
        b = self.kv_block_size
        hist = np.bincount(ctx % b, minlength=b)
        r = np.arange(b)
        pad = ((-(r[:, None] + r[None, :])) % b * hist[:, None]).sum(axis=0)  # pad[s] for j % b == s
        return int(ctx.sum()) + ctx.size * steps + pad[steps % b]

    def verify_time(self, context_lens: np.ndarray, verify_tokens: int) -> float:
        """One target forward over ``verify_tokens + 1`` tree tokens per request (no overheads)."""
        ctx = as_lengths(context_lens, "context_lens")
        if ctx.size == 0:
            return 0.0
        return self._verify(ctx.size, *self._sums(ctx), verify_tokens)

    def draft_step_time(self, context_lens: np.ndarray, topk: int, step: int = 0) -> float:
        """One drafter forward over ``topk`` candidate tokens per request at draft depth ``step``
        (its own one-layer KV over the context plus the draft so far), without overheads."""
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
        and reduced once (cost-aware prices a dozen shapes per decision). A subclass that prices SD its
        own way (overrides ``sd_time``) gets its own ``sd_time`` per config."""
        if type(self).sd_time is not RooflineCostModel.sd_time:
            return PerConfigSDTimes.sd_times(self, context_lens, configs)
        ctx = as_lengths(context_lens, "context_lens")
        b = ctx.size
        if b == 0:
            return [0.0 for _ in configs]
        sums = self._sums(ctx) if any(c.enabled for c in configs) else (0, 0)
        return [self._sd_at(b, *sums, c) if c.enabled else self.decode_time(ctx) for c in configs]

    def _sd_at(self, b: int, paged_sum: int, ctx_sum: int, config: SDConfig) -> float:
        """One SD iteration of ``b`` requests from their (paged, plain) context sums."""
        depth, topk, verify_tokens = config.depth, config.topk, config.verify_tokens
        draft_fixed, draft_overhead, verify_fixed = self._sd_constants(b, depth, topk, verify_tokens)
        drafting = self._draft_attention(draft_fixed, b, paged_sum, ctx_sum, topk, 0, depth)
        tokens = verify_tokens + 1
        verify = verify_fixed + self._target.attention_time(paged_sum + b * tokens,
                                                             tokens * (ctx_sum + b * tokens))
        return drafting + draft_overhead + verify + self.sd_overhead_s + self.iteration_overhead_s

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
