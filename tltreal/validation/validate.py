"""``tlt validate --backend native``: the same trace steps run for real and simulated, and the error.

For each step of a scenario (lengths scaled to a small model) and each policy:

1. **Real**: the native engine replays the step (:mod:`tltreal.validation.replay`): a plain reference run, then
   every speculative policy with the pinned drafter (acceptance from the scenario's acceptance model,
   verification real and lossless). A recording wrapper keeps every decision's batch view and every
   outcome: each iteration's conditions (batch, per-request contexts, draft shape) and time.
2. **Calibration**: the engine is profiled on this machine (:mod:`tltreal.validation.profiler`) over the batch
   sizes, contexts and draft shapes the real runs used, unless a table is given.
3. **Simulated**: the same requests on one rollout worker, with the measured table (``calibrated``)
   or an analytic roofline of this CPU built from measured peak FLOP/s and copy bandwidth
   (``analytic``), and with acceptance either ``predicted`` (the acceptance model) or ``measured``
   (each draft shape's accept-length distribution in the real run), which separates cost error from
   acceptance error.

Reported: makespan error per (step, policy) for each (cost model, acceptance) pair; per-iteration
latency error of each cost model on the real iterations' own conditions (median and p90 of
|predicted / measured - 1|); accept-length error.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from tltcore.acceptance import ChainAcceptance, TreeAcceptance
from tltcore.cost import CostModel, RooflineCostModel, TableCostModel, shape_fingerprint
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.engine_limits import EngineLimits
from tltcore.hardware import GPUSpec
from tltcore.model_config import ModelConfig
from tltcore.model_shape import ModelShape
from tltcore.policy.base import NO_SD, SDConfig
from tltcore.policy.registry import make_policy
from tltcore.step_simulator import SimulatedEngine, StepSimulator
from tltcore.summary import summarize_step
from tltreal.model.transformer import Transformer
from tltreal.model.weights import random_model
from tltreal.validation.profiler import PROFILE_DEVICE, ProfileGrid, grid_points, profile_metadata, profile_native
from tltreal.validation.replay import (
    RealRun,
    RecordingPolicy,
    ReplayRequests,
    reference_run,
    replay_requests,
    speculative_run,
    with_extra_tokens,
)

#: A small Llama-shaped target the CPU replays in seconds (hidden 256, 4 layers, vocab 2,048).
DEFAULT_MODEL = ModelConfig(vocab_size=2048, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                            num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096)
#: The pinned drafter's positional table covers draft shapes up to this depth and top-k.
PINNED_DEPTH, PINNED_TOPK = 16, 8
Positional = TreeAcceptance | ChainAcceptance


@dataclass(frozen=True)
class NativeSettings:
    """How the scenario's steps are brought to the small model on this machine."""

    model: ModelConfig = DEFAULT_MODEL
    length_scale: float = 1 / 32  # traced prompt and response lengths are multiplied by this (>= 1 token)
    max_batch: int = 32
    seed: int = 0
    grid_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    grid_iterations: int = 5
    grid_repeats: int = 3
    real_repeats: int = 3  # real runs per (step, policy); the median makespan's run is kept


def shape_of(cfg: ModelConfig, name: str = "native") -> ModelShape:
    """The simulator's view of the native model (cost-relevant numbers only)."""
    return ModelShape.from_config(cfg, name)


def scaled(workload, scale: float):
    """A step with prompt and response lengths multiplied by ``scale`` (at least one token each)."""
    prompts = np.maximum(1, np.rint(np.asarray(workload.prompt_tokens) * scale)).astype(np.int64)
    responses = np.maximum(1, np.rint(np.asarray(workload.response_tokens) * scale)).astype(np.int64)
    return replace(workload, prompt_tokens=prompts, response_tokens=responses)


def _real_run(step: int, spec: str, result, recorder: RecordingPolicy) -> RealRun:
    rows, accepted = [], {}
    for view, outcome in zip(recorder.views, recorder.outcomes, strict=True):
        rows.append({"batch_size": view.batch_size, "contexts": view.context_lens, "config": outcome.config,
                     "seconds": outcome.elapsed_s, "accept_length": outcome.accept_length})
        if outcome.config.enabled:
            accepted.setdefault(outcome.config, []).extend(outcome.accepted_per_request)
    stage = result.events[result.events["kind"] == "stage"]
    return RealRun(step, spec, result.events, float((stage["t_end"] - stage["t_start"]).iloc[0]), pd.DataFrame(rows),
                   {c: np.asarray(v) for c, v in accepted.items()})


class _Silent:
    """No progress display."""

    def phase(self, name: str, total: int | None = None, unit: str = "units") -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass


