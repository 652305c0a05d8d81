"""A real RL run with TLT's adaptive drafter: GRPO on the arithmetic task with the learning settings of
:mod:`tltreal.rl.grpo_run`, rollouts on worker processes with EAGLE SD, the Spot Trainer in the
bubbles, and three drafters measured beside each other on identical text every step.

What one run does (``tlt real rl``; every random choice comes from ``--seed``):

1. **Target.** Pre-train the small policy on worked solutions (:mod:`tltreal.rl.pretrain`), or load a
   folder it wrote.
2. **Difficulty band** (:func:`tltreal.rl.grpo_run.difficulty_pass_rates`): the step counts whose
   temperature-1 pass rate is in ``[band_low, band_high]``; RL, evaluation and initial-drafter problems
   are drawn from it (:func:`tltreal.rl.grpo_run.band_problems`), as in the run that learns.
3. **Initial drafter.** Sample one response per prompt for ``initial_prompts`` band problems from the
   pre-trained policy (at ``initial_temperature``) and train an EAGLE drafter on their tokens and the
   target's hidden states (:mod:`tltreal.rl.drafter_train`). This is the *static* drafter (trained once,
   never again: the paper's baseline) and the adaptive drafter's starting point.
4. **RL steps.** Each step draws ``prompts_per_step`` band problems, answered ``group_size`` times
   each, and rolls them out on the Spot Trainer's worker processes (:mod:`tltreal.spot.trainer`) under
   the rollout SD policy with the adaptive drafter. A released worker trains the drafter
   (``bubble="spot"``: until the step's last response, TLT; ``"budget"``: exactly ``budget_steps``
   steps, repeatable). Responses are paid by ``reward_kind`` (``answer``; ``terse``: the designed drift,
   :func:`tltreal.rl.task.format_reward`) and GRPO (lr 5e-5, dual clip) updates the policy.
5. **Measurements**, per step, on the policy of that step (before its update), on the same fixed
   held-out band prompts (``eval_prompts``, a ``depth`` chain), greedy (``eval_temperature = 0``):
   greedy SD emits exactly the target's greedy text whatever the drafter, so every drafter is measured
   on *identical* text (``eval_text_identical`` checks it), and from step to step the text changes only
   where the policy's answers change. Three drafters:

   * ``static``: the initial drafter;
   * ``adaptive``: the drafter the rollout used (the Spot Trainer's latest commit);
   * ``upper``: every ``upper_every`` steps, the static drafter fine-tuned for ``upper_steps`` steps at
     the initial learning rate on *this* step's policy alone: its rollouts plus ``upper_samples`` fresh
     temperature-1 responses to band problems (none of them evaluation problems). Why fresh samples: a
     drafter here is data-limited (one step's 128 rollouts fine-tune the static drafter to no better
     than it was, while the adaptive one has seen several steps' data), so "trained to convergence on
     this step's data" needs enough of this step's data to converge on; ``upper_loss_first`` /
     ``upper_loss_last`` show its loss flattening. What a drafter trained on exactly the current policy's
     text reaches: the bound adaptation is measured against.

   Also the format share of the rollouts (``terse_share``) and of the measured greedy text
   (``eval_terse_share``), how far the policy moved (:func:`hidden_drift`), the rollout's own accept
   length, its time and the drafter training inside the bubble; and every ``speedup_every`` steps the
   SD speedup of each drafter on the *padded* target (:mod:`tltreal.rl.padded_target`: this step's
   policy plus compute that changes nothing, so SD can pay on a CPU) at batch ``speedup_batch``,
   ``speedup_repeats`` interleaved repeats with each repeat's value kept (the spread). At the last step
   (when ``speedup_every`` and ``e2e_repeats`` are on), the **end-to-end step time** with and without SD
   on the padded target (:func:`end_to_end`): the step's whole rollout (all its requests, temperature 1,
   the rollout's SD policy with the adaptive drafter, against no SD), ``e2e_repeats`` interleaved pairs,
   plus one timed GRPO update of the padded model on the step's rollouts (the same in both arms).
6. **Outputs** in ``--out``: ``steps.csv`` (one row per step), ``trace.csv`` (the rollouts' response
   lengths in the canonical trace schema: our own RL trace), ``drafter_dynamics.json`` (the
   simulator's drafter dynamics fitted to the static and adaptive accept curves,
   :mod:`tltreal.validation.dynamics_fit`), ``config.json``, and under ``work/`` the final policy and
   the drafter checkpoints.

Repeatability: with ``bubble="budget"`` the adaptive drafter trains exactly ``budget_steps`` steps per
step whatever the timing, and a rerun with the same seed gives the same responses and accept lengths.
With ``bubble="spot"`` how much it trains depends on how long the bubble lasts on this machine, and
because SD under sampling is exact in distribution, not token for token, different drafter weights give
different (equally distributed) responses.
"""

