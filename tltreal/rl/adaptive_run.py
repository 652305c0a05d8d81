"""A real RL run with TLT's adaptive drafter: GRPO on the arithmetic task, rollouts on worker
processes with EAGLE SD, the Spot Trainer in the bubbles, and the static drafter measured beside it.

What one run does (``tlt real rl``; every random choice comes from ``--seed``):

1. **Target.** Pre-train the small policy on worked solutions (:mod:`tltreal.rl.pretrain`), or load a
   folder it wrote.
2. **Initial drafter.** Sample one response per prompt for ``initial_prompts`` RL prompts from the
   pre-trained policy, and train an EAGLE drafter on their tokens and target hidden states
   (:mod:`tltreal.rl.drafter_train`). This drafter is the *static* drafter (trained once, never again,
   the paper's baseline) and the adaptive drafter's starting point.
3. **RL steps.** Each step draws ``prompts_per_step`` prompts, answered ``group_size`` times each, and
   rolls them out on the Spot Trainer's worker processes (:mod:`tltreal.spot.trainer`) under the
   rollout SD policy with the adaptive drafter. Workers that finish their share train the drafter
   until the step's last response finishes. The rollout's responses are scored and GRPO updates the
   policy (:mod:`tltreal.rl.grpo`).
4. **Measurements**, per step, on the policy of that step (before its update):
   * the accept length of the static drafter and of the adaptive drafter the rollout used, on the
     same fixed evaluation prompts (``eval_prompts``, a ``depth`` chain), greedy by default
     (``eval_temperature = 0``): greedy SD emits exactly the target's greedy text whatever the
     drafter, so both drafters are measured on *identical* text, and from step to step the text
     changes only where the policy's answers change -- with sampling, the accept length moves with
     whichever texts were drawn (measured: +-0.3 tokens step to step for an unchanged drafter);
   * how far the policy moved: the relative change of its last hidden states (the drafter's input)
     on fixed reference texts since step 0 (:func:`hidden_drift`);
   * the rollout's own accept length, its time, and the drafter training inside the bubble;
   * every ``speedup_every`` steps, the SD speedup of both drafters on the *padded* target
     (:mod:`tltreal.rl.padded_target`: this step's policy plus compute that changes nothing, so SD can
     pay on a CPU) at batch ``speedup_batch``, the long tail's batch sizes.
5. **Outputs** in ``--out``: ``steps.csv`` (one row per step), ``trace.csv`` (the rollouts' response
   lengths in the canonical trace schema: our own RL trace), ``drafter_dynamics.json`` (the
   simulator's drafter dynamics fitted to the two accept curves, :mod:`tltreal.validation.dynamics_fit`),
   ``config.json``, and under ``work/`` the final policy and the drafter checkpoints.

Repeatability: with ``bubble="budget"`` the adaptive drafter trains exactly ``budget_steps`` steps per
step whatever the timing, and a rerun with the same seed gives the same responses and accept lengths.
With ``bubble="spot"`` (TLT: train until preempted) how much it trains depends on how long the bubble
lasts on this machine, and because SD under sampling is exact in distribution, not token for token,
different drafter weights give different (equally distributed) responses.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from tltcore.errors import InputError
from tltcore.policy.base import NoSD, SDConfig, Static
from tltreal.engine.engine import Engine
from tltreal.engine.engine_config import EngineConfig
from tltreal.model.sampling import SamplingParams
from tltreal.model.tokenizer import TaskTokenizer
from tltreal.model.transformer import Transformer
from tltreal.rl.drafter_train import DrafterTrainer, DrafterTrainerConfig
from tltreal.rl.grpo import GRPOConfig, GRPOTrainer, Rollout
from tltreal.rl.pretrain import PretrainConfig, load_pretrained, pretrain, save_pretrained
from tltreal.rl.task import Problem, TaskConfig, reward, sample_problems
from tltreal.spec_decode.proposers.eagle import EagleDrafter, random_drafter
from tltreal.spot.drafter_checkpoint import trainable_tensors
from tltreal.spot.sample_buffer import Sample, SampleBuffer, target_hidden

TRACE_SOURCE = "tlt-grpo-arith"
BUBBLES = ("spot", "budget")


@dataclass(frozen=True)
class AdaptiveRunConfig:
    """Everything a run depends on (module docstring)."""

    seed: int = 0
    steps: int = 20
    prompts_per_step: int = 8
    max_new_tokens: int = 400
    temperature: float = 1.0
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    pretrained: str | None = None
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    initial_prompts: int = 96
    initial_steps: int = 300
    initial_lr: float = 3e-3
    online_lr: float = 1e-4
    samples_per_step: int = 8
    session_steps: int = 200
    bubble: str = "spot"
    budget_steps: int = 40
    checkpoint_every: int = 5
    workers: int = 2
    sd_policy: str = "elastic:16+static:4_1_4"
    depth: int = 4
    eval_prompts: int = 48
    eval_temperature: float = 0.0
    speedup_every: int = 5
    speedup_batch: int = 4
    speedup_new_tokens: int = 96
    speedup_repeats: int = 1
    pad_layers: int = 6
    pad_intermediate: int | None = 16384

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "max_new_tokens", "initial_prompts", "eval_prompts", "workers",
                     "depth", "samples_per_step", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"must be a positive integer, got {value!r}", field=name)
        if self.bubble not in BUBBLES:
            raise InputError(f"must be one of {', '.join(BUBBLES)}, got {self.bubble!r}", field="bubble")
        if self.speedup_every < 0:
            raise InputError(f"must be >= 0 (0: never), got {self.speedup_every}", field="speedup_every")
        if self.temperature <= 0:
            raise InputError(f"must be > 0 (GRPO needs sampled groups), got {self.temperature}", field="temperature")

    @property
    def task(self) -> TaskConfig:
        """The RL prompts: pre-training's layout, the default (lighter) tail."""
        return replace(self.pretrain.task, tail_alpha=TaskConfig().tail_alpha)


