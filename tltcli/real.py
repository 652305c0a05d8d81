"""`tlt real …`: real execution with the native engine. Imports torch lazily inside commands.

Every path a command reads or writes is checked here, before torch is imported or a model is built,
so bad input costs milliseconds: inputs must be regular files or folders (a FIFO would block the
read forever, ``/dev/zero`` would fill the memory), and every output -- not only ``--out`` but each
companion file a command writes beside it -- must be writable, must not be one of the inputs, and,
for a companion the user did not name, must be one tlt wrote (``--force`` overwrites it; nothing is
ever deleted).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tltcli.validate import (
    Clock,
    RealBackend,
    check_clock,
    command_line,
    need_torch,
    phase_console,
    target_config,
    torch_device,
)
from tltcore.errors import InputError
from tltcore.input_files import check_input
from tltcore.policy.base import SDConfig
from tltreal.engine.outputs import check_generate_outputs
from tltreal.rl.task import REWARDS

app = typer.Typer(help="Run the real engine (needs the `real` extra: torch, triton).", no_args_is_help=True)

#: bounds of `tlt real rl`'s flags, checked before anything is imported or trained
RL_BOUNDS = {"--steps": (1, 100_000), "--prompts": (1, 4_096), "--pretrain-steps": (1, 10_000_000),
             "--workers": (1, 64), "--speedup-every": (0, 100_000), "--eval-prompts": (1, 100_000),
             "--seed": (0, 2**31 - 1)}
#: a response must fit GRPO's packed row (1024 tokens) beside the task's prompts (at most ~26 tokens)
RL_MAX_NEW_TOKENS = 960


@app.callback()
def _real() -> None:
    """Real execution: native PyTorch/Triton engine with lossless tree speculative decoding."""


def _check_range(values: dict[str, tuple[object, tuple[int, int]]]) -> None:
    for flag, (value, (lo, hi)) in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise InputError(f"must be an integer in [{lo}, {hi:,}], got {value}", field=flag)


def _check_reward(pay: str, terse_share: float) -> None:
    """``--reward`` names one of :data:`tltreal.rl.task.REWARDS`; ``--terse-share`` is a share."""
    if pay not in REWARDS:
        raise InputError(f"must be {', '.join(REWARDS[:-1])} or {REWARDS[-1]}, got '{pay}'", field="--reward")
    if not (math.isfinite(terse_share) and 0 <= terse_share <= 1):
        raise InputError(f"must be a share in [0, 1], got {terse_share}", field="--terse-share")


def _check_pretrained(pretrained: Path | None) -> None:
    """A ``--pretrained`` folder must be a readable folder holding what ``python -m tltreal.rl.pretrain``
    writes (one line naming the missing file otherwise); None is no folder given."""
    if pretrained is None:
        return
    check_input(pretrained, "--pretrained", folder=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (pretrained / name).is_file():
            raise InputError(f"lacks {name}; give a folder written by `python -m tltreal.rl.pretrain --out DIR`",
                             path=pretrained, field="--pretrained")


def _check_rate(value: float, flag: str) -> None:
    if not (math.isfinite(value) and 0 < value <= 1):
        raise InputError(f"must be a learning rate in (0, 1], got {value}", field=flag)


# ---- commands --------------------------------------------------------------------------------------
#: Typer renders help as rich markup, where "[ids]" reads as a style tag and vanishes: escaped.
PROMPTS_FILE_HELP = escape('JSONL prompts, one per line: [ids] (token ids, e.g. [1, 5, 9]), {"tokens": [ids]} or '
                           '{"text": "..."} (needs --tokenizer); replaces --prompts/--prompt-len.')


@app.command()
def generate(
    config: Annotated[Path, typer.Option("--config", help="HF config.json of the target (Llama, Mistral, Qwen2, "
                                         "Qwen3), or its folder. A tiny one ships: examples/tiny-llama/config.json.")],
    prompts: Annotated[int, typer.Option("--prompts", help="Number of random prompts.")] = 8,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="New tokens per prompt.")] = 64,
    policy: Annotated[str, typer.Option("--policy", help="SD policy spec, e.g. no-sd, static:4_2_6, "
                                        "elastic+beg-mab.")] = "no-sd",
    drafter: Annotated[str, typer.Option("--drafter", help="random | oracle | ngram (model-free, chain "
                                         "shapes only) | none")] = "random",
    batch: Annotated[int, typer.Option("--batch", help="Max running batch (0: all prompts).")] = 0,
    prompt_len: Annotated[int, typer.Option("--prompt-len", help="Max prompt length (random tokens).")] = 16,
    temperature: Annotated[float, typer.Option("--temperature", help="0 = greedy.")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling: sample from the smallest set of "
                                         "tokens whose probability reaches this, in (0, 1] (1 = off; unused "
                                         "when greedy).")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the random weights, the random prompts, the "
                                      "random drafter and each request's sampling.")] = 0,
    dtype: Annotated[str, typer.Option("--dtype", help="float32 | float64 | bfloat16 | float16")] = "float32",
    weights: Annotated[Path | None, typer.Option("--weights", help="safetensors file or folder (default: "
                                                 "random weights from --seed).")] = None,
    triton: Annotated[bool | None, typer.Option("--triton/--no-triton", help="Use the Triton kernels "
                                                "(default: when CUDA is available).")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the event log here (.parquet or .csv); beside "
                                             "it go <stem>.tokens.jsonl (the generated tokens) and "
                                             "<stem>.config.json (the settings).")] = None,
    prompts_file: Annotated[Path | None, typer.Option("--prompts-file", help=PROMPTS_FILE_HELP)] = None,
    tokenizer: Annotated[Path | None, typer.Option("--tokenizer", help="Local tokenizer folder for text prompts.")]
    = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Do not stop at the config's eos_token_id "
                                             "(every request runs to --max-tokens).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite <stem>.tokens.jsonl / <stem>.config.json "
                                        "beside --out even if tlt did not write them (nothing is deleted).")]
    = False,
) -> None:
    """Generate from random prompts or a prompts file; print tokens/s, mean accept length and latency
    per iteration, and with --out write the event log and the generated tokens.

    Example: tlt real generate --config examples/tiny-llama/config.json --policy static:4_2_6 --drafter oracle
    """
    # Before loading anything: a bad path fails in milliseconds, and no read can block.
    check_input(config, "--config", folder=None)
    for path, flag, folder in ((prompts_file, "--prompts-file", False), (weights, "--weights", None),
                               (tokenizer, "--tokenizer", True)):
        if path is not None:
            check_input(path, flag, folder=folder)
    files = check_generate_outputs(out, force, (config, prompts_file, weights, tokenizer)) if out else None
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("the real engine needs torch: pip install 'tlt[real]'") from None
    from tltcore.policy.registry import policy_spec
    from tltreal.engine.generate import GenerateSettings, write_results
    from tltreal.engine.generate import generate as run_generate
    from tltreal.model.transformer import read_buildable
    from tltreal.spec_decode import kernels

    cfg = read_buildable(config)
    settings = GenerateSettings(prompts=prompts, max_tokens=max_tokens, prompt_len=prompt_len, policy=policy,
                                drafter=drafter, max_batch=batch, temperature=temperature, top_p=top_p,
                                seed=seed, dtype=dtype, weights=str(weights) if weights else None,
                                prompts_file=str(prompts_file) if prompts_file else None,
                                tokenizer=str(tokenizer) if tokenizer else None, ignore_eos=ignore_eos)
    kernels.set_use_triton(triton)
    result = run_generate(cfg, settings)
    dec = result.decode_events
    lat = (dec["t_end"] - dec["t_start"]) * 1e3
    used = drafter if policy_spec(policy).shapes else "none"  # a policy that never drafts gets none
    typer.echo(f"policy {policy}  drafter {used}  requests {len(result.outputs)}  generated {result.generated_tokens} "
               f"tokens in {result.wall_s:.3f} s")
    typer.echo(f"tokens/s            {result.tokens_per_s:,.1f}")
    typer.echo(f"mean accept length  {result.mean_accept_length:.3f}")
    typer.echo(f"decode iterations   {len(dec)}  (SD on in {int((dec['depth'] > 0).sum())})")
    if len(dec):
        typer.echo(f"latency/iteration   mean {lat.mean():.2f} ms  p50 {lat.median():.2f} ms  "
                   f"p99 {lat.quantile(0.99):.2f} ms")
    if out is not None and files is not None:
        write_results(result, settings, cfg, out)
        typer.echo(f"events -> {out}, tokens -> {files['tokens']}, settings -> {files['config']}")


@app.command()
def rl(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Run folder to write (steps.csv, trace.csv, "
                                      "drafter_dynamics.json, figures, README.md).")],
    seed: Annotated[int, typer.Option("--seed", help="Every random choice of the run comes from it.")] = 0,
    steps: Annotated[int, typer.Option("--steps", help="RL steps.")] = 30,
    prompts: Annotated[int, typer.Option("--prompts", help="Prompts per step (each answered 8 times).")] = 16,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Upper cap on a response (tokens, at most "
                                                f"{RL_MAX_NEW_TOKENS}); the band's longest worked solution plus 8 "
                                                "is the cap below it.")] = 400,
    pretrained: Annotated[Path | None, typer.Option("--pretrained", help="A folder written by "
                                                    "`python -m tltreal.rl.pretrain` (default: pre-train now).")]
    = None,
    pretrain_steps: Annotated[int, typer.Option("--pretrain-steps", help="Pre-training steps when no "
                                                "--pretrained folder is given.")] = 600,
    terse_share: Annotated[float, typer.Option("--terse-share", help="Share of terse worked solutions in "
                                               "pre-training (the designed drift's mix, e.g. 0.2; ignored with "
                                               "--pretrained).")] = 0.0,
    pay: Annotated[str, typer.Option("--reward", help="answer: the right final answer pays 1. terse: the designed "
                                     "drift, the right answer pays 1 in the terse format and nothing otherwise. "
                                     "format: the designed drift with a dense signal, 0.5 for the right answer "
                                     "plus 0.5 for the terse format.")]
    = "answer",
    lr: Annotated[float, typer.Option("--lr", help="GRPO learning rate.")] = 5e-5,
    drafter_lr: Annotated[float, typer.Option("--drafter-lr", help="The Spot Trainer's learning rate "
                                              "(online adaptation of the trained drafter).")] = 1e-3,
    drafter_loss: Annotated[str, typer.Option("--drafter-loss", help="eagle: 1.0 SmoothL1(hidden) + 0.1 soft-CE; "
                                              "fastrl: TLT's released trainer's 0.5 + 0.5.")] = "eagle",
    bubble: Annotated[str, typer.Option("--bubble", help="spot: train until the rollout ends (TLT); budget: "
                                        "--budget-steps steps per step (repeatable).")] = "budget",
    budget_steps: Annotated[int, typer.Option("--budget-steps", help="Drafter optimizer steps per RL step with "
                                              "--bubble budget.")] = 40,
    depth: Annotated[int, typer.Option("--depth", help="Chain depth the drafters are measured with.")] = 8,
    static_temperature: Annotated[float, typer.Option("--static-temperature", help="Temperature of the pre-RL "
                                                      "policy's responses the static drafter is trained on (0: its "
                                                      "greedy, most likely text; 1: samples like a rollout's).")]
    = 0.0,
    upper_every: Annotated[int, typer.Option("--upper-every", help="Train and measure the upper-bound drafter "
                                             "every N steps (0: never).")] = 1,
    upper_steps: Annotated[int, typer.Option("--upper-steps", help="Optimizer steps of the upper-bound drafter on "
                                             "one step's data.")] = 600,
    upper_samples: Annotated[int, typer.Option("--upper-samples", help="Fresh temperature-1 responses of the step's "
                                               "policy the upper bound trains on beside the step's rollouts (e.g. "
                                               "896 with --upper-steps 1500: as much data and training as the static "
                                               "drafter had).")] = 384,
    workers: Annotated[int, typer.Option("--workers", help="Rollout worker processes.")] = 2,
    speedup_every: Annotated[int, typer.Option("--speedup-every", help="Measure the padded target's SD "
                                               "speedup every N steps (0: never).")] = 10,
    speedup_repeats: Annotated[int, typer.Option("--speedup-repeats", help="Interleaved repeats per speedup "
                                                 "point (each one's value is kept).")] = 3,
    eval_prompts: Annotated[int, typer.Option("--eval-prompts", help="Held-out prompts the drafters are "
                                              "measured on each step.")] = 48,
    tiny: Annotated[bool, typer.Option("--tiny", help="A small run: a 2-layer 64-wide policy pre-trained for "
                                       "--pretrain-steps, step counts 1-2 with any pass rate, small drafter "
                                       "budgets. Not seconds: with the other defaults (600 pre-training steps, 30 "
                                       "RL steps, an upper-bound drafter every step) it takes about 1.5 CPU minutes "
                                       "(86 s measured, more wall time on a busy machine); CI's smoke test adds "
                                       "--steps 2 --prompts 2 --pretrain-steps 40 --eval-prompts 4 (about 21 CPU "
                                       "seconds).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Write into an existing folder tlt did not create.")]
    = False,
) -> None:
    """A real GRPO run (the learning settings: band problems, lr 5e-5, dual clip) with TLT's adaptive
    drafter trained by the Spot Trainer, beside a static drafter and an upper bound retrained on each
    step's data, all three measured on identical greedy text; with --reward terse the designed drift.
    Writes per-step accept lengths, format shares, bubble training and SD speedups, our own RL trace, the
    simulator's drafter dynamics fitted to the run, and a report with figures."""
    import shlex

    from tltcore.atomic import check_output_dir

    # Every flag and path before anything is imported or trained: a typo costs milliseconds, not the
    # minutes of pre-training that would come before the first use of the flag.
    _check_range({"--seed": (seed, RL_BOUNDS["--seed"]), "--steps": (steps, RL_BOUNDS["--steps"]),
                  "--prompts": (prompts, RL_BOUNDS["--prompts"]),
                  "--max-new-tokens": (max_new_tokens, (1, RL_MAX_NEW_TOKENS)),
                  "--pretrain-steps": (pretrain_steps, RL_BOUNDS["--pretrain-steps"]),
                  "--workers": (workers, RL_BOUNDS["--workers"]),
                  "--speedup-every": (speedup_every, RL_BOUNDS["--speedup-every"]),
                  "--eval-prompts": (eval_prompts, RL_BOUNDS["--eval-prompts"]),
                  "--budget-steps": (budget_steps, (1, 100_000)), "--depth": (depth, (1, 16)),
                  "--upper-every": (upper_every, (0, 100_000)), "--upper-steps": (upper_steps, (1, 100_000)),
                  "--upper-samples": (upper_samples, (0, 100_000)),
                  "--speedup-repeats": (speedup_repeats, (1, 100))})
    _check_rate(lr, "--lr")
    _check_rate(drafter_lr, "--drafter-lr")
    if bubble not in ("spot", "budget"):
        raise InputError(f"must be spot or budget, got '{bubble}'", field="--bubble")
    _check_reward(pay, terse_share)
    if drafter_loss not in ("eagle", "fastrl"):
        raise InputError(f"must be eagle or fastrl, got '{drafter_loss}'", field="--drafter-loss")
    if not (math.isfinite(static_temperature) and 0 <= static_temperature <= 2):
        raise InputError(f"must be in [0, 2], got {static_temperature}", field="--static-temperature")
    _check_pretrained(pretrained)
    check_output_dir(out, force, kind="real-rl", inputs=[pretrained] if pretrained else ())
    from analysis.adaptive_report import write_report
    from tltreal.rl.adaptive_run import AdaptiveRunConfig, record_path, run_adaptive
    from tltreal.rl.grpo import GRPOConfig
    from tltreal.rl.pretrain import PretrainConfig

    pre = PretrainConfig(steps=pretrain_steps, seed=seed, terse_share=terse_share)
    extra: dict[str, object] = {}
    if tiny:
        pre = PretrainConfig(steps=pretrain_steps, seed=seed, layers=2, hidden=64, intermediate=128, sequences=8,
                             terse_share=terse_share)
        extra = {"initial_prompts": 16, "initial_steps": 20, "session_steps": 10, "checkpoint_every": 2,
                 "pad_layers": 1, "pad_intermediate": 256, "max_difficulty": 2, "band_low": 0.0, "band_high": 1.0,
                 "band_draws": 4,
                 # tiny's sizes for the flags left at their defaults: a flag given beside --tiny is kept
                 **{name: value for name, value in (("budget_steps", 5), ("upper_steps", 10), ("upper_samples", 4))
                    if getattr(ctx.get_parameter_source(name), "name", None) == "DEFAULT"}}
    settings: dict[str, object] = {"budget_steps": budget_steps, "upper_steps": upper_steps,
                                   "upper_samples": upper_samples, **extra}
    cfg = AdaptiveRunConfig(seed=seed, steps=steps, prompts_per_step=prompts, max_new_tokens=max_new_tokens,
                            pretrain=pre, pretrained=str(pretrained) if pretrained else None,
                            grpo=GRPOConfig(lr=lr, minibatches=2), reward_kind=pay, online_lr=drafter_lr,
                            drafter_loss=drafter_loss, bubble=bubble, depth=depth, upper_every=upper_every,
                            initial_temperature=static_temperature,
                            workers=workers, speedup_every=speedup_every, speedup_repeats=speedup_repeats,
                            eval_prompts=eval_prompts, **settings)  # type: ignore[arg-type]
    given = {"--seed": seed, "--steps": steps, "--prompts": prompts, "--max-new-tokens": max_new_tokens,
             "--pretrained": record_path(pretrained, "PRETRAINED"),
             "--pretrain-steps": None if pretrained else pretrain_steps,
             "--terse-share": None if pretrained else terse_share, "--reward": pay, "--lr": lr,
             "--drafter-lr": drafter_lr, "--drafter-loss": drafter_loss, "--bubble": bubble,
             "--budget-steps": budget_steps, "--depth": depth, "--static-temperature": static_temperature,
             "--upper-every": upper_every, "--upper-steps": upper_steps, "--upper-samples": upper_samples,
             "--workers": workers, "--speedup-every": speedup_every,
             "--speedup-repeats": speedup_repeats, "--eval-prompts": eval_prompts}
    command = " ".join(["tlt real rl", *(["--tiny"] if tiny else []),
                        *(f"{k} {shlex.quote(str(v))}" for k, v in given.items() if v is not None),
                        f"--out {shlex.quote(str(record_path(out, 'RUN')))}"])
    result = run_adaptive(cfg, out, force=force, log=typer.echo, finish=write_report, command=command)
    typer.echo(f"run -> {result.folder} (README.md, steps.csv, trace.csv, drafter_dynamics.json)")


