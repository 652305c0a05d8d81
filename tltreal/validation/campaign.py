"""The GPU validation campaign: ``../shared/GPU-CHECKLIST.md`` as one command (``tlt gpu campaign``).

A GPU machine is lent to a task by chance, for minutes, with no network, so everything here runs
first time and keeps what it measured. Five stages run in order (:data:`STAGES`), each with its own
time cap, a share of the budget (:data:`SHARES`), each writing its files into the results folder
before the next starts and one line of ``campaign.jsonl`` (status ok / failed / timeout, seconds,
cap, versions, headline numbers); a crash or a timeout in one stage is recorded and the next runs:

a. ``environment``: device, torch / Triton / CUDA versions, HBM peak of the GPU preset, free memory,
   and a plain device-to-device copy's bandwidth.
b. ``kernels``: the Triton kernels (tree acceptance, KV compaction) against their PyTorch references,
   compiled for real on CUDA (``TRITON_INTERPRET=0``), under the interpreter on a CPU, with achieved
   bandwidth; a 150k vocabulary for the acceptance kernel.
c. ``engine``: a Qwen2.5-7B-shaped model with random bf16 weights (``--tiny``: a tiny float32 one):
   plain decode forwards by batch and context, attention alone by batch and context (the engine's
   path and PyTorch's fused one), verify forwards by rows, drafter steps (``ops.csv``, a point at a
   time), then the engine's cost table by :func:`~tltreal.validation.profiler.profile_native`
   (``cost_table.parquet``, rewritten after each batch size) and the cost table of ``tlt validate``'s
   small model (``cost_table_validation.parquet``) for stage d.
d. ``validate``: ``tlt validate`` with that table (the callable is the CLI's: the real half imports
   no simulator).
e. ``compare``: every measured op beside the calibrated cost model's prediction for the same shapes
   (:func:`tltcore.cost.measured.measured_cost_model` of the GPU, its profiles from
   ``../shared/gpu-profiles``) -> ``compare.csv`` and the median |error|: the out-of-sample error on
   that GPU.

Time caps are enforced by ``SIGALRM`` (the main thread only): the stage's Python code is interrupted
at the cap, whatever it was doing, and the rows written so far stay.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from tltcore.atomic import mark_results_dir, write_text, write_with
from tltcore.model_config import ModelConfig
from tltcore.policy.base import SDConfig

STAGES: tuple[str, ...] = ("environment", "kernels", "engine", "validate", "compare")
#: Each stage's share of ``--budget-s`` (sized in the module docstring of :func:`full_grid`); the rest is slack.
SHARES: dict[str, float] = {"environment": 0.04, "kernels": 0.12, "engine": 0.50, "validate": 0.25, "compare": 0.05}
KIND = "gpu-campaign"
LOG = "campaign.jsonl"

#: Qwen2.5-7B's shape (source: https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json, the catalog
#: entry tltcore/data/model_catalog.json "Qwen/Qwen2.5-7B"); weights random.
QWEN25_7B = ModelConfig(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                        num_attention_heads=28, num_key_value_heads=4, rms_norm_eps=1e-6, rope_theta=1_000_000.0,
                        qkv_bias=True, max_position_embeddings=32768, model_type="qwen2")
#: ``--tiny``: the same family, small enough for a CPU dry run in seconds.
TINY_MODEL = ModelConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, qkv_bias=True, max_position_embeddings=4096,
                         model_type="qwen2")
#: GPU presets (tltcore.hardware) by a word of torch's device name.
GPU_PRESETS: tuple[tuple[str, str], ...] = (("H200", "H200"), ("H100", "H100-SXM"), ("H800", "H800"),
                                            ("A100", "A100-80GB-SXM"), ("A40", "A40"))
#: Stage e's predictions on a CPU dry run: H100's calibrated model (the code path runs; the error means nothing).
DRY_RUN_GPU = "H100-SXM"


class StageTimeout(Exception):
    """A stage ran past its cap."""


@dataclass(frozen=True)
class CampaignGrid:
    """What stage c measures. Pairs are (batch, context) unless named otherwise."""

    decode: tuple[tuple[int, int], ...]
    attention: tuple[tuple[int, int], ...]
    verify: tuple[tuple[int, int], ...]  # (batch, tokens per request) at verify_context
    verify_context: int
    drafter: tuple[tuple[int, int], ...]  # (batch, top-k) at drafter_context
    drafter_context: int
    table_batches: tuple[int, ...]
    table_contexts: tuple[int, ...]
    table_prefill: tuple[int, ...]
    table_shapes: tuple[SDConfig, ...]
    validation_batches: tuple[int, ...]
    validation_contexts: tuple[int, ...]
    validation_prefill: tuple[int, ...]
    accept_cases: tuple[tuple[int, int, int], ...]  # (batch, tree nodes, vocabulary)
    compact_cases: tuple[tuple[int, int, int, int], ...]  # (layers, batch, context, path tokens)
    warmup: int = 3
    iterations: int = 5


def _pairs(batches: tuple[int, ...], contexts: tuple[int, ...], tokens: int) -> tuple[tuple[int, int], ...]:
    """Every (batch, context) whose KV fits ``tokens`` tokens in all (batch x context <= tokens)."""
    return tuple((b, c) for b in batches for c in contexts if b * c <= tokens)


#: The validation scenario's draft shapes (stage d) and the 7B table's: a chain and a tree.
SHAPES: tuple[SDConfig, ...] = (SDConfig(4, 1, 4), SDConfig(6, 4, 16))


def full_grid() -> CampaignGrid:
    """The H100 grid, sized to fit the 8-minute budget with room to spare.

    Sizing (Qwen2.5-7B bf16 on one H100: 15.2 GB of weights at ~3.0 TB/s, the copy bandwidth the
    device notes measured, is ~5 ms a forward; the paper's 164.7 tok/s at batch 1 is 6.1 ms; the eager
    engine adds ~1,000 kernel launches, a few ms): a decode or verify point is warm-up 3 + 5 timed
    forwards, under 0.5 s even at 2,080 rows (31.6 TFLOP at ~600 TFLOP/s is ~50 ms); KV is capped
    at 262,144 tokens a point (15 GB at 57 KB a token; the engine's bf16 attention repeats K/V per
    query head, 4 GB more), so batch 256 stops at context 1,024 and context 16k at batch 16. About
    20 decode and 25 attention points, 7 verify and 4 drafter points: ~20 s. The engine table (three
    batch sizes, one context, two shapes) spends most of its time building random drafters on the
    CPU (~2 s each, ~12 of them): ~60 s. The validation model's table and ``tlt validate`` (1 step,
    32 responses, 3 policies, 3 rounds, a 4-layer model) ~60 s. Kernels: Triton compiles, ~20 s.
    Total ~3 minutes, well inside the 480 s budget; each stage's cap (:data:`SHARES`) is ~2x its
    estimate."""
    batches = (1, 4, 16, 64, 256)
    contexts = (1, 256, 1024, 4096, 16384)
    return CampaignGrid(
        decode=_pairs(batches, contexts, 262_144), attention=_pairs((1, 4, 16, 64, 256), contexts, 262_144),
        verify=((1, 16), (4, 16), (8, 32), (16, 32), (32, 32), (16, 65), (32, 65)), verify_context=1024,
        drafter=((1, 1), (1, 8), (16, 8), (64, 8)), drafter_context=1024,
        table_batches=(1, 16, 64), table_contexts=(1024,), table_prefill=(512,), table_shapes=SHAPES,
        validation_batches=(1, 2, 4, 8, 16, 32), validation_contexts=(32, 96, 320), validation_prefill=(1, 16, 64),
        accept_cases=((4, 16, 32_000), (4, 16, 152_064), (32, 33, 152_064)),
        compact_cases=((28, 16, 2048, 8), (28, 64, 2048, 16)))


def tiny_grid() -> CampaignGrid:
    """``--tiny``: every code path of :func:`full_grid`, on a CPU in seconds."""
    return CampaignGrid(
        decode=((1, 1), (2, 16)), attention=((1, 16), (2, 64)), verify=((1, 4), (2, 4)), verify_context=16,
        drafter=((1, 2),), drafter_context=16, table_batches=(2,), table_contexts=(16,), table_prefill=(8,),
        table_shapes=(SDConfig(2, 1, 2),), validation_batches=(1, 4), validation_contexts=(16, 48),
        validation_prefill=(1, 8), accept_cases=((2, 5, 100),), compact_cases=((2, 2, 16, 3),),
        warmup=1, iterations=2)


@dataclass
class Campaign:
    """One campaign's settings, folder and what its stages hand on (``state``)."""

    out: Path
    device: str  # "cuda", "cuda:1" or "cpu"
    tiny: bool
    budget_s: float
    command: str
    marked: bool = True  # whether tlt's marker lists the folder's files (False: --force into a user's folder)
    grid: CampaignGrid = field(default_factory=full_grid)
    state: dict = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def model(self) -> ModelConfig:
        return TINY_MODEL if self.tiny else QWEN25_7B

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32 if self.tiny else torch.bfloat16

    def cap(self, stage: str) -> float:
        return SHARES[stage] * self.budget_s

    def written(self) -> None:
        if self.marked:
            mark_results_dir(self.out, KIND)

    def write_frame(self, name: str, df: pd.DataFrame) -> Path:
        """Write ``df`` as ``name`` (.csv or .parquet), atomically, and list it in the marker."""
        path = self.out / name
        if name.endswith(".parquet"):
            write_with(path, lambda tmp: df.to_parquet(tmp, index=False))
        else:
            write_with(path, lambda tmp: df.to_csv(tmp, index=False))
        self.written()
        return path

    def write_json(self, name: str, data: object) -> None:
        write_text(self.out / name, json.dumps(data, indent=1, default=str) + "\n")
        self.written()


