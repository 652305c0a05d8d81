"""`tlt cost …`: cost tables from the cost model calibrated on measured GPU profiles.

``tlt cost build --gpu H100 --model Qwen2.5-7B --tp 1 --out table.parquet`` prices a grid of decode,
verify, draft-step, SD and prefill iterations with :func:`tltcore.cost.measured.measured_cost_model`
and writes them as a cost table (:mod:`tltcore.cost.table`), which a scenario reads with
``cost.model = "table"`` (``cost.model = "measured"`` prices the same model directly, without a table).
The file is written atomically, and an existing file is replaced only if
``tlt cost build`` wrote it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tltcore.errors import InputError

app = typer.Typer(help="Cost tables from the cost model calibrated on measured GPU profiles.", no_args_is_help=True)

WRITER = "tlt cost build"
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXTS = (0, 256, 1024, 4096, 16384, 32768)
DEFAULT_SHAPES = ("8_4_48", "8_4_32", "8_4_16", "8_4_8")  # BEG-MAB's published arms
#: verify and draft-step rows let a table price SD shapes it has no whole-iteration rows for (every chain
#: k_1_k of the vllm-table policy up to 64, and wider trees)
VERIFY_TOKENS = (*range(1, 65), 80, 96, 128, 192, 256)
TOPKS = (*range(1, 9), 10, 12, 16)


def _written_by_us(path: Path) -> bool:
    """Whether ``path`` is a Parquet table whose metadata says ``tlt cost build`` wrote it."""
    try:
        import pyarrow.parquet as pq

        from tltcore.cost.table import META_KEY

        raw = (pq.read_schema(path).metadata or {}).get(META_KEY)
        meta = json.loads(raw) if raw else {}
    except Exception:  # anything unreadable is not ours
        return False
    return isinstance(meta, dict) and meta.get("writer") == WRITER


def resolve_gpu(name: str):
    """The GPU spec called ``name``; an unknown name is one line with the closest known ones."""
    from tltcore.config import suggest
    from tltcore.cost.measured import gpu_names, gpu_spec

    try:
        return gpu_spec(name)
    except InputError:
        names = ["H100", "A100", *gpu_names()]
        raise InputError(f"unknown GPU '{name}'{suggest(name, names)}; known: {', '.join(gpu_names())}",
                         field="--gpu") from None


def resolve_model(name: str):
    """The model shape called ``name`` (a preset, a catalog hub id or a config.json); unknown is one line with
    suggestions."""
    from tltcore.config import suggest
    from tltcore.model_catalog import catalog
    from tltcore.model_shape import MODEL_HELP, MODEL_NAMES, get_model

    try:
        return get_model(name)
    except InputError as exc:
        if exc.path is not None:  # a file's own error: the file and its key, and the option that named it
            raise InputError(f"{exc.message} (--model)" if exc.field else exc.message, path=exc.path,
                             field=exc.field or "--model") from None
        if exc.field != "model":
            raise
        raise InputError(f"unknown model '{name}'{suggest(name, [*MODEL_NAMES, *catalog()])}; presets: "
                         f"{', '.join(MODEL_NAMES)}; {MODEL_HELP}", field="--model") from None


def _ints(values: list[int] | None, default: tuple[int, ...], flag: str, lo: int, hi: int) -> tuple[int, ...]:
    out = tuple(sorted(set(values))) if values else default
    if any(not lo <= v <= hi for v in out):
        raise InputError(f"values must be in [{lo}, {hi}], got {list(out)}", field=flag)
    return out


def build_rows(model, batches: tuple[int, ...], contexts: tuple[int, ...], shapes) -> list[dict]:
    """Cost-table rows (:data:`tltcore.cost.table.TABLE_KINDS`) priced by ``model``."""
    import numpy as np

    rows: list[dict] = []
    verify = sorted({*VERIFY_TOKENS, *(s.verify_tokens for s in shapes)})
    topks = sorted({*TOPKS, *(s.topk for s in shapes)})
    zeros = {b: np.zeros(b, dtype=np.int64) for b in batches}
    for b in batches:
        rows.append({"kind": "sd_overhead", "batch_size": b, "context": 0,
                     "seconds": model.sd_overhead_s + model.iteration_overhead_s})
        for c in contexts:
            ctx = np.full(b, c, dtype=np.int64)
            rows.append({"kind": "decode", "batch_size": b, "context": c, "seconds": model.decode_time(ctx)})
            for v in verify:
                rows.append({"kind": "verify", "batch_size": b, "context": c, "verify_tokens": v,
                             "seconds": model.verify_time(ctx, v)})
            for k in topks:
                rows.append({"kind": "draft_step", "batch_size": b, "context": c, "topk": k,
                             "seconds": model.draft_step_time(ctx, k) + model.draft_step_overhead_s})
            for s in shapes:
                rows.append({"kind": "sd", "batch_size": b, "context": c, "depth": s.depth, "topk": s.topk,
                             "verify_tokens": s.verify_tokens, "seconds": model.sd_time(ctx, s)})
            rows.append({"kind": "prefill", "batch_size": b, "context": c,
                         "seconds": model.prefill_time(ctx, zeros[b])})
            rows.append({"kind": "drafter_prefill", "batch_size": b, "context": c,
                         "seconds": model.drafter_prefill_time(ctx, zeros[b])})
    return rows


@app.command()
def build(
    gpu: Annotated[str, typer.Option(help="GPU with measured profiles: H100, A100 or A40.")],
    model: Annotated[str, typer.Option(help="Model preset (e.g. Qwen2.5-7B), catalog hub id (tlt model list) "
                                      "or a path to an HF config.json.")],
    out: Annotated[Path, typer.Option(help="The table to write (.parquet); an existing file is replaced only if "
                                      "tlt cost build wrote it.")],
    tp: Annotated[int, typer.Option(help="Tensor-parallel GPUs per rollout instance.")] = 1,
    batch: Annotated[list[int] | None, typer.Option(help="Batch sizes of the grid (repeatable).")] = None,
    context: Annotated[list[int] | None, typer.Option(help="Context lengths of the grid (repeatable; 0 is always "
                                                      "added: a per-request table lookup needs it).")] = None,
    shape: Annotated[list[str] | None, typer.Option(help="Draft shapes depth_topk_verify priced as whole SD "
                                                    "iterations (repeatable; default BEG-MAB's arms).")] = None,
    profiles: Annotated[Path | None, typer.Option(help="Folder holding vidur/ (default: $TLT_GPU_PROFILES, "
                                                  "else ../shared/gpu-profiles).")] = None,
    collectives: Annotated[str, typer.Option(help="TP all-reduce times: 'measured' (the node's measured NCCL "
                                             "table) or 'analytic' (latency + ring bandwidth, as with a custom "
                                             "all-reduce in CUDA graphs).")] = "measured",
) -> None:
    """Write a cost table priced by the cost model calibrated on measured GPU profiles."""
    from tltcore.atomic import check_output_file
    from tltcore.policy.base import SDConfig

    spec = resolve_gpu(gpu)
    shape_ = resolve_model(model)
    if not 1 <= tp <= 64:
        raise InputError(f"must be in [1, 64], got {tp}", field="--tp")
    if shape_.num_attention_heads % tp:
        raise InputError(f"must divide {shape_.name}'s {shape_.num_attention_heads} attention heads, got {tp}",
                         field="--tp")
    batches = _ints(batch, DEFAULT_BATCHES, "--batch", 1, 4096)
    contexts = tuple(sorted({0, *_ints(context, DEFAULT_CONTEXTS, "--context", 0, 1 << 20)}))
    shapes = []
    for text in shape or DEFAULT_SHAPES:
        try:
            s = SDConfig.parse(text)
        except (InputError, ValueError) as exc:
            raise InputError(f"'{text}': {getattr(exc, 'message', exc)}", field="--shape") from None
        if not s.enabled:
            raise InputError(f"'{text}' is no draft shape; give depth_topk_verify, e.g. 8_4_32", field="--shape")
        shapes.append(s)
    if out.suffix.lower() != ".parquet":
        raise InputError("the cost table is written as Parquet: give a .parquet path", field="--out")
    check_output_file(out, writer="tlt cost build", written_by=_written_by_us)
    if not out.expanduser().parent.is_dir():
        raise InputError(f"folder {out.expanduser().parent} does not exist; create it first (a typo must not "
                         "scatter tables)", path=out, field="--out")
    from tltcore.cost.measured import COLLECTIVE_SOURCES

    if collectives not in COLLECTIVE_SOURCES:
        raise InputError(f"must be one of {', '.join(COLLECTIVE_SOURCES)}, got '{collectives}'", field="--collectives")
    write_cost_table(spec, shape_, tp, out, batches, contexts, tuple(shapes), profiles, collectives)


def write_cost_table(spec, shape, tp: int, out: Path, batches, contexts, shapes, profiles: Path | None,
                     collectives: str = "measured") -> None:
    import platform
    from datetime import UTC, datetime

    import tltcore
    from tltcli.validate import command_line
    from tltcore.cost import shape_fingerprint, table_frame, write_table
    from tltcore.cost.measured import PROFILE_GPUS, gpu_spec, measured_cost_model, profile_key

    if profile_key(spec) is None:
        profiled = ", ".join(gpu_spec(n).name for n in PROFILE_GPUS.values())
        raise InputError(f"no measured profiles for {spec.name} (profiled: {profiled}): a table of it would be no "
                         "measurement; a scenario on it needs none (cost.model = \"measured\" borrows the nearest "
                         "measured GPU's calibration and says so, \"roofline\" prices its data sheet)", field="--gpu")
    cm = measured_cost_model(shape, spec, tp, profiles=profiles, collectives=collectives)
    if not cm.measured:
        raise InputError(f"cannot calibrate {spec.name}: {cm.source}", field="--profiles")
    df = table_frame(build_rows(cm, batches, contexts, shapes))
    meta = {"device": spec.name, "model": shape_fingerprint(shape), "tp": str(tp), "dtype": "bfloat16",
            "context_rule": "sum", "engine": "measured-cost-model", "writer": WRITER, "source": cm.describe(),
            "versions": f"tlt {tltcore.__version__}, python {platform.python_version()}",
            "date": datetime.now(UTC).strftime("%Y-%m-%d"), "command": command_line()}
    write_table(df, meta, out)
    typer.echo(f"{len(df)} rows -> {out} ({cm.describe()})")