class _Messages(_Silent):
    """A plain ``progress(message)`` callable, told each phase's name."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def phase(self, name: str, total: int | None = None, unit: str = "units") -> None:
        self.say(name)


def phases(progress) -> _Silent:
    """``progress`` as an object with ``phase(name, total, unit)`` and ``advance(n)`` (e.g.
    :class:`tltcli.progress.PhaseProgress`): None is silent, a plain callable gets each phase's
    name."""
    if progress is None:
        return _Silent()
    if hasattr(progress, "phase") and hasattr(progress, "advance"):
        return progress
    return _Messages(progress)


def run_real(target: Transformer, requests: ReplayRequests, specs: Sequence[str], accept: Positional, *,
             max_batch: int, seed: int, repeats: int = 1, on_run: Callable[[], None] | None = None) -> list[RealRun]:
    """The reference (``no-sd``) and every speculative policy on one step's requests; each policy runs
    ``repeats`` times and the run with the median makespan is kept (CPU timings vary from run to run).
    ``on_run()`` is called after each run (progress)."""
    probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)
    # The truth for the pinned drafter runs PINNED_DEPTH tokens past every response's end: a drafter
    # blind past the end would censor the measured acceptance of every request's last iterations.
    reference = reference_run(target, with_extra_tokens(requests, PINNED_DEPTH), max_batch=max_batch)
    runs = []
    for spec in specs:
        tries = []
        for _ in range(repeats):
            recorder = RecordingPolicy(make_policy(spec, seed=seed))
            if spec == "no-sd":
                result = reference_run(target, requests, max_batch=max_batch, policy=recorder)
            else:
                result = speculative_run(target, requests, reference, recorder, position_probs=probs,
                                         max_batch=max_batch, seed=seed)
            tries.append(_real_run(requests.step, spec, result, recorder))
            if on_run is not None:
                on_run()
        tries.sort(key=lambda r: r.makespan)
        runs.append(tries[len(tries) // 2])
    return runs


class MeasuredAcceptance:
    """Acceptance as the real run measured it: each draft shape's accept-length distribution (accepted
    draft tokens + the bonus token, per request and iteration); shapes never run fall back to
    ``model``."""

    def __init__(self, accepted: dict[SDConfig, np.ndarray], model: Positional) -> None:
        self.model = model
        self._probs = {c: np.bincount(a.astype(np.int64), minlength=c.depth + 1)[: c.depth + 1] / len(a)
                       for c, a in accepted.items() if len(a)}

    def accept_length_probs(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> np.ndarray:
        probs = self._probs.get(config)
        return probs if probs is not None else self.model.accept_length_probs(config, drafter)

    def expected_accept_length(self, config: SDConfig, drafter: DrafterState = INITIAL_DRAFTER) -> float:
        if not config.enabled:
            return 1.0
        probs = self.accept_length_probs(config, drafter)
        return float((probs * np.arange(1, probs.size + 1)).sum())


def cpu_roofline(cfg: ModelConfig, seconds: float = 0.5) -> RooflineCostModel:
    """An analytic roofline of this CPU: peak FLOP/s from a float32 matmul and bandwidth from a large
    copy, both measured now on the threads torch uses."""
    a = torch.randn(512, 512)
    flops, t0, n = 0.0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        a @ a
        n += 1
    flops = n * 2 * 512**3 / (time.perf_counter() - t0)
    src = torch.empty(64 * 2**20 // 4)
    dst = torch.empty_like(src)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        dst.copy_(src)
        n += 1
    bandwidth = n * 2 * src.numel() * 4 / (time.perf_counter() - t0)
    spec = GPUSpec("cpu-roofline", flops, bandwidth, 64e9, None, flops_efficiency=1.0, bandwidth_efficiency=1.0,
                   source="measured on this CPU by tltreal.validation.validate.cpu_roofline")
    return RooflineCostModel(shape_of(cfg), spec, tp=1)


def profile_table(target: Transformer, runs: Sequence[RealRun], settings: NativeSettings, accept: Positional,
                  command: str, progress=None) -> tuple[pd.DataFrame, dict[str, str]]:
    """Profile the engine over the batch sizes, contexts and draft shapes the real runs reached
    (``progress``: see :func:`phases`; one phase, one unit per grid point)."""
    contexts = [max(c) for r in runs for c in r.iterations["contexts"] if len(c)]
    hi = int(max(contexts)) if contexts else 64
    grid_contexts = tuple(sorted({int(x) for x in np.geomspace(32, max(64, hi), 4).round()}))
    lengths = tuple(sorted({1, *(int(x) for x in np.geomspace(4, max(8, hi), 3).round())}))
    configs = tuple(sorted({c for r in runs for c in r.iterations["config"] if c.enabled}))
    grid = ProfileGrid(batch_sizes=tuple(b for b in settings.grid_batches if b <= settings.max_batch),
                       contexts=grid_contexts, prefill_lengths=lengths, sd_configs=configs,
                       iterations=settings.grid_iterations, repeats=settings.grid_repeats)
    probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)
    shown = phases(progress)
    shown.phase("profiling the engine", grid_points(grid), "grid points")
    df = profile_native(target, grid, position_probs=dict.fromkeys(configs, probs), seed=settings.seed,
                        on_point=shown.advance)
    meta = profile_metadata(target, command=command, model_fingerprint=shape_fingerprint(shape_of(settings.model)))
    return df, meta


def native_engine(max_batch: int, mode: str = "stochastic") -> SimulatedEngine:
    """The simulator's engine for the native engine: every admitted request prefilled in one pass, the
    drafter caught up at the switch (the replay pins ``switch="catch_up"`` too)."""
    return SimulatedEngine(EngineLimits(max_batch=max_batch, prefill_budget=10**8, switch="catch_up"),
                           acceptance_mode=mode)


def iteration_errors(run: RealRun, cost: CostModel) -> np.ndarray:
    """predicted / measured - 1 for every decode iteration of a real run, at its own conditions."""
    out = []
    for r in run.iterations.itertuples(index=False):
        ctx = np.asarray(r.contexts, dtype=np.int64)
        predicted = cost.sd_time(ctx, r.config) if r.config.enabled else cost.decode_time(ctx)
        out.append(predicted / r.seconds - 1 if r.seconds > 0 else np.nan)
    return np.asarray(out, dtype=np.float64)


@dataclass
class ValidationResult:
    """Everything the report shows. ``table`` is the calibrated cost model of every policy, except
    ``no-sd`` when ``plain_table`` is given (vLLM: an engine without a drafter is cheaper per step)."""

    makespans: pd.DataFrame  # step, policy, real_s, then <cost>_<acceptance>_s and _err columns
    iterations: pd.DataFrame  # step, policy, cost, median_abs_err, p90_abs_err, n
    acceptance: pd.DataFrame  # step, policy, real, then the sim's mean accept length per acceptance source
    real_runs: list
    sim_events: pd.DataFrame
    table: TableCostModel
    analytic: CostModel
    backend: str = "native"
    plain_table: TableCostModel | None = None

    def cost(self, name: str, policy: str) -> CostModel:
        """The cost model ``name`` (calibrated / analytic) used for ``policy``."""
        if name == "analytic":
            return self.analytic
        return self.plain_table if policy == "no-sd" and self.plain_table is not None else self.table

    @property
    def acceptance_sources(self) -> list[str]:
        return [c for c in self.acceptance.columns if c not in ("step", "policy", "real")]


def compare(steps: Sequence, specs: Sequence[str], runs: Sequence[RealRun], result: ValidationResult, *,
            accept_sources: Callable[[RealRun], dict[str, Positional | MeasuredAcceptance]],
            engine: SimulatedEngine, simulate: StepSimulator, seed: int, deal_mode: str,
            progress=None) -> ValidationResult:
    """Simulate every (step, policy) with both cost models and every acceptance source, and fill in
    ``result``'s makespan, per-iteration and accept-length tables."""
    by_key = {(r.step, r.policy): r for r in runs}
    make_rows, acc_rows, sim_logs = [], [], []
    shown = phases(progress)
    for w in steps:
        shown.phase(f"simulating step {w.step}", len(specs), "policies")
        for spec in specs:
            real = by_key[(w.step, spec)]
            row = {"step": w.step, "policy": spec, "real_s": real.makespan}
            sim_accept = {}
            for cost_name in ("calibrated", "analytic"):
                cost = result.cost(cost_name, spec)
                for acc_name, acc in accept_sources(real).items():
                    ev = simulate(w, spec, cost, acc, engine=engine, seed=seed, deal_mode=deal_mode)
                    s = summarize_step(ev, gpus=1, tp=1)
                    row[f"{cost_name}_{acc_name}_s"] = s.makespan_s
                    row[f"{cost_name}_{acc_name}_err"] = s.makespan_s / real.makespan - 1
                    if cost_name == "calibrated":
                        sim_accept[acc_name] = s.mean_accept_length
                        sim_logs.append(ev.assign(policy=f"{spec} [sim {acc_name}]"))
            make_rows.append(row)
            sd = real.iterations[real.iterations["config"] != NO_SD] if len(real.iterations) else real.iterations
            real_accept = float(np.average(sd["accept_length"], weights=sd["batch_size"])) if len(sd) else np.nan
            acc_rows.append({"step": w.step, "policy": spec, "real": real_accept, **sim_accept})
            shown.advance()
    iter_rows = []
    for r in runs:
        for cost_name in ("calibrated", "analytic"):
            err = np.abs(iteration_errors(r, result.cost(cost_name, r.policy)))
            iter_rows.append({"step": r.step, "policy": r.policy, "cost": cost_name,
                              "median_abs_err": float(np.nanmedian(err)),
                              "p90_abs_err": float(np.nanpercentile(err, 90)), "n": int(np.isfinite(err).sum())})
    result.makespans, result.iterations = pd.DataFrame(make_rows), pd.DataFrame(iter_rows)
    result.acceptance, result.real_runs = pd.DataFrame(acc_rows), list(runs)
    result.sim_events = pd.concat(sim_logs, ignore_index=True)
    return result