@app.command("rl-report")
def rl_report(
    out: Annotated[Path, typer.Option("--out", help="Report folder to write (README.md, summary.json, figures, "
                                      "runs/NAME/ copies of each run's records).")],
    run: Annotated[list[str], typer.Option("--run", help="NAME=DIR: a folder written by `tlt real rl`, repeatable "
                                           "(drift runs are those paid for the terse format).")],
    grpo_summary: Annotated[Path | None, typer.Option("--grpo-summary", help="summary.json of a `tlt real grpo` "
                                                      "run whose reward gain and shuffled-reward control the report "
                                                      "cites.")] = None,
    setup: Annotated[list[str] | None, typer.Option("--setup", help="A command the runs depend on (the "
                                                    "pre-training of their --pretrained folders), repeatable: listed "
                                                    "first among the commands that regenerate the report.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into an existing folder tlt did not create.")]
    = False,
) -> None:
    """The adaptive-drafter report over several `tlt real rl` runs (the designed drift over seeds and a
    no-drift run): adaptive over static accept length over the drifted steps, the upper bound, the
    speedups with their spread, the step-time breakdown, and the simulator's drafter dynamics fitted on
    one drift run and checked on the others. summary.json has adaptive_over_static_accept, seeds,
    natural_drift_adaptive_over_static_accept (the no-drift runs: the GRPO run's own drift), and with
    --grpo-summary reward_gain_mean, control_reward_gain_mean and margin_over_no_update_mean.

    Example: tlt real rl-report --run drift-s0=runs/d0 --run drift-s1=runs/d1 --run nodrift-s0=runs/n0
    --grpo-summary reports/grpo-learning/summary.json --out reports/adaptive-drafter
    """
    import re
    import shlex

    from tltcore.atomic import check_output_dir

    folders: dict[str, Path] = {}
    for item in run:
        name, sep, folder = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name) or not folder:
            raise InputError(f"must be NAME=DIR with NAME of letters, digits, '.', '_', '-', got '{item}'",
                             field="--run")
        if name in folders:
            raise InputError(f"the name '{name}' is given twice", field="--run")
        check_input(Path(folder), "--run", folder=True)
        folders[name] = Path(folder)
    if grpo_summary is not None:
        check_input(grpo_summary, "--grpo-summary", folder=False)
    # the runs are folders read whole; the GRPO summary is one file (an --out beside it is fine)
    check_output_dir(out, force, kind="real-rl", inputs=[*folders.values(), *([grpo_summary] if grpo_summary else [])])
    from analysis.drafter_report import read_run, write_report
    from tltreal.rl.adaptive_run import record_path

    runs = [read_run(name, folder) for name, folder in folders.items()]
    if not any(r.drift for r in runs):
        raise InputError("no drift run among them (a run made with --reward terse or format)", field="--run")
    commands = [str(r.config.get("command") or f"# {r.name}: command not recorded") for r in runs]
    command = " ".join(["tlt real rl-report",
                        *("--run " + shlex.quote(f"{n}={record_path(f, 'RUN')}") for n, f in folders.items()),
                        *([f"--grpo-summary {shlex.quote(str(record_path(grpo_summary, 'SUMMARY')))}"]
                          if grpo_summary else []),
                        *(f"--setup {shlex.quote(x)}" for x in setup or ()),
                        f"--out {shlex.quote(str(record_path(out, 'OUT')))}"])
    summary = write_report(runs, out, grpo_summary=grpo_summary, commands=commands, command=command, force=force,
                           setup=setup or ())
    ratio = summary["adaptive_over_static_accept"]
    typer.echo(f"adaptive over static accept length over the drifted steps: {ratio:.3f}x (seeds {summary['seeds']}); "
               f"15% above in every seed: {summary['adaptive_15pct_above_static_every_seed']}; upper bound above both: "
               f"{summary['upper_above_both_every_seed']}")
    natural = summary["natural_drift_adaptive_over_static_accept"]
    if natural is not None:
        typer.echo(f"under the GRPO run's own drift (no designed drift, {', '.join(summary['natural_drift_runs'])}): "
                   f"{natural:.3f}x")
    typer.echo(f"report -> {out} (README.md, summary.json, figures, runs/)")


