"""`tlt real …`: real execution with the native engine. Imports torch lazily inside commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tltsim.errors import InputError

app = typer.Typer(help="Run the real engine (needs the `real` extra: torch, triton).", no_args_is_help=True)


@app.callback()
def _real() -> None:
    """Real execution: native PyTorch/Triton engine with lossless tree speculative decoding."""


@app.command()
def generate(
    config: Annotated[Path, typer.Option("--config", help="HF config.json of the target (Llama / Qwen2).")],
    prompts: Annotated[int, typer.Option("--prompts", help="Number of random prompts.")] = 8,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="New tokens per prompt.")] = 64,
    policy: Annotated[str, typer.Option("--policy", help="SD policy spec, e.g. no-sd, static:4_2_6, "
                                        "elastic+beg-mab.")] = "no-sd",
    drafter: Annotated[str, typer.Option("--drafter", help="random | oracle | ngram (model-free, chain "
                                         "shapes only) | none")] = "random",
    batch: Annotated[int, typer.Option("--batch", help="Max running batch (0: all prompts).")] = 0,
    prompt_len: Annotated[int, typer.Option("--prompt-len", help="Max prompt length (random tokens).")] = 16,
    temperature: Annotated[float, typer.Option("--temperature", help="0 = greedy.")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p")] = 1.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    dtype: Annotated[str, typer.Option("--dtype", help="float32 | float64 | bfloat16 | float16")] = "float32",
    weights: Annotated[Path | None, typer.Option("--weights", help="safetensors file or folder (default: "
                                                 "random weights from --seed).")] = None,
    triton: Annotated[bool | None, typer.Option("--triton/--no-triton", help="Use the Triton kernels "
                                                "(default: when CUDA is available).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the event log here (.parquet or .csv); the "
                                             "generated tokens go beside it as <stem>.tokens.jsonl.")] = None,
    prompts_file: Annotated[Path | None, typer.Option("--prompts-file", help="JSONL prompts, one per line: [ids], "
                                                      '{"tokens": [ids]} or {"text": "..."} (needs --tokenizer); '
                                                      "replaces --prompts/--prompt-len.")] = None,
    tokenizer: Annotated[Path | None, typer.Option("--tokenizer", help="Local tokenizer folder for text prompts.")]
    = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Do not stop at the config's eos_token_id "
                                             "(every request runs to --max-tokens).")] = False,
) -> None:
    """Generate from random prompts or a prompts file; print tokens/s, mean accept length and latency
    per iteration, and with --out write the event log and the generated tokens."""
    from tltsim.atomic import check_output_file

    if out is not None:  # before loading anything: a bad --out fails in milliseconds
        check_output_file(out)
        if out.suffix not in (".parquet", ".csv"):
            raise InputError(f"'{out.suffix or out.name}' is not .parquet or .csv", field="--out")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("the real engine needs torch: pip install 'tlt[real]'") from None
    from tltreal import kernels
    from tltreal.generate import GenerateSettings, write_results
    from tltreal.generate import generate as run_generate
    from tltsim.model_config import ModelConfig
    from tltsim.policy.registry import make_policy
    from tltsim.policy.shapes import policy_shapes

    cfg = ModelConfig.from_json(config)
    settings = GenerateSettings(prompts=prompts, max_tokens=max_tokens, prompt_len=prompt_len, policy=policy,
                                drafter=drafter, max_batch=batch, temperature=temperature, top_p=top_p,
                                seed=seed, dtype=dtype, weights=str(weights) if weights else None,
                                prompts_file=str(prompts_file) if prompts_file else None,
                                tokenizer=str(tokenizer) if tokenizer else None, ignore_eos=ignore_eos)
    kernels.set_use_triton(triton)
    result = run_generate(cfg, settings)
    dec = result.decode_events
    lat = (dec["t_end"] - dec["t_start"]) * 1e3
    used = drafter if policy_shapes(make_policy(policy)) else "none"  # a policy that never drafts gets none
    typer.echo(f"policy {policy}  drafter {used}  requests {len(result.outputs)}  generated {result.generated_tokens} "
               f"tokens in {result.wall_s:.3f} s")
    typer.echo(f"tokens/s            {result.tokens_per_s:,.1f}")
    typer.echo(f"mean accept length  {result.mean_accept_length:.3f}")
    typer.echo(f"decode iterations   {len(dec)}  (SD on in {int((dec['depth'] > 0).sum())})")
    if len(dec):
        typer.echo(f"latency/iteration   mean {lat.mean():.2f} ms  p50 {lat.median():.2f} ms  "
                   f"p99 {lat.quantile(0.99):.2f} ms")
    if out is not None:
        write_results(result, settings, cfg, out)
        typer.echo(f"events -> {out}, tokens -> {out.with_name(out.stem + '.tokens.jsonl')}")


@app.command()
def rl(
    out: Annotated[Path, typer.Option("--out", help="Run folder to write (steps.csv, trace.csv, "
                                      "drafter_dynamics.json, figures, README.md).")],
    seed: Annotated[int, typer.Option("--seed", help="Every random choice of the run comes from it.")] = 0,
    steps: Annotated[int, typer.Option("--steps", help="RL steps.")] = 20,
    prompts: Annotated[int, typer.Option("--prompts", help="Prompts per step (each answered 8 times).")] = 8,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Response cap (tokens).")] = 400,
    pretrained: Annotated[Path | None, typer.Option("--pretrained", help="A folder written by "
                                                    "`python -m tltreal.pretrain` (default: pre-train now).")]
    = None,
    pretrain_steps: Annotated[int, typer.Option("--pretrain-steps", help="Pre-training steps when no "
                                                "--pretrained folder is given.")] = 600,
    lr: Annotated[float, typer.Option("--lr", help="GRPO learning rate.")] = 1e-4,
    drafter_lr: Annotated[float, typer.Option("--drafter-lr", help="The Spot Trainer's learning rate "
                                              "(online adaptation of the trained drafter).")] = 1e-4,
    bubble: Annotated[str, typer.Option("--bubble", help="spot: train until the rollout ends (TLT); budget: "
                                        "a fixed number of steps per step (repeatable).")] = "spot",
    workers: Annotated[int, typer.Option("--workers", help="Rollout worker processes.")] = 2,
    speedup_every: Annotated[int, typer.Option("--speedup-every", help="Measure the padded target's SD "
                                               "speedup every N steps (0: never).")] = 5,
    eval_prompts: Annotated[int, typer.Option("--eval-prompts", help="Prompts the two drafters are "
                                              "measured on each step.")] = 48,
    tiny: Annotated[bool, typer.Option("--tiny", help="A few-second smoke-test run: a 2-layer 64-wide policy "
                                       "pre-trained for --pretrain-steps, small drafter budgets.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Write into an existing folder tlt did not create.")]
    = False,
) -> None:
    """A real GRPO run with TLT's adaptive drafter trained by the Spot Trainer beside a static drafter;
    writes per-step accept lengths, bubble training and SD speedups, our own RL trace, the simulator's
    drafter dynamics fitted to the run, and a report with figures."""
    import shlex

    from tltsim.atomic import check_output_dir

    check_output_dir(out, force)  # before the expensive work
    from analysis.adaptive_report import write_report
    from tltreal.adaptive_run import AdaptiveRunConfig, run_adaptive
    from tltreal.grpo import GRPOConfig
    from tltreal.pretrain import PretrainConfig

    pre = PretrainConfig(steps=pretrain_steps, seed=seed)
    extra: dict[str, object] = {}
    if tiny:
        pre = PretrainConfig(steps=pretrain_steps, seed=seed, layers=2, hidden=64, intermediate=128, sequences=8)
        extra = {"initial_prompts": 16, "initial_steps": 20, "session_steps": 10, "budget_steps": 5,
                 "checkpoint_every": 2, "pad_layers": 1, "pad_intermediate": 256, "speedup_new_tokens": 16}
    cfg = AdaptiveRunConfig(seed=seed, steps=steps, prompts_per_step=prompts, max_new_tokens=max_new_tokens,
                            pretrain=pre, pretrained=str(pretrained) if pretrained else None,
                            grpo=GRPOConfig(lr=lr), online_lr=drafter_lr, bubble=bubble, workers=workers,
                            speedup_every=speedup_every, eval_prompts=eval_prompts, **extra)  # type: ignore[arg-type]
    given = {"--seed": seed, "--steps": steps, "--prompts": prompts, "--max-new-tokens": max_new_tokens,
             "--pretrained": pretrained, "--pretrain-steps": pretrain_steps, "--lr": lr, "--drafter-lr": drafter_lr,
             "--bubble": bubble, "--workers": workers, "--speedup-every": speedup_every,
             "--eval-prompts": eval_prompts}
    command = " ".join(["tlt real rl", *(["--tiny"] if tiny else []),
                        *(f"{k} {shlex.quote(str(v))}" for k, v in given.items() if v is not None),
                        f"--out {shlex.quote(str(out))}"])
    result = run_adaptive(cfg, out, force=force, log=typer.echo, finish=write_report, command=command)
    typer.echo(f"run -> {result.folder} (README.md, steps.csv, trace.csv, drafter_dynamics.json)")