def _empty_result(table: TableCostModel, analytic: CostModel, **kw) -> ValidationResult:
    return ValidationResult(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), [], pd.DataFrame(), table, analytic, **kw)


def validate_native(workloads: Sequence, specs: Sequence[str], accept: Positional, settings: NativeSettings, *,
                    simulate: StepSimulator, table: TableCostModel | None = None, deal_mode: str = "shuffle",
                    command: str = "", progress=None
                    ) -> tuple[ValidationResult, pd.DataFrame | None, dict[str, str] | None]:
    """Run, profile (unless ``table``), simulate and compare (module docstring). Returns the result and
    the table rows and metadata when it was profiled now (for the caller to write)."""
    shown = phases(progress)
    shown.phase("building the model, warm-up run")
    torch.manual_seed(settings.seed)
    target = random_model(settings.model, seed=settings.seed, dtype=torch.float32)
    steps = [scaled(w, settings.length_scale) for w in workloads]
    all_requests = [replay_requests(w, vocab_size=settings.model.vocab_size, seed=settings.seed, deal_mode=deal_mode)
                    for w in steps]
    reference_run(target, all_requests[0], max_batch=settings.max_batch)  # warm-up: first runs are slower, untimed
    runs: list[RealRun] = []
    for requests in all_requests:
        shown.phase(f"real runs, step {requests.step}", len(specs) * settings.real_repeats, "runs")
        runs += run_real(target, requests, specs, accept, max_batch=settings.max_batch, seed=settings.seed,
                         repeats=settings.real_repeats, on_run=shown.advance)
    rows, meta = None, None
    if table is None:
        rows, meta = profile_table(target, runs, settings, accept, command, progress=shown)
        table = TableCostModel.from_frame(rows, meta, source="profile")
    result = _empty_result(table, cpu_roofline(settings.model))
    # Each run's own accept-length distribution per shape (pooling runs by shape let the last run that
    # used a shape stand for all of them).
    compare(steps, specs, runs, result, engine=native_engine(settings.max_batch), simulate=simulate,
            seed=settings.seed,
            deal_mode=deal_mode, progress=shown,
            accept_sources=lambda real: {"predicted": accept, "measured": MeasuredAcceptance(real.accepted, accept)})
    return result, rows, meta