from __future__ import annotations

import json
import os
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
from tltreal.rl.drafter_train import FASTRL_WEIGHTS, DrafterTrainer, DrafterTrainerConfig
from tltreal.rl.grpo import GRPOConfig, GRPOTrainer, Rollout
from tltreal.rl.grpo_run import (
    GRPORunConfig,
    band_problems,
    choose_band,
    difficulty_pass_rates,
    terse_share,
    versions,
)
from tltreal.rl.pretrain import PretrainConfig, load_pretrained, pretrain, save_pretrained, solution_budget
from tltreal.rl.task import Problem, TaskConfig, make_problem, paid, reward, solution_format
from tltreal.spec_decode.proposers.eagle import EagleDrafter, random_drafter
from tltreal.spot.drafter_checkpoint import trainable_tensors
from tltreal.spot.sample_buffer import Sample, SampleBuffer, target_hidden, target_sample

TRACE_SOURCE = "tlt-grpo-arith"
BUBBLES = ("spot", "budget")
#: the drafter's loss weights: EAGLE's (1.0 SmoothL1 + 0.1 soft-CE) or TLT's released trainer's (0.5 + 0.5)
DRAFTER_LOSSES = {"eagle": (1.0, 0.1), "fastrl": FASTRL_WEIGHTS}
#: the drafters measured each step, in the order of steps.csv's columns
DRAFTERS = ("static", "adaptive", "upper")


@dataclass(frozen=True)
class AdaptiveRunConfig:
    """Everything a run depends on (module docstring). GRPO's defaults are the learning run's
    (:class:`tltreal.rl.grpo_run.GRPORunConfig`): 16 prompts x 8, lr 5e-5, two minibatches, dual clip."""

    seed: int = 0
    steps: int = 30
    prompts_per_step: int = 16
    max_new_tokens: int = 400  # an upper cap; the band's longest worked solution + slack is used below it
    temperature: float = 1.0
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    pretrained: str | None = None
    grpo: GRPOConfig = field(default_factory=lambda: GRPOConfig(lr=5e-5, minibatches=2))
    reward_kind: str = "answer"  # tltreal.rl.task.REWARDS
    band_low: float = 0.2
    band_high: float = 0.8
    band_draws: int = 64
    max_difficulty: int = 12
    slack: int = 8
    initial_prompts: int = 1024
    initial_steps: int = 1500
    initial_lr: float = 3e-3
    initial_temperature: float = 0.0  # 0: the pre-RL policy's greedy text (train_initial_drafter says why)
    online_lr: float = 1e-3
    samples_per_step: int = 8
    session_steps: int = 200
    bubble: str = "budget"
    budget_steps: int = 40
    checkpoint_every: int = 5
    drafter_loss: str = "eagle"  # DRAFTER_LOSSES
    response_only: bool = True
    upper_every: int = 1  # 0: no upper-bound drafter
    upper_steps: int = 600
    upper_samples: int = 384  # fresh responses of the step's policy, beside its rollouts
    workers: int = 2
    sd_policy: str = "elastic:16+static:8_1_8"
    depth: int = 8
    eval_prompts: int = 48
    eval_temperature: float = 0.0
    speedup_every: int = 10
    speedup_batch: int = 4
    speedup_repeats: int = 3
    pad_layers: int = 6
    pad_intermediate: int | None = 16384
    e2e_repeats: int = 3  # end-to-end step time with and without SD on the padded target, last step (0: never)

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "max_new_tokens", "initial_prompts", "eval_prompts", "workers",
                     "depth", "samples_per_step", "checkpoint_every", "band_draws", "max_difficulty",
                     "speedup_repeats", "speedup_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"must be a positive integer, got {value!r}", field=name)
        if self.bubble not in BUBBLES:
            raise InputError(f"must be one of {', '.join(BUBBLES)}, got {self.bubble!r}", field="bubble")
        paid(self.reward_kind)  # an unknown kind is refused there, naming the table's kinds
        if self.drafter_loss not in DRAFTER_LOSSES:
            raise InputError(f"must be one of {', '.join(DRAFTER_LOSSES)}, got {self.drafter_loss!r}",
                             field="drafter_loss")
        for name in ("speedup_every", "upper_every", "upper_steps", "upper_samples", "e2e_repeats"):
            if getattr(self, name) < 0:
                raise InputError(f"must be >= 0 (0: never), got {getattr(self, name)}", field=name)
        if self.temperature <= 0:
            raise InputError(f"must be > 0 (GRPO needs sampled groups), got {self.temperature}", field="temperature")
        if not 0 <= self.band_low < self.band_high <= 1:
            raise InputError(f"need 0 <= band_low < band_high <= 1, got {self.band_low}, {self.band_high}",
                             field="band_low")

    @property
    def task(self) -> TaskConfig:
        """The RL prompts' layout: pre-training's."""
        return self.pretrain.task

    def drafter_trainer(self, *, lr: float, steps: int, seed: int, one_step_offset: bool = True
                        ) -> DrafterTrainerConfig:
        """The drafter-training knobs every drafter of the run shares (loss weights, response-only)."""
        hidden_w, ce_w = DRAFTER_LOSSES[self.drafter_loss]
        return DrafterTrainerConfig(lr=lr, samples_per_step=self.samples_per_step, max_steps=steps, seed=seed,
                                    hidden_weight=hidden_w, ce_weight=ce_w, response_only=self.response_only,
                                    one_step_offset=one_step_offset)

    def band_config(self) -> GRPORunConfig:
        """The learning run's config carrying this run's band settings (its band code reads them)."""
        return GRPORunConfig(seeds=(self.seed,), band_low=self.band_low, band_high=self.band_high,
                             band_draws=self.band_draws, max_difficulty=self.max_difficulty, pretrain=self.pretrain,
                             slack=self.slack, temperature=self.temperature, reward_kind=self.reward_kind)


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


