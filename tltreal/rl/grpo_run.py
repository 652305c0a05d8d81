"""GRPO that learns, measured against a shuffled-reward control (issue 26, item 1).

Why this run exists: the adaptive-drafter run (:mod:`tltreal.rl.adaptive_run`) showed the plumbing but
its GRPO made the policy *worse*, and a control with rewards shuffled within each group degraded as
fast, so its updates were noise. An RL claim needs a control, a signal and an evaluation that can see
the signal. This run is the smallest honest setting we found on the arithmetic task:

1. **Policy.** Pre-train (:mod:`tltreal.rl.pretrain`) once, or load a folder it wrote, and check that
   one-line greedy accuracy is >= 0.9 (``one_line_accuracy`` in the summary; a run below it says so).
   All seeds start from this one policy: the seeds vary the RL (problems, samples, shuffles).
2. **Difficulty band.** Measure the policy's temperature-1 pass rate for each step count
   ``1..max_difficulty`` (``band_draws`` samples each) and keep the step counts whose pass rate lies in
   ``[band_low, band_high]`` (0.2-0.8). Problems every sample solves (or none does) give groups with no
   reward spread, whose GRPO advantages are all 0: they teach nothing. RL and evaluation problems are
   drawn uniformly over the band.
3. **Three arms per seed**, from the same starting weights, on the same problems and sampling seeds:
   ``grpo`` (the rewards as scored), ``control`` (each group's rewards shuffled among its members
   before the update: same reward statistics, no information about which response earned them) and
   ``no-update`` (the same rollouts scored, no optimizer step). An improvement the control also shows
   is not learning; and since reward-blind updates can *degrade* the policy on their own (the shuffled
   control lost 0.27 of held-out reward in the committed 40-step run), the margin over the control
   overstates learning: the margin over ``no-update`` is the honest one (issue 44, item 4). With the
   evaluation's common random numbers the no-update arm's held-out reward cannot move (same weights,
   same draws): its gain is 0 by construction, and what it adds is that the run checks so.
4. **Evaluation** every ``eval_every`` steps, at step 0 (before any update) and after the last update:
   the mean temperature-1 reward on ``eval_draws`` fresh draws over held-out band problems (the primary
   measure: GRPO moves sampled behaviour, which greedy decoding can hide), and the greedy accuracy on the
   same problems (the second measure). Every evaluation uses the same problems and the same sampling
   generator seed, so two evaluations differ only by the policy (common random numbers). Held out by
   construction: evaluation problems come from the held-out split of the problem space
   (:func:`tltreal.rl.task.held_out`, a hash of the problem's parameters), GRPO's from the rest, and a
   pre-training run here draws none from the held-out split (``PretrainConfig.exclude_held_out``);
   ``eval_overlap`` in the summary counts, per seed, evaluation problems also among the seed's training
   problems (0 by construction; the committed run before the split had 8, 5 and 9 of 64).

The update is :class:`tltreal.rl.grpo.GRPOTrainer` with the dual clip and an optional KL to the
pre-trained policy. Generation here is a plain batched sampler (:func:`tltreal.rl.pretrain.sample_batch`), not the SD
engine: this run measures learning, not rollout speed, and SD is lossless (tests/real/test_rollout_lossless.py)
so it would not change what is learnt.

**Designed drift** (``reward_kind = "terse"``, issue 26 item 2): pre-train on a mix of the two solution
formats (``PretrainConfig.terse_share``, e.g. 20% terse) and pay the right answer in full only in the
terse format (:func:`tltreal.rl.task.format_reward`). GRPO then moves the policy's *text* from verbose to
terse -- the drift a drafter trained before RL has not seen -- and ``terse_share`` (rollouts) and
``eval_terse_share`` (held-out draws) record the format share per step.

Outputs in ``--out``: ``steps.csv`` (one row per seed, arm and step; evaluation columns filled at
evaluated steps; the row at ``step == steps`` is the evaluation after the last update), ``band.csv``
(pass rate per step count), ``summary.json`` (``reward_gain_mean``, ``control_reward_gain_mean``, per
seed gains, the band, CPU seconds, versions, the command) and a figure. Same inputs and seed give the
same numbers (fixed thread count, seeded generators, deterministic update).
"""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from tltcore.errors import InputError
from tltreal.model.tokenizer import TaskTokenizer
from tltreal.model.transformer import Transformer
from tltreal.rl.grpo import GRPOConfig, GRPOTrainer, Rollout
from tltreal.rl.pretrain import PretrainConfig, load_pretrained, pretrain, sample_batch, solution_budget
from tltreal.rl.task import (
    HELD_OUT_SHARE,
    Problem,
    TaskConfig,
    make_problem,
    make_split_problem,
    paid,
    reward,
    solution_format,
)

