"""NeMo-RL's per-step training data dumps, read as a trace.

What NeMo-RL writes (NVIDIA-NeMo/RL, nemo_rl/algorithms/grpo.py, ``grpo_train`` and
``async_grpo_train``: ``logger.log_batched_dict_as_jsonl(log_data, f"train_data_step{N}.jsonl")``
unless ``env.should_log_nemo_gym_responses``; the writer is ``Logger.log_batched_dict_as_jsonl`` in
nemo_rl/utils/logger.py): one file ``train_data_step{N}.jsonl`` per step (N counts from 1) in the
logger's ``log_dir``, one JSON object per response, written from a one-row slice of the batch, so
every value is a one-element list: ``content``, ``rewards``, ``input_lengths``, ``token_ids``,
``token_loss_mask``, ``sample_loss_mask``, ``advantages``, ``generation_logprobs``,
``prev_logprobs``, and ``idx`` (the row number, not a list). ``val_data_step{N}.jsonl`` holds
validation samples and is not read.

So this reader, with no tokenizer needed (the dump holds token ids):

* **response_tokens**: the generated tokens, ``sum(token_loss_mask[:input_lengths])``
  (``add_grpo_token_loss_masks_and_generation_logprobs`` sets the mask to 1 on tokens the policy
  generated and 0 on prompt, tool output and padding), so a multi-turn rollout counts every turn
  it generated.
* **prompt_tokens**: the tokens before the first generated one (the prompt as prefilled).
* **steps**: ``N`` of the file name.
* **groups**: rows of one file with the same prompt token ids are one prompt group
  (``num_generations_per_prompt`` copies of each prompt).
* **hit_cap**: not recorded (NeMo-RL keeps ``truncated`` in the batch but does not log it). Give
  ``trace.cap`` (``policy.generation.max_new_tokens``) to mark responses that reached it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from tltcore.errors import InputError
from tltsim.traces.frameworks.base import Dump, DumpFormat, group_ids
from tltsim.traces.textio import read_json_lines


def _one(record: dict[str, object], key: str, path: Path, row: int) -> object:
    """``record[key]`` unwrapped from the one-row slice NeMo-RL logs (``[value]``)."""
    if key not in record:
        raise InputError(f"{key} is missing; NeMo-RL's train_data_step files hold token_ids, token_loss_mask and "
                         "input_lengths on every line", path=path, row=row, field=key)
    value = record[key]
    if isinstance(value, list) and len(value) == 1:
        return value[0]
    return value


def _int_list(value: object, key: str, path: Path, row: int) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise InputError("is not a list of integers", path=path, row=row, field=key)
    return value


def read(steps: tuple[tuple[int, Path], ...], tokenizer: Path | None) -> Dump:
    if tokenizer is not None:
        raise InputError("NeMo-RL's dump holds token ids; no tokenizer is needed (drop --tokenizer / "
                         "trace.tokenizer)", path=steps[0][1], field="trace.tokenizer")
    rows: list[dict[str, object]] = []
    for step, path in steps:
        keys: list[object] = []
        first = len(rows)
        for i, r in enumerate(read_json_lines(path), start=1):
            length = _one(r, "input_lengths", path, i)
            if not isinstance(length, int) or isinstance(length, bool) or length < 1:
                raise InputError(f"{length!r} is not a positive integer", path=path, row=i, field="input_lengths")
            ids = _int_list(_one(r, "token_ids", path, i), "token_ids", path, i)[:length]
            mask = _int_list(_one(r, "token_loss_mask", path, i), "token_loss_mask", path, i)[:length]
            generated = sum(1 for m in mask if m)
            if generated == 0:
                raise InputError("no generated token (token_loss_mask is 0 on every token): not a rollout", path=path,
                                 row=i, field="token_loss_mask")
            prompt = next(j for j, m in enumerate(mask) if m)
            keys.append(tuple(ids[:prompt]))
            rows.append({"step": step, "response_tokens": generated, "prompt_tokens": prompt,
                         "reward": _one(r, "rewards", path, i) if "rewards" in r else None})
        for row, pid in zip(rows[first:], group_ids(keys, step), strict=True):
            row["prompt_id"] = pid
    provenance = {
        "step": "N of the file name train_data_step{N}.jsonl",
        "prompt_id": "rows of one file with the same prompt token ids, numbered s{step}p{k} in order of first "
                     "appearance",
        "group_id": "= prompt_id",
        "sample_idx": "order within the group in the file",
        "response_tokens": "sum of token_loss_mask over the first input_lengths tokens (tokens the policy generated)",
        "prompt_tokens": "tokens before the first generated token (token_loss_mask)",
        "hit_cap": "not recorded by NeMo-RL: false unless trace.cap is set",
    }
    return Dump(pd.DataFrame.from_records(rows), tuple(p for _, p in steps), "nemo-rl", provenance)


FORMAT = DumpFormat(framework="nemo-rl", what="train_data_step{N}.jsonl per step (the logger's log_dir)",
                    pattern=re.compile(r"train_data_step([0-9]{1,9})\.jsonl(?:\.gz|\.zst)?"), read=read)