def _seed(*parts: object) -> int:
    """A stable 31-bit seed from the run seed and a purpose (no Python hash randomisation)."""
    return random.Random(":".join(map(str, parts))).getrandbits(31)


# ---- generation and acceptance -------------------------------------------------------------------------
@dataclass(frozen=True)
class GeneratedResponse:
    prompt: list[int]
    output: list[int]
    hidden: torch.Tensor | None


def generate_responses(target: Transformer, tokenizer: TaskTokenizer, prompts: Sequence[Sequence[int]],
                       seeds: Sequence[int], *, max_new_tokens: int, temperature: float,
                       drafter: EagleDrafter | None = None, depth: int = 4,
                       record_hidden: bool = False) -> tuple[list[GeneratedResponse], float]:
    """Sample one response per prompt with our engine (a static ``depth`` chain when ``drafter`` is
    given); the responses and the engine's accept length (1 without SD)."""
    policy = Static(SDConfig(depth, 1, depth)) if drafter is not None else NoSD()
    longest = max(len(p) for p in prompts)
    engine = Engine(target, policy, drafter,
                    EngineConfig(max_batch=len(prompts), max_len=longest + max_new_tokens + 1, max_verify=depth,
                                 max_draft_nodes=depth, eos_token_ids=(tokenizer.eos_id,),
                                 record_hidden=record_hidden))
    rids = [engine.add_request(list(p), max_new_tokens, SamplingParams(temperature, seed=s))
            for p, s in zip(prompts, seeds, strict=True)]
    result = engine.run()
    out = [GeneratedResponse(result.finished[r].prompt, result.finished[r].output, result.finished[r].hidden)
           for r in rids]
    return out, (result.mean_accept_length if drafter is not None else 1.0)