#: The arms of a seed (module docstring, point 3); ``grpo`` must come first (the others are compared with it).
ARMS = ("grpo", "control", "no-update")


@dataclass(frozen=True)
class GRPORunConfig:
    """Everything a learning run depends on (module docstring). Defaults are the issue's: 16 prompts
    x 8 samples, lr 5e-5 (inside 2e-5..5e-5), 40 steps, 256 evaluation draws, 3 seeds."""

    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 40
    prompts_per_step: int = 16
    grpo: GRPOConfig = field(default_factory=lambda: GRPOConfig(lr=5e-5, minibatches=2))
    temperature: float = 1.0
    eval_every: int = 5
    eval_draws: int = 256
    eval_problems: int = 64
    band_low: float = 0.2
    band_high: float = 0.8
    band_draws: int = 64
    max_difficulty: int = 12
    min_one_line_accuracy: float = 0.9
    pretrain: PretrainConfig = field(default_factory=lambda: PretrainConfig(exclude_held_out=True))
    pretrained: str | None = None
    slack: int = 8  # tokens of generation budget beyond the longest band problem's worked solution
    reward_kind: str = "answer"  # what GRPO is paid for: tltreal.rl.task.REWARDS

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "eval_every", "eval_draws", "eval_problems", "band_draws",
                     "max_difficulty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"must be a positive integer, got {value!r}", field=name)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise InputError(f"must be one or more distinct seeds, got {list(self.seeds)}", field="seeds")
        if not 0 <= self.band_low < self.band_high <= 1:
            raise InputError(f"need 0 <= band_low < band_high <= 1, got {self.band_low}, {self.band_high}",
                             field="band_low")
        paid(self.reward_kind)  # an unknown kind is refused there, naming the table's kinds
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise InputError(f"must be > 0 (GRPO needs sampled groups), got {self.temperature}", field="temperature")

    @property
    def task(self) -> TaskConfig:
        return self.pretrain.task


def _seed(*parts: object) -> int:
    """A stable 63-bit seed from the run seed and a purpose (no Python hash randomisation)."""
    return random.Random(":".join(map(str, parts))).getrandbits(63)


# ---- generation ------------------------------------------------------------------------------------


def _text(tokenizer: TaskTokenizer, output: Sequence[int]) -> str:
    return tokenizer.decode([t for t in output if t != tokenizer.eos_id])


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def answer_texts(model: Transformer, tokenizer: TaskTokenizer, problems: Sequence[Problem], *, draws_per_problem: int,
                 temperature: float, seed: int, max_new_tokens: int) -> list[tuple[Problem, str]]:
    """``draws_per_problem`` responses to each problem, as (problem, text), in one batch (greedy when
    ``temperature == 0``, where one draw per problem is enough)."""
    repeated = [p for p in problems for _ in range(draws_per_problem)]
    outs = sample_batch(model, tokenizer, [tokenizer.encode(p.prompt, bos=True) for p in repeated], max_new_tokens,
                        temperature, _generator(seed))
    return [(p, _text(tokenizer, o)) for p, o in zip(repeated, outs, strict=True)]


def mean_reward(model: Transformer, tokenizer: TaskTokenizer, problems: Sequence[Problem], *, draws_per_problem: int,
                temperature: float, seed: int, max_new_tokens: int) -> float:
    """Mean (answer) reward of :func:`answer_texts`."""
    return float(np.mean([reward(p, t) for p, t in answer_texts(
        model, tokenizer, problems, draws_per_problem=draws_per_problem, temperature=temperature, seed=seed,
        max_new_tokens=max_new_tokens)]))


