"""`tlt model …`: the models tlt knows (the bundled catalog), one model's shape, and fetching a config.json.

``tlt model list`` shows the catalog (:mod:`tltcore.model_catalog`) with each model's cost-relevant
numbers, source and licence; ``tlt model show NAME|PATH`` the shape a ``--model`` value resolves to
(preset, catalog hub id or config.json); ``tlt model fetch ORG/NAME`` downloads a config.json from the
Hugging Face hub (:mod:`tltcore.model_fetch`: bounded, checked before it is written, never replacing a
file tlt did not write).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="The models tlt knows: the bundled catalog, a model's shape, fetching a config.json.",
                  no_args_is_help=True)


def _b(n: float) -> str:
    """A parameter count in billions (``30.53B``)."""
    return f"{n / 1e9:,.2f}B" if n >= 1e9 else f"{n / 1e6:,.0f}M"


def _experts(shape) -> str:
    m = shape.moe
    if m is None:
        return "-"
    shared = f" + shared {m.shared_intermediate_size}" if m.shared_intermediate_size else ""
    return f"{m.experts_per_token}/{m.num_experts} x {m.expert_intermediate_size}{shared}"


@app.command("list")
def list_models() -> None:
    """Show the bundled catalog: each model's hub id, family, layers, experts, total and active
    parameters, weight dtype, KV bytes per token, licence and source. Any of them works offline as
    --model ORG/NAME (or NAME alone).

    Example: tlt model list
    """
    from tltcore.model_catalog import catalog
    from tltcore.model_shape import catalog_shape

    table = Table(title="Model catalog (architecture fields of each config.json; --model takes the hub id)")
    for col in ("hub id", "family", "layers", "experts (k/E x width)", "total", "active", "weights", "KV B/token",
                "licence", "source"):
        table.add_column(col, overflow="fold")
    for hub_id, entry in catalog().items():
        shape, cfg = catalog_shape(hub_id), entry.model_config()
        table.add_row(hub_id, cfg.family, str(shape.num_hidden_layers), _experts(shape), _b(shape.total_params),
                      _b(shape.active_params), shape.weight_dtype, f"{shape.kv_bytes_per_token:,}", entry.license,
                      entry.source)
    Console(width=None if Console().is_terminal else 200).print(table)


def describe(name: str) -> list[tuple[str, str]]:
    """``(label, value)`` lines of what ``--model name`` resolves to: the shape and where it came from."""
    from tltcore.model_catalog import CatalogModel
    from tltcore.model_config import ModelConfig
    from tltcore.model_fetch import fetched_from
    from tltcore.model_shape import resolve_model

    shape, origin = resolve_model(name)
    cfg = None
    if isinstance(origin, CatalogModel):
        cfg = origin.model_config()
        source = f"catalog: {origin.source} (licence: {origin.license}; {origin.checked})"
    elif origin is not None:
        cfg = ModelConfig.from_json(origin)
        record = fetched_from(origin)
        source = f"{origin}" + (f" (tlt model fetch: {record['url']})" if record else "")
    else:
        source = "preset (the public config.json values, tltcore/model_shape.py)"
    family = cfg.family if cfg is not None else "dense (preset)"
    if shape.mla is not None:
        m = shape.mla
        attention = (f"multi-head latent attention: {shape.num_attention_heads} heads, q rank "
                     f"{m.q_lora_rank or 'none (direct)'}, kv rank {m.kv_lora_rank}, rope dim {m.qk_rope_head_dim}; "
                     f"caches {m.latent_dim} values per token and layer")
    else:
        attention = (f"{shape.num_attention_heads} query / {shape.num_key_value_heads} KV heads of {shape.head_dim}"
                     + (", q/k RMSNorm" if shape.qk_norm else "") + (", q/k/v biases" if shape.qkv_bias else ""))
    if shape.moe is not None:
        m = shape.moe
        mlp = (f"{shape.moe_layers} MoE layers: {m.experts_per_token} of {m.num_experts} routed experts of width "
               f"{m.expert_intermediate_size} per token" + (f", shared experts of width {m.shared_intermediate_size}"
                                                           if m.shared_intermediate_size else "")
               + (f"; {m.dense_layers} dense layers of width {shape.intermediate_size}" if m.dense_layers else ""))
    else:
        mlp = f"dense SwiGLU of width {shape.intermediate_size}"
    lines = [
        ("model", f"{shape.name} ({family})"),
        ("layers", f"{shape.num_hidden_layers}, hidden {shape.hidden_size}, vocab {shape.vocab_size:,}"
                   + (", tied embeddings" if shape.tie_word_embeddings else "")),
        ("attention", attention),
        ("MLP", mlp),
        ("parameters", f"{_b(shape.total_params)} total, {_b(shape.active_params)} active per token (embeddings "
                       "counted in both)"),
        ("weights", f"{shape.weight_dtype}: {shape.weight_bytes / 1e9:,.1f} GB"),
        ("KV cache", f"{shape.kv_bytes_per_token:,} bytes per token (bf16, all layers)"),
    ]
    if shape.mtp_layers:
        lines.append(("MTP modules", f"{shape.mtp_layers} (multi-token prediction, shipped with the checkpoint)"))
    if cfg is not None and cfg.model_type not in ("llama", "mistral", "qwen2", "qwen3"):
        lines.append(("native engine", "not built by tlt real (the simulator prices it)"))
    lines.append(("source", source))
    return lines


@app.command("show")
def show(name: Annotated[str, typer.Argument(help="Preset, catalog hub id (tlt model list) or a config.json / "
                                             "model folder.")]) -> None:
    """Show the shape a --model value resolves to: layers, attention, experts, total and active
    parameters, weight bytes, KV bytes per token, and where it came from.

    Example: tlt model show Qwen/Qwen3-30B-A3B
    """
    for label, value in describe(name):
        typer.echo(f"{label:<14}{value}")


@app.command("fetch", epilog=(
        "Downloads https://huggingface.co/ORG/NAME/resolve/REVISION/config.json ($HF_ENDPOINT replaces "
        "https://huggingface.co, for a mirror). $HF_TOKEN, when set, is sent as a bearer token to that host only "
        "and never printed. $TLT_FETCH_TIMEOUT bounds the whole download (seconds, default 60)."))
def fetch(repo_id: Annotated[str, typer.Argument(metavar="ORG/NAME", help="Hub model id, e.g. Qwen/Qwen3-8B.")],
          out: Annotated[Path | None, typer.Option(help="Where to write it (default NAME/config.json; a folder gets "
                                                   "config.json inside). An existing file is replaced only if tlt "
                                                   "model fetch wrote it.")] = None,
          revision: Annotated[str, typer.Option(help="Branch, tag or commit.")] = "main") -> None:
    """Download a model's config.json from the Hugging Face hub, check it with tlt's reader, write it.

    A page that is not a config.json (an HTML error or login page, a JSON without model_type, a family tlt
    cannot read) is refused and nothing is written. Use the file with --model PATH.

    Example: tlt model fetch Qwen/Qwen3-8B --out models/Qwen3-8B/config.json
    """
    from tltcore.model_fetch import config_url
    from tltcore.model_fetch import fetch as fetch_config

    config_url(repo_id, revision)  # a malformed id fails before anything else
    target = out if out is not None else Path(repo_id.rsplit("/", 1)[-1]) / "config.json"
    if target.is_dir():
        target = target / "config.json"
    done = fetch_config(repo_id, target, revision=revision)
    typer.echo(f"fetched {repo_id} ({revision}): {done.message()}")
    typer.echo(f"use it: tlt sim run --model {done.path}")