#: bounds of `tlt real grpo`'s integer flags, checked before anything is imported or trained
GRPO_BOUNDS = {"--seed": (0, 2**31 - 1), "--steps": (1, 100_000), "--prompts": (1, 4_096),
               "--eval-every": (1, 100_000), "--eval-draws": (1, 1_000_000), "--eval-problems": (1, 100_000),
               "--max-difficulty": (1, 64), "--band-draws": (1, 100_000), "--pretrain-steps": (1, 10_000_000)}
#: `tlt real grpo --tiny`'s sizes, by parameter: they replace the defaults, never a flag given on the command line
GRPO_TINY: dict[str, object] = {"seed": [0], "steps": 2, "prompts": 2, "eval_every": 1, "eval_draws": 8,
                                "eval_problems": 4, "max_difficulty": 2, "band_low": 0.0, "band_high": 1.0,
                                "band_draws": 4, "pretrain_steps": 40}


def _tiny_sizes(ctx: typer.Context) -> dict[str, object]:
    """:data:`GRPO_TINY` less the parameters given on the command line: an explicit ``--steps 0`` or
    ``--seed -1`` must be checked and refused (an explicit valid value used), not silently replaced.
    (The source is compared by name: typer vendors its own click, whose enum is not click's.)"""
    return {name: value for name, value in GRPO_TINY.items()
            if getattr(ctx.get_parameter_source(name), "name", None) == "DEFAULT"}


