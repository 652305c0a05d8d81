"""Rebuild the framework-dump fixtures in this folder (deterministic): python tests/data/traces/make_fixtures.py

Each fixture is laid out exactly as the framework writes it (see the reader modules'
docstrings in tltsim/traces/frameworks/ for the upstream files cited):

* ``verl_rollout_dump/{step}.jsonl``: verl's ``trainer.rollout_data_dir``, one JSON object per
  response with input, output, gts, score, step and a reward function's extra info (``acc``).
* ``nemo_rl_logs/train_data_step{N}.jsonl``: NeMo-RL's logger, every value a one-element list
  (a one-row slice of the batch) plus ``idx``; a ``val_data_step1.jsonl`` beside them is not read.
* ``wordlevel_tokenizer.json``: a whitespace word-level tokenizer, so a token is a word and the
  expected counts are easy to check by eye.
* ``foreign_rollouts.csv`` (and ``.csv.gz``): a user's own log with verl-style column names.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORDS = ["the", "answer", "is", "so", "we", "add", "two", "and", "three", "then", "check", "it", "again"]
STEPS, PROMPTS, SAMPLES = (1, 2), 3, 4


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def verl() -> None:
    rng = random.Random(0)
    folder = HERE / "verl_rollout_dump"
    folder.mkdir(exist_ok=True)
    for step in STEPS:
        rows = []
        for p in range(PROMPTS):
            prompt = f"Question {step}.{p}: " + _text(rng, 5 + p)
            for _ in range(SAMPLES):
                rows.append({"input": prompt, "output": _text(rng, rng.randint(3, 40)), "gts": str(p),
                             "score": float(rng.random() < 0.5), "step": step, "acc": rng.random() < 0.5})
        rng.shuffle(rows)  # verl dumps the balanced batch: a group's rows are not adjacent
        # verl joins the lines with "\n" and ends with one (ray_trainer.py _dump_generations)
        (folder / f"{step}.jsonl").write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")


def nemo_rl() -> None:
    rng = random.Random(1)
    folder = HERE / "nemo_rl_logs"
    folder.mkdir(exist_ok=True)
    for step in STEPS:
        rows = []
        for p in range(PROMPTS):
            prompt = [rng.randint(10, 999) for _ in range(6 + p)]
            for _ in range(SAMPLES):
                rows.append((prompt, [rng.randint(10, 999) for _ in range(rng.randint(3, 40))]))
        width = max(len(a) + len(b) for a, b in rows) + 2  # padded to the batch's longest, as flattened
        lines = []
        for i, (prompt, response) in enumerate(rows):
            ids = prompt + response
            pad = width - len(ids)
            sample = {"content": [[f"prompt {i}", f"response {i}"]], "rewards": [float(i % 2)],
                      "input_lengths": [len(ids)], "token_ids": [ids + [0] * pad],
                      "token_loss_mask": [[0] * len(prompt) + [1] * len(response) + [0] * pad],
                      "sample_loss_mask": [1.0], "advantages": [[0.0] * width],
                      "generation_logprobs": [[0.0] * width], "prev_logprobs": [[0.0] * width]}
            lines.append(json.dumps({**sample, "idx": i}) + "\n")
        (folder / f"train_data_step{step}.jsonl").write_text("".join(lines))
    (folder / "val_data_step1.jsonl").write_text(json.dumps({"content": [["v"]], "rewards": [1.0], "idx": 0}) + "\n")


def tokenizer() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(HERE / "wordlevel_tokenizer.json"))


def foreign_csv() -> None:
    rng = random.Random(2)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["step", "uid", "index", "prompt_length", "response_length", "finish_reason"])
    for step in STEPS:
        for p in range(PROMPTS):
            for i in range(SAMPLES):
                capped = rng.random() < 0.25
                w.writerow([step, f"u{step}-{p}", i, 20 + p, 64 if capped else rng.randint(5, 63),
                            "length" if capped else "stop"])
    (HERE / "foreign_rollouts.csv").write_text(buf.getvalue())
    (HERE / "foreign_rollouts.csv.gz").write_bytes(gzip.compress(buf.getvalue().encode(), mtime=0))


if __name__ == "__main__":
    verl()
    nemo_rl()
    tokenizer()
    foreign_csv()
