"""``tlt validate --backend native``: the same trace steps run for real and simulated, and the error.

For each step of a scenario (lengths scaled to a small model) and each policy:

1. **Real**: the native engine replays the step (:mod:`tltreal.replay`): a plain reference run, then
   every speculative policy with the pinned drafter (acceptance from the scenario's acceptance model,
   verification real and lossless). A recording wrapper keeps every decision's batch view and every
   outcome: each iteration's conditions (batch, per-request contexts, draft shape) and time.
2. **Calibration**: the engine is profiled on this machine (:mod:`tltreal.profiler`) over the batch
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
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from tltreal.model import Transformer, random_model
from tltreal.profiler import PROFILE_DEVICE, ProfileGrid, profile_metadata, profile_native
from tltreal.replay import (
    RecordingPolicy,
    ReplayRequests,
    reference_run,
    replay_requests,
    speculative_run,
    with_extra_tokens,
)
from tltsim.acceptance import ChainAcceptance, TreeAcceptance
from tltsim.cost import CostModel, RooflineCostModel, TableCostModel, shape_fingerprint
from tltsim.drafter_state import INITIAL_DRAFTER, DrafterState
from tltsim.hardware import GPUSpec
from tltsim.model_config import ModelConfig
from tltsim.model_shape import ModelShape
from tltsim.policy.base import NO_SD, SDConfig
from tltsim.policy.registry import make_policy
from tltsim.rollout import EngineConfig as SimEngineConfig
from tltsim.rollout import RolloutRun
from tltsim.summary import summarize_step

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


@dataclass
class RealRun:
    """One policy's real run of one step, with what its policy saw and was told."""

    step: int
    policy: str
    events: pd.DataFrame
    makespan: float
    iterations: pd.DataFrame  # one row per decode iteration: batch_size, contexts, config, seconds, accept_length
    accepted: dict[SDConfig, np.ndarray]  # per-request accepted draft tokens of every SD iteration


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


def run_real(target: Transformer, requests: ReplayRequests, specs: Sequence[str], accept: Positional, *,
             max_batch: int, seed: int, repeats: int = 1) -> list[RealRun]:
    """The reference (``no-sd``) and every speculative policy on one step's requests; each policy runs
    ``repeats`` times and the run with the median makespan is kept (CPU timings vary from run to run)."""
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
                   source="measured on this CPU by tltreal.validation.cpu_roofline")
    return RooflineCostModel(shape_of(cfg), spec, tp=1)


