"""Pre-train a small Llama-style target on the task's worked solutions, on CPU, in minutes.

Why: a real GRPO run with an adaptive drafter needs a policy that already solves some problems
(otherwise every reward is 0 and GRPO's group advantages vanish) but not all of them (otherwise
there is nothing to learn), and whose outputs are real text with real long-tailed lengths. A few
minutes of supervised training on ``<bos> prompt solution <eos>`` gets a tiny model there: it
learns the step rule, solves most short problems greedily and slips more often the longer the
chain, which is the regime RL then improves.

Training uses the cache-free :meth:`Transformer.forward_train` over padding-free packed rows
(:func:`tltreal.model.train_forward.pack_sequences`), AdamW with warm-up and cosine decay, and a loss on
the solution tokens only (the prompt is random, predicting it is noise), the first solution line
weighted up (see :func:`encode_example`). Everything random comes from the seed: problems from a
seeded :class:`random.Random`, weights from :func:`tltreal.model.weights.init_weights`; with a fixed thread
count two runs give identical losses.

``save_pretrained`` writes an HF-style model folder (``config.json`` in Llama format, which
:class:`tltcore.model_config.ModelConfig` reads, ``model.safetensors``, the tokenizer files) into a
temporary sibling folder and renames it into place, so a reader never sees half a model.

Run: ``python -m tltreal.rl.pretrain --out runs/pretrained --steps 600`` (see ``--help``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tltcore.errors import InputError
from tltcore.model_config import ModelConfig
from tltreal.model.tokenizer import TaskTokenizer, build_tokenizer
from tltreal.model.tokenizer import load as load_tokenizer
from tltreal.model.train_forward import PackedBatch, pack_sequences, token_logprobs
from tltreal.model.transformer import Transformer, causal_mask, padded_causal_mask
from tltreal.model.weights import init_weights, load_model, save_model
from tltreal.rl.task import (
    Problem,
    TaskConfig,
    make_problem,
    make_split_problem,
    reward,
    sample_difficulty,
    sample_problems,
)


@dataclass(frozen=True)
class PretrainConfig:
    """Everything a pre-training run depends on. The defaults train in about five minutes on one
    CPU core; ``sequences`` problems per step are packed into rows of ``row_len`` tokens (longer
    solutions are truncated to ``row_len``: only problems of more than ~21 steps are).

    ``task`` must lay text out as the RL task does (same ``digits``, ``max_add``, ``max_steps``);
    its tail is heavier than the RL default (alpha 0.6 vs 0.9) on purpose: supervised data rich in
    multi-step chains teaches the step rule with fewer wasted prompt tokens, while the RL prompts
    keep the realistic mostly-short mix."""

    steps: int = 600
    sequences: int = 16
    row_len: int = 256
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    layers: int = 4
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 384
    max_position_embeddings: int = 2048
    task: TaskConfig = field(default_factory=lambda: TaskConfig(tail_alpha=0.6))
    first_line_weight: float = 8.0
    log_every: int = 50
    #: share of worked solutions written in the terse format (:data:`tltreal.rl.task.FORMATS`); 0 keeps
    #: every solution verbose and the problem stream identical to runs from before the formats existed
    terse_share: float = 0.0
    #: draw only problems outside the held-out split (:func:`tltreal.rl.task.held_out`), so an evaluation on
    #: held-out problems sees none the policy was pre-trained on; False keeps the stream of earlier runs
    exclude_held_out: bool = False

    def __post_init__(self) -> None:
        for name in ("steps", "sequences", "row_len", "layers", "hidden", "heads", "kv_heads", "intermediate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"must be a positive integer, got {value!r}", field=name)
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"must be a positive number, got {self.lr}", field="lr")
        if not (math.isfinite(self.terse_share) and 0 <= self.terse_share <= 1):
            raise InputError(f"must be a share in [0, 1], got {self.terse_share}", field="terse_share")
        if not (math.isfinite(self.first_line_weight) and self.first_line_weight > 0):
            raise InputError(f"must be a positive number, got {self.first_line_weight}", field="first_line_weight")

    def model_config(self, tokenizer: TaskTokenizer) -> ModelConfig:
        """The target's shape: Llama, untied head, GQA, vocabulary of ``tokenizer``."""
        return ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=self.hidden,
                           intermediate_size=self.intermediate, num_hidden_layers=self.layers,
                           num_attention_heads=self.heads, num_key_value_heads=self.kv_heads,
                           max_position_embeddings=self.max_position_embeddings, model_type="llama",
                           eos_token_ids=(tokenizer.eos_id,))