def _text(tokenizer: TaskTokenizer, output: Sequence[int]) -> str:
    return tokenizer.decode([t for t in output if t != tokenizer.eos_id])


def train_drafter(drafter: EagleDrafter, samples: Sequence[Sample], config: DrafterTrainerConfig, steps: int
                  ) -> list[float]:
    """Train ``drafter`` in place for ``steps`` steps on ``samples`` alone (one buffer step, no offset);
    the per-step losses."""
    buffer = SampleBuffer(keep_steps=1, window_tokens=config.window_tokens, one_step_offset=False)
    buffer.start_step(0)
    for s in samples:
        buffer.add(replace(s, step=0))
    return list(DrafterTrainer(drafter, replace(config, one_step_offset=False)).train(buffer, steps).losses)


def train_initial_drafter(target: Transformer, tokenizer: TaskTokenizer, cfg: AdaptiveRunConfig,
                          problems: Sequence[Problem], cap: int) -> tuple[EagleDrafter, list[float], float]:
    """The drafter trained once, to convergence, on the pre-trained policy's own responses to
    ``problems`` sampled at ``initial_temperature`` (module docstring, 3); returns it, its training
    losses and the terse share of the text it was trained on.

    Why so much data (1,024 responses, 1,500 steps by default): a drafter trained on a few hundred
    responses is data-limited, and an adaptive drafter that merely sees more data of the *same* policy
    then beats it with no drift at all (measured: 96 responses, 300 steps; the adaptive drafter was 27%
    ahead after 7 steps while the policy's greedy text had not changed). The static baseline must be as
    good as training can make it on the pre-RL policy, so that what the adaptive drafter gains is drift.

    Why greedy text by default (``initial_temperature = 0``): a drafter is trained before RL on the text
    the model writes, and the pre-RL policy's most likely text is 98% verbose; its temperature-1 samples
    are 25% terse, and a drafter trained on those has seen the format the drift moves to. Measured
    (reports/adaptive-drafter, seed 0, the same drift): after the drift the adaptive drafter's accept length
    is 1.51x the greedy-trained static drafter's and 1.22x the sample-trained one's. Which one a deployment
    has depends on how its drafter was trained; ``--static-temperature 1`` measures the other case."""
    samples = policy_samples(target, tokenizer, problems, cap=cap, temperature=cfg.initial_temperature,
                             seed=_seed(cfg.seed, "initial-drafter-sample"))
    drafter = random_drafter(target, seed=_seed(cfg.seed, "drafter-init"))
    losses = train_drafter(drafter, samples, cfg.drafter_trainer(lr=cfg.initial_lr, steps=cfg.initial_steps,
                                                                 seed=_seed(cfg.seed, "drafter-draw")),
                           cfg.initial_steps)
    share = terse_share([tokenizer.decode([t for t in s.tokens[s.prompt_len:].tolist() if t != tokenizer.eos_id])
                         for s in samples])
    return drafter, losses, share