def train_initial_drafter(target: Transformer, tokenizer: TaskTokenizer, cfg: AdaptiveRunConfig
                          ) -> tuple[EagleDrafter, float]:
    """The drafter trained once, on the pre-trained policy's own sampled responses (module
    docstring, 2); returns it and its final training loss."""
    problems = sample_problems(cfg.initial_prompts, _seed(cfg.seed, "initial-drafter"), cfg.task)
    prompts = [tokenizer.encode(p.prompt, bos=True) for p in problems]
    seeds = [_seed(cfg.seed, "initial-drafter-sample", i) for i in range(len(prompts))]
    responses, _ = generate_responses(target, tokenizer, prompts, seeds, max_new_tokens=cfg.max_new_tokens,
                                      temperature=cfg.temperature, record_hidden=True)
    buffer = SampleBuffer(window_tokens=DrafterTrainerConfig.window_tokens)
    buffer.start_step(0)
    for r in responses:
        assert r.hidden is not None
        buffer.add(Sample(torch.tensor(r.prompt + r.output), r.hidden, 0))
    drafter = random_drafter(target, seed=_seed(cfg.seed, "drafter-init"))
    trainer = DrafterTrainer(drafter, DrafterTrainerConfig(lr=cfg.initial_lr, samples_per_step=cfg.samples_per_step,
                                                           max_steps=cfg.initial_steps,
                                                           seed=_seed(cfg.seed, "drafter-draw")))
    metrics = trainer.train(buffer, cfg.initial_steps)
    return drafter, float(np.mean(metrics.losses[-10:])) if metrics.losses else float("nan")


@torch.no_grad()
def hidden_drift(target: Transformer, references: Sequence[torch.Tensor], initial: Sequence[torch.Tensor]) -> float:
    """How far the policy moved: the relative change of its last hidden states (what the EAGLE drafter
    reads) on fixed reference texts since the initial policy, ``mean ||h_t - h_0|| / ||h_0||``."""
    return float(np.mean([float((target_hidden(target, ref) - h0).norm() / h0.norm())
                          for ref, h0 in zip(references, initial, strict=True)]))


def drafter_with_state(target: Transformer, state: dict[str, torch.Tensor]) -> EagleDrafter:
    """A drafter bound to ``target`` (its embedding and LM head) with trainable weights ``state``."""
    drafter = EagleDrafter(target).to(target.dtype)
    drafter.load_state_dict(state)
    return drafter.eval()


# ---- one step's records --------------------------------------------------------------------------------
def trace_rows(step: int, problems: Sequence[Problem], rollouts: Sequence[Rollout], group_size: int,
               cap: int) -> list[dict[str, object]]:
    """The step's responses in the canonical trace schema (:mod:`tltsim.traces.schema`)."""
    rows = []
    for i, r in enumerate(rollouts):
        g, k = divmod(i, group_size)
        rows.append({"source": TRACE_SOURCE, "step": step, "prompt_id": f"s{step}-p{g}", "group_id": f"s{step}-p{g}",
                     "sample_idx": k, "prompt_tokens": r.prompt_len, "response_tokens": r.response_len,
                     "hit_cap": r.response_len >= cap, "difficulty": problems[g].steps})
    return rows


def _padded(target: Transformer, padded: Transformer | None, cfg: AdaptiveRunConfig) -> Transformer:
    """The padded target of this step's policy: built once, then only the policy's weights are
    copied in (the zero-output filler never changes)."""
    from tltreal.rl.padded_target import pad_target, refresh_padded_target

    if padded is None:
        return pad_target(target, extra_layers=cfg.pad_layers, intermediate_size=cfg.pad_intermediate)
    return refresh_padded_target(padded, target)


