"""verl's rollout dump folder (``trainer.rollout_data_dir``), read as a trace.

What verl writes (volcengine/verl, verl/trainer/ppo/ray_trainer.py, ``RayPPOTrainer._dump_generations``
called from ``_log_rollout_data``; the same in verl/experimental/*/ray_trainer.py): one file
``{global_step}.jsonl`` per training step in ``trainer.rollout_data_dir``, one JSON object per
response with ``input`` (the prompt, decoded with ``skip_special_tokens=True``), ``output`` (the
response, decoded the same way), ``gts``, ``score``, ``step``, and each reward function's extra
info of the batch's length (e.g. ``acc``; ``request_id`` in the fully-async trainer). verl writes
**no token counts, no prompt uid and no finish reason** in it.

So this reader:

* **tokens**: counts the tokens of ``output`` (and ``input``) with the policy's tokenizer
  (``--tokenizer`` / ``trace.tokenizer``, :mod:`tltsim.traces.frameworks.tokens`), and refuses the
  dump without one. verl decoded without special tokens, so the count leaves out the stop token and
  can differ from the generated ids where re-tokenising the text splits differently: a close
  count, not the engine's. Where a reward function logged per-response ``response_length`` (and
  ``prompt_length``) as extra info, those are used and no tokenizer is needed.
* **steps**: from the file name (the ``step`` field, where present, must agree).
* **groups**: rows of one file with the same ``input`` text are one prompt group (verl repeats
  each prompt ``rollout.n`` times; the dump's row order is the balanced batch's, so groups are
  found by text, not position); a ``uid`` field, where a fork writes one, is used instead.
* **hit_cap**: not recorded. Give ``trace.cap`` (verl's ``data.max_response_length``), or map a
  finish-reason field a reward function logged: ``--map hit_cap=finish_reason:length``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from tltcore.errors import InputError, warn
from tltsim.traces.frameworks.base import Dump, DumpFormat, group_ids
from tltsim.traces.frameworks.tokens import count_tokens, tokenizer_file
from tltsim.traces.textio import read_json_lines

#: Extra-info keys a reward function may log with per-response lengths in tokens.
LENGTH_KEYS = ("response_length", "prompt_length")
_TEXT = ("input", "output")


def _lengths_logged(records: list[dict[str, object]]) -> bool:
    return all(isinstance(r.get("response_length"), int) and not isinstance(r.get("response_length"), bool)
               for r in records)


def _check_text(records: list[dict[str, object]], path: Path, keys: tuple[str, ...] = _TEXT) -> None:
    for i, r in enumerate(records, start=1):
        for key in keys:
            if not isinstance(r.get(key), str):
                what = "missing" if key not in r else f"not text ({type(r[key]).__name__})"
                raise InputError(f"{key} is {what}; verl's rollout dump has input and output text on every line",
                                 path=path, row=i, field=key)


def read(steps: tuple[tuple[int, Path], ...], tokenizer: Path | None) -> Dump:
    frames, counted, empty = [], False, 0
    for step, path in steps:
        records = read_json_lines(path)
        for i, r in enumerate(records, start=1):
            if "step" in r and r["step"] != step:
                raise InputError(f"step {r['step']!r} differs from the file name's step {step}", path=path, row=i,
                                 field="step")
        frame = pd.DataFrame.from_records(records)
        if _lengths_logged(records):
            frame = frame.rename(columns={"response_length": "response_tokens", "prompt_length": "prompt_tokens"})
        else:
            _check_text(records, path)
            if tokenizer is None:
                raise InputError("verl's rollout dump holds text only (input/output), no token counts: pass the "
                                 "policy's tokenizer, --tokenizer PATH/tokenizer.json (scenario: trace.tokenizer)",
                                 path=path, field="trace.tokenizer")
            outputs = [str(r["output"]) for r in records]
            frame["response_tokens"] = count_tokens(outputs, tokenizer)
            frame["prompt_tokens"] = count_tokens([str(r["input"]) for r in records], tokenizer)
            zero = frame["response_tokens"] == 0
            empty += int(zero.sum())
            frame.loc[zero, "response_tokens"] = 1  # the stop token verl's decode dropped: one token generated
            counted = True
        if "uid" in frame.columns:
            keys = [str(u) for u in frame["uid"]]
        else:
            _check_text(records, path, ("input",))
            keys = [r["input"] for r in records]
        frame["prompt_id"] = group_ids(keys, step)
        frame["step"] = step
        frames.append(frame.drop(columns=[c for c in (*_TEXT, "uid") if c in frame.columns]))
    if empty:
        warn(f"{steps[0][1].parent}: {empty} response(s) of verl's dump are empty text; each is counted as 1 "
             "token (the stop token verl's decode leaves out)")
    how = (f"tokens of 'output' counted with {tokenizer_file(tokenizer)}" if counted and tokenizer is not None
           else "the 'response_length' field a reward function logged")
    provenance = {
        "step": "file name {step}.jsonl (verl's global step)",
        "prompt_id": "rows of one file with the same 'uid'" if any("uid" in f for f in frames) else
                     "rows of one file with the same 'input' text, numbered s{step}p{k} in order of first appearance",
        "group_id": "= prompt_id",
        "sample_idx": "order within the group in the file",
        "response_tokens": how + (" (verl decoded with skip_special_tokens: the stop token is not counted)"
                                  if counted else ""),
        "prompt_tokens": (f"tokens of 'input' counted with {tokenizer_file(tokenizer)}" if counted and tokenizer
                          else "the 'prompt_length' field a reward function logged, else missing"),
        "hit_cap": "not recorded by verl: false unless mapped (--map hit_cap=COLUMN:VALUE) or trace.cap is set",
    }
    return Dump(pd.concat(frames, ignore_index=True), tuple(p for _, p in steps), "verl", provenance)


FORMAT = DumpFormat(framework="verl", what="{step}.jsonl per step (trainer.rollout_data_dir)",
                    pattern=re.compile(r"([0-9]{1,9})\.jsonl(?:\.gz|\.zst)?"), read=read)