# ---- timing -----------------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device: str, warmup: int, iterations: int,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of ``iterations`` calls of ``fn`` after ``warmup`` untimed ones (synchronised),
    on ``clock`` (the wall clock; ``time.thread_time`` on a CPU shared with other work)."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(iterations):
        t0 = clock()
        fn()
        _sync(device)
        times.append(clock() - t0)
    return statistics.median(times)


@contextlib.contextmanager
def stage_cap(seconds: float) -> Iterator[None]:
    """Raise :class:`StageTimeout` in the body after ``seconds`` (SIGALRM; the main thread only: elsewhere
    the cap is not enforced and the stage runs to its end)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def _on_alarm(signum: int, frame: object) -> None:
        raise StageTimeout(f"ran past its cap of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def versions() -> dict[str, str]:
    import tltcore

    out = {"tlt": tltcore.__version__, "python": platform.python_version(), "torch": torch.__version__,
           "cuda": str(torch.version.cuda), "triton_interpret": os.environ.get("TRITON_INTERPRET", "")}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "absent"
    return out


# ---- the stages ---------------------------------------------------------------------------------------
def gpu_preset(device_name: str) -> str | None:
    """The GPU preset (tltcore.hardware) of torch's device name, or None."""
    for word, preset in GPU_PRESETS:
        if word in device_name:
            return preset
    return None