@dataclass
class PretrainMetrics:
    """Per-step mean loss (plain NLL in nats per solution token, unweighted), solution tokens
    trained on and wall time of a run."""

    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0

    @property
    def final_loss(self) -> float:
        """Mean of the last 10% of steps (one step's loss is noisy)."""
        tail = self.losses[-max(1, len(self.losses) // 10):]
        return sum(tail) / len(tail) if tail else math.nan


def encode_example(tokenizer: TaskTokenizer, problem: Problem, *,
                   first_line_weight: float = 1.0) -> tuple[list[int], list[float]]:
    """``<bos> prompt solution <eos>`` and, per token, the loss weight of predicting it: 0 on
    ``<bos>`` and the prompt (random, so predicting it is noise), ``first_line_weight`` on the first
    solution line (with its newline), 1 on the rest and ``<eos>``.

    Why weight the first line: it is the only one computed from the prompt (counter and start
    value copied from it); every later line is computed from the line above. At weight 1 it is one
    line per problem against hundreds of in-chain lines, and a few-minute run learns the shortcut
    "next result = previous line's result + increment", which is right in-chain and wrong on line 1
    (measured: first-line sums and counters wrong, every 16-step problem failed)."""
    prompt = tokenizer.encode(problem.prompt, bos=True)
    first, _, rest = problem.solution.partition("\n")
    head = tokenizer.encode(first + "\n") if rest else tokenizer.encode(first)
    tail = [*tokenizer.encode(rest), tokenizer.eos_id]
    weights = [0.0] * len(prompt) + [float(first_line_weight)] * len(head) + [1.0] * len(tail)
    return prompt + head + tail, weights


def training_problems(rng: random.Random, cfg: PretrainConfig) -> list[Problem]:
    """``cfg.sequences`` fresh problems from :attr:`PretrainConfig.task`'s heavy-tailed law, each solution
    terse with probability ``cfg.terse_share`` (no draw at all when it is 0, so the stream is the one
    runs made before the formats existed). With ``cfg.exclude_held_out`` a problem in the held-out split is
    drawn again at the same step count (:func:`tltreal.rl.task.make_split_problem`)."""
    out = []
    for _ in range(cfg.sequences):
        fmt = "terse" if cfg.terse_share > 0 and rng.random() < cfg.terse_share else "verbose"
        steps = sample_difficulty(rng, cfg.task)
        out.append(make_split_problem(rng, steps, "train", cfg.task, fmt=fmt) if cfg.exclude_held_out
                   else make_problem(rng, steps, cfg.task, fmt=fmt))
    return out


def training_batch(rng: random.Random, cfg: PretrainConfig, tokenizer: TaskTokenizer) -> PackedBatch:
    """:func:`training_problems`, encoded and packed."""
    examples = [encode_example(tokenizer, p, first_line_weight=cfg.first_line_weight)
                for p in training_problems(rng, cfg)]
    return pack_sequences([e[0] for e in examples], cfg.row_len, tokenizer.pad_id, [e[1] for e in examples])


def packed_loss(model: Transformer, batch: PackedBatch) -> tuple[torch.Tensor, float]:
    """The objective (weighted mean negative log-likelihood) and, for reporting, the plain mean
    NLL per solution token (nats)."""
    logits, _ = model.forward_train(batch.tokens, segment_ids=batch.segment_ids)
    nll = -token_logprobs(logits, batch.targets)
    counted = batch.weights > 0
    plain = float(nll.detach()[counted].mean()) if bool(counted.any()) else 0.0
    return (nll * batch.weights).sum() / batch.weights.sum().clamp_min(1e-9), plain


def learning_rate(cfg: PretrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio * lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def new_model(cfg: PretrainConfig, tokenizer: TaskTokenizer) -> Transformer:
    """Seeded random init: normal(0, 0.02) weights, unit norm scales (:func:`init_weights`)."""
    model = Transformer(cfg.model_config(tokenizer))
    init_weights(model, cfg.seed, std=0.02)
    return model


def pretrain(cfg: PretrainConfig, *, log: bool = False) -> tuple[Transformer, TaskTokenizer, PretrainMetrics]:
    """Train a fresh target on worked solutions; returns it in eval mode (float32, CPU)."""
    tokenizer = build_tokenizer()
    model = new_model(cfg, tokenizer).train()
    decay = [p for p in model.parameters() if p.ndim >= 2]  # matrices; norm scales are not decayed
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    rng = random.Random(f"tlt-pretrain:{cfg.seed}")
    metrics = PretrainMetrics()
    start = time.perf_counter()
    for step in range(cfg.steps):
        batch = training_batch(rng, cfg, tokenizer)
        for group in opt.param_groups:
            group["lr"] = learning_rate(cfg, step)
        loss, plain = packed_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        metrics.losses.append(plain)
        metrics.tokens += int((batch.weights > 0).sum())
        if log and (step % cfg.log_every == 0 or step == cfg.steps - 1):
            print(f"step {step:5d}  loss {metrics.losses[-1]:.4f}  lr {learning_rate(cfg, step):.2e}  "
                  f"{time.perf_counter() - start:7.1f}s", flush=True)
    metrics.seconds = time.perf_counter() - start
    return model.eval(), tokenizer, metrics


# ---- greedy evaluation (cached forward; the engine is not needed for this) --------------------------
@torch.no_grad()
def sample_batch(model: Transformer, tokenizer: TaskTokenizer, prompts: Sequence[Sequence[int]],
                 max_new_tokens: int, temperature: float, generator: torch.Generator | None) -> list[list[int]]:
    """One continuation per prompt (token ids, ending with ``<eos>`` unless the cap came first):
    sampled at ``temperature`` from ``generator``, or greedy when ``temperature == 0``.

    One right-padded prefill (:func:`padded_causal_mask` hides the padding), then one token per row
    per forward at each row's own cache length. Rows draw in row order from one generator, so a batch
    is reproducible from the generator's seed."""
    if not prompts:
        return []
    b, width = len(prompts), max(len(p) for p in prompts)
    counts = torch.tensor([len(p) for p in prompts])
    tokens = torch.tensor([list(p) + [tokenizer.pad_id] * (width - len(p)) for p in prompts])
    cache = model.new_cache(b, width + max_new_tokens)
    slots = torch.arange(b)
    logits, _ = model(tokens, torch.arange(width).expand(b, width), cache, slots, torch.zeros(b, dtype=torch.long),
                      padded_causal_mask(counts, width))

    def pick(last: torch.Tensor) -> torch.Tensor:
        if temperature == 0:
            return last.argmax(-1)
        probs = torch.softmax(last.double() / temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    nxt = pick(logits[torch.arange(b), counts - 1])
    lens, out, done = counts.clone(), [[] for _ in range(b)], torch.zeros(b, dtype=torch.bool)
    for _ in range(max_new_tokens):
        for i in range(b):
            if not done[i]:
                out[i].append(int(nxt[i]))
        done |= nxt == tokenizer.eos_id
        if bool(done.all()):
            break
        logits, _ = model(nxt[:, None], lens[:, None], cache, slots, lens, causal_mask(b, 1))
        lens = lens + 1
        nxt = pick(logits[:, -1])
    return out


def greedy_generate(model: Transformer, tokenizer: TaskTokenizer, prompts: Sequence[str],
                    max_new_tokens: int) -> list[str]:
    """Greedy continuations of ``prompts`` (each prefixed with ``<bos>``), decoded up to ``<eos>``
    (:func:`sample_batch` at temperature 0)."""
    rows = [tokenizer.encode(p, bos=True) for p in prompts]
    return [tokenizer.decode(o) for o in sample_batch(model, tokenizer, rows, max_new_tokens, 0.0, None)]


def solution_budget(tokenizer: TaskTokenizer, problem: Problem, slack: int = 16) -> int:
    """Generation budget for ``problem``: its worked solution's length plus ``slack``."""
    return len(tokenizer.encode(problem.solution)) + 1 + slack


def accuracy_by_difficulty(model: Transformer, tokenizer: TaskTokenizer, difficulties: Sequence[int], *,
                           per_difficulty: int = 50, seed: int = 12345,
                           task: TaskConfig | None = None) -> dict[int, float]:
    """Greedy accuracy (mean reward) on ``per_difficulty`` fresh problems of each step count."""
    task = task or TaskConfig()
    result = {}
    for d in difficulties:
        problems = sample_problems(per_difficulty, seed + d, task, difficulty=d)
        budget = max(solution_budget(tokenizer, p) for p in problems)
        texts = greedy_generate(model, tokenizer, [p.prompt for p in problems], budget)
        result[d] = sum(reward(p, t) for p, t in zip(problems, texts, strict=True)) / len(problems)
    return result


# ---- model folders ------------------------------------------------------------------------------------
def hf_config(model: Transformer, tokenizer: TaskTokenizer) -> dict[str, object]:
    """``config.json``: the Llama fields :class:`ModelConfig` writes, plus the token ids HF expects."""
    return {**model.cfg.to_hf_dict(), "bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id,
            "pad_token_id": tokenizer.pad_id, "torch_dtype": str(model.dtype).removeprefix("torch.")}


def save_pretrained(model: Transformer, tokenizer: TaskTokenizer, folder: str | Path, *,
                    force: bool = False) -> Path:
    """Write an HF-style model folder atomically (built in a temporary sibling, then renamed).

    An existing folder is replaced only if tlt wrote it and nothing was added since (see
    :func:`tltcore.atomic.atomic_dir`); ``force`` writes into any folder without deleting."""
    from tltcore.atomic import atomic_dir

    ids = {"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id, "pad_token_id": tokenizer.pad_id}
    with atomic_dir(folder, kind="model", force=force, field="folder") as tmp:
        (tmp / "config.json").write_text(json.dumps(hf_config(model, tokenizer), indent=1) + "\n", encoding="utf-8")
        (tmp / "generation_config.json").write_text(json.dumps(ids, indent=1) + "\n", encoding="utf-8")
        save_model(model, tmp / "model.safetensors")
        tokenizer.save(tmp)
    return Path(folder)


def load_pretrained(folder: str | Path, *, dtype: torch.dtype = torch.float32) -> tuple[Transformer, TaskTokenizer]:
    """Model and tokenizer from a folder written by :func:`save_pretrained`."""
    folder = Path(folder)
    cfg = ModelConfig.from_json(folder / "config.json")
    return load_model(cfg, folder / "model.safetensors", dtype=dtype), load_tokenizer(folder)


# ---- command line ---------------------------------------------------------------------------------------
EVAL_DIFFICULTIES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def main(argv: Sequence[str] | None = None) -> None:
    """Pre-train, report greedy accuracy by difficulty, and save the model folder."""
    ap = argparse.ArgumentParser(prog="python -m tltreal.rl.pretrain", description=main.__doc__)
    ap.add_argument("--out", type=Path, required=True, help="model folder to write")
    ap.add_argument("--steps", type=int, default=PretrainConfig.steps)
    ap.add_argument("--seed", type=int, default=PretrainConfig.seed)
    ap.add_argument("--hidden", type=int, default=PretrainConfig.hidden)
    ap.add_argument("--layers", type=int, default=PretrainConfig.layers)
    ap.add_argument("--eval-per-difficulty", type=int, default=50)
    ap.add_argument("--terse-share", type=float, default=PretrainConfig.terse_share,
                    help="share of worked solutions in the terse format (the designed drift's mix, e.g. 0.2)")
    ap.add_argument("--force", action="store_true", help="write into an existing folder tlt did not create")
    args = ap.parse_args(argv)
    from tltcore.atomic import check_output_dir

    check_output_dir(args.out, args.force, kind="model")  # before minutes of training, not after
    cfg = PretrainConfig(steps=args.steps, seed=args.seed, hidden=args.hidden, layers=args.layers,
                         intermediate=3 * args.hidden, terse_share=args.terse_share)
    model, tokenizer, metrics = pretrain(cfg, log=True)
    print(f"trained {cfg.steps} steps in {metrics.seconds:.1f}s, {metrics.tokens} loss tokens, "
          f"final loss {metrics.final_loss:.4f}")
    t0 = time.perf_counter()
    acc = accuracy_by_difficulty(model, tokenizer, EVAL_DIFFICULTIES, per_difficulty=args.eval_per_difficulty,
                                 task=cfg.task)
    print(f"greedy accuracy by difficulty ({args.eval_per_difficulty} problems each, "
          f"{time.perf_counter() - t0:.1f}s):")
    for d, a in acc.items():
        print(f"  {d:3d} steps: {a:.2f}")
    print(f"saved {save_pretrained(model, tokenizer, args.out, force=args.force)}")


if __name__ == "__main__":
    try:
        main()
    except InputError as exc:  # one line, exit 2, as tlt's own commands end on bad input
        print(f"python -m tltreal.rl.pretrain: error: {exc}", file=sys.stderr)
        sys.exit(2)