@app.command()
def grpo(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Run folder to write (steps.csv, band.csv, summary.json, "
                                      "reward.png/.pdf).")],
    seed: Annotated[list[int] | None, typer.Option("--seed", help="RL seed, repeatable (default: 0 1 2). Each "
                                                   "seed runs GRPO, its shuffled-reward control and a no-update "
                                                   "arm.")] = None,
    steps: Annotated[int, typer.Option("--steps", help="GRPO steps per arm.")] = 40,
    prompts: Annotated[int, typer.Option("--prompts", help="Prompts per step (each answered 8 times).")] = 16,
    lr: Annotated[float, typer.Option("--lr", help="GRPO learning rate.")] = 5e-5,
    kl: Annotated[float, typer.Option("--kl", help="Weight of the k3 KL to the pre-trained policy (0: off).")] = 0.0,
    dual_clip: Annotated[float, typer.Option("--dual-clip", help="c of the dual clip: a negative advantage's "
                                             "term is floored at c*A (0: off).")] = 3.0,
    eval_every: Annotated[int, typer.Option("--eval-every", help="Evaluate every N steps (and after the last "
                                            "update).")] = 5,
    eval_draws: Annotated[int, typer.Option("--eval-draws", help="Temperature-1 draws per evaluation.")] = 256,
    eval_problems: Annotated[int, typer.Option("--eval-problems", help="Held-out problems the draws are "
                                               "spread over (also the greedy accuracy's).")] = 64,
    max_difficulty: Annotated[int, typer.Option("--max-difficulty", help="Step counts 1..N are measured for "
                                                "the difficulty band.")] = 12,
    band_low: Annotated[float, typer.Option("--band-low", help="Lowest temperature-1 pass rate of the "
                                            "band.")] = 0.2,
    band_high: Annotated[float, typer.Option("--band-high", help="Highest temperature-1 pass rate of the "
                                             "band.")] = 0.8,
    band_draws: Annotated[int, typer.Option("--band-draws", help="Problems per step count measuring the "
                                            "band.")] = 64,
    pretrained: Annotated[Path | None, typer.Option("--pretrained", help="A folder written by "
                                                    "`python -m tltreal.rl.pretrain` (default: pre-train now).")]
    = None,
    pretrain_steps: Annotated[int, typer.Option("--pretrain-steps", help="Pre-training steps when no "
                                                "--pretrained folder is given.")] = 600,
    pay: Annotated[str, typer.Option("--reward", help="answer: the right final answer pays 1. terse: the designed "
                                     "drift, the right answer pays 1 in the terse format and nothing otherwise. "
                                     "format: 0.5 for the right answer plus 0.5 for the terse format (the drift, "
                                     "dense).")]
    = "answer",
    terse_share: Annotated[float, typer.Option("--terse-share", help="Share of terse worked solutions in "
                                               "pre-training (with --reward terse, e.g. 0.2; ignored with "
                                               "--pretrained).")] = 0.0,
    tiny: Annotated[bool, typer.Option("--tiny", help="CI's smoke size, seconds of CPU: a 2-layer 64-wide "
                                       "policy pre-trained 40 steps, seed 0, 2 steps of 2 prompts, step counts "
                                       "1-2 with any pass rate, 8 evaluation draws on 4 problems. Proves the "
                                       "plumbing, not learning. A flag given beside it wins over its size.")]
    = False,
    force: Annotated[bool, typer.Option("--force", help="Write into an existing folder tlt did not create.")]
    = False,
) -> None:
    """GRPO that learns, against controls: a pre-trained policy, RL problems from the difficulty band
    where its temperature-1 pass rate is 0.2-0.8, GRPO (dual clip, optional KL) beside the same run with
    rewards shuffled within each group and beside one with no optimizer step, held-out temperature-1
    reward and greedy accuracy at each evaluation on problems from a held-out split of the problem space
    (disjoint from the training problems by construction), for each seed. summary.json has
    reward_gain_mean, control_reward_gain_mean and margin_over_no_update_mean.

    Example: tlt real grpo --pretrained runs/pretrained --seed 0 --out reports/grpo-learning
    """
    import shlex

    from tltcore.atomic import check_output_dir

    if tiny:
        size = _tiny_sizes(ctx)
        seed, steps, prompts = size.get("seed", seed), size.get("steps", steps), size.get("prompts", prompts)
        eval_every, eval_draws = size.get("eval_every", eval_every), size.get("eval_draws", eval_draws)
        eval_problems, band_draws = size.get("eval_problems", eval_problems), size.get("band_draws", band_draws)
        max_difficulty, pretrain_steps = size.get("max_difficulty", max_difficulty), size.get("pretrain_steps",
                                                                                              pretrain_steps)
        band_low, band_high = size.get("band_low", band_low), size.get("band_high", band_high)
    seeds = list(seed) if seed else [0, 1, 2]
    _check_range({"--steps": (steps, GRPO_BOUNDS["--steps"]), "--prompts": (prompts, GRPO_BOUNDS["--prompts"]),
                  "--eval-every": (eval_every, GRPO_BOUNDS["--eval-every"]),
                  "--eval-draws": (eval_draws, GRPO_BOUNDS["--eval-draws"]),
                  "--eval-problems": (eval_problems, GRPO_BOUNDS["--eval-problems"]),
                  "--max-difficulty": (max_difficulty, GRPO_BOUNDS["--max-difficulty"]),
                  "--band-draws": (band_draws, GRPO_BOUNDS["--band-draws"]),
                  "--pretrain-steps": (pretrain_steps, GRPO_BOUNDS["--pretrain-steps"])})
    for s in seeds:
        _check_range({"--seed": (s, GRPO_BOUNDS["--seed"])})
    if len(set(seeds)) != len(seeds):
        raise InputError(f"seeds must be distinct, got {seeds}", field="--seed")
    _check_rate(lr, "--lr")
    if not (math.isfinite(kl) and kl >= 0):
        raise InputError(f"must be >= 0, got {kl}", field="--kl")
    if not (math.isfinite(dual_clip) and (dual_clip == 0 or dual_clip > 1)):
        raise InputError(f"must be > 1 (or 0: off), got {dual_clip}", field="--dual-clip")
    for flag, value in (("--band-low", band_low), ("--band-high", band_high)):
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise InputError(f"must be a pass rate in [0, 1], got {value}", field=flag)
    _check_reward(pay, terse_share)
    if band_low >= band_high:
        raise InputError(f"must be below --band-high ({band_high}), got {band_low}", field="--band-low")
    _check_pretrained(pretrained)
    check_output_dir(out, force, kind="real-grpo", inputs=[pretrained] if pretrained else ())
    from tltreal.rl.adaptive_run import record_path
    from tltreal.rl.grpo import GRPOConfig
    from tltreal.rl.grpo_run import GRPORunConfig, run_grpo
    from tltreal.rl.pretrain import PretrainConfig

    pre = PretrainConfig(steps=pretrain_steps, seed=0, terse_share=terse_share, exclude_held_out=True)
    if tiny:
        pre = PretrainConfig(steps=pretrain_steps, seed=0, layers=2, hidden=64, intermediate=128, sequences=8,
                             terse_share=terse_share, exclude_held_out=True)
    cfg = GRPORunConfig(seeds=tuple(seeds), steps=steps, prompts_per_step=prompts,
                        grpo=GRPOConfig(lr=lr, minibatches=2, kl_coef=kl, dual_clip=dual_clip or None),
                        eval_every=eval_every, eval_draws=eval_draws, eval_problems=eval_problems,
                        band_low=band_low, band_high=band_high, band_draws=band_draws, max_difficulty=max_difficulty,
                        pretrain=pre, pretrained=str(pretrained) if pretrained else None, reward_kind=pay)
    given = {"--steps": steps, "--prompts": prompts, "--lr": lr, "--kl": kl, "--dual-clip": dual_clip,
             "--eval-every": eval_every, "--eval-draws": eval_draws, "--eval-problems": eval_problems,
             "--max-difficulty": max_difficulty, "--band-low": band_low, "--band-high": band_high,
             "--band-draws": band_draws, "--pretrained": record_path(pretrained, "PRETRAINED"),
             "--pretrain-steps": None if pretrained else pretrain_steps, "--reward": pay,
             "--terse-share": None if pretrained else terse_share}
    parts = ["tlt real grpo", *(["--tiny"] if tiny else []), *(f"--seed {s}" for s in seeds),
             *(f"{k} {shlex.quote(str(v))}" for k, v in given.items() if v is not None)]
    command = " ".join([*parts, f"--out {shlex.quote(str(record_path(out, 'RUN')))}"])
    from analysis.rl_plots import learning_curves

    result = run_grpo(cfg, out, force=force, log=typer.echo, command=command, figure=learning_curves)
    s = result.summary
    typer.echo(f"held-out temperature-1 reward gain: GRPO {s['reward_gain_mean']:+.3f}, shuffled-reward control "
               f"{s['control_reward_gain_mean']:+.3f}, no update {s['no_update_reward_gain_mean']:+.3f} (mean over "
               f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}); margin over no update "
               f"{s['margin_over_no_update_mean']:+.3f}, over the control {s['margin_over_control_mean']:+.3f}; above "
               f"both in every seed: {s['above_control_every_seed'] and s['above_no_update_every_seed']}")
    typer.echo(f"run -> {result.folder} (steps.csv, band.csv, summary.json, reward.png)")