def terse_share(texts: Sequence[str]) -> float:
    """Fraction of ``texts`` in the terse format (the drift's measure, :func:`solution_format`)."""
    return float(np.mean([solution_format(t) == "terse" for t in texts])) if texts else float("nan")


# ---- the difficulty band -----------------------------------------------------------------------------
def difficulty_pass_rates(model: Transformer, tokenizer: TaskTokenizer, cfg: GRPORunConfig, seed: int
                          ) -> pd.DataFrame:
    """Temperature-1 pass rate of ``band_draws`` fresh problems for each step count ``1..max_difficulty``."""
    rows = []
    for d in range(1, cfg.max_difficulty + 1):
        rng = random.Random(f"tlt-grpo-band:{seed}:{d}")
        problems = [make_problem(rng, d, cfg.task) for _ in range(cfg.band_draws)]
        budget = max(solution_budget(tokenizer, p, cfg.slack) for p in problems)
        rate = mean_reward(model, tokenizer, problems, draws_per_problem=1, temperature=cfg.temperature,
                           seed=_seed(seed, "band-sample", d), max_new_tokens=budget)
        rows.append({"difficulty": d, "pass_rate": rate, "draws": cfg.band_draws})
    return pd.DataFrame(rows)


def choose_band(rates: pd.DataFrame, low: float, high: float) -> list[int]:
    """The step counts whose pass rate lies in ``[low, high]``; an empty band is an error naming the
    rates (no problem there would give GRPO groups with reward spread)."""
    band = [int(d) for d, r in zip(rates["difficulty"], rates["pass_rate"], strict=True) if low <= r <= high]
    if not band:
        seen = ", ".join(f"{int(d)}: {r:.2f}" for d, r in zip(rates["difficulty"], rates["pass_rate"], strict=True))
        raise InputError(f"no step count has a temperature-1 pass rate in [{low}, {high}] (measured {seen})",
                         field="band")
    return band


def band_problems(n: int, band: Sequence[int], seed: int, purpose: str, task: TaskConfig, *,
                  split: str | None = None) -> list[Problem]:
    """``n`` problems with step counts drawn uniformly from ``band``; identical for identical arguments.
    With ``split`` (:data:`tltreal.rl.task.SPLITS`) only problems of that split of the problem space
    (:func:`tltreal.rl.task.make_split_problem`); without it the whole space (the adaptive-drafter run's
    stream, which claims no held-out evaluation)."""
    rng = random.Random(f"tlt-grpo:{purpose}:{seed}")
    if split is None:
        return [make_problem(rng, rng.choice(list(band)), task) for _ in range(n)]
    return [make_split_problem(rng, rng.choice(list(band)), split, task) for _ in range(n)]


def training_problems(cfg: GRPORunConfig, band: Sequence[int], seed: int, step: int) -> list[Problem]:
    """Step ``step``'s GRPO problems of seed ``seed``: the training split of the band."""
    return band_problems(cfg.prompts_per_step, band, seed, f"step-{step}", cfg.task, split="train")


def evaluation_problems(cfg: GRPORunConfig, band: Sequence[int], seed: int) -> list[Problem]:
    """Seed ``seed``'s evaluation problems: the held-out split of the band, disjoint from every
    :func:`training_problems` by construction."""
    return band_problems(cfg.eval_problems, band, seed, "held-out", cfg.task, split="held-out")


def eval_overlap(cfg: GRPORunConfig, band: Sequence[int], seed: int) -> int:
    """How many of seed ``seed``'s evaluation problems are also among its training problems (by prompt,
    which fixes a problem): recorded so the summary shows the split working, not just claims it."""
    trained = {p.prompt for step in range(cfg.steps) for p in training_problems(cfg, band, seed, step)}
    return sum(p.prompt in trained for p in evaluation_problems(cfg, band, seed))


def shuffle_within_groups(rewards: Sequence[float], groups: Sequence[int], rng: random.Random) -> list[float]:
    """The control's rewards: each group's rewards permuted among its own members, so every group keeps
    its reward statistics (and advantages their magnitudes) but loses which response earned which."""
    out = list(rewards)
    for g in sorted(set(groups)):
        idx = [i for i, x in enumerate(groups) if x == g]
        vals = [out[i] for i in idx]
        rng.shuffle(vals)
        for i, v in zip(idx, vals, strict=True):
            out[i] = v
    return out


