"""GPU memory: the rollout engine's split (weights, KV cache, CUDA graphs) and the actor's training
footprint under FSDP.

KV capacity is a property of the model, the GPUs and the engine's memory share
(``gpu_memory_utilization``), not of any cost model, so it lives here and every cost model
(analytic or measured) is paired with it the same way.

Three models, all closed-form and numpy/python only:

* :func:`kv_capacity_tokens` / :func:`rollout_memory` — what a ``tp``-GPU rollout worker has left for
  KV cache after its weights and (optionally) its CUDA graphs.
* :func:`cuda_graph_bytes` — the per-GPU memory of the rollout engine's captured CUDA graphs for a
  set of SD strategies, captured naively (every strategy at every batch size) or TLT's bucketed way.
  Two constants, fitted to the paper's three published numbers (see that function).
* :func:`training_memory` — the per-GPU peak of one actor update under FSDP / ZeRO-3 (colocated
  veRL / TLT layout): sharded model states, the gathered FSDP units, activations and the full-vocab
  logits. No fitted constants; it reproduces the paper's "Qwen2.5-32B OOMs on 1 and 2 nodes of
  8 H100-80GB, runs on 4 and 8" under its default configuration (see :class:`TrainingMemoryConfig`
  for which assumptions that result hinges on).

All byte counts are decimal (1 GB = 1e9 bytes), like :class:`~tltcore.hardware.GPUSpec`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tltcore.cost.roofline import CUDA_GRAPH_BATCH_SIZES, padded_batch
from tltcore.errors import InputError
from tltcore.hardware import GPUSpec
from tltcore.model_shape import BF16_BYTES, ModelShape, get_model

GB = 1e9
FP32_BYTES = 4


# =================================================================================================
# Rollout engine: weights, KV cache, CUDA graphs
# =================================================================================================
@dataclass(frozen=True)
class RolloutMemory:
    """Memory of one ``tp``-GPU rollout worker inside its engine share (bytes, all GPUs together).

    ``kv_cache`` is what the share leaves after the weights and the CUDA graphs (0 when they do not
    fit); ``kv_tokens`` is that many bytes in tokens of bf16 KV cache (the admission-control limit).
    """

    weights: float
    kv_cache: float
    cuda_graphs: float
    kv_tokens: int

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.cuda_graphs


def rollout_memory(model: ModelShape, gpu: GPUSpec, tp: int, memory_fraction: float,
                   graph_bytes: float = 0.0) -> RolloutMemory:
    """Split ``memory_fraction`` of ``tp`` GPUs into weights, CUDA graphs and KV cache.

    ``graph_bytes`` is CUDA-graph memory *per GPU* (what :func:`cuda_graph_bytes` returns; every TP
    rank captures its own graphs), counted inside the engine's share as vLLM's memory profiler does.
    SGLang's ``mem_fraction_static`` instead covers weights + KV only and leaves graphs to the rest of
    the GPU; model that with ``graph_bytes=0`` and check the headroom separately.
    """
    if tp < 1:
        raise InputError(f"must be >= 1, got {tp}", field="tp")
    if graph_bytes < 0:
        raise InputError(f"must be >= 0, got {graph_bytes}", field="graph_bytes")
    graphs = graph_bytes * tp
    # Same expression as before graphs existed: subtracting 0.0 leaves the float unchanged.
    free = memory_fraction * gpu.memory_bytes * tp - model.weight_bytes - graphs
    kv_tokens = max(0, int(free // model.kv_bytes_per_token_on_group(tp)))
    return RolloutMemory(weights=float(model.weight_bytes), kv_cache=max(0.0, float(free)), cuda_graphs=float(graphs),
                         kv_tokens=kv_tokens)


def kv_capacity_tokens(model: ModelShape, gpu: GPUSpec, tp: int, memory_fraction: float,
                       graph_bytes: float = 0.0) -> int:
    """Tokens of bf16 KV cache a ``tp``-GPU worker holds in ``memory_fraction`` of its memory after
    the weights and ``graph_bytes`` of CUDA graphs per GPU (the admission-control limit); 0 when the
    weights alone do not fit. ``graph_bytes=0`` is the plain weights-only formula."""
    return rollout_memory(model, gpu, tp, memory_fraction, graph_bytes).kv_tokens


# ---- CUDA graphs ---------------------------------------------------------------------------------
# The paper's published numbers (drafter_and_system.csv), GB per GPU: four strategies captured
# naively, TLT's bucketed capture of the same four, one strategy alone.
PAPER_GRAPH_GB_NAIVE = 30.39
PAPER_GRAPH_GB_BUCKETED = 10.69
PAPER_GRAPH_GB_SINGLE = 7.81
# What we assume those numbers were measured on (the paper's SD micro-benchmarks are Qwen2.5-32B at
# TP 4; its released 32B RL script uses TP 8, whose 2.4 % smaller token rows move the predictions by ~1 %).
PAPER_GRAPH_MODEL = "Qwen2.5-32B"
PAPER_GRAPH_TP = 4
# BEG-MAB's arms (depth, topk, verify_tokens) and bucket thresholds; SD graphs exist only at batch
# sizes <= the elastic threshold (above it the engine decodes without SD).
PAPER_ARMS: tuple[tuple[int, int, int], ...] = ((8, 4, 48), (8, 4, 32), (8, 4, 16), (8, 4, 8))
PAPER_BUCKETS: tuple[int, ...] = (1, 2, 5, 21)
PAPER_SINGLE_ARM: tuple[int, int, int] = (8, 4, 32)  # an assumption: the paper does not say which arm
SD_MAX_BATCH = 32

# Fitted constants (least squares on relative error to the three paper numbers by
# fit_cuda_graph_constants(): 0.1202 GB and 4.703 rows; as rounded here the errors are naive -2.0 %,
# bucketed -1.2 %, single +2.8 %).
GRAPH_OVERHEAD_BYTES = 0.120e9
"""Fixed memory of one captured graph (the graph object and its private-pool blocks that later
captures cannot reuse). Fitted; applying it to plain decode graphs is an extrapolation (vLLM reports
~0.5–2 GB for its whole 67-size decode capture, i.e. 10–30 MB a graph, so this likely overstates
decode-only capture)."""
GRAPH_TOKEN_ROWS = 4.70
"""Per-token "rows" a graph runner keeps for the largest batch it captures, in units of
:func:`graph_token_row_bytes` (a fp32 full-vocab logits row + one TP-sharded bf16 activation row).
Fitted; ~5 rows is plausible: the runner's fp32 logits buffer, the gathered bf16 logits, fp32
probabilities for sampling / top-k, and pool scratch."""


def graph_token_row_bytes(model: ModelShape, tp: int) -> float:
    """Bytes one token occupies in a graph's widest buffers on one GPU: an fp32 full-vocab logits row
    (gathered, so replicated on every TP rank) plus the bf16 activations of the widest layer: the hidden
    row (replicated) and the q/k/v and gate/up rows (sharded over ``tp``). The EAGLE drafter has the
    target's width and shares its LM head, so one row size serves verify and draft graphs alike."""
    acts = model.hidden_size + (model.q_dim + 2 * model.kv_dim + 2 * model.intermediate_size) / tp
    return FP32_BYTES * model.vocab_size + BF16_BYTES * acts