# ---- tlt real profile ------------------------------------------------------------------------------
@app.command("profile")
def profile(
    config: Annotated[Path | None, typer.Option("--config", help="config.json of the target (default: the "
                                                "validation model).")] = None,
    shape: Annotated[list[str] | None, typer.Option("--shape", help="Draft shape depth_topk_verify, repeatable "
                                                    "(default: TLT's arms and chains 1/3/5).")] = None,
    batch: Annotated[list[int] | None, typer.Option("--batch", help="Batch size, repeatable.")] = None,
    context: Annotated[list[int] | None, typer.Option("--context", help="Context length, repeatable.")] = None,
    repeats: Annotated[int, typer.Option(help="Fresh engines per point; medians kept.")] = 3,
    acceptance: Annotated[str, typer.Option(help="Acceptance preset of the pinned drafter.")] = "paper-qwen32b",
    out: Annotated[Path, typer.Option("--out", help="Cost table to write (.parquet).")] = Path("profile.parquet"),
    backend: Annotated[RealBackend, typer.Option(help="Engine to measure.")] = RealBackend.native,
    drafter: Annotated[str, typer.Option(help="vLLM backend: 'draft' (early-exit draft model) or 'ngram'.")]
    = "draft",
    device: Annotated[str, typer.Option(help="Torch device to profile the native engine on (cpu, cuda, cuda:1); "
                                        "vLLM runs on its build's device and takes only that one.")] = "cpu",
    clock: Annotated[Clock, typer.Option(help="Time on the wall clock, or on the engine thread's CPU time (thread: "
                                         "CPU only; other processes' load does not count).")] = Clock.wall,
) -> None:
    """Measure an engine's iteration latencies on this machine and write a cost table the simulator
    reads (cost.model = "table", cost.table = PATH). With --backend vllm, OUT holds the drafter
    engine's table (SD policies) and OUT-plain.parquet the plain engine's (no-sd). An existing OUT is
    replaced only if tlt real profile wrote it.

    Example: tlt real profile --shape 8_4_32 --shape 4_1_4 --out calibration/cpu/profile.parquet
    Example: tlt real profile --backend vllm --shape 3_1_3 --context 64 --out calibration/cpu/vllm.parquet
    """
    from tltcore.policy.base import SDConfig
    from tltcore.policy.beg_mab import DEFAULT_ARMS

    vllm = backend is RealBackend.vllm
    default_shapes = tuple(SDConfig.chain(k) for k in (1, 3, 5)) if vllm else (
        *DEFAULT_ARMS, *(SDConfig.chain(k) for k in (1, 3, 5)))
    shapes = tuple(_draft_shape(x) for x in shape) if shape else default_shapes
    if vllm and any(c.topk != 1 or c.verify_tokens != c.depth for c in shapes):
        raise InputError("vLLM drafts chains only: give K_1_K shapes", field="--shape")
    if drafter not in ("draft", "ngram"):
        raise InputError(f"must be 'draft' or 'ngram', got '{drafter}'", field="--drafter")
    batches = tuple(batch) if batch else (1, 2, 4, 8, 16, 32)
    contexts = tuple(context) if context else (64, 256, 1024)
    for name, values, hi in (("--batch", batches, 1024), ("--context", contexts, 65536)):
        if any(not 1 <= v <= hi for v in values):
            raise InputError(f"values must be in [1, {hi}], got {list(values)}", field=name)
    if not 1 <= repeats <= 20:
        raise InputError(f"must be in [1, 20], got {repeats}", field="--repeats")
    if out.suffix != ".parquet":
        raise InputError("the cost table is written as Parquet: give a .parquet path", field="--out")
    from tltcore.atomic import check_not_inputs, check_output_file

    for path in (out, _plain_table(out)) if vllm else (out,):  # every file it writes, before any work
        check_not_inputs(path, [config] if config else [])  # the more telling refusal first
        check_output_file(path, writer=PROFILE_WRITER, written_by=_written_by_profile)
    need_torch()
    import torch

    cfg = target_config(config)
    prefill_lengths = tuple(sorted({1, 8, 64, max(contexts)}))
    if vllm:  # before vLLM is imported: a model too short for the profile is refused in one line
        from tltreal.backends.vllm_backend import model_len, profile_length

        chains = sorted({c.depth for c in shapes})
        max_model_len = model_len(cfg, profile_length(contexts, chains, prefill_lengths),
                                  max(2048, 2 * max(contexts)), config=config,
                                  hint=f" at --context {max(contexts)}; give a shorter --context")
    device = torch_device(device, backend)
    clock_name = check_clock(clock, device)

    from tltcli.progress import PhaseProgress
    from tltcore.acceptance import get_acceptance
    from tltcore.cost import shape_fingerprint, write_table
    from tltreal.model.weights import random_model
    from tltreal.validation.profiler import ProfileGrid, grid_points, profile_metadata, profile_native
    from tltreal.validation.validate import PINNED_DEPTH, PINNED_TOPK, shape_of

    if vllm:
        _profile_vllm(cfg, chains, batches, contexts, prefill_lengths, repeats, drafter, out, clock_name,
                      max_model_len)
        return
    accept = get_acceptance(acceptance)
    with PhaseProgress(phase_console(), planned=3) as bar:
        bar.phase("building the model")
        target = random_model(cfg, seed=0, dtype=torch.float32).to(device)
        grid = ProfileGrid(batch_sizes=batches, contexts=contexts, sd_configs=shapes, repeats=repeats,
                           prefill_lengths=prefill_lengths, clock=clock_name)
        probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)
        bar.phase(f"profiling {len(shapes)} draft shapes, {repeats} repeats", grid_points(grid), "grid points")
        df = profile_native(target, grid, position_probs=dict.fromkeys(shapes, probs), on_point=bar.advance)
        bar.phase("writing the table")
        write_table(df, {**profile_metadata(target, command=command_line(), clock=clock_name,
                                            model_fingerprint=shape_fingerprint(shape_of(cfg))),
                         "writer": PROFILE_WRITER}, out)
    typer.echo(f"{len(df)} measurements -> {out}")


