"""Measured per-operation GPU latencies (Vidur's profiles), read and tidied.

The profiles are third-party data (Vidur, Agrawal et al., MLSys 2024; microsoft/vidur
``data/profiling/``) kept in the team's shared folder (``../shared/gpu-profiles/``, see
:mod:`tltcore.shared_paths`), never in the repository. Two kinds of file:

* ``vidur/compute/<gpu>/<org>/<model>/mlp.csv``: one row per (num_tokens, TP) with
  ``time_stats.<op>.median`` in milliseconds for one transformer layer's operations on one GPU of a
  TP group, and the model's shape columns. :func:`load_compute` makes it tidy: one row per
  ``gpu, model, op, num_tokens, tp, median_ms`` plus the shape columns (:data:`SHAPE_COLUMNS`).
* ``vidur/network/<topology>/{all_reduce,send_recv}.csv``: ``time_stats.<collective>.median`` by
  message ``size`` (bytes) and ``num_workers``. :func:`load_network` gives ``topology, collective,
  bytes, workers, devices_per_node, median_ms``.

A malformed file is one :class:`~tltcore.errors.InputError` line naming the file and the column.
Rows repeated for one (num_tokens, TP) (the files hold a few) are reduced to their median.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from tltcore.errors import InputError, reason
from tltcore.shared_paths import gpu_profiles_dir, gpu_profiles_search_path

#: The per-layer operations a compute profile times (Vidur's names).
OPS: tuple[str, ...] = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
                        "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
MATMUL_OPS: tuple[str, ...] = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE_OPS: tuple[str, ...] = tuple(op for op in OPS if op not in MATMUL_OPS)
SHAPE_COLUMNS: tuple[str, ...] = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")
COMPUTE_KEYS: tuple[str, ...] = ("num_tokens", "num_tensor_parallel_workers")
COMPUTE_COLUMNS: tuple[str, ...] = ("gpu", "model", "op", "num_tokens", "tp", "median_ms", *SHAPE_COLUMNS)
NETWORK_COLUMNS: tuple[str, ...] = ("topology", "collective", "bytes", "workers", "devices_per_node", "median_ms")
COLLECTIVES: tuple[str, ...] = ("all_reduce", "send_recv")


def profiles_root(root: str | Path | None = None) -> Path:
    """The folder holding ``vidur/``: ``root`` when given, else the first one on the search path."""
    if root is not None:
        path = Path(root)
        if not (path / "vidur").is_dir():
            raise InputError("has no vidur/ folder of GPU profiles", path=path)
        return path
    found = gpu_profiles_dir()
    if found is None:
        where = ", ".join(str(p) for p in gpu_profiles_search_path())
        raise InputError(f"no measured GPU profiles found (searched {where}; set TLT_GPU_PROFILES or "
                         "TLT_SHARED_DIR)", field="gpu-profiles")
    return found


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"not a readable CSV ({reason(exc, 160)})", path=path) from None
    if df.empty:
        raise InputError("no rows", path=path)
    return df


def _numeric(df: pd.DataFrame, col: str, path: Path, *, positive: bool = False) -> np.ndarray:
    """Column ``col`` as float64; a missing column, a non-number, a negative (or, with ``positive``,
    a zero) value is one error line naming the file, the first bad row and the column."""
    if col not in df.columns:
        raise InputError("missing column", path=path, field=col)
    raw = df[col]
    if raw.dtype == bool:
        return raw.to_numpy(dtype=np.float64)
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (values <= 0 if positive else values < 0)
    if bad.any():
        i = int(np.argmax(bad))
        want = "a finite number > 0" if positive else "a finite number >= 0"
        raise InputError(f"must be {want}, got {raw.iloc[i]!r}", path=path, row=i + 2, field=col)
    return values


def read_compute_file(path: str | Path, gpu: str, model: str) -> pd.DataFrame:
    """One ``mlp.csv`` as tidy rows (:data:`COMPUTE_COLUMNS`). An op a model does not have is absent
    (phi-2's parallel attention block has no ``post_attention_layernorm``); at least one op must be there."""
    path = Path(path)
    df = _read_csv(path)
    keys = {k: _numeric(df, k, path, positive=True) for k in COMPUTE_KEYS}
    shape = {}
    for col in SHAPE_COLUMNS:
        if col == "use_gated_mlp":
            if col not in df.columns:
                raise InputError("missing column", path=path, field=col)
            text = df[col].astype(str).str.strip().str.lower()
            ok = text.isin(["true", "false", "1", "0", "1.0", "0.0"])
            if not ok.all():
                i = int(np.argmax(~ok.to_numpy()))
                raise InputError(f"must be True or False, got {df[col].iloc[i]!r}", path=path, row=i + 2, field=col)
            shape[col] = text.isin(["true", "1", "1.0"]).to_numpy()
        else:
            shape[col] = _numeric(df, col, path, positive=True)
    for col in SHAPE_COLUMNS:
        if len(np.unique(shape[col])) != 1:
            raise InputError("differs between rows (one file holds one model shape)", path=path, field=col)
    parts = []
    present = [op for op in OPS if f"time_stats.{op}.median" in df.columns]
    if not present:
        raise InputError(f"no time_stats.<op>.median column for any of {', '.join(OPS)}", path=path,
                         field=f"time_stats.{OPS[0]}.median")
    for op in present:
        ms = _numeric(df, f"time_stats.{op}.median", path)
        part = pd.DataFrame({"op": op, "num_tokens": keys["num_tokens"].astype(np.int64),
                             "tp": keys["num_tensor_parallel_workers"].astype(np.int64), "median_ms": ms})
        parts.append(part)
    tidy = pd.concat(parts, ignore_index=True)
    tidy = tidy.groupby(["op", "num_tokens", "tp"], as_index=False, sort=True)["median_ms"].median()
    tidy.insert(0, "model", model)
    tidy.insert(0, "gpu", gpu)
    for col in SHAPE_COLUMNS:
        tidy[col] = bool(shape[col][0]) if col == "use_gated_mlp" else int(shape[col][0])
    return tidy[list(COMPUTE_COLUMNS)]


def read_network_file(path: str | Path, topology: str) -> pd.DataFrame:
    """One collective's table (``all_reduce.csv`` / ``send_recv.csv``) as tidy rows (:data:`NETWORK_COLUMNS`)."""
    path = Path(path)
    collective = path.stem
    df = _read_csv(path)
    size = _numeric(df, "size", path, positive=True)
    workers = _numeric(df, "num_workers", path, positive=True)
    ms = _numeric(df, f"time_stats.{collective}.median", path)
    per_node = _numeric(df, "devices_per_node", path, positive=True) if "devices_per_node" in df.columns else workers
    tidy = pd.DataFrame({"topology": topology, "collective": collective, "bytes": size.astype(np.int64),
                         "workers": workers.astype(np.int64), "devices_per_node": per_node.astype(np.int64),
                         "median_ms": ms})
    return tidy.groupby(["topology", "collective", "bytes", "workers", "devices_per_node"], as_index=False,
                        sort=True)["median_ms"].median()[list(NETWORK_COLUMNS)]


def compute_files(root: str | Path | None = None) -> list[tuple[str, str, Path]]:
    """``(gpu, "org/model", path)`` of every compute profile under ``root`` (sorted)."""
    base = profiles_root(root) / "vidur" / "compute"
    out = []
    for path in sorted(base.glob("*/*/*/mlp.csv")):
        gpu, org, model = path.parts[-4:-1]
        out.append((gpu, f"{org}/{model}", path))
    return out


@cache
def _load_compute(root: Path, gpu: str | None = None) -> pd.DataFrame:
    files = [f for f in compute_files(root) if gpu is None or f[0] == gpu]
    if not files:
        where = root / "vidur" if gpu is None else root / "vidur" / "compute" / gpu
        raise InputError("no compute profiles (vidur/compute/<gpu>/<org>/<model>/mlp.csv)", path=where)
    return pd.concat([read_compute_file(p, g, m) for g, m, p in files], ignore_index=True)


@cache
def _load_network(root: Path, topology: str | None = None) -> pd.DataFrame:
    paths = sorted((root / "vidur" / "network").glob(f"{topology or '*'}/*.csv"))
    frames = [read_network_file(p, p.parent.name) for p in paths if p.stem in COLLECTIVES]
    if not frames:
        return pd.DataFrame({c: [] for c in NETWORK_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def load_compute(root: str | Path | None = None, gpu: str | None = None) -> pd.DataFrame:
    """Every compute profile as one tidy frame (read once per folder; a copy is returned); with ``gpu``
    only that GPU's files are read (a simulation fits one GPU's laws, and reading every GPU's profiles
    was ~0.4 CPU s of each process that prices with a measured model)."""
    return _load_compute(profiles_root(root).resolve(), gpu).copy()


def load_network(root: str | Path | None = None, topology: str | None = None) -> pd.DataFrame:
    """Every collective table as one tidy frame (read once per folder; a copy is returned); with
    ``topology`` only that node's tables (a calibration reads one topology's)."""
    return _load_network(profiles_root(root).resolve(), topology).copy()