def policy_samples(target: Transformer, tokenizer: TaskTokenizer, problems: Sequence[Problem], *, cap: int,
                   temperature: float, seed: int) -> list[Sample]:
    """One response per problem sampled from ``target`` (the batched sampler, seeded), as drafter-training
    samples with the target's hidden states and the prompt length."""
    from tltreal.rl.pretrain import sample_batch

    if not problems:
        return []
    prompts = [tokenizer.encode(p.prompt, bos=True) for p in problems]
    gen = torch.Generator()
    gen.manual_seed(seed)
    outs = sample_batch(target, tokenizer, prompts, cap, temperature, gen)
    return [replace(target_sample(target, p + o), prompt_len=len(p)) for p, o in zip(prompts, outs, strict=True)]


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
              cfg: AdaptiveRunConfig, cap: int, eos: int) -> dict[str, object]:
    """SD speedup of each drafter on the padded target ``big`` (module docstring, 5): the median over
    ``speedup_repeats`` interleaved repeats and each repeat's value (``speedup_NAME_repeats``)."""
    from tltreal.rl.padded_target import measure_drafter_speedups, rebind_drafter

    got = measure_drafter_speedups(big, {n: rebind_drafter(d, big) for n, d in drafters.items()}, prompts,
                                   batch=cfg.speedup_batch, new_tokens=cap, depth=cfg.depth,
                                   repeats=cfg.speedup_repeats, eos_token_ids=(eos,))
    out: dict[str, object] = {}
    for name, m in got.items():
        out[f"speedup_{name}"] = m.speedup
        out[f"speedup_{name}_min"] = min(m.per_repeat)
        out[f"speedup_{name}_max"] = max(m.per_repeat)
        out[f"speedup_{name}_repeats"] = " ".join(repr(float(x)) for x in m.per_repeat)  # exact: min, max of these
        out[f"padded_accept_{name}"] = m.accept_length
        out["padded_base_tok_s"] = m.base_tok_s
    return out


def end_to_end(big: Transformer, drafter: EagleDrafter, requests: Sequence[object], rollouts: Sequence[Rollout],
               cfg: AdaptiveRunConfig, eos: int, pad_id: int) -> dict[str, object]:
    """One RL step's time on the padded target ``big`` with the rollout's SD policy and ``drafter``
    (bound to ``big``) against the same step without SD (module docstring, 5): the rollout of every
    request of ``requests`` in one engine (``e2e_repeats`` interleaved pairs: no SD, then SD) and one
    GRPO update of a copy of ``big`` on ``rollouts`` (timed once: it is the same in both arms). The
    drafter's training is not added: it runs on released workers inside the bubble."""
    import copy

    from tltcore.policy.registry import make_policy

    def rollout(sd: bool) -> tuple[float, int, float]:
        engine = Engine(big, make_policy(cfg.sd_policy) if sd else NoSD(), drafter if sd else None,
                        EngineConfig(max_batch=len(requests), max_len=cfg.grpo.row_len, eos_token_ids=(eos,)))
        for r in requests:
            engine.add_request(list(r.prompt), r.max_new_tokens,  # type: ignore[attr-defined]
                               SamplingParams(r.temperature, seed=r.seed))  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        result = engine.run()
        return time.perf_counter() - t0, sum(len(o) for o in result.outputs.values()), result.mean_accept_length

    plain, sd = [], []
    for _ in range(cfg.e2e_repeats):
        plain.append(rollout(False))
        sd.append(rollout(True))
    model = copy.deepcopy(big)
    t0 = time.perf_counter()
    GRPOTrainer(model, cfg.grpo, pad_id=pad_id).update(rollouts)
    update_s = time.perf_counter() - t0
    del model
    plain_s, sd_s = float(np.median([x[0] for x in plain])), float(np.median([x[0] for x in sd]))
    return {"e2e_rollout_nosd_s": plain_s, "e2e_rollout_sd_s": sd_s, "e2e_update_s": update_s,
            "e2e_rollout_nosd_repeats": " ".join(f"{x[0]:.3f}" for x in plain),
            "e2e_rollout_sd_repeats": " ".join(f"{x[0]:.3f}" for x in sd),
            "e2e_tokens_nosd": int(np.median([x[1] for x in plain])),
            "e2e_tokens_sd": int(np.median([x[1] for x in sd])),
            "e2e_sd_accept": float(np.median([x[2] for x in sd])),
            "e2e_rollout_speedup": plain_s / sd_s, "e2e_step_speedup": (plain_s + update_s) / (sd_s + update_s)}


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


