"""Converters from upstream trace layouts to the canonical CSVs of the catalog.

``tlt trace fetch`` downloads a catalogued trace's original files (pinned to a commit) and rebuilds
the very CSV the catalog's ``sha256`` describes — byte for byte, so a downloaded copy and the
team's ``../shared/traces`` copy are interchangeable and ``tlt trace list`` checks both the same way.
Each converter is the documented form of the conversion described in ``../shared/traces/SOURCES.md``
and writes with :mod:`csv` defaults (``\\r\\n`` line ends), as the original conversion did.

A converter gets ``{upstream path: local file}`` and returns the CSV bytes. Upstream data that does
not fit the expected layout is an :class:`InputError` (one line), never a traceback: the bytes were
checked against the catalog's sha256 first, so this only happens when a test feeds hand-made files.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tltcore.errors import InputError
from tltcore.input_files import json_lines

Converter = Callable[[Mapping[str, Path]], bytes]


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    try:
        yield from json_lines(path.read_bytes(), path=path)
    except InputError as exc:  # say it is the upstream file's layout that is off, not the user's trace
        raise InputError(f"upstream file is not JSON lines ({exc.message})", path=path, row=exc.row,
                         field=exc.field) from None


def _csv_bytes(columns: list[str], rows: list[dict[str, Any]]) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _step_of(path: str) -> int:
    m = re.search(r"_step_(\d+)\.jsonl$", path)
    if m is None:
        raise InputError("upstream file name has no _step_N", path=path)
    return int(m.group(1))


#: PolyTrace runs converted into ``polytrace_rl_rollouts.csv``: (log folder, source, model, task, cap).
POLYTRACE_RUNS = (
    ("verl/profile/packed_length_log/20260614_023133", "polytrace/verl_dapo_qwen2.5-32b",
     "Qwen2.5-32B (base) DAPO, verl", "math (DAPO-style)", None),
    ("rllm/profile/packed_length_log/20260616_024512", "polytrace/rllm_deepcoder_14b_16k",
     "DeepCoder-14B recipe (init DeepSeek-R1-Distill-Qwen-14B), rllm/verl GRPO+", "code", 16000),
    ("verl-video/profile/packed_length_log/20260609_033329", "polytrace/verl_video_qwen2.5-vl-7b",
     "Qwen2.5-VL-7B GRPO, verl (video RL)", "video QA", 16000),
)
POLYTRACE_COLUMNS = ["source", "model", "task", "step", "trainer_step", "prompt_id", "group_id", "sample_idx",
                     "n_samples", "prompt_tokens", "response_tokens", "length_unit", "response_cap", "hit_cap",
                     "dapo_kept", "dapo_used", "rank", "dp_rank", "local_index"]


def polytrace_packed_lengths(files: Mapping[str, Path]) -> bytes:
    """PolyTrace ``packed_lengths_step_N.jsonl`` logs -> one row per response.

    Each log line is one prompt on one (dp, tp) rank with its 8 response lengths (``output``). Only
    tp rank 0 is kept (other tp ranks repeat it) and validation lines are dropped. The global prompt
    index is dp-rank-major (``dp_rank * prompts per dp rank + local_index``), ``prompt_id = group_id =
    s{step}_p{index}``. For the DAPO run, ``dapo_filter_indices.jsonl`` gives each generation batch's
    trainer step and whether the prompt's group was kept / used by DAPO's dynamic sampling. A run with
    a response cap marks ``hit_cap`` for responses at the cap.
    """
    rows: list[dict[str, Any]] = []
    for folder, source, model, task, cap in POLYTRACE_RUNS:
        dapo = {}
        if f"{folder}/dapo_filter_indices.jsonl" in files:
            dapo = {int(r["workload_step"]): r for r in _jsonl(files[f"{folder}/dapo_filter_indices.jsonl"])}
        logs = sorted((p for p in files if p.startswith(folder + "/packed_lengths_step_")), key=_step_of)
        for log in logs:
            step = _step_of(log)
            recs = [r for r in _jsonl(files[log]) if r.get("tp_rank") == 0 and not r.get("validate")]
            if not recs:
                continue
            per_dp = max(int(r["local_index"]) for r in recs) + 1
            recs.sort(key=lambda r: (int(r["dp_rank"]), int(r["local_index"])))
            for r in recs:
                g = int(r["dp_rank"]) * per_dp + int(r["local_index"])
                for k, n in enumerate(r["output"]):
                    row = {"source": source, "model": model, "task": task, "step": step, "trainer_step": "",
                           "prompt_id": f"s{step}_p{g}", "group_id": f"s{step}_p{g}", "sample_idx": k,
                           "n_samples": r["n_sampling"], "prompt_tokens": r["input"], "response_tokens": n,
                           "length_unit": "tokens", "response_cap": cap or "",
                           "hit_cap": int(n >= cap) if cap else "", "dapo_kept": "", "dapo_used": "",
                           "rank": r["rank"], "dp_rank": r["dp_rank"], "local_index": r["local_index"]}
                    if dapo:
                        batch = dapo[step]
                        row.update(trainer_step=batch["trainer_step"],
                                   dapo_kept=int(g in batch["kept_prompt_indices"]),
                                   dapo_used=int(g in batch["used_prompt_indices"]))
                    rows.append(row)
    return _csv_bytes(POLYTRACE_COLUMNS, rows)


SEARCH_R1_COLUMNS = ["source", "model", "task", "step", "prompt_id", "group_id", "sample_idx", "prompt_tokens",
                     "response_tokens", "length_unit", "model_generated_tokens", "tool_response_tokens", "num_turns",
                     "num_tool_calls", "turn_completion_tokens", "turn_engine_latency_s", "tool_latency_s",
                     "finish_reason", "response_cap"]


def polytrace_search_r1(files: Mapping[str, Path]) -> bytes:
    """PolyTrace Search-R1 ``multiturn_workload_step_N.jsonl`` -> one row per trajectory.

    ``response_tokens`` = ``final_response_len`` (tool results included, capped at
    ``max_response_len``); ``model_generated_tokens`` sums the turns' completion tokens and
    ``tool_response_tokens`` the tool calls' returned tokens; per-turn lists are ``;``-joined (latency
    in seconds, 3 and 4 decimals). ``prompt_id = group_id = s{step}_g{prompt_group_id}``.
    """
    rows: list[dict[str, Any]] = []
    for log in sorted(files, key=_step_of):
        for r in _jsonl(files[log]):
            if r.get("validate"):
                continue
            pid = f"s{r['step']}_g{r['prompt_group_id']}"
            turns, tools = r["turns"], r["tool_calls"]
            rows.append({
                "source": "polytrace/search_r1_qwen2.5-7b",
                "model": "Qwen2.5-7B (Search-R1 style multi-turn GRPO), verl+sglang", "task": "multi-turn search QA",
                "step": r["step"], "prompt_id": pid, "group_id": pid, "sample_idx": r["sample_id"],
                "prompt_tokens": r["prompt_len"], "response_tokens": r["final_response_len"], "length_unit": "tokens",
                "model_generated_tokens": sum(t["completion_tokens"] for t in turns),
                "tool_response_tokens": sum(t["response_token_len"] for t in tools),
                "num_turns": r["turn_count"], "num_tool_calls": r["tool_call_count"],
                "turn_completion_tokens": ";".join(str(t["completion_tokens"]) for t in turns),
                "turn_engine_latency_s": ";".join(f"{t['engine_latency_s']:.3f}" for t in turns),
                "tool_latency_s": ";".join(f"{t['latency_s']:.4f}" for t in tools),
                "finish_reason": r["finish_reason"], "response_cap": r["max_response_len"]})
    return _csv_bytes(SEARCH_R1_COLUMNS, rows)


AIME_COLUMNS = ["source", "model", "dataset", "step", "prompt_id", "group_id", "sample_idx", "n_samples",
                "prompt_tokens", "response_tokens", "length_unit", "response_cap", "hit_cap", "correct",
                "response_chars", "temperature", "run"]


def task_hardness_aime(files: Mapping[str, Path]) -> bytes:
    """task-hardness-analysis ``per_record_stats.csv`` -> the AIME groups of 8.

    The upstream CSV lists the same generations twice; only ``experiment_archive/`` rows are kept.
    Their path ``experiment_archive/{run}/self_classification/aime/{model}/temp_0.6/{year}/{I|II}/
    {problem}/gen_{k}/result.json`` gives ``prompt_id = group_id = aime_{year}_{I|II}_{problem}`` and
    ``sample_idx = k``; ``response_tokens = tok_len`` (16,000-token cap), rows sorted by prompt id and
    sample.
    """
    (path,) = files.values()
    rows: list[dict[str, Any]] = []
    with path.open(newline="", encoding="utf-8") as fh:
        for lineno, r in enumerate(csv.DictReader(fh), start=2):
            parts = str(r.get("path") or "").split("/")
            if parts[0] != "experiment_archive":
                continue
            if len(parts) < 10 or not parts[9].startswith("gen_"):
                raise InputError("unexpected record path", path=path, row=lineno, field="path")
            run, year, part, problem = parts[1], parts[6], parts[7], parts[8]
            tok = int(r["tok_len"])
            pid = f"aime_{year}_{part}_{problem}"
            rows.append({"source": "task-hardness-analysis/aime", "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
                         "dataset": "AIME 1983-2024", "step": 0, "prompt_id": pid, "group_id": pid,
                         "sample_idx": int(parts[9].removeprefix("gen_")), "n_samples": 8, "prompt_tokens": "",
                         "response_tokens": tok, "length_unit": "tokens", "response_cap": 16000,
                         "hit_cap": int(tok >= 16000), "correct": int(r["correct"] == "True"),
                         "response_chars": int(r["len_chars"]), "temperature": 0.6, "run": run})
    rows.sort(key=lambda r: (r["prompt_id"], r["sample_idx"]))
    return _csv_bytes(AIME_COLUMNS, rows)


CONVERTERS: dict[str, Converter] = {
    "polytrace_packed_lengths": polytrace_packed_lengths,
    "polytrace_search_r1": polytrace_search_r1,
    "task_hardness_aime": task_hardness_aime,
}


def convert(name: str, files: Mapping[str, Path]) -> bytes:
    """Run converter ``name`` (a catalog entry's ``convert``); layout surprises become one line."""
    try:
        return CONVERTERS[name](files)
    except InputError:
        raise
    except (KeyError, ValueError, TypeError, IndexError, AttributeError, OSError) as exc:
        raise InputError(f"upstream files do not have the layout converter '{name}' expects "
                         f"({type(exc).__name__}: {exc})") from None
