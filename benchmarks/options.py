"""What the benchmarks share: the typer options of a small random-weight target (one definition
instead of an argparse block per script) and comma-separated integer lists.

Each benchmark is a typer app, as the ``tlt`` CLI is, so ``--help`` and bad values read the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

Layers = Annotated[int, typer.Option(help="Target decoder layers.")]
Hidden = Annotated[int, typer.Option(help="Target hidden size (MLP width 8/3 of it).")]
Heads = Annotated[int, typer.Option(help="Attention heads.")]
KvHeads = Annotated[int, typer.Option(help="Key/value heads (grouped-query attention).")]
Vocab = Annotated[int, typer.Option(help="Vocabulary size.")]
Batches = Annotated[str, typer.Option(help="Batch sizes, comma-separated.")]
PromptLen = Annotated[int, typer.Option(help="Prompt tokens per request.")]
MaxTokens = Annotated[int, typer.Option(help="New tokens per request.")]
Threads = Annotated[int, typer.Option(help="torch threads.")]


@dataclass(frozen=True)
class TinyTarget:
    """A small Llama-shaped target with random weights (real timings for its shape)."""

    layers: int = 4
    hidden: int = 256
    heads: int = 8
    kv_heads: int = 4
    vocab: int = 1024

    def model_config(self, max_position_embeddings: int | None = None):
        from tltcore.model_config import ModelConfig

        extra = {} if max_position_embeddings is None else {"max_position_embeddings": max_position_embeddings}
        return ModelConfig(vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.hidden * 8 // 3,
                           num_hidden_layers=self.layers, num_attention_heads=self.heads,
                           num_key_value_heads=self.kv_heads, **extra)

    def describe(self) -> str:
        return f"{self.layers} layers, hidden {self.hidden}, heads {self.heads}/{self.kv_heads}, vocab {self.vocab}"


def int_list(text: str, option: str) -> list[int]:
    """``"1,4,16"`` → ``[1, 4, 16]``; anything else is a usage error naming ``option``."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=option) from None
    if not values or min(values) < 1:
        raise typer.BadParameter(f"expected positive integers, got {text!r}", param_hint=option)
    return values


def run(app: typer.Typer) -> None:
    """Run a benchmark's app; a bad input (:class:`tltcore.errors.InputError`) is one line and exit 2,
    as in the ``tlt`` CLI, not a traceback."""
    from tltcore.errors import InputError

    try:
        app()
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