def _band(target: Transformer, tokenizer: TaskTokenizer, cfg: AdaptiveRunConfig, log: Callable[[str], None]
          ) -> tuple[list[int], int, dict[str, float]]:
    """The difficulty band, the response cap and the measured pass rates (module docstring, 2)."""
    rates = difficulty_pass_rates(target, tokenizer, cfg.band_config(), cfg.seed)
    band = choose_band(rates, cfg.band_low, cfg.band_high)
    cap = min(cfg.max_new_tokens, max(solution_budget(tokenizer, make_problem(random.Random(0), d, cfg.task),
                                                      cfg.slack) for d in band))
    log("temperature-1 pass rate by step count: " +
        ", ".join(f"{d}: {r:.2f}" for d, r in zip(rates["difficulty"], rates["pass_rate"], strict=True)) +
        f"; band {band}; response cap {cap} tokens")
    return band, cap, {str(int(d)): float(r) for d, r in zip(rates["difficulty"], rates["pass_rate"], strict=True)}


def _train_overrun(report: object) -> float:
    """Seconds the drafter training ran past the rollout's end (budget mode: the step waits for it)."""
    ends = [w.train_end_s for w in report.workers if w.train_end_s is not None]  # type: ignore[attr-defined]
    return max([0.0, *(e - report.rollout_s for e in ends)])  # type: ignore[attr-defined]