@dataclass(frozen=True)
class VllmValidation:
    """The vLLM half's settings beside :class:`NativeSettings`'s scaling and repeats."""

    drafter: str = "draft"
    late_scale: float = 0.05
    chains: tuple[int, ...] = (1, 3, 5)  # draft lengths profiled (every K a policy may use must be here)


def fitted_chain(accepted: Sequence[dict[SDConfig, np.ndarray]]) -> ChainAcceptance:
    """Per-position chain acceptance estimated from measured accepted-draft counts (pooled over runs
    and chain lengths): alpha_i = P(position i accepted | positions < i accepted, position i drafted)."""
    reached, passed = np.zeros(PINNED_DEPTH), np.zeros(PINNED_DEPTH)
    for runs in accepted:
        for config, counts in runs.items():
            a = np.asarray(counts, dtype=np.int64)
            for i in range(min(config.depth, PINNED_DEPTH)):
                reached[i] += int((a >= i).sum())
                passed[i] += int((a >= i + 1).sum())
    seen = reached > 0
    if not seen.any():
        return ChainAcceptance((0.0,))
    return ChainAcceptance(tuple((passed[seen] / reached[seen]).tolist()))


def vllm_chains(specs: Sequence[str], max_batch: int, seed: int) -> tuple[int, ...]:
    """Every draft length the policies can schedule on vLLM (refuses policies vLLM cannot run)."""
    from tltreal.backends.vllm_backend import vllm_schedule

    out: set[int] = set()
    for spec in specs:
        k, schedule = vllm_schedule(make_policy(spec, seed=seed), max_batch)
        out |= {n for _, _, n in schedule if n} if schedule else ({k} if k else set())
    return tuple(sorted(out))