def profile_table(target: Transformer, runs: Sequence[RealRun], settings: NativeSettings, accept: Positional,
                  command: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Profile the engine over the batch sizes, contexts and draft shapes the real runs reached."""
    contexts = [max(c) for r in runs for c in r.iterations["contexts"] if len(c)]
    hi = int(max(contexts)) if contexts else 64
    grid_contexts = tuple(sorted({int(x) for x in np.geomspace(32, max(64, hi), 4).round()}))
    lengths = tuple(sorted({1, *(int(x) for x in np.geomspace(4, max(8, hi), 3).round())}))
    configs = tuple(sorted({c for r in runs for c in r.iterations["config"] if c.enabled}))
    grid = ProfileGrid(batch_sizes=tuple(b for b in settings.grid_batches if b <= settings.max_batch),
                       contexts=grid_contexts, prefill_lengths=lengths, sd_configs=configs,
                       iterations=settings.grid_iterations, repeats=settings.grid_repeats)
    probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)
    df = profile_native(target, grid, position_probs=dict.fromkeys(configs, probs), seed=settings.seed)
    meta = profile_metadata(target, command=command, model_fingerprint=shape_fingerprint(shape_of(settings.model)))
    return df, meta


def simulate(workload, spec: str, cost: CostModel, accept, *, max_batch: int, seed: int, deal_mode: str,
             mode: str = "stochastic") -> pd.DataFrame:
    """One step on one rollout worker, as the native engine runs it (prefill of all admitted requests
    in one pass, drafter catch-up at the switch)."""
    engine = SimEngineConfig(max_batch=max_batch, prefill_budget=10**8, switch="catch_up", acceptance_mode=mode)
    run = RolloutRun([make_policy(spec, seed=seed, accept_model=accept, cost_model=cost)], cost=cost, accept=accept,
                     engine=engine, seed=seed, deal_mode=deal_mode, policy_name=spec)
    run.step(workload)
    return run.events()


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
    """Everything the report shows."""

    makespans: pd.DataFrame  # step, policy, real_s, then <cost>_<acceptance>_s and _err columns
    iterations: pd.DataFrame  # step, policy, cost, median_abs_err, p90_abs_err, n
    acceptance: pd.DataFrame  # step, policy, real, predicted, measured (sim mean accept lengths)
    real_runs: list[RealRun]
    sim_events: pd.DataFrame
    table: TableCostModel
    analytic: RooflineCostModel


def validate_native(workloads: Sequence, specs: Sequence[str], accept: Positional, settings: NativeSettings, *,
                    table: TableCostModel | None = None, deal_mode: str = "shuffle", command: str = "",
                    progress=None) -> tuple[ValidationResult, pd.DataFrame | None, dict[str, str] | None]:
    """Run, profile (unless ``table``), simulate and compare (module docstring). Returns the result and
    the table rows and metadata when it was profiled now (for the caller to write)."""
    torch.manual_seed(settings.seed)
    target = random_model(settings.model, seed=settings.seed, dtype=torch.float32)
    steps = [scaled(w, settings.length_scale) for w in workloads]
    all_requests = [replay_requests(w, vocab_size=settings.model.vocab_size, seed=settings.seed, deal_mode=deal_mode)
                    for w in steps]
    reference_run(target, all_requests[0], max_batch=settings.max_batch)  # warm-up: first runs are slower, untimed
    runs: list[RealRun] = []
    for requests in all_requests:
        if progress:
            progress(f"real runs, step {requests.step}")
        runs += run_real(target, requests, specs, accept, max_batch=settings.max_batch, seed=settings.seed,
                         repeats=settings.real_repeats)
    rows, meta = None, None
    if table is None:
        if progress:
            progress("profiling the engine")
        rows, meta = profile_table(target, runs, settings, accept, command)
        table = TableCostModel.from_frame(rows, meta, source="profile")
    analytic = cpu_roofline(settings.model)
    costs: dict[str, CostModel] = {"calibrated": table, "analytic": analytic}
    by_key = {(r.step, r.policy): r for r in runs}
    make_rows, acc_rows, sim_logs = [], [], []
    for w in steps:
        if progress:
            progress(f"simulating step {w.step}")
        for spec in specs:
            real = by_key[(w.step, spec)]
            # This run's own accept-length distribution per shape (pooling runs by shape let the last
            # run that used a shape stand for all of them).
            measured = MeasuredAcceptance(real.accepted, accept)
            row = {"step": w.step, "policy": spec, "real_s": real.makespan}
            sim_accept = {}
            for cost_name, cost in costs.items():
                for acc_name, acc in (("predicted", accept), ("measured", measured)):
                    ev = simulate(w, spec, cost, acc, max_batch=settings.max_batch, seed=settings.seed,
                                  deal_mode=deal_mode)
                    s = summarize_step(ev, gpus=1, tp=1)
                    row[f"{cost_name}_{acc_name}_s"] = s.makespan_s
                    row[f"{cost_name}_{acc_name}_err"] = s.makespan_s / real.makespan - 1
                    if cost_name == "calibrated":
                        sim_accept[acc_name] = s.mean_accept_length
                        sim_logs.append(ev.assign(policy=f"{spec} [sim {acc_name}]"))
            make_rows.append(row)
            sd = real.iterations[real.iterations["config"] != NO_SD]
            real_accept = float(np.average(sd["accept_length"], weights=sd["batch_size"])) if len(sd) else np.nan
            acc_rows.append({"step": w.step, "policy": spec, "real": real_accept, **sim_accept})
    iter_rows = []
    for r in runs:
        for cost_name, cost in costs.items():
            err = np.abs(iteration_errors(r, cost))
            iter_rows.append({"step": r.step, "policy": r.policy, "cost": cost_name,
                              "median_abs_err": float(np.nanmedian(err)),
                              "p90_abs_err": float(np.nanpercentile(err, 90)), "n": int(np.isfinite(err).sum())})
    result = ValidationResult(pd.DataFrame(make_rows), pd.DataFrame(iter_rows), pd.DataFrame(acc_rows), runs,
                              pd.concat(sim_logs, ignore_index=True), table, analytic)
    return result, rows, meta


__all__ = ["DEFAULT_MODEL", "PROFILE_DEVICE", "MeasuredAcceptance", "NativeSettings", "RealRun", "ValidationResult",
           "cpu_roofline", "iteration_errors", "profile_table", "run_real", "scaled", "shape_of", "simulate",
           "validate_native"]