def _speedups(big: Transformer, drafters: dict[str, EagleDrafter], prompts: Sequence[Sequence[int]],
              cfg: AdaptiveRunConfig) -> dict[str, float]:
    """SD speedup of each drafter on the padded target ``big`` (module docstring, 4)."""
    from tltreal.rl.padded_target import measure_sd_speedup, rebind_drafter

    out: dict[str, float] = {}
    for name, d in drafters.items():
        m = measure_sd_speedup(big, rebind_drafter(d, big), prompts, batch=cfg.speedup_batch,
                               new_tokens=cfg.speedup_new_tokens, depth=cfg.depth, repeats=cfg.speedup_repeats)
        out[f"speedup_{name}"] = m.speedup
        out[f"padded_accept_{name}"] = m.accept_length
        out["padded_base_tok_s"] = m.base_tok_s
    return out


def record_path(path: Path | None, placeholder: str) -> str | None:
    """A path as a committed record may show it: as typed when relative, relative to the working
    folder when under it, else ``placeholder`` -- never an absolute path of the machine that made the
    run (a temporary folder, a home directory), which means nothing anywhere else and leaks its layout.
    The run folder records where its own inputs came from this way (``config.json``, the report's
    reproduce command)."""
    if path is None:
        return None
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return placeholder


# ---- the run -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunOutputs:
    folder: Path
    steps: pd.DataFrame
    trace: pd.DataFrame
    dynamics: dict[str, object]


def _load_target(cfg: AdaptiveRunConfig, log: Callable[[str], None]) -> tuple[Transformer, TaskTokenizer, dict]:
    if cfg.pretrained is not None:
        target, tokenizer = load_pretrained(cfg.pretrained)
        return target, tokenizer, {"pretrained": record_path(Path(cfg.pretrained), "PRETRAINED")}
    log(f"pre-training the policy ({cfg.pretrain.steps} steps)")
    target, tokenizer, metrics = pretrain(cfg.pretrain)
    return target, tokenizer, {"pretrain_seconds": metrics.seconds, "pretrain_final_loss": metrics.final_loss}


def run_adaptive(cfg: AdaptiveRunConfig, out: str | Path, *, force: bool = False,
                 log: Callable[[str], None] = print, finish: Callable[[Path], object] | None = None,
                 command: str | None = None) -> RunOutputs:
    """One run (module docstring). ``out`` is built in a temporary sibling and swapped in at the end
    (:func:`tltcore.atomic.atomic_dir`): a failed or interrupted run leaves nothing half written, and a
    folder tlt did not write is refused unless ``force``. ``finish(folder)`` adds to the folder before
    the swap (the CLI writes the report with it)."""
    from tltcore.atomic import atomic_dir

    with atomic_dir(out, kind="real-rl", force=force, inputs=[cfg.pretrained] if cfg.pretrained else ()) as tmp:
        result = _run(cfg, tmp, log, command)
        if finish is not None:
            finish(tmp)
    return replace(result, folder=Path(out))