def validate_vllm(workloads: Sequence, specs: Sequence[str], settings: NativeSettings, vllm: VllmValidation, *,
                  workdir, simulate: StepSimulator, deal_mode: str = "shuffle", command: str = "", progress=None
                  ) -> tuple[ValidationResult, dict[str, pd.DataFrame], dict[str, str]]:
    """The vLLM backend's validation: run every policy on vLLM, profile vLLM (a plain engine and one
    engine per draft length), simulate with measured acceptance and compare. ``workdir`` receives
    the HF model folders. Returns the result, the profiled tables (``plain``, ``drafter``) and their
    metadata."""
    from pathlib import Path

    from tltreal.backends.vllm_backend import VllmSettings, profile_vllm, run_policies, vllm_metadata, write_models

    chains = vllm_chains(specs, settings.max_batch, settings.seed)
    steps = [scaled(w, settings.length_scale) for w in workloads]
    all_requests = [replay_requests(w, vocab_size=settings.model.vocab_size, seed=settings.seed, deal_mode=deal_mode)
                    for w in steps]
    longest = max(r.max_len for r in all_requests)
    vs = VllmSettings(model=settings.model, drafter=vllm.drafter, late_scale=vllm.late_scale,
                      max_batch=settings.max_batch, seed=settings.seed,
                      max_model_len=max(VllmSettings.max_model_len, 2 ** int(np.ceil(np.log2(longest + 64)))))
    target_dir, draft_dir = write_models(Path(workdir), settings.model, seed=settings.seed,
                                         late_scale=vllm.late_scale)
    shown = phases(progress)
    shown.phase(f"real runs on vLLM ({len(specs)} policies x {len(all_requests)} steps x {settings.real_repeats})")
    runs = run_policies(target_dir, draft_dir, vs, all_requests, specs, repeats=settings.real_repeats)
    # A draft length a run never used (the sim's batch may differ) falls back to every run's acceptance.
    pooled = fitted_chain([r.accepted for r in runs])
    contexts = [max(c) for r in runs for c in r.iterations["contexts"] if len(c)]
    hi = int(max(contexts)) if contexts else 64
    prompts = [len(p) for r in all_requests for p in r.prompts]
    shown.phase("profiling vLLM")
    rows = profile_vllm(target_dir, draft_dir, vs, batch_sizes=[b for b in settings.grid_batches
                                                                if b <= settings.max_batch],
                        contexts=sorted({int(x) for x in np.geomspace(16, max(32, hi), 4).round()}),
                        chains=chains, prefill_lengths=sorted({1, int(np.median(prompts)), max(prompts)}),
                        repeats=settings.grid_repeats)
    meta = vllm_metadata(vs, command=command, model_fingerprint=shape_fingerprint(shape_of(settings.model)))
    tables = {name: rows[rows["engine"] == name].drop(columns="engine").reset_index(drop=True)
              for name in ("plain", "drafter")}
    plain, drafter = tables["plain"], tables["drafter"]
    result = _empty_result(TableCostModel.from_frame(drafter, meta, source="profile (vLLM, drafter engine)"),
                           cpu_roofline(settings.model), backend="vllm",
                           plain_table=TableCostModel.from_frame(plain, meta, source="profile (vLLM, plain)"))
    engine = SimulatedEngine(EngineLimits(max_batch=settings.max_batch, prefill_budget=vs.max_batched_tokens,
                                          switch="in_step"), acceptance_mode="stochastic", mixed_prefill=True)
    compare(steps, specs, runs, result, engine=engine, simulate=simulate, seed=settings.seed, deal_mode=deal_mode,
            progress=shown,
            accept_sources=lambda real: {"measured": MeasuredAcceptance(real.accepted, pooled)})
    return result, tables, meta


__all__ = [
    "DEFAULT_MODEL",
    "PROFILE_DEVICE",
    "MeasuredAcceptance",
    "NativeSettings",
    "RealRun",
    "ValidationResult",
    "VllmValidation",
    "compare",
    "cpu_roofline",
    "fitted_chain",
    "iteration_errors",
    "native_engine",
    "phases",
    "profile_table",
    "run_real",
    "scaled",
    "shape_of",
    "validate_native",
    "validate_vllm",
    "vllm_chains",
]