def stage_environment(c: Campaign) -> dict:
    """Device, versions, HBM peak of the preset (its data-sheet figure, tltcore.hardware), free memory and
    a plain copy's bandwidth (bytes read + written per second)."""
    from tltcore.hardware import get_gpu

    row: dict[str, object] = {"device": c.device, **versions(), "host": platform.node(),
                              "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    if c.cuda:
        props = torch.cuda.get_device_properties(c.device)
        free, total = torch.cuda.mem_get_info(c.device)
        row.update(device_name=props.name, multiprocessors=props.multi_processor_count, memory_total_gb=total / 1e9,
                   memory_free_gb=free / 1e9)
        preset = gpu_preset(props.name)
        row["gpu_preset"] = preset or ""
        row["hbm_peak_tb_s"] = get_gpu(preset).hbm_bytes_per_s / 1e12 if preset else float("nan")
        nbytes = 1 << 30
    else:
        row.update(device_name=platform.processor() or platform.machine(), gpu_preset="",
                   hbm_peak_tb_s=float("nan"))
        nbytes = 1 << 24
    src = torch.empty(nbytes, dtype=torch.uint8, device=c.device)
    dst = torch.empty_like(src)
    seconds = time_call(lambda d=dst, s=src: d.copy_(s), c.device, 2, 5)
    row["copy_bytes"] = nbytes
    row["copy_tb_s"] = 2 * nbytes / seconds / 1e12
    del src, dst
    c.state["copy_tb_s"] = row["copy_tb_s"]
    c.state["hbm_peak_tb_s"] = row["hbm_peak_tb_s"]
    c.state["gpu_preset"] = row["gpu_preset"]
    c.write_frame("environment.csv", pd.DataFrame([row]))
    return {"device_name": row["device_name"], "copy_tb_s": round(float(row["copy_tb_s"]), 4),
            "hbm_peak_tb_s": row["hbm_peak_tb_s"] if row["hbm_peak_tb_s"] == row["hbm_peak_tb_s"] else None}


def _random_tree(gen: torch.Generator, b: int, n: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Tokens and parents ``[b, n]`` of random trees in verify order (each node's parent comes before it)
    and their depth."""
    parents = torch.full((b, n), -1, dtype=torch.long)
    depth = torch.zeros(b, n, dtype=torch.long)
    for j in range(1, n):
        parents[:, j] = torch.randint(0, j, (b,), generator=gen)
        depth[:, j] = depth.gather(1, parents[:, j:j + 1]).squeeze(1) + 1
    return torch.randint(0, vocab, (b, n), generator=gen), parents, int(depth.max())


def stage_kernels(c: Campaign) -> dict:
    """Each kernel case against its reference (exact equality), timed both ways; achieved bandwidth is
    the bytes each kernel must move over its time. A failing case is a row with its error, the others
    still run."""
    from tltreal.spec_decode.kernels import compact_kv_reference
    from tltreal.spec_decode.kernels.accept import tree_accept_triton
    from tltreal.spec_decode.kernels.compact import compact_kv_triton
    from tltreal.spec_decode.verify import tree_accept_reference

    g = c.grid
    rows: list[dict] = []
    peak = c.state.get("hbm_peak_tb_s", float("nan"))

    def record(row: dict) -> None:
        rows.append(row)
        c.write_frame("kernels.csv", pd.DataFrame(rows))

    for b, n, vocab in g.accept_cases:
        row: dict[str, object] = {"kernel": "tree_accept", "batch": b, "nodes": n, "vocab": vocab}
        try:
            gen = torch.Generator().manual_seed(b * 1000 + n)
            tokens, parents, depth = _random_tree(gen, b, n, vocab)
            p = (torch.randn(b, n, vocab, generator=gen) * 3).softmax(-1)
            q = (torch.randn(b, n, vocab, generator=gen) * 3).softmax(-1)
            u, ub = torch.rand(b, n, generator=gen), torch.rand(b, generator=gen)
            args = [x.to(c.device) for x in (p, q, tokens, parents, u, ub)]
            ref = tree_accept_reference(*args, depth)
            got = tree_accept_triton(*args, depth)
            row["matches"] = all(torch.equal(r.cpu(), x.cpu()) for r, x in zip(ref, got, strict=True))
            row["accepted_mean"] = float(ref[1].float().mean())
            row["triton_s"] = time_call(lambda a=args, d=depth: tree_accept_triton(*a, d), c.device, 1, g.iterations)
            row["reference_s"] = time_call(lambda a=args, d=depth: tree_accept_reference(*a, d), c.device, 1,
                                           g.iterations)
            row["bytes"] = 2 * b * n * vocab * 4  # p and q read once, float32
            row["status"] = "ok" if row["matches"] else "mismatch"
        except StageTimeout:
            raise
        except Exception as exc:  # recorded; the next case runs
            row.update(status="failed", error=f"{type(exc).__name__}: {str(exc)[:300]}")
        record(row)
    for layers, b, ctx, count in g.compact_cases:
        row = {"kernel": "compact_kv", "batch": b, "nodes": count, "context": ctx, "layers": layers}
        try:
            cfg = c.model
            gen = torch.Generator().manual_seed(layers + b)
            shape = (layers, b, cfg.num_key_value_heads, ctx, cfg.head_dim)
            cache = torch.randn(shape, generator=gen).to(c.dtype).to(c.device)
            slots = torch.arange(b)
            base = torch.full((b,), ctx // 2, dtype=torch.long)
            src = torch.stack([torch.sort(torch.randperm(3 * count, generator=gen)[:count]).values for _ in range(b)])
            src[:, 0] = 0
            counts = torch.full((b,), count, dtype=torch.long)
            args = [x.to(c.device) for x in (slots, base, src, counts)]
            ref_cache, got_cache = cache.clone(), cache.clone()
            compact_kv_reference(ref_cache, *args)
            compact_kv_triton(got_cache, *args)
            row["matches"] = bool(torch.equal(ref_cache, got_cache))
            row["triton_s"] = time_call(lambda a=args, k=got_cache: compact_kv_triton(k, *a), c.device, 1, g.iterations)
            row["reference_s"] = time_call(lambda a=args, k=ref_cache: compact_kv_reference(k, *a), c.device, 1,
                                           g.iterations)
            row["bytes"] = 2 * layers * b * count * cfg.num_key_value_heads * cfg.head_dim * cache.element_size()
            row["status"] = "ok" if row["matches"] else "mismatch"
        except StageTimeout:
            raise
        except Exception as exc:
            row.update(status="failed", error=f"{type(exc).__name__}: {str(exc)[:300]}")
        record(row)
    df = pd.DataFrame(rows)
    if "triton_s" in df:
        df["triton_tb_s"] = df["bytes"] / df["triton_s"] / 1e12
        df["share_of_hbm_peak"] = df["triton_tb_s"] / peak if peak == peak else float("nan")
        c.write_frame("kernels.csv", df)
    bad = df[df["status"] != "ok"]
    if len(bad):
        raise RuntimeError(f"{len(bad)} of {len(df)} kernel cases not ok: "
                           + "; ".join(f"{r.kernel} vocab/ctx {r.get('vocab', r.get('context'))}: {r.status}"
                                       for _, r in bad.iterrows()))
    return {"cases": len(df), "all_match": bool(df["matches"].all()),
            "best_tb_s": round(float(df["triton_tb_s"].max()), 4)}


def build_model(cfg: ModelConfig, device: str, dtype: torch.dtype, seed: int = 0):
    """A target with random weights built on ``device`` directly (normal(0, 0.02), unit norms): a 7B
    model's seeded CPU init (:func:`tltreal.model.weights.random_model`, float64 draws) would take
    minutes and 60 GB; on a CPU it is that function."""
    from tltreal.model.transformer import Transformer
    from tltreal.model.weights import random_model

    if not device.startswith("cuda"):
        return random_model(cfg, seed=seed, dtype=dtype).to(device)
    return _built_on_gpu(lambda: Transformer(cfg), device, dtype, seed)


def _built_on_gpu(make: Callable[[], torch.nn.Module], device: str, dtype: torch.dtype, seed: int):
    """``make()`` constructed directly on ``device`` in ``dtype`` (no CPU copy of the weights), then
    filled with seeded random weights (:func:`_fill`), in eval mode."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            module = make()
    finally:
        torch.set_default_dtype(previous)
    _fill(module, device, seed)
    return module.eval()


def _fill(module: torch.nn.Module, device: str, seed: int) -> None:
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)


def build_drafter(target, device: str, seed: int = 1):
    """The EAGLE drafter beside ``target``, built like :func:`build_model` (random weights)."""
    from tltreal.spec_decode.proposers.eagle import EagleDrafter, random_drafter

    if not device.startswith("cuda"):
        return random_drafter(target, seed=seed).to(device)
    return _built_on_gpu(lambda: EagleDrafter(target), device, target.dtype, seed)


def forward_point(target, b: int, ctx: int, tokens: int, device: str) -> Callable[[], object]:
    """A closure running one target forward of ``tokens`` new tokens per request (causal among them)
    after ``ctx`` cached positions of each of ``b`` requests (the cache holds zeros: timing does not
    depend on the values)."""
    from tltreal.model.transformer import causal_mask

    cache = target.new_cache(b, ctx + tokens)
    slots = torch.arange(b, device=device)
    lens = torch.full((b,), ctx, dtype=torch.long, device=device)
    ids = torch.randint(0, target.cfg.vocab_size, (b, tokens), device=device)
    pos = (ctx + torch.arange(tokens, device=device)).expand(b, tokens)
    mask = causal_mask(b, tokens, device)
    return lambda: target(ids, pos, cache, slots, lens, mask)


def attention_point(cfg: ModelConfig, b: int, ctx: int, dtype: torch.dtype, device: str
                     ) -> dict[str, Callable[[], object]]:
    """One layer's attention of one new token per request over ``ctx + 1`` keys: the engine's path for
    its dtype (eager :func:`~tltreal.model.transformer.attend_reference` in bf16/fp16, PyTorch's fused
    attention in float32/64) and PyTorch's fused attention."""
    from tltreal.model.transformer import attend_reference

    q = torch.randn(b, cfg.num_attention_heads, 1, cfg.head_dim, dtype=dtype, device=device)
    k = torch.randn(b, cfg.num_key_value_heads, ctx + 1, cfg.head_dim, dtype=dtype, device=device)
    v = torch.randn_like(k)
    mask = torch.ones(b, 1, 1, ctx + 1, dtype=torch.bool, device=device)
    gqa = cfg.num_attention_heads != cfg.num_key_value_heads
    fused = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)  # noqa: E731
    eager = lambda: attend_reference(q, k, v, mask)  # noqa: E731
    return {"attention_eager": eager, "attention_sdpa": fused}


def _drafter_point(drafter, b: int, ctx: int, topk: int, device: str) -> Callable[[], object]:
    """One drafter step: ``topk`` candidates per request, each seeing itself, after ``ctx`` positions."""
    cfg = drafter.cfg
    cache = drafter.new_cache(b, ctx + topk)
    slots = torch.arange(b, device=device)
    lens = torch.full((b,), ctx, dtype=torch.long, device=device)
    ids = torch.randint(0, cfg.vocab_size, (b, topk), device=device)
    feats = torch.randn(b, topk, cfg.hidden_size, dtype=drafter.dtype, device=device)
    pos = torch.full((b, topk), ctx, dtype=torch.long, device=device)
    mask = torch.eye(topk, dtype=torch.bool, device=device).expand(b, topk, topk).contiguous()
    return lambda: drafter.draft_forward(ids, feats, pos, cache, slots, lens, mask)


def _free(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def stage_engine(c: Campaign) -> dict:
    """Op timings a point at a time (``ops.csv``), then the engine's cost table a batch size at a time
    (``cost_table.parquet``) and the validation model's (``cost_table_validation.parquet``)."""
    from tltcore.acceptance import get_acceptance
    from tltcore.cost import shape_fingerprint, write_table
    from tltreal.validation.profiler import ProfileGrid, profile_metadata, profile_native
    from tltreal.validation.validate import DEFAULT_MODEL, PINNED_DEPTH, PINNED_TOPK, shape_of

    g, dev = c.grid, c.device
    torch.manual_seed(0)
    t0 = time.perf_counter()
    target = build_model(c.model, dev, c.dtype)
    built_s = time.perf_counter() - t0
    rows: list[dict] = []

    def record(kind: str, b: int, ctx: int, tokens: int, fn: Callable[[], object], **extra: object) -> None:
        try:
            seconds = time_call(fn, dev, g.warmup, g.iterations)
            rows.append({"kind": kind, "batch": b, "context": ctx, "tokens": tokens, "seconds": seconds,
                         "status": "ok", **extra})
        except torch.OutOfMemoryError as exc:  # recorded; the next point runs
            rows.append({"kind": kind, "batch": b, "context": ctx, "tokens": tokens, "seconds": float("nan"),
                         "status": "failed", "error": str(exc)[:200], **extra})
        c.write_frame("ops.csv", pd.DataFrame(rows))
        _free(dev)

    with torch.no_grad():
        for b, ctx in g.decode:
            record("decode_forward", b, ctx, 1, forward_point(target, b, ctx, 1, dev))
        engine_path = "attention_eager" if c.dtype in (torch.bfloat16, torch.float16) else "attention_sdpa"
        for b, ctx in g.attention:
            for kind, fn in attention_point(c.model, b, ctx, c.dtype, dev).items():
                record(kind, b, ctx, 1, fn, engine_path=kind == engine_path)
        for b, tokens in g.verify:
            record("verify_forward", b, g.verify_context, tokens, forward_point(target, b, g.verify_context, tokens,
                                                                                  dev))
        drafter = build_drafter(target, dev)
        for b, topk in g.drafter:
            record("draft_step", b, g.drafter_context, topk, _drafter_point(drafter, b, g.drafter_context, topk, dev))
        del drafter
    c.state["ops"] = pd.DataFrame(rows)

    accept = get_acceptance("paper-qwen32b")
    probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)

    def profile(model, cfg: ModelConfig, name: str, batches, contexts, prefill, shapes) -> int:
        meta = {**profile_metadata(model, command=c.command, model_fingerprint=shape_fingerprint(shape_of(cfg))),
                "writer": "tlt gpu campaign"}
        parts: list[pd.DataFrame] = []
        for b in batches:  # one batch size at a time: a timeout keeps the batch sizes done
            grid = ProfileGrid(batch_sizes=(b,), contexts=contexts, prefill_lengths=prefill, sd_configs=shapes,
                               iterations=g.iterations, warmup=2, decode_warmup=g.warmup, repeats=1)
            parts.append(profile_native(model, grid, position_probs=dict.fromkeys(shapes, probs)))
            table = pd.concat(parts, ignore_index=True)
            write_table(table, meta, c.out / name)
            c.written()
            _free(dev)
        c.state[name] = c.out / name
        return len(table)

    table_rows = profile(target, c.model, "cost_table.parquet", g.table_batches, g.table_contexts, g.table_prefill,
                         g.table_shapes)
    del target
    _free(dev)
    small = build_model(DEFAULT_MODEL, dev, torch.float32)
    validation_rows = profile(small, DEFAULT_MODEL, "cost_table_validation.parquet", g.validation_batches,
                              g.validation_contexts, g.validation_prefill, validation_shapes(c.tiny))
    ops = c.state["ops"]
    ok = ops[ops["status"] == "ok"]
    head: dict[str, object] = {"model_build_s": round(built_s, 2), "op_points": len(ops),
                               "op_points_failed": int((ops["status"] != "ok").sum()), "table_rows": table_rows,
                               "validation_table_rows": validation_rows}
    one = ok[(ok["kind"] == "decode_forward") & (ok["batch"] == 1)].sort_values("context")
    if len(one):
        head["decode_tok_s_batch1"] = round(1.0 / float(one["seconds"].iloc[0]), 1)
    return head


def validation_shapes(tiny: bool) -> tuple[SDConfig, ...]:
    """The draft shapes stage d's policies run, which the validation model's table must price."""
    return (SDConfig(2, 1, 2),) if tiny else SHAPES


def validation_scenario_text(tiny: bool) -> str:
    """The scenario stage d hands ``tlt validate``: one traced DAPO step, 4 prompt groups (32 responses;
    ``tiny``: 1 group), no SD beside static shapes (:func:`validation_shapes`)."""
    shapes = [f"static:{s.depth}_{s.topk}_{s.verify_tokens}" for s in validation_shapes(tiny)]
    policies = ", ".join(f'"{p}"' for p in ["no-sd", *shapes])
    groups = 1 if tiny else 4
    return (f"# written by tlt gpu campaign for its stage d (tlt validate)\nseed = 0\npolicies = [{policies}]\n\n"
            f'[trace]\nname = "polytrace_rl_rollouts"\nsource = "polytrace/verl_dapo_qwen2.5-32b"\nstep = 0\n'
            f'num_steps = 1\nprompts_per_step = {groups}\n\n[acceptance]\npreset = "paper-qwen32b"\n')


def stage_compare(c: Campaign) -> dict:
    """Each measured op and table row beside the calibrated model's prediction for the same shapes.

    Forwards are priced as the model prices them without per-iteration overheads (``verify_time`` with
    ``T - 1`` verify tokens: a decode forward is ``T = 1``; ``draft_step_time``); attention alone as the
    attention term of a one-token forward (:meth:`~tltcore.cost.roofline.RooflineCostModel.forward_attention_time`)
    plus the calibrated per-layer kernel latency, against one layer's measured attention times the layer
    count; the engine's table rows (whole iterations) as ``decode_time`` / ``sd_time`` / ``prefill_time``.
    """
    from tltcore.cost.measured import measured_cost_model
    from tltreal.validation.validate import shape_of

    preset = c.state.get("gpu_preset") or (gpu_preset(torch.cuda.get_device_name(c.device)) if c.cuda else None)
    note = ""
    if not preset:
        preset, note = DRY_RUN_GPU, f"no GPU preset for {c.device}: {DRY_RUN_GPU}'s predictions (a dry run)"
    shape = shape_of(c.model, "campaign")
    model = measured_cost_model(shape, preset, 1)
    layers = c.model.num_hidden_layers
    floor = model.calibration.matmul.latency_s * layers if model.calibration is not None else 0.0
    ops = c.state.get("ops")
    if ops is None and (c.out / "ops.csv").is_file():
        ops = pd.read_csv(c.out / "ops.csv")
    rows: list[dict] = []
    for r in ([] if ops is None else ops[ops["status"] == "ok"].itertuples(index=False)):
        ctx = np.full(int(r.batch), int(r.context), dtype=np.int64)
        measured = float(r.seconds)
        if r.kind in ("decode_forward", "verify_forward"):
            predicted = model.verify_time(ctx, int(r.tokens) - 1)
        elif r.kind == "draft_step":
            predicted = model.draft_step_time(ctx, int(r.tokens), 0)
        elif r.kind.startswith("attention"):
            predicted, measured = model.forward_attention_time(ctx, 1) + floor, measured * layers
        else:
            continue
        rows.append({"kind": r.kind, "batch": int(r.batch), "context": int(r.context), "tokens": int(r.tokens),
                     "measured_s": measured, "predicted_s": float(predicted)})
    table_path = c.out / "cost_table.parquet"
    if table_path.is_file():
        table = pd.read_parquet(table_path)
        for r in table.itertuples(index=False):
            ctx = np.full(int(r.batch_size), int(r.context), dtype=np.int64)
            if r.kind == "decode":
                predicted = model.decode_time(ctx)
            elif r.kind == "sd":
                predicted = model.sd_time(ctx, SDConfig(int(r.depth), int(r.topk), int(r.verify_tokens)))
            elif r.kind == "prefill":
                predicted = model.prefill_time(ctx, np.zeros_like(ctx))
            else:
                continue
            name = r.kind if r.kind != "sd" else f"sd_{int(r.depth)}_{int(r.topk)}_{int(r.verify_tokens)}"
            rows.append({"kind": f"iteration_{name}", "batch": int(r.batch_size), "context": int(r.context),
                         "tokens": 0, "measured_s": float(r.seconds), "predicted_s": float(predicted)})
    df = pd.DataFrame(rows, columns=["kind", "batch", "context", "tokens", "measured_s", "predicted_s"])
    df["error"] = df["predicted_s"] / df["measured_s"] - 1
    df["gpu_preset"] = preset
    df["model_source"] = model.source
    c.write_frame("compare.csv", df)
    summary = (df.assign(abs_error=df["error"].abs()).groupby("kind")["abs_error"].agg(["median", "size"])
               .reset_index().rename(columns={"median": "median_abs_error", "size": "points"}))
    c.write_frame("compare_summary.csv", summary)
    if df.empty:
        raise RuntimeError("nothing measured to compare (stage c wrote no ops.csv or cost table)")
    head = {"points": len(df), "median_abs_error": round(float(df["error"].abs().median()), 4),
            "gpu_preset": preset, "calibrated": model.calibration is not None}
    for kind in ("decode_forward", "verify_forward", "attention_eager", "attention_sdpa", "draft_step"):
        part = df[df["kind"] == kind]
        if len(part):
            head[f"median_abs_error_{kind}"] = round(float(part["error"].abs().median()), 4)
    if note:
        head["note"] = note
    return head


# ---- running ------------------------------------------------------------------------------------------
Stage = Callable[[Campaign], dict]


def default_stages(validate: Stage) -> list[tuple[str, Stage]]:
    return [("environment", stage_environment), ("kernels", stage_kernels), ("engine", stage_engine),
            ("validate", validate), ("compare", stage_compare)]


def run_stage(c: Campaign, name: str, fn: Stage) -> dict:
    """Run one stage under its cap; record its line in ``campaign.jsonl`` whatever happens."""
    cap = c.cap(name)
    t0 = time.perf_counter()
    status, headline, error = "ok", {}, ""
    try:
        with stage_cap(cap):
            headline = fn(c) or {}
    except StageTimeout as exc:
        status, error = "timeout", str(exc)
    except Exception as exc:  # recorded; the next stage runs
        status = "failed"
        error = f"{type(exc).__name__}: {str(exc)[:500]}"
        c.state.setdefault("tracebacks", {})[name] = traceback.format_exc(limit=8)
    result = {"stage": name, "status": status, "seconds": round(time.perf_counter() - t0, 3), "cap_s": round(cap, 1),
              "headline": headline, "error": error, "versions": versions(),
              "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    c.results.append(result)
    write_text(c.out / LOG, "".join(json.dumps(r, default=str) + "\n" for r in c.results))
    c.written()
    write_readme(c)
    return result


def run_campaign(c: Campaign, stages: list[tuple[str, Stage]], say: Callable[[str], None] = print) -> list[dict]:
    """Every stage in order, each under its cap; returns the log's lines."""
    for name, fn in stages:
        say(f"stage {name} (cap {c.cap(name):.0f} s) ...")
        r = run_stage(c, name, fn)
        say(f"stage {name}: {r['status']} in {r['seconds']:.1f} s {r['error']}".rstrip())
    return c.results


def write_readme(c: Campaign) -> None:
    """``README.md``: each stage's status, seconds, cap and headline numbers, the command, versions, date."""
    v = versions()
    lines = [f"# GPU campaign: {c.device}{' (tiny dry run)' if c.tiny else ''}", "",
             f"Command: `{c.command}`", "",
             f"Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; tlt {v['tlt']}, torch {v['torch']} "
             f"(CUDA {v['cuda']}), Triton {v['triton']}, Python {v['python']}, TRITON_INTERPRET="
             f"{v['triton_interpret'] or 'unset'}; budget {c.budget_s:.0f} s.", "",
             f"Model: {'tiny qwen2-shaped, float32' if c.tiny else 'Qwen2.5-7B-shaped, random bf16 weights'}.", "",
             "| stage | status | seconds | cap (s) | headline |", "| --- | --- | --- | --- | --- |"]
    for r in c.results:
        head = ", ".join(f"{k} {v}" for k, v in r["headline"].items()) or r["error"]
        if r["error"] and r["headline"]:
            head += f" ({r['error']})"
        lines.append(f"| {r['stage']} | {r['status']} | {r['seconds']:.1f} | {r['cap_s']:.0f} | "
                     f"{head.replace('|', '/')} |")
    done = {r["stage"] for r in c.results}
    lines += [f"| {s} | not run yet | | {c.cap(s):.0f} | |" for s in STAGES if s not in done]
    lines += ["", "Files: environment.csv, kernels.csv, ops.csv (op timings), cost_table.parquet (engine table), "
              "cost_table_validation.parquet (tlt validate's model), validation/ (tlt validate's report), "
              "compare.csv and compare_summary.csv (measured vs the calibrated model's prediction), campaign.jsonl "
              "(one line per stage). See the accuracy page (docs/accuracy.md) for what each holds."]
    tracebacks = c.state.get("tracebacks", {})
    for name, text in tracebacks.items():
        lines += ["", f"## {name} failed", "", "```", text.rstrip(), "```"]
    write_text(c.out / "README.md", "\n".join(lines) + "\n")
    c.written()
