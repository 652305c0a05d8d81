"""Tokens/s of the native engine on CPU: batch x SD off/on x drafter (random EAGLE layer / oracle).

The oracle drafter is the target itself (every greedy draft accepted up to rounding): an upper bound
on acceptance, at the price of target-sized draft steps. The random drafter is an untrained EAGLE
layer (nearly nothing accepted): the overhead floor. Greedy decoding, random weights, one thread.

    OMP_NUM_THREADS=1 python benchmarks/real_bench.py            # 4 layers, hidden 256, batch 1/4/16/64
    python benchmarks/real_bench.py --batches 1,4 --max-tokens 16 --sd 3_1_3   # a quick look
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import options as opt
from options import TinyTarget, int_list, run

os.environ.setdefault("OMP_NUM_THREADS", "1")


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def main(
    layers: opt.Layers = 4, hidden: opt.Hidden = 256, heads: opt.Heads = 8, kv_heads: opt.KvHeads = 4,
    vocab: opt.Vocab = 1024,
    batches: opt.Batches = "1,4,16,64",
    sd: Annotated[str, typer.Option(help="SD configs (depth_topk_verify) to compare with SD off.")] = "4_1_4,4_2_8",
    drafters: Annotated[str, typer.Option(help="Drafters, comma-separated: random, oracle.")] = "random,oracle",
    max_tokens: opt.MaxTokens = 32, prompt_len: opt.PromptLen = 32, threads: opt.Threads = 1,
    init_std: Annotated[float, typer.Option(help="Std of the random weights.")] = 0.02,
    triton: Annotated[bool, typer.Option(help="Use the Triton kernels (GPU, or interpreter).")] = False,
) -> None:
    target_shape = TinyTarget(layers, hidden, heads, kv_heads, vocab)
    batch_sizes = int_list(batches, "--batches")
    runs = [("off", "none")] + [(shape, d) for shape in sd.split(",") for d in drafters.split(",")]

    import torch

    from tltreal.engine.generate import GenerateSettings, build_target, generate
    from tltreal.spec_decode import kernels

    torch.set_num_threads(threads)
    kernels.set_use_triton(triton)
    cfg = target_shape.model_config()
    base = GenerateSettings(max_tokens=max_tokens, prompt_len=prompt_len, init_std=init_std)
    target = build_target(cfg, base)
    generate(cfg, GenerateSettings(prompts=2, max_tokens=4, policy="static:2_2_3", drafter="random"), target)

    print(f"# {target_shape.describe()}, fp32, {threads} thread(s), "
          f"greedy, {max_tokens} new tokens/request, torch {torch.__version__}")
    print(f"{'batch':>5} {'sd':>7} {'drafter':>8} {'tokens/s':>10} {'accept':>7} {'ms/iter':>8} {'speedup':>8}")
    for batch in batch_sizes:
        baseline = None
        for shape, drafter in runs:
            policy = "no-sd" if shape == "off" else f"static:{shape}"
            settings = GenerateSettings(prompts=batch, max_tokens=max_tokens, prompt_len=prompt_len,
                                        policy=policy, drafter=drafter, init_std=init_std)
            result = generate(cfg, settings, target)
            dec = result.decode_events
            tps = dec["tokens"].sum() / (dec["t_end"] - dec["t_start"]).sum()  # decode throughput
            baseline = baseline or tps
            print(f"{batch:>5} {shape:>7} {drafter:>8} {tps:>10.1f} {result.mean_accept_length:>7.2f} "
                  f"{result.mean_iteration_s * 1e3:>8.2f} {tps / baseline:>7.2f}x", flush=True)


if __name__ == "__main__":
    run(app)