def _run(cfg: AdaptiveRunConfig, out: Path, log: Callable[[str], None], command: str | None) -> RunOutputs:
    from tltreal.spot.contract import SpotConfig
    from tltreal.spot.messages import RolloutRequest
    from tltreal.spot.trainer import SpotTrainer

    torch.manual_seed(cfg.seed)
    target, tokenizer, info = _load_target(cfg, log)
    info["command"] = command
    task = cfg.task
    t0 = time.perf_counter()
    static, init_loss = train_initial_drafter(target, tokenizer, cfg)
    info.update(initial_drafter_seconds=time.perf_counter() - t0, initial_drafter_loss=init_loss)
    static_state = trainable_tensors(static)
    log(f"initial drafter trained in {info['initial_drafter_seconds']:.1f}s (loss {init_loss:.4f})")

    eval_problems = sample_problems(cfg.eval_prompts, _seed(cfg.seed, "eval"), task)
    eval_prompts = [tokenizer.encode(p.prompt, bos=True) for p in eval_problems]
    eval_seeds = [_seed(cfg.seed, "eval-sample", i) for i in range(len(eval_prompts))]
    # fixed texts (the evaluation problems' worked solutions) on which the policy's drift is measured
    references = [torch.tensor(tokenizer.encode(p.prompt + p.solution, bos=True)) for p in eval_problems[:16]]
    initial_hidden = [target_hidden(target, ref) for ref in references]
    # the long tail's prompts for the speedup: the longest evaluation problems
    long_first = sorted(range(len(eval_problems)), key=lambda i: -eval_problems[i].steps)
    speed_prompts = [eval_prompts[i] for i in long_first[:cfg.speedup_batch]]

    spot_cfg = SpotConfig(n_workers=cfg.workers, training=cfg.bubble, sd_policy=cfg.sd_policy,
                          trainer=DrafterTrainerConfig(lr=cfg.online_lr, samples_per_step=cfg.samples_per_step,
                                                       max_steps=cfg.session_steps, seed=_seed(cfg.seed, "spot")),
                          max_train_steps=cfg.budget_steps if cfg.bubble == "budget" else cfg.session_steps,
                          checkpoint_every=cfg.checkpoint_every,
                          window_tokens=DrafterTrainerConfig.window_tokens, keep_steps=2,
                          max_batch=cfg.prompts_per_step * cfg.grpo.group_size,
                          max_len=cfg.grpo.row_len, eos_token_ids=(tokenizer.eos_id,), seed=cfg.seed)
    grpo = GRPOTrainer(target, cfg.grpo, pad_id=tokenizer.pad_id)
    rows: list[dict[str, object]] = []
    trace: list[dict[str, object]] = []
    padded: Transformer | None = None
    with SpotTrainer(spot_cfg, out / "work" / "spot", target.cfg, static_state) as spot:
        for step in range(cfg.steps):
            ts = time.perf_counter()
            adaptive_state = spot.latest_drafter_state()
            problems = sample_problems(cfg.prompts_per_step, _seed(cfg.seed, "step", step), task)
            requests = [RolloutRequest(rid=g * cfg.grpo.group_size + k,
                                       prompt=tuple(tokenizer.encode(p.prompt, bos=True)),
                                       max_new_tokens=cfg.max_new_tokens, group=g,
                                       seed=_seed(cfg.seed, "rollout", step, g, k), temperature=cfg.temperature)
                        for g, p in enumerate(problems) for k in range(cfg.grpo.group_size)]
            report = spot.run_step(step, target, requests)
            rollouts = [Rollout(r.rid // cfg.grpo.group_size, r.prompt + r.output, len(r.prompt),
                                reward(problems[r.rid // cfg.grpo.group_size], tokenizer.decode(r.output)),
                                truncated=len(r.output) >= cfg.max_new_tokens and r.output[-1] != tokenizer.eos_id)
                        for r in report.responses]
            trace += trace_rows(step, problems, rollouts, cfg.grpo.group_size, cfg.max_new_tokens)

            te = time.perf_counter()
            drafters = {"static": drafter_with_state(target, static_state),
                        "adaptive": drafter_with_state(target, adaptive_state)}
            accepts, eval_rewards = {}, []
            for name, d in drafters.items():
                responses, accepts[name] = generate_responses(target, tokenizer, eval_prompts, eval_seeds,
                                                              max_new_tokens=cfg.max_new_tokens,
                                                              temperature=cfg.eval_temperature,
                                                              drafter=d, depth=cfg.depth)
                eval_rewards += [reward(p, tokenizer.decode(r.output)) for p, r in zip(eval_problems, responses,
                                                                                        strict=True)]
            speed: dict[str, float] = {}
            if cfg.speedup_every and (step % cfg.speedup_every == 0 or step == cfg.steps - 1):
                padded = _padded(target, padded, cfg)
                speed = _speedups(padded, drafters, speed_prompts, cfg)
            eval_s = time.perf_counter() - te

            drift = hidden_drift(target, references, initial_hidden)
            update = grpo.update(rollouts)
            lengths = np.array([r.response_len for r in rollouts])
            row = {"step": step, "reward": float(np.mean([r.reward for r in rollouts])),
                   "eval_reward": float(np.mean(eval_rewards)), "hidden_drift": drift,
                   "mean_response_tokens": float(lengths.mean()), "max_response_tokens": int(lengths.max()),
                   "hit_cap": int((lengths >= cfg.max_new_tokens).sum()),
                   "accept_static": accepts["static"], "accept_adaptive": accepts["adaptive"],
                   "rollout_accept": report.accept_length, "drafter_version": report.drafter_version,
                   "committed_version": report.committed_version, "rollout_s": report.rollout_s,
                   "bubble_train_s": report.bubble_train_s,
                   "train_steps": sum(w.train_steps for w in report.workers),
                   "train_windows": sum(w.train_windows for w in report.workers),
                   "grpo_loss": update.loss, "grpo_clip_fraction": update.clip_fraction,
                   "learning_responses": update.learning_responses, "update_s": update.seconds,
                   "eval_s": eval_s, **speed, "step_s": time.perf_counter() - ts}
            rows.append(row)
            log(_row_line(row))
        final_state = spot.latest_drafter_state()
    steps = pd.DataFrame(rows)
    trace_df = pd.DataFrame(trace)
    dynamics = _fit(steps, cfg)
    _write_outputs(out, cfg, steps, trace_df, dynamics, info)
    save_pretrained(target, tokenizer, out / "work" / "final-target", force=True)
    torch.save(final_state, out / "work" / "final-drafter.pt")
    return RunOutputs(out, steps, trace_df, dynamics)


def _row_line(row: dict[str, object]) -> str:
    return (f"step {row['step']:3d}  reward {row['reward']:.3f}  len {row['mean_response_tokens']:6.1f} "
            f"(max {row['max_response_tokens']})  eval reward {row['eval_reward']:.3f}  "
            f"drift {row['hidden_drift']:.3f}  accept static {row['accept_static']:.2f} "
            f"adaptive {row['accept_adaptive']:.2f} (v{row['drafter_version']})  rollout {row['rollout_s']:.1f}s "
            f"bubble training {row['bubble_train_s']:.1f}s ({row['train_steps']} steps)  step {row['step_s']:.1f}s")


def _fit(steps: pd.DataFrame, cfg: AdaptiveRunConfig) -> dict[str, object]:
    from tltreal.validation.dynamics_fit import fit_dynamics, scenario_section

    if len(steps) < 2:
        return {"fitted": False, "why": "a fit needs >= 2 steps"}
    try:
        fit = fit_dynamics(steps["accept_static"].tolist(), steps["accept_adaptive"].tolist(),
                           steps["train_windows"].tolist(), depth=cfg.depth)
    except ValueError as exc:
        return {"fitted": False, "why": str(exc)}
    return {"fitted": True, "drafter": scenario_section(fit), "static_rms": fit.static_rms,
            "adaptive_rms": fit.adaptive_rms, "static_quality": list(fit.static_quality),
            "adaptive_quality": list(fit.adaptive_quality), "depth": cfg.depth,
            "samples": "training windows per step (<= 512 tokens each)"}


def _write_outputs(out: Path, cfg: AdaptiveRunConfig, steps: pd.DataFrame, trace: pd.DataFrame,
                   dynamics: dict[str, object], info: dict[str, object]) -> None:
    from tltcore.atomic import write_text

    write_text(out / "steps.csv", steps.to_csv(index=False))
    write_text(out / "trace.csv", trace.to_csv(index=False))
    write_text(out / "drafter_dynamics.json", json.dumps(dynamics, indent=1) + "\n")
    recorded = asdict(replace(cfg, pretrained=record_path(Path(cfg.pretrained), "PRETRAINED")
                              if cfg.pretrained is not None else None))
    write_text(out / "config.json", json.dumps({"config": recorded, **info}, indent=1) + "\n")


__all__ = [
    "TRACE_SOURCE",
    "AdaptiveRunConfig",
    "GeneratedResponse",
    "RunOutputs",
    "drafter_with_state",
    "generate_responses",
    "record_path",
    "run_adaptive",
    "trace_rows",
    "train_initial_drafter",
]