@dataclass(frozen=True)
class GraphRunner:
    """One CUDA-graph runner: graphs of one kind captured at several batch sizes.

    ``tokens_per_batch``: tokens one request puts through the graph (1 for decode, ``verify + 1`` for
    a verify graph, ``topk * depth`` for a multi-step draft graph). The runner's static input/output
    buffers are sized for its largest batch and shared by its smaller graphs (SGLang's
    ``CudaGraphRunner`` / ``EAGLEDraftCudaGraphRunner``), so its token term is ``max(batch) x
    tokens_per_batch``, not a sum over graphs.
    """

    kind: str  # "decode" | "verify" | "draft"
    tokens_per_batch: int
    batch_sizes: tuple[int, ...]

    @property
    def graphs(self) -> int:
        return len(self.batch_sizes)

    @property
    def max_tokens(self) -> int:
        return max(self.batch_sizes, default=0) * self.tokens_per_batch


def _check_strategy(s: Sequence[int]) -> tuple[int, int, int]:
    if len(s) != 3 or any(int(x) != x or x < 1 for x in s):
        raise InputError(f"strategy {tuple(s)} must be three positive integers (depth, topk, verify_tokens)",
                         field="strategies")
    return int(s[0]), int(s[1]), int(s[2])


def graph_runners(strategies: Sequence[Sequence[int]] | None, capture: str,
                  batch_sizes: Sequence[int] = CUDA_GRAPH_BATCH_SIZES, buckets: Sequence[int] = PAPER_BUCKETS,
                  sd_max_batch: int = SD_MAX_BATCH) -> list[GraphRunner]:
    """The graph runners a capture mode builds (what :func:`cuda_graph_bytes` prices).

    * no strategies: plain decode graphs at every size in ``batch_sizes``.
    * ``naive``: every strategy captured at every size <= ``sd_max_batch``, each with its own verify
      runner and its own draft runner.
    * ``bucketed`` (TLT): strategies grouped by verify budget; the largest budget takes the first
      BEG-MAB bucket ``[buckets[0], buckets[1])``, the next the second, …, the last runs to
      ``sd_max_batch``. A group is captured only at the sizes its bucket's batches pad to (batch 20 of
      ``[5, 21)`` pads to 24, so 24 is captured for that bucket too), and its strategies share one
      target verify runner; draft runners stay per strategy.
    * ``none``: no runners.

    SD graphs stop at ``sd_max_batch`` (elastic SD is off above it); plain decode graphs for the larger
    batches are a separate call with no strategies, and are not part of the paper's three numbers.
    """
    if capture not in ("naive", "bucketed", "none"):
        raise InputError(f"unknown capture mode '{capture}'; use naive, bucketed or none", field="capture")
    sizes = tuple(sorted({int(b) for b in batch_sizes}))
    if not sizes or sizes[0] < 1:
        raise InputError("must be a non-empty list of positive batch sizes", field="batch_sizes")
    if capture == "none":
        return []
    if not strategies:
        return [GraphRunner("decode", 1, sizes)]
    arms = [_check_strategy(s) for s in strategies]
    sd_sizes = tuple(b for b in sizes if b <= sd_max_batch)
    if not sd_sizes:
        raise InputError(f"no captured batch size is <= sd_max_batch={sd_max_batch}", field="batch_sizes")
    if capture == "naive":
        runners = []
        for d, k, v in arms:
            runners += [GraphRunner("verify", v + 1, sd_sizes), GraphRunner("draft", k * d, sd_sizes)]
        return runners
    budgets = sorted({v for _, _, v in arms}, reverse=True)
    edges = sorted(int(b) for b in buckets)
    if len(budgets) != len(edges):
        raise InputError(f"bucketed capture needs one verify budget per bucket: {len(budgets)} budgets "
                         f"{budgets} for buckets {edges}", field="buckets")
    by_budget: dict[int, tuple[int, ...]] = {}
    for i, v in enumerate(budgets):
        lo = edges[i]
        hi = edges[i + 1] if i + 1 < len(edges) else sd_max_batch + 1
        padded = {padded_batch(b, sizes) for b in range(lo, min(hi, sd_max_batch + 1))}
        by_budget[v] = tuple(sorted(b for b in padded if b in sizes))
    runners = [GraphRunner("verify", v + 1, by_budget[v]) for v in budgets if by_budget[v]]
    runners += [GraphRunner("draft", k * d, by_budget[v]) for d, k, v in arms if by_budget[v]]
    return runners


