"""How lossless is greedy speculative decoding in each dtype? Measured, not promised.

For float64, float32 and bfloat16, and random weights at two scales (peaked and flat next-token
distributions): 32 random prompts x 64 new tokens through a random-weight Llama (4 layers, hidden
128). The reference is plain decoding with all 32 prompts in one batch.

* floor: plain decoding again, 3 requests at a time -- the same maths in different batch shapes,
  so any divergence is numerics (BLAS blocking, padding), not speculation;
* SD: oracle chain 4_1_4, noisy-oracle tree 5_3_10 and random-drafter tree 4_2_6, 8 at a time.

A prompt "diverges" when its greedy output differs from the reference anywhere. SD is lossless in a
dtype when it diverges no more than the floor does: SD changes the shapes of the forwards (tree
verification, batch composition), never the decision rule.

    OMP_NUM_THREADS=1 python benchmarks/losslessness.py --out reports/losslessness
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import torch
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from options import run

from tltcore.model_config import ModelConfig
from tltcore.policy.base import NoSD, SDConfig, SDPolicy, Static
from tltreal.engine.engine import Engine
from tltreal.engine.engine_config import EngineConfig
from tltreal.model.transformer import Transformer
from tltreal.model.weights import random_model
from tltreal.spec_decode.proposers import OracleDrafter, random_drafter

CFG = ModelConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2)
DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}
N_PROMPTS, N_NEW = 32, 64
# Random weights at two scales: peaked next-token distributions (large logit margins) and flat ones,
# where near-ties are common and rounding decides more argmaxes.
INIT_STDS = {0.1: "peaked logits", 0.02: "flat logits"}


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, CFG.vocab_size, (int(torch.randint(3, 20, (1,), generator=g)),), generator=g).tolist()
            for _ in range(N_PROMPTS)]


def _run(target: Transformer, policy: SDPolicy, drafter, batch: int) -> dict[int, list[int]]:
    engine = Engine(target, policy, drafter, EngineConfig(max_batch=batch, max_len=20 + N_NEW + 2, max_verify=16,
                                                          max_draft_nodes=16))
    for p in _prompts():
        engine.add_request(p, N_NEW)
    return engine.run().outputs


def _divergence(ref: dict[int, list[int]], out: dict[int, list[int]]) -> tuple[int, float]:
    firsts = []
    for rid, tokens in ref.items():
        other = out[rid]
        diff = [i for i, (a, b) in enumerate(zip(tokens, other, strict=True)) if a != b]
        if diff:
            firsts.append(diff[0])
    return len(firsts), float(np.median(firsts)) if firsts else float("nan")


def _ablate_norm() -> None:
    """Break-it check: RMSNorm in the input's dtype (the engine before it upcast like transformers)."""
    from tltreal.model import transformer as model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    model.RMSNorm.forward = forward


def measure(dtypes: dict[str, torch.dtype] = DTYPES) -> pd.DataFrame:
    rows = []
    variants: list[tuple[str, Callable[[Transformer], tuple[SDPolicy, object]], int]] = [
        ("floor: plain, batch 3", lambda t: (NoSD(), None), 3),
        ("SD oracle chain 4_1_4", lambda t: (Static(SDConfig(4, 1, 4)), OracleDrafter(t)), 8),
        ("SD noisy-oracle tree 5_3_10", lambda t: (Static(SDConfig(5, 3, 10)), OracleDrafter(t, noise=0.3)), 8),
        ("SD random-drafter tree 4_2_6", lambda t: (Static(SDConfig(4, 2, 6)), random_drafter(t, seed=3)), 8),
    ]
    for std, logits in INIT_STDS.items():
        for name, dtype in dtypes.items():
            target = random_model(CFG, seed=1, dtype=dtype, std=std)
            ref = _run(target, NoSD(), None, N_PROMPTS)
            for label, build, batch in variants:
                policy, drafter = build(target)
                n, first = _divergence(ref, _run(target, policy, drafter, batch))
                rows.append({"weights": f"std {std} ({logits})", "dtype": name, "run": label, "prompts_diverging": n,
                             "of": N_PROMPTS, "median_first_divergent_token": first})
                print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def write(out: Path, df: pd.DataFrame) -> None:
    from tltcore.atomic import atomic_dir, write_text

    lines = ["| weights | dtype | run | prompts diverging from the reference | median first divergent token |",
             "|---|---|---|---|---|"]
    for r in df.itertuples(index=False):
        first = "-" if np.isnan(r.median_first_divergent_token) else f"{r.median_first_divergent_token:.0f}"
        lines.append(f"| {r.weights} | {r.dtype} | {r.run} | {r.prompts_diverging} / {r.of} | {first} |")
    text = "\n".join([
        "# Greedy losslessness per dtype (measured)",
        "",
        "Reproduce: `OMP_NUM_THREADS=1 python benchmarks/losslessness.py --out reports/losslessness` "
        f"(CPU, torch {torch.__version__}, Python {platform.python_version()}).",
        "",
        f"Random-weight Llama (4 layers, hidden 128, vocab 512; weights N(0, std), std 0.1: peaked next-token "
        f"distributions, 0.02: flat ones with many near-ties), {N_PROMPTS} prompts x {N_NEW} new tokens. "
        "Reference: plain greedy decoding, all prompts in one batch. The floor row is plain decoding again in "
        "batches of 3: what batch shape alone does to the numerics. SD rows run 8 at a time.",
        "",
        *lines,
        "",
        "The last rows are a break-it check: the same bf16 runs with RMSNorm computed in bf16 (as the engine "
        "did before it upcast like transformers). Batch shape alone then changes most greedy outputs.",
        "",
        "Reading: where the floor is 0, SD must be 0 too, and is (bit-identical output). Where the floor is "
        "not 0, the dtype's rounding already makes greedy output depend on the batch shape, and SD -- which "
        "changes the shapes of the forwards -- diverges at a similar rate: not a speculation error, a property "
        "of greedy decoding in that dtype. The engine computes RMSNorm, attention softmax and acceptance "
        "probabilities in float32 for half-precision models, as transformers does.",
        "",
    ])
    with atomic_dir(out, kind="benchmark") as tmp:
        write_text(tmp / "README.md", text)
        write_text(tmp / "losslessness.csv", df.to_csv(index=False))


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def main(out: Annotated[Path, typer.Option(help="Report folder (created; never one tlt did not create).")]
         = Path("reports/losslessness")) -> None:
    torch.set_num_threads(1)
    df = measure()
    _ablate_norm()
    ablated = measure({"bfloat16": torch.bfloat16}).assign(dtype="bfloat16, RMSNorm in bf16 (ablation)")
    write(out, pd.concat([df, ablated], ignore_index=True))


if __name__ == "__main__":
    run(app)