PROFILE_WRITER = "tlt real profile"


def _written_by_profile(path: Path) -> bool:
    """Whether ``path`` is a Parquet cost table whose metadata says ``tlt real profile`` wrote it (its
    ``writer``; tables from before the writer was recorded: a command starting ``tlt real profile``)."""
    try:
        import pyarrow.parquet as pq

        from tltcore.cost.table import META_KEY

        raw = (pq.read_schema(path).metadata or {}).get(META_KEY)
        meta = json.loads(raw) if raw else {}
    except Exception:  # anything unreadable is not ours
        return False
    if not isinstance(meta, dict):
        return False
    return meta.get("writer") == PROFILE_WRITER or (
        "writer" not in meta and str(meta.get("command", "")).startswith(PROFILE_WRITER + " "))


def _draft_shape(text: str) -> SDConfig:
    """One ``--shape``: a draft shape to time (``off`` is none: plain decoding has no shape to profile)."""
    try:
        shape = SDConfig.parse(text)
    except InputError as exc:
        raise InputError(exc.message, field="--shape") from None
    if shape.depth == 0:
        raise InputError(f"'{text}' is no draft shape; give depth_topk_verify, e.g. 8_4_32", field="--shape")
    return shape


def _plain_table(out: Path) -> Path:
    """Where ``--backend vllm`` writes the plain engine's table, beside ``out``."""
    return out.with_name(out.stem + "-plain.parquet")