def _graph_features(runners: Sequence[GraphRunner], model: ModelShape, tp: int) -> tuple[float, float]:
    """(number of graphs, token-row bytes): the two terms the fitted constants multiply."""
    graphs = sum(r.graphs for r in runners)
    rows = sum(r.max_tokens for r in runners) * graph_token_row_bytes(model, tp)
    return float(graphs), float(rows)


def cuda_graph_bytes(model: ModelShape, tp: int, strategies: Sequence[Sequence[int]] | None, capture: str,
                     batch_sizes: Sequence[int] = CUDA_GRAPH_BATCH_SIZES, buckets: Sequence[int] = PAPER_BUCKETS,
                     sd_max_batch: int = SD_MAX_BATCH, *, overhead_bytes: float = GRAPH_OVERHEAD_BYTES,
                     token_rows: float = GRAPH_TOKEN_ROWS) -> float:
    """Per-GPU bytes of the rollout engine's captured CUDA graphs.

    ``strategies``: ``(depth, topk, verify_tokens)`` per SD strategy (empty / None: plain decode only).
    The model (see :func:`graph_runners` for which graphs exist)::

        bytes = overhead_bytes x (number of graphs)
              + token_rows x graph_token_row_bytes(model, tp) x sum over runners of max_batch x tokens_per_batch

    a fixed cost per captured graph plus buffers that grow with the tokens a runner's largest graph
    processes (``batch x (verify_tokens + 1)`` for a verify graph, ``batch x topk`` per draft step,
    ``depth`` steps in one draft graph). Runner-max rather than a per-graph sum because SGLang (which
    TLT runs) sizes a runner's static buffers for its largest batch and shares one memory pool across
    graphs. A per-graph token sum does not fit the paper: bucketed capture (10.69 GB) processes fewer
    tokens than one strategy at all sizes (7.81 GB), so the per-token term comes out negative and the
    best non-negative fit is overhead only (0.58 GB a graph; errors +6.9 / -13.2 / +4.0 %).

    Calibration (Qwen2.5-32B, TP 4, arms 8_4_48 / 8_4_32 / 8_4_16 / 8_4_8, buckets 1, 2, 5, 21, SD at
    batch <= 32, the single strategy assumed to be 8_4_32): naive 29.78 GB vs 30.39 (-2.0 %), bucketed
    10.56 vs 10.69 (-1.2 %), single 8.03 vs 7.81 (+2.8 %). Had the single arm been 8_4_16, 8_4_48 or
    8_4_8, the refit's worst error would be 6 %, 11 % and 8 %.
    """
    if tp < 1:
        raise InputError(f"must be >= 1, got {tp}", field="tp")
    graphs, rows = _graph_features(graph_runners(strategies, capture, batch_sizes, buckets, sd_max_batch), model, tp)
    return overhead_bytes * graphs + token_rows * rows