def _run(cfg: AdaptiveRunConfig, out: Path, log: Callable[[str], None], command: str | None) -> RunOutputs:
    from tltreal.spot.contract import SpotConfig
    from tltreal.spot.messages import RolloutRequest
    from tltreal.spot.trainer import SpotTrainer

    cpu0, wall0, load0 = time.process_time(), time.perf_counter(), os.getloadavg()[0]
    torch.manual_seed(cfg.seed)
    target, tokenizer, info = _load_target(cfg, log)
    info["command"] = command
    task = cfg.task
    pay = paid(cfg.reward_kind)
    band, cap, rates = _band(target, tokenizer, cfg, log)
    info.update(band=band, response_cap_tokens=cap, band_pass_rates=rates)
    t0 = time.perf_counter()
    static, init_losses, init_terse = train_initial_drafter(
        target, tokenizer, cfg, band_problems(cfg.initial_prompts, band, cfg.seed, "initial-drafter", task), cap)
    init_loss = float(np.mean(init_losses[-10:])) if init_losses else float("nan")
    half = init_losses[len(init_losses) // 2 - 5: len(init_losses) // 2 + 5]
    info.update(initial_drafter_seconds=time.perf_counter() - t0, initial_drafter_loss=init_loss,
                initial_drafter_loss_halfway=float(np.mean(half)) if half else float("nan"),
                initial_drafter_terse_share=init_terse)
    static_state = trainable_tensors(static)
    log(f"initial drafter trained in {info['initial_drafter_seconds']:.1f}s (loss {init_loss:.4f}, halfway "
        f"{info['initial_drafter_loss_halfway']:.4f}; trained on text {init_terse:.0%} terse)")

    eval_problems = band_problems(cfg.eval_prompts, band, cfg.seed, "held-out-eval", task)
    eval_prompts = [tokenizer.encode(p.prompt, bos=True) for p in eval_problems]
    eval_seeds = [_seed(cfg.seed, "eval-sample", i) for i in range(len(eval_prompts))]
    # fixed texts (the evaluation problems' worked solutions) on which the policy's drift is measured
    references = [torch.tensor(tokenizer.encode(p.prompt + p.solution, bos=True)) for p in eval_problems[:16]]
    initial_hidden = [target_hidden(target, ref) for ref in references]
    # the long tail's prompts for the speedup: the longest evaluation problems
    long_first = sorted(range(len(eval_problems)), key=lambda i: -eval_problems[i].steps)
    speed_prompts = [eval_prompts[i] for i in long_first[:cfg.speedup_batch]]
    k = cfg.grpo.group_size

    spot_cfg = SpotConfig(n_workers=cfg.workers, training=cfg.bubble, sd_policy=cfg.sd_policy,
                          trainer=cfg.drafter_trainer(lr=cfg.online_lr, steps=cfg.session_steps,
                                                      seed=_seed(cfg.seed, "spot")),
                          max_train_steps=cfg.budget_steps if cfg.bubble == "budget" else cfg.session_steps,
                          checkpoint_every=cfg.checkpoint_every,
                          window_tokens=DrafterTrainerConfig.window_tokens, keep_steps=2,
                          max_batch=cfg.prompts_per_step * k, max_len=cfg.grpo.row_len,
                          eos_token_ids=(tokenizer.eos_id,), seed=cfg.seed)
    grpo = GRPOTrainer(target, cfg.grpo, pad_id=tokenizer.pad_id)
    rows: list[dict[str, object]] = []
    trace: list[dict[str, object]] = []
    padded: Transformer | None = None
    with SpotTrainer(spot_cfg, out / "work" / "spot", target.cfg, static_state) as spot:
        for step in range(cfg.steps):
            ts = time.perf_counter()
            adaptive_state = spot.latest_drafter_state()
            problems = band_problems(cfg.prompts_per_step, band, cfg.seed, f"step-{step}", task)
            requests = [RolloutRequest(rid=g * k + j, prompt=tuple(tokenizer.encode(p.prompt, bos=True)),
                                       max_new_tokens=cap, group=g, seed=_seed(cfg.seed, "rollout", step, g, j),
                                       temperature=cfg.temperature)
                        for g, p in enumerate(problems) for j in range(k)]
            report = spot.run_step(step, target, requests)
            texts = [_text(tokenizer, r.output) for r in report.responses]
            rollouts = [Rollout(r.rid // k, r.prompt + r.output, len(r.prompt), pay(problems[r.rid // k], t),
                                truncated=len(r.output) >= cap and r.output[-1] != tokenizer.eos_id)
                        for r, t in zip(report.responses, texts, strict=True)]
            answers = [reward(problems[r.rid // k], t) for r, t in zip(report.responses, texts, strict=True)]
            trace += trace_rows(step, problems, rollouts, k, cap)

            te = time.perf_counter()
            drafters = {"static": drafter_with_state(target, static_state),
                        "adaptive": drafter_with_state(target, adaptive_state)}
            upper: dict[str, object] = {}
            if cfg.upper_every and step % cfg.upper_every == 0:
                tu = time.perf_counter()
                bound = drafter_with_state(target, static_state)
                fresh = policy_samples(target, tokenizer, band_problems(cfg.upper_samples, band, cfg.seed,
                                                                        f"upper-{step}", task),
                                       cap=cap, temperature=cfg.temperature, seed=_seed(cfg.seed, "upper-sample", step))
                # the buffer holds responses in the order they arrived from the workers (timing): sorted, the
                # upper bound's data and its window draws repeat with the seed
                rolled = sorted(spot.buffer.samples(step), key=lambda x: tuple(x.tokens.tolist()))
                losses = train_drafter(bound, rolled + fresh,
                                       cfg.drafter_trainer(lr=cfg.initial_lr, steps=cfg.upper_steps,
                                                           seed=_seed(cfg.seed, "upper", step)), cfg.upper_steps)
                drafters["upper"] = bound.eval()
                upper = {"upper_loss_first": float(np.mean(losses[:10])),
                         "upper_loss_last": float(np.mean(losses[-10:])), "upper_train_s": time.perf_counter() - tu}
            accepts, outputs = {}, {}
            for name, d in drafters.items():
                responses, accepts[name] = generate_responses(target, tokenizer, eval_prompts, eval_seeds,
                                                              max_new_tokens=cap, temperature=cfg.eval_temperature,
                                                              drafter=d, depth=cfg.depth)
                outputs[name] = [r.output for r in responses]
            eval_texts = [_text(tokenizer, o) for o in outputs["static"]]
            speed: dict[str, object] = {}
            if cfg.speedup_every and (step % cfg.speedup_every == 0 or step == cfg.steps - 1):
                padded = _padded(target, padded, cfg)
                speed = _speedups(padded, drafters, speed_prompts, cfg, cap, tokenizer.eos_id)
            eval_s = time.perf_counter() - te

            if cfg.speedup_every and cfg.e2e_repeats and step == cfg.steps - 1:
                from tltreal.rl.padded_target import rebind_drafter

                padded = _padded(target, padded, cfg)
                speed.update(end_to_end(padded, rebind_drafter(drafters["adaptive"], padded), requests, rollouts, cfg,
                                        tokenizer.eos_id, tokenizer.pad_id))
                log(f"end to end on the padded target: rollout {speed['e2e_rollout_nosd_s']:.1f}s without SD, "
                    f"{speed['e2e_rollout_sd_s']:.1f}s with; update {speed['e2e_update_s']:.1f}s; step "
                    f"{speed['e2e_step_speedup']:.3f}x")
                eval_s = time.perf_counter() - te
            drift = hidden_drift(target, references, initial_hidden)
            update = grpo.update(rollouts)
            lengths = np.array([r.response_len for r in rollouts])
            row = {"step": step, "reward": float(np.mean([r.reward for r in rollouts])),
                   "answer_reward": float(np.mean(answers)), "terse_share": terse_share(texts),
                   "eval_reward": float(np.mean([reward(p, t) for p, t in zip(eval_problems, eval_texts,
                                                                                strict=True)])),
                   "eval_terse_share": terse_share(eval_texts),
                   "eval_text_identical": all(o == outputs["static"] for o in outputs.values()),
                   "hidden_drift": drift,
                   "mean_response_tokens": float(lengths.mean()), "max_response_tokens": int(lengths.max()),
                   "hit_cap": int((lengths >= cap).sum()),
                   **{f"accept_{n}": accepts.get(n, float("nan")) for n in DRAFTERS}, **upper,
                   "rollout_accept": report.accept_length, "drafter_version": report.drafter_version,
                   "committed_version": report.committed_version, "rollout_s": report.rollout_s,
                   "bubble_train_s": report.bubble_train_s, "train_overrun_s": _train_overrun(report),
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
    info.update(cpu_s=time.process_time() - cpu0, wall_s=time.perf_counter() - wall0, load_start=load0,
                load_end=os.getloadavg()[0], versions=versions())
    _write_outputs(out, cfg, steps, trace_df, dynamics, info)
    save_pretrained(target, tokenizer, out / "work" / "final-target", force=True)
    torch.save(final_state, out / "work" / "final-drafter.pt")
    return RunOutputs(out, steps, trace_df, dynamics)


def _row_line(row: dict[str, object]) -> str:
    upper = row["accept_upper"]
    return (f"step {row['step']:3d}  reward {row['reward']:.3f} (answers {row['answer_reward']:.3f}, terse "
            f"{row['terse_share']:.2f})  len {row['mean_response_tokens']:5.1f}  eval reward {row['eval_reward']:.3f} "
            f"terse {row['eval_terse_share']:.2f}  drift {row['hidden_drift']:.3f}  accept static "
            f"{row['accept_static']:.2f} adaptive {row['accept_adaptive']:.2f} (v{row['drafter_version']}) upper "
            f"{upper:.2f}  rollout {row['rollout_s']:.1f}s  bubble training {row['bubble_train_s']:.1f}s "
            f"({row['train_steps']} steps)  step {row['step_s']:.1f}s")


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
    write_text(out / "config.json", json.dumps({"config": recorded, **info}, indent=1, default=_jsonable) + "\n")


def _jsonable(value: object) -> object:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


__all__ = [
    "DRAFTERS",
    "DRAFTER_LOSSES",
    "TRACE_SOURCE",
    "AdaptiveRunConfig",
    "GeneratedResponse",
    "RunOutputs",
    "drafter_with_state",
    "generate_responses",
    "policy_samples",
    "record_path",
    "run_adaptive",
    "solution_format",
    "trace_rows",
    "train_drafter",
    "train_initial_drafter",
]