def _profile_vllm(cfg, chains: list[int], batches, contexts, prefill_lengths: tuple[int, ...], repeats: int,
                  drafter: str, out: Path, clock: str, max_model_len: int) -> None:
    """``tlt real profile --backend vllm``: ``max_model_len`` is sized for the profile's longest
    sequence and the model's positions (:func:`tltreal.backends.vllm_backend.model_len`)."""
    import tempfile

    from tltcli.progress import PhaseProgress
    from tltcore.cost import shape_fingerprint, write_table
    from tltreal.backends.vllm_backend import VllmSettings, profile_vllm, vllm_metadata, write_models
    from tltreal.validation.validate import shape_of

    plain_out = _plain_table(out)

    settings = VllmSettings(model=cfg, drafter=drafter, max_batch=max(batches), clock=clock,
                            max_model_len=max_model_len)
    with PhaseProgress(phase_console(), planned=3) as bar, tempfile.TemporaryDirectory(prefix="tlt-vllm-") as workdir:
        bar.phase("writing the vLLM model folders")
        target_dir, draft_dir = write_models(Path(workdir), cfg, seed=0, late_scale=settings.late_scale)
        bar.phase(f"profiling vLLM ({len(batches)} batch sizes x {len(contexts)} contexts, {repeats} repeats)")
        rows = profile_vllm(target_dir, draft_dir, settings, batch_sizes=batches, contexts=contexts,
                            chains=chains, prefill_lengths=prefill_lengths, repeats=repeats)
        bar.phase("writing the tables")
        meta = {**vllm_metadata(settings, command=command_line(), model_fingerprint=shape_fingerprint(shape_of(cfg))),
                "writer": PROFILE_WRITER}
        for name, path in (("drafter", out), ("plain", plain_out)):
            write_table(rows[rows["engine"] == name].drop(columns="engine").reset_index(drop=True), meta, path)
    typer.echo(f"{len(rows)} measurements -> {out} (drafter engine), {plain_out} (plain engine)")
