"""Tokens/s of the native engine on CPU: batch x SD off/on x drafter (random EAGLE layer / oracle).

The oracle drafter is the target itself (every greedy draft accepted up to rounding): an upper bound
on acceptance, at the price of target-sized draft steps. The random drafter is an untrained EAGLE
layer (nearly nothing accepted): the overhead floor. Greedy decoding, random weights, one thread.

    OMP_NUM_THREADS=1 python benchmarks/real_bench.py            # 4 layers, hidden 256, batch 1/4/16/64
    python benchmarks/real_bench.py --batches 1,4 --max-tokens 16 --sd 3_1_3   # a quick look
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--batches", default="1,4,16,64")
    parser.add_argument("--sd", default="4_1_4,4_2_8", help="SD configs to compare with SD off")
    parser.add_argument("--drafters", default="random,oracle")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--init-std", type=float, default=0.02)
    parser.add_argument("--triton", action="store_true", help="use the Triton kernels (GPU, or interpreter)")
    args = parser.parse_args(argv)

    import torch

    from tltcore.model_config import ModelConfig
    from tltreal.engine.generate import GenerateSettings, build_target, generate
    from tltreal.spec_decode import kernels

    torch.set_num_threads(args.threads)
    kernels.set_use_triton(args.triton)
    cfg = ModelConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads)
    base = GenerateSettings(max_tokens=args.max_tokens, prompt_len=args.prompt_len, init_std=args.init_std)
    target = build_target(cfg, base)
    generate(cfg, GenerateSettings(prompts=2, max_tokens=4, policy="static:2_2_3", drafter="random"), target)

    print(f"# {args.layers} layers, hidden {args.hidden}, vocab {args.vocab}, fp32, {args.threads} thread(s), "
          f"greedy, {args.max_tokens} new tokens/request, torch {torch.__version__}")
    print(f"{'batch':>5} {'sd':>7} {'drafter':>8} {'tokens/s':>10} {'accept':>7} {'ms/iter':>8} {'speedup':>8}")
    for batch in (int(b) for b in args.batches.split(",")):
        runs = [("off", "none")] + [(sd, d) for sd in args.sd.split(",") for d in args.drafters.split(",")]
        baseline = None
        for sd, drafter in runs:
            policy = "no-sd" if sd == "off" else f"static:{sd}"
            settings = GenerateSettings(prompts=batch, max_tokens=args.max_tokens, prompt_len=args.prompt_len,
                                        policy=policy, drafter=drafter, init_std=args.init_std)
            result = generate(cfg, settings, target)
            dec = result.decode_events
            tps = dec["tokens"].sum() / (dec["t_end"] - dec["t_start"]).sum()  # decode throughput
            baseline = baseline or tps
            print(f"{batch:>5} {sd:>7} {drafter:>8} {tps:>10.1f} {result.mean_accept_length:>7.2f} "
                  f"{result.mean_iteration_s * 1e3:>8.2f} {tps / baseline:>7.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
