"""Synthetic GPU profiles in Vidur's layout, generated from known laws (no ../shared needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tltcore.cost.gpu_profiles import OPS, SHAPE_COLUMNS
from tltcore.cost.measured import (
    PROFILE_GPUS,
    ElementwiseFit,
    MatmulFit,
    OpShape,
    elementwise_bytes,
    gpu_spec,
    matmul_dims,
)

#: the laws the synthetic profiles are generated from (what a fit must recover)
TRUE_MATMUL = MatmulFit(flops_efficiency=0.62, bandwidth_efficiency=0.81, latency_s=4e-6, smoothness=2.0)
TRUE_ELEMENTWISE = ElementwiseFit(bandwidth_efficiency=0.45, latency_s=2.5e-6)
#: three Llama-like shapes: (org/model, heads, kv heads, hidden, intermediate, vocab)
SHAPES = {"synth/small-7b": OpShape(32, 32, 4096, 11008, 32000), "synth/gqa-8b": OpShape(32, 8, 4096, 14336, 128256),
          "synth/wide-20b": OpShape(40, 40, 5120, 13824, 103168), "synth/big-70b": OpShape(64, 8, 8192, 28672, 32000)}
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
TPS = (1, 2, 4, 8)


def true_time(gpu: str, op: str, shape: OpShape, tp: int, tokens: np.ndarray) -> np.ndarray:
    spec = gpu_spec(PROFILE_GPUS[gpu])
    if op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"):
        k, n = matmul_dims(op, shape, tp)
        return TRUE_MATMUL.time(tokens, k, n, spec)
    return TRUE_ELEMENTWISE.time(elementwise_bytes(op, shape, tp, tokens), spec)


def profile_frame(gpu: str, shape: OpShape, tps=TPS, tokens=TOKENS, noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """One synthetic mlp.csv in Vidur's columns (milliseconds), optionally with log-normal noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for tp in tps:
        m = np.array(tokens, dtype=np.float64)
        cols: dict[str, np.ndarray] = {}
        for op in OPS:
            ms = true_time(gpu, op, shape, tp, m) * 1e3 * np.exp(noise * rng.standard_normal(m.size))
            for stat in ("min", "max", "mean", "median", "std"):
                cols[f"time_stats.{op}.{stat}"] = ms if stat != "std" else 0.01 * ms
        part = pd.DataFrame(cols)
        for col, value in zip(SHAPE_COLUMNS, (shape.heads, shape.kv_heads, shape.hidden, shape.intermediate,
                                              shape.vocab, shape.gated), strict=True):
            part[col] = value
        part["num_tokens"] = m.astype(int)
        part["num_tensor_parallel_workers"] = tp
        rows.append(part)
    return pd.concat(rows, ignore_index=True)


def write_profiles(root: Path, gpus=("h100",), models=tuple(SHAPES), noise: float = 0.0, network: bool = True) -> Path:
    """A ``vidur/`` tree under ``root`` with synthetic compute (and all-reduce) tables; returns ``root``."""
    for gi, gpu in enumerate(gpus):
        for mi, model in enumerate(models):
            folder = root / "vidur" / "compute" / gpu / model
            folder.mkdir(parents=True, exist_ok=True)
            profile_frame(gpu, SHAPES[model], noise=noise, seed=100 * gi + mi).to_csv(folder / "mlp.csv", index=False)
    if network:
        folder = root / "vidur" / "network" / "h100_dgx"
        folder.mkdir(parents=True, exist_ok=True)
        sizes = 2 ** np.arange(11, 27)
        rows = [{"time_stats.all_reduce.median": (10e-6 + 2 * (w - 1) / w * s / 300e9) * 1e3, "rank": 0,
                 "num_workers": w, "size": s, "collective": "all_reduce", "devices_per_node": w,
                 "max_devices_per_node": 8} for w in (2, 4, 8) for s in sizes]
        pd.DataFrame(rows).to_csv(folder / "all_reduce.csv")
    return root