# ---- one arm ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Evaluation:
    problems: list[Problem]
    seed: int
    budget: int


def _evaluate(model: Transformer, tokenizer: TaskTokenizer, ev: Evaluation, cfg: GRPORunConfig) -> dict[str, float]:
    per = max(1, math.ceil(cfg.eval_draws / len(ev.problems)))
    sampled = answer_texts(model, tokenizer, ev.problems, draws_per_problem=per, temperature=cfg.temperature,
                           seed=ev.seed, max_new_tokens=ev.budget)
    return {"eval_reward_t1": float(np.mean([reward(p, t) for p, t in sampled])),
            "eval_draws": per * len(ev.problems),
            "eval_terse_share": terse_share([t for _, t in sampled]),
            "greedy_accuracy": mean_reward(model, tokenizer, ev.problems, draws_per_problem=1, temperature=0.0,
                                           seed=ev.seed, max_new_tokens=ev.budget)}


def run_arm(start: Transformer, tokenizer: TaskTokenizer, cfg: GRPORunConfig, seed: int, arm: str, band: Sequence[int],
            ev: Evaluation, log: Callable[[str], None] = print) -> list[dict[str, object]]:
    """``cfg.steps`` GRPO steps of one arm from a copy of ``start``; one row per step (and one for the
    evaluation after the last update). The ``no-update`` arm samples and scores its rollouts as the others
    do (its ``train_reward`` is the frozen policy's) and skips the update: its loss columns are empty."""
    if arm not in ARMS:
        raise InputError(f"must be one of {', '.join(ARMS)}, got {arm!r}", field="arm")
    model = copy.deepcopy(start).eval()
    trainer = GRPOTrainer(model, cfg.grpo, pad_id=tokenizer.pad_id)
    shuffler = random.Random(f"tlt-grpo-shuffle:{seed}")
    k = cfg.grpo.group_size
    rows: list[dict[str, object]] = []
    for step in range(cfg.steps + 1):
        cpu0 = time.process_time()
        row: dict[str, object] = {"seed": seed, "arm": arm, "step": step}
        if step % cfg.eval_every == 0 or step == cfg.steps:
            row.update(_evaluate(model, tokenizer, ev, cfg))
        if step < cfg.steps:
            problems = training_problems(cfg, band, seed, step)
            prompts = [tokenizer.encode(p.prompt, bos=True) for p in problems for _ in range(k)]
            outs = sample_batch(model, tokenizer, prompts, ev.budget, cfg.temperature,
                                _generator(_seed(seed, "rollout", step)))
            texts = [_text(tokenizer, o) for o in outs]
            pay = paid(cfg.reward_kind)
            scored = [pay(problems[i // k], t) for i, t in enumerate(texts)]
            groups = [i // k for i in range(len(outs))]
            used = shuffle_within_groups(scored, groups, shuffler) if arm == "control" else scored
            rollouts = [Rollout(g, tuple(p) + tuple(o), len(p), r,
                                truncated=len(o) >= ev.budget and o[-1] != tokenizer.eos_id)
                        for g, p, o, r in zip(groups, prompts, outs, used, strict=True)]
            row.update(train_reward=float(np.mean(scored)), terse_share=terse_share(texts),
                       mean_response_tokens=float(np.mean([len(o) for o in outs])))
            if arm != "no-update":
                update = trainer.update(rollouts)
                row.update(loss=update.loss, clip_fraction=update.clip_fraction, grad_norm=update.grad_norm,
                           kl=update.kl, learning_responses=update.learning_responses)
        row["cpu_s"] = time.process_time() - cpu0
        rows.append(row)
        if "eval_reward_t1" in row:
            log(f"seed {seed} {arm:9s} step {step:3d}  held-out T=1 reward {row['eval_reward_t1']:.3f}  "
                f"greedy {row['greedy_accuracy']:.3f}  terse {row['eval_terse_share']:.2f}" +
                (f"  train reward {row['train_reward']:.3f}" if "train_reward" in row else ""))
    return rows


# ---- the run ------------------------------------------------------------------------------------------------
def _policy(cfg: GRPORunConfig, log: Callable[[str], None]) -> tuple[Transformer, TaskTokenizer, dict[str, object]]:
    if cfg.pretrained is not None:
        model, tokenizer = load_pretrained(cfg.pretrained)
        return model, tokenizer, {"pretrain_cpu_s": 0.0}
    log(f"pre-training the policy ({cfg.pretrain.steps} steps)")
    cpu0 = time.process_time()
    model, tokenizer, metrics = pretrain(cfg.pretrain)
    return model, tokenizer, {"pretrain_cpu_s": time.process_time() - cpu0,
                              "pretrain_final_loss": metrics.final_loss}


def gains(steps: pd.DataFrame, column: str = "eval_reward_t1") -> pd.DataFrame:
    """Per seed and arm: ``column`` at step 0, at the last step, and the gain between them."""
    ev = steps.dropna(subset=[column])
    rows = []
    for (seed, arm), g in ev.groupby(["seed", "arm"], sort=True):
        g = g.sort_values("step")
        first, last = float(g[column].iloc[0]), float(g[column].iloc[-1])
        rows.append({"seed": int(seed), "arm": arm, "first": first, "last": last, "gain": last - first})
    return pd.DataFrame(rows)


def _spread(values: Sequence[float]) -> float:
    """Sample standard deviation over seeds (0 for one seed: no spread measured)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def summarise(steps: pd.DataFrame, cfg: GRPORunConfig) -> dict[str, object]:
    """``summary.json``'s numbers: mean gains of the three arms (:data:`ARMS`), per seed, GRPO's margin
    over each baseline arm (mean and standard deviation over seeds), and whether each seed beat both (the
    bar: a margin >= 0.10 over no-update on the mean, above the control and the no-update arm in every
    seed). "Above" compares the last evaluations: the arms start from the same weights and are evaluated
    on the same draws' seeds, so their step-0 values are equal and this is the same as comparing gains.
    Every arm must be in ``steps`` for every seed: a missing one is an error, not a silent zero."""
    t1, greedy = gains(steps), gains(steps, "greedy_accuracy")
    for name in ARMS:
        have = set(t1.loc[t1["arm"] == name, "seed"]) if not t1.empty else set()
        if have != set(t1["seed"]):
            raise InputError(f"arm {name!r} has evaluations for seeds {sorted(have)}, the run for "
                             f"{sorted(set(t1['seed']))}", field="arm")

    def arm(table: pd.DataFrame, name: str) -> pd.DataFrame:
        return table[table["arm"] == name].set_index("seed")

    real, ctrl, still = arm(t1, "grpo"), arm(t1, "control"), arm(t1, "no-update")
    per_seed = [{"seed": int(s), "eval_reward_first": real.at[s, "first"], "eval_reward_last": real.at[s, "last"],
                 "reward_gain": real.at[s, "gain"], "control_reward_gain": ctrl.at[s, "gain"],
                 "no_update_reward_gain": still.at[s, "gain"],
                 "margin_over_control": real.at[s, "last"] - ctrl.at[s, "last"],
                 "margin_over_no_update": real.at[s, "last"] - still.at[s, "last"],
                 "greedy_gain": arm(greedy, "grpo").at[s, "gain"],
                 "control_greedy_gain": arm(greedy, "control").at[s, "gain"],
                 "no_update_greedy_gain": arm(greedy, "no-update").at[s, "gain"],
                 "above_control": bool(real.at[s, "last"] > ctrl.at[s, "last"]),
                 "above_no_update": bool(real.at[s, "last"] > still.at[s, "last"])}
                for s in real.index]
    gain_mean = float(real["gain"].mean())
    over_still = [float(r["margin_over_no_update"]) for r in per_seed]
    over_ctrl = [float(r["margin_over_control"]) for r in per_seed]
    fmt = gains(steps, "eval_terse_share") if "eval_terse_share" in steps else None
    formats = {} if fmt is None or fmt.empty else {
        f"{prefix}terse_share_{end}_mean": float(arm(fmt, name)[end].mean())
        for prefix, name in (("", "grpo"), ("control_", "control")) for end in ("first", "last")}
    above_both = all(r["above_control"] and r["above_no_update"] for r in per_seed)
    return {"seeds": [int(s) for s in cfg.seeds], "steps": cfg.steps,
            "reward_gain_mean": gain_mean, "reward_gain_sd": _spread(list(real["gain"])),
            "control_reward_gain_mean": float(ctrl["gain"].mean()),
            "control_reward_gain_sd": _spread(list(ctrl["gain"])),
            "no_update_reward_gain_mean": float(still["gain"].mean()),
            "margin_over_control_mean": float(np.mean(over_ctrl)), "margin_over_control_sd": _spread(over_ctrl),
            "margin_over_no_update_mean": float(np.mean(over_still)), "margin_over_no_update_sd": _spread(over_still),
            "greedy_gain_mean": float(arm(greedy, "grpo")["gain"].mean()),
            "control_greedy_gain_mean": float(arm(greedy, "control")["gain"].mean()),
            "no_update_greedy_gain_mean": float(arm(greedy, "no-update")["gain"].mean()),
            "above_control_every_seed": all(r["above_control"] for r in per_seed),
            "above_no_update_every_seed": all(r["above_no_update"] for r in per_seed),
            "meets_bar": bool(float(np.mean(over_still)) >= 0.10 and above_both),
            **formats, "reward_kind": cfg.reward_kind, "per_seed": per_seed}


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def versions() -> dict[str, str]:
    """What the numbers were measured with."""
    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "machine": platform.machine(), "processor": cpu_name(), "cores": str(os.cpu_count()),
            "device": "cpu", "torch_threads": str(torch.get_num_threads())}


@dataclass(frozen=True)
class GRPORunOutputs:
    folder: Path
    steps: pd.DataFrame
    summary: dict[str, object]


def run_grpo(cfg: GRPORunConfig, out: str | Path, *, force: bool = False, log: Callable[[str], None] = print,
             command: str | None = None,
             figure: Callable[[pd.DataFrame, Path], object] | None = None) -> GRPORunOutputs:
    """The run (module docstring), built in a temporary sibling of ``out`` and swapped in at the end
    (:func:`tltcore.atomic.atomic_dir`): an interrupted run leaves nothing half written, and a folder
    tlt did not write is refused unless ``force``. ``figure(steps, stem)`` draws the learning curves
    (the CLI passes :func:`analysis.rl_plots.learning_curves`; the real half imports no report code)."""
    from tltcore.atomic import atomic_dir, write_text

    with atomic_dir(out, kind="real-grpo", force=force, inputs=[cfg.pretrained] if cfg.pretrained else ()) as tmp:
        cpu0, wall0, load0 = time.process_time(), time.perf_counter(), os.getloadavg()[0]
        torch.manual_seed(cfg.pretrain.seed)
        start, tokenizer, info = _policy(cfg, log)
        one_line = mean_reward(start, tokenizer, band_problems(200, [1], cfg.pretrain.seed, "one-line", cfg.task),
                               draws_per_problem=1, temperature=0.0, seed=0,
                               max_new_tokens=solution_budget(tokenizer, make_problem(random.Random(0), 1, cfg.task),
                                                              cfg.slack))
        log(f"one-line greedy accuracy {one_line:.3f}" + ("" if one_line >= cfg.min_one_line_accuracy else
            f": BELOW the {cfg.min_one_line_accuracy} wanted, pre-train longer (the summary records it)"))
        rates = difficulty_pass_rates(start, tokenizer, cfg, cfg.pretrain.seed)
        band = choose_band(rates, cfg.band_low, cfg.band_high)
        log("temperature-1 pass rate by step count: " +
            ", ".join(f"{d}: {r:.2f}" for d, r in zip(rates["difficulty"], rates["pass_rate"], strict=True)) +
            f"; band {band}")
        budget = max(solution_budget(tokenizer, make_problem(random.Random(0), d, cfg.task), cfg.slack) for d in band)
        rows: list[dict[str, object]] = []
        overlap = {str(seed): eval_overlap(cfg, band, seed) for seed in cfg.seeds}
        for seed in cfg.seeds:
            ev = Evaluation(evaluation_problems(cfg, band, seed), _seed(seed, "eval-sample"), budget)
            for arm in ARMS:
                rows += run_arm(start, tokenizer, cfg, seed, arm, band, ev, log)
        steps = pd.DataFrame(rows)
        summary = {**summarise(steps, cfg), "band": band, "band_pass_rates": dict(zip(
            rates["difficulty"].astype(int).astype(str), rates["pass_rate"].astype(float), strict=True)),
            "one_line_accuracy": one_line, "one_line_ok": bool(one_line >= cfg.min_one_line_accuracy),
            "response_cap_tokens": budget, **info, "eval_overlap": overlap, "held_out_share": HELD_OUT_SHARE,
            "pretraining_excluded_held_out": None if cfg.pretrained else cfg.pretrain.exclude_held_out,
            "rl_cpu_s": float(steps["cpu_s"].sum()), "cpu_s": time.process_time() - cpu0,
            "wall_s": time.perf_counter() - wall0, "load_start": load0, "load_end": os.getloadavg()[0],
            "versions": versions(), "command": command,
            "config": asdict(replace(cfg, pretrained="PRETRAINED" if cfg.pretrained else None))}
        write_text(tmp / "steps.csv", steps.to_csv(index=False))
        write_text(tmp / "band.csv", rates.to_csv(index=False))
        write_text(tmp / "summary.json", json.dumps(summary, indent=1, default=_jsonable) + "\n")
        if figure is not None:
            figure(steps, tmp / "reward")
        write_text(tmp / "README.md", readme(json.loads((tmp / "summary.json").read_text())))
    return GRPORunOutputs(Path(out), steps, summary)


def readme(summary: dict[str, object]) -> str:
    """The run folder's README.md: the bar, the per-seed table, the band, the cost and the command,
    from ``summary`` alone (so it can be rebuilt from a folder's summary.json)."""
    s = summary
    per_seed = s["per_seed"]
    assert isinstance(per_seed, list)
    seeds = len(per_seed)
    v = s["versions"]
    assert isinstance(v, dict)
    lines = ["# GRPO that learns, against a shuffled-reward control and a no-update arm", "",
             f"Reproduce: `{s['command']}`", "",
             f"Device: CPU ({v['processor']}, {v.get('cores', '?')} cores, {v['torch_threads']} torch thread), "
             f"Python {v['python']}, torch "
             f"{v['torch']}, numpy {v['numpy']}. CPU time: pre-training {s['pretrain_cpu_s']:.0f} s, RL "
             f"{s['rl_cpu_s']:.0f} s (all three arms, {seeds} seed{'s' if seeds > 1 else ''}), whole command "
             f"{s['cpu_s']:.0f} s; wall {s['wall_s']:.0f} s at load average {s['load_start']:.1f} -> "
             f"{s['load_end']:.1f} "
             "(the machine was shared).", "",
             "## Result", "",
             f"- Held-out temperature-1 reward, step 0 to step {s['steps']} (mean ± sd over {seeds} "
             f"seed{'s' if seeds > 1 else ''}): GRPO **{s['reward_gain_mean']:+.3f}** ± {s['reward_gain_sd']:.3f}, "
             f"shuffled-reward control **{s['control_reward_gain_mean']:+.3f}** ± {s['control_reward_gain_sd']:.3f}, "
             f"no-update arm **{s['no_update_reward_gain_mean']:+.3f}**. Greedy accuracy: GRPO "
             f"{s['greedy_gain_mean']:+.3f}, control {s['control_greedy_gain_mean']:+.3f}, no-update "
             f"{s['no_update_greedy_gain_mean']:+.3f}.",
             f"- GRPO's margin at step {s['steps']}: over the no-update arm **{s['margin_over_no_update_mean']:+.3f}** "
             f"± {s['margin_over_no_update_sd']:.3f} (what learning added), over the shuffled-reward control "
             f"{s['margin_over_control_mean']:+.3f} ± {s['margin_over_control_sd']:.3f} (larger by what the "
             "control's reward-blind updates lost on their own: it overstates learning).",
             f"- The bar (margin over no-update >= 0.10 on the mean, above the control and the no-update arm in "
             f"every seed): **{'met' if s['meets_bar'] else 'not met'}**"
             + ("" if seeds >= 3 else f" on {seeds} seed{'s' if seeds > 1 else ''} (the bar asks for 3)") + ".",
             f"- Held out by construction: evaluation problems come from the held-out "
             f"{s['held_out_share']:.1%} of the problem space (a hash of each problem's start value, increment "
             f"and step count: `tltreal.rl.task.held_out`), GRPO's from the rest; evaluation problems also among "
             f"the seed's training problems: " + ", ".join(f"seed {k}: {v}" for k, v in s["eval_overlap"].items())
             + " (checked by `tests/real/test_grpo_run.py`). Pre-training "
             + {True: "drew none from the held-out split.", False: "drew from the whole space (held-out problems "
                "included).", None: "was a given folder: whether it saw held-out problems is not known."}[
                 s["pretraining_excluded_held_out"]],
             f"- Policy: one-line greedy accuracy {s['one_line_accuracy']:.3f} "
             f"({'>=' if s['one_line_ok'] else 'BELOW'} 0.9). Difficulty band (step counts with temperature-1 pass "
             f"rate in [{s['config']['band_low']}, {s['config']['band_high']}]): {s['band']}; pass rates "
             + ", ".join(f"{d}: {r:.2f}" for d, r in s["band_pass_rates"].items()) + ".",
             ""]
    if "terse_share_first_mean" in s and s.get("reward_kind") in ("terse", "format"):
        lines += [f"- Designed drift (reward pays the terse format): terse share of held-out draws "
                  f"{s['terse_share_first_mean']:.2f} -> {s['terse_share_last_mean']:.2f} (control "
                  f"{s['control_terse_share_first_mean']:.2f} -> {s['control_terse_share_last_mean']:.2f}).", ""]
    lines += ["| seed | T=1 reward, first -> last | gain | control gain | no-update gain | margin over control | "
              "margin over no-update | greedy gain | control greedy gain | above both at the end |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in per_seed:
        lines.append(f"| {r['seed']} | {r['eval_reward_first']:.3f} -> {r['eval_reward_last']:.3f} | "
                     f"{r['reward_gain']:+.3f} | {r['control_reward_gain']:+.3f} | {r['no_update_reward_gain']:+.3f} | "
                     f"{r['margin_over_control']:+.3f} | {r['margin_over_no_update']:+.3f} | {r['greedy_gain']:+.3f} | "
                     f"{r['control_greedy_gain']:+.3f} | "
                     f"{'yes' if r['above_control'] and r['above_no_update'] else 'no'} |")
    cfg = s["config"]
    assert isinstance(cfg, dict)
    g = cfg["grpo"]
    lines += ["", "![Held-out temperature-1 reward and greedy accuracy per evaluated step, GRPO beside the "
              "shuffled-reward control and the no-update arm](reward.png)", "",
              f"*Held-out reward at temperature 1 ({cfg['eval_draws']} draws over {cfg['eval_problems']} held-out "
              "band problems, the same draws' seeds at every evaluation) and greedy accuracy on the same problems; "
              "the three arms start from the same policy and see the same problems and sampling seeds; the "
              "control's rewards are shuffled within each group before the update; the no-update arm samples and "
              "scores its rollouts and takes no optimizer step (its held-out reward cannot move: same weights, "
              "same draws).*", "",
              f"Settings: {cfg['prompts_per_step']} prompts x {g['group_size']} samples per step, lr {g['lr']}, "
              f"{g['minibatches']} minibatches, clip {g['clip_eps']}, dual clip {g['dual_clip']}, KL "
              f"{g['kl_coef']}, response cap {s['response_cap_tokens']} tokens, evaluation every "
              f"{cfg['eval_every']} steps and after the last update. Files: steps.csv (one row per seed, arm and "
              "step), band.csv, summary.json.", ""]
    return "\n".join(lines)


def _jsonable(value: object) -> object:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


__all__ = ["ARMS", "Evaluation", "GRPORunConfig", "GRPORunOutputs", "answer_texts", "band_problems",
           "choose_band", "difficulty_pass_rates", "gains", "mean_reward", "readme", "run_arm", "run_grpo",
           "shuffle_within_groups", "summarise", "terse_share"]