def paper_graph_cases(single: Sequence[int] = PAPER_SINGLE_ARM) -> dict[str, tuple[float, list[GraphRunner]]]:
    """The paper's three measurements as ``{name: (published bytes, runners)}``."""
    return {
        "naive": (PAPER_GRAPH_GB_NAIVE * GB, graph_runners(PAPER_ARMS, "naive")),
        "bucketed": (PAPER_GRAPH_GB_BUCKETED * GB, graph_runners(PAPER_ARMS, "bucketed")),
        "single": (PAPER_GRAPH_GB_SINGLE * GB, graph_runners([tuple(single)], "naive")),
    }


def fit_cuda_graph_constants(model: ModelShape | None = None, tp: int = PAPER_GRAPH_TP,
                             single: Sequence[int] = PAPER_SINGLE_ARM) -> tuple[float, float, dict[str, float]]:
    """Least-squares ``(overhead_bytes, token_rows)`` minimising the relative error to the paper's three
    numbers, and the relative error of each case (how the module constants were obtained; ``model``
    defaults to :data:`PAPER_GRAPH_MODEL`)."""
    model = model or get_model(PAPER_GRAPH_MODEL)
    cases = paper_graph_cases(single)
    target = np.array([t for t, _ in cases.values()])
    feats = np.array([_graph_features(r, model, tp) for _, r in cases.values()])
    coef, *_ = np.linalg.lstsq(feats / target[:, None], np.ones(len(target)), rcond=None)
    errors = feats @ coef / target - 1.0
    return float(coef[0]), float(coef[1]), dict(zip(cases, map(float, errors), strict=True))


# =================================================================================================
# Training: the actor update under FSDP (ZeRO-3)
# =================================================================================================
@dataclass(frozen=True)
class TrainingMemoryConfig:
    """How the actor trains (defaults: veRL's FSDP actor without CPU offload, bf16 mixed precision).

    * ``param_bytes = 2``: bf16 compute weights, sharded (ZeRO-3 accounting; FSDP1/2 with an fp32
      master keep no separate bf16 shard, i.e. 0 — it does not change any verdict below).
    * ``grad_bytes = 4``: fp32 gradients, sharded (FSDP ``reduce_dtype=fp32``, what veRL sets).
    * ``optimizer_bytes = 12``: AdamW's fp32 master weight + first and second moments, sharded.
    * ``reference_model``: a frozen bf16 reference policy (ref log-probs for the KL loss) sharded the
      same way and resident on the GPU.
    * ``micro_batch_tokens = 32768``: tokens one GPU runs forward + backward at once (one 32K-token
      response; veRL's ``ppo_max_token_len_per_gpu``, after Ulysses sequence parallelism if any).
    * ``activation_checkpointing``: save only each decoder layer's input, recompute the layer in
      backward (veRL ``enable_gradient_checkpointing``).
    * ``logits_fp32``: the micro-batch's full-vocab logits materialised in fp32 for log-probs (152K
      vocab x 32K tokens = 19.9 GB), else bf16.
    * ``framework_reserved_bytes = 3 GB``: CUDA context (~0.5 GB), NCCL and cuBLAS workspaces (~1 GB)
      and caching-allocator fragmentation (~1–2 GB).
    * ``usable_fraction = 0.95``: share of the data-sheet memory the allocator can fill (PyTorch
      cannot pack the last few percent). Note an H100 "80 GB" holds 80 GiB = 85.9e9 bytes, while
      :class:`GPUSpec` stores the data-sheet 80e9; together the capacity is conservative by ~7 %.

    What the paper's OOM table hinges on under these defaults: the 32-GPU case of Qwen2.5-32B fits
    with ~5 GB to spare, and only because the fp32 logits (freed before backward recomputes the first
    layer) are the largest transient — an unfused log-softmax holding a second full-vocab copy would
    push it over. TLT's released scripts avoid all of this differently (CPU offload of parameters and
    optimizer, Ulysses sequence parallelism 4–8), so these defaults are a stylised no-offload veRL,
    not the authors' exact run.
    """

    param_bytes: float = 2
    grad_bytes: float = 4
    optimizer_bytes: float = 12
    reference_model: bool = True
    micro_batch_tokens: int = 32768
    activation_checkpointing: bool = True
    logits_fp32: bool = True
    framework_reserved_bytes: float = 3e9
    usable_fraction: float = 0.95

    def __post_init__(self) -> None:
        for name in ("param_bytes", "grad_bytes", "optimizer_bytes", "framework_reserved_bytes"):
            if getattr(self, name) < 0:
                raise InputError(f"must be >= 0, got {getattr(self, name)}", path="training memory", field=name)
        if self.micro_batch_tokens < 1:
            raise InputError(f"must be >= 1, got {self.micro_batch_tokens}", path="training memory",
                             field="micro_batch_tokens")
        if not 0.0 < self.usable_fraction <= 1.0:
            raise InputError(f"must be in (0, 1], got {self.usable_fraction}", path="training memory",
                             field="usable_fraction")


@dataclass(frozen=True)
class TrainingMemory:
    """Per-GPU peak memory of one actor update (bytes).

    Sharded model states: ``params``, ``grads``, ``optimizer``, ``reference``. ``fsdp_buffers``: the
    FSDP units gathered at once. ``activations``: what the backward pass needs, of which
    ``layer_workspace`` is one layer's recompute + backward working set. ``logits``: the micro-batch's
    full-vocab logits. ``reserved``: CUDA context, communication buffers, fragmentation.

    ``total`` is the peak, not the plain sum: the logits are consumed by the loss and freed at the very
    start of backward, before the first layer is recomputed, so only the larger of ``logits`` and
    ``layer_workspace`` is ever live (``not_concurrent`` is the smaller one, subtracted).
    """

    params: float
    grads: float
    optimizer: float
    reference: float
    fsdp_buffers: float
    activations: float
    layer_workspace: float
    logits: float
    reserved: float
    capacity: float

    @property
    def not_concurrent(self) -> float:
        return min(self.layer_workspace, self.logits)

    @property
    def total(self) -> float:
        return (self.params + self.grads + self.optimizer + self.reference + self.fsdp_buffers + self.activations
                + self.logits + self.reserved - self.not_concurrent)

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def components(self) -> dict[str, float]:
        """The named terms of ``total`` (bytes), the subtracted overlap last and negative."""
        return {"params": self.params, "grads": self.grads, "optimizer": self.optimizer, "reference": self.reference,
                "fsdp buffers": self.fsdp_buffers, "activations": self.activations, "logits": self.logits,
                "reserved": self.reserved, "not concurrent": -self.not_concurrent}

    def describe(self) -> str:
        """One line, e.g. ``12.3 GB optimizer + … − 13.4 GB not concurrent = 70.9 GB per GPU <= 76.0 GB usable``."""
        parts = [f"{v / GB:.1f} GB {k}" for k, v in self.components().items() if k != "not concurrent"]
        verdict = "<=" if self.fits else ">"
        return (" + ".join(parts) + f" - {self.not_concurrent / GB:.1f} GB not concurrent (logits vs layer "
                f"recompute) = {self.total / GB:.1f} GB per GPU {verdict} {self.capacity / GB:.1f} GB usable")


def layer_saved_elements_per_token(model: ModelShape) -> int:
    """bf16 elements one decoder layer's forward keeps for its backward, per token, excluding its input.

    Attention: RMSNorm output (h), rotated q, k and v kept by flash-attention (q + 2 kv), the attention
    output (q); MLP: the residual sum and its RMSNorm output (2 h), gate, up, SiLU(gate) and their
    product (4 i). Flash-attention's log-sum-exp and the norms' fp32 inverse RMS are < 1 % and left out.
    """
    h, q, kv, i = model.hidden_size, model.q_dim, model.kv_dim, model.intermediate_size
    return 3 * h + 2 * q + 2 * kv + 4 * i


def layer_backward_elements_per_token(model: ModelShape) -> int:
    """bf16 gradient elements live at once in one layer's backward, per token: the gradients of gate and
    up (2 i) and of the hidden stream / residual (2 h)."""
    return 2 * model.intermediate_size + 2 * model.hidden_size


def training_memory(model: ModelShape, gpu: GPUSpec, gpus: int,
                    cfg: TrainingMemoryConfig = TrainingMemoryConfig()) -> TrainingMemory:
    """Per-GPU peak memory of the actor update of ``model`` FSDP-sharded over ``gpus`` GPUs of ``gpu``.

    * Sharded states: ``total_params x bytes / gpus`` each for params, grads and optimizer, and
      ``total_params x 2 / gpus`` for the bf16 reference policy.
    * FSDP buffers (not sharded): the LM head gathered in bf16 for the whole step (it is in the root
      unit, which FSDP does not reshard after forward) plus its unsharded bf16 gradient; two decoder
      layers gathered (the current one and the prefetched next) plus one layer's unsharded gradient
      waiting for its reduce-scatter.
    * Activations, ``T = micro_batch_tokens``: with checkpointing, every layer's input
      (``T x hidden x 2 B x layers``) plus one layer's working set while it is recomputed and
      back-propagated (:func:`layer_saved_elements_per_token` + :func:`layer_backward_elements_per_token`,
      x 2 B; ~0.41 MB a token for Qwen2.5-32B, 13.4 GB at 32K tokens); without it, every layer's input
      and saved intermediates, plus one layer's backward gradients.
    * Logits: ``T x vocab x 4`` (fp32) or ``x 2`` (bf16).
    """
    if gpus < 1 or int(gpus) != gpus:
        raise InputError(f"must be a positive integer, got {gpus}", field="gpus")
    params = model.total_params
    tokens = cfg.micro_batch_tokens
    h, layers = model.hidden_size, model.num_hidden_layers

    layer_params = model.mean_layer_params
    lm_head = model.lm_head_params if not model.tie_word_embeddings else model.embedding_params
    fsdp = BF16_BYTES * (2 * lm_head + 3 * layer_params)

    saved = layer_saved_elements_per_token(model)
    backward = layer_backward_elements_per_token(model)
    if cfg.activation_checkpointing:
        persistent = tokens * h * BF16_BYTES * layers
        workspace = tokens * (saved + backward) * BF16_BYTES
    else:
        persistent = tokens * (h + saved) * BF16_BYTES * layers
        workspace = tokens * backward * BF16_BYTES
    logits = tokens * model.vocab_size * (FP32_BYTES if cfg.logits_fp32 else BF16_BYTES)

    return TrainingMemory(
        params=params * cfg.param_bytes / gpus,
        grads=params * cfg.grad_bytes / gpus,
        optimizer=params * cfg.optimizer_bytes / gpus,
        reference=params * BF16_BYTES / gpus if cfg.reference_model else 0.0,
        fsdp_buffers=float(fsdp),
        activations=float(persistent + workspace),
        layer_workspace=float(workspace),
        logits=float(logits),
        reserved=float(cfg.framework_reserved_bytes),
        capacity=gpu.memory_bytes * cfg.usable_fraction,
    )
