"""``tlt validate --backend native``: the same trace steps run for real and simulated, and the error.

The work runs in rounds (at least ``--repeats``, at most ``--max-rounds``; :mod:`tltreal.validation.rounds`
says why each rule), so that the cost table and the real runs see the same conditions on a machine
that is busy now and quiet later. Before the rounds, every free policy runs once per step, untimed
(warm-up; the contexts and draft shapes they reach set the profile grid). In each round:

1. **Real** and **calibration**, interleaved: the native engine replays every step once per policy
   (:mod:`tltreal.validation.replay`; speculative ones with the pinned drafter, acceptance from the
   scenario's acceptance model, verification real and lossless against a plain reference run made
   once per step before the rounds) and measures every point of the profile grid once
   (:mod:`tltreal.validation.profiler`), unless a table is given, all in one balanced order that
   shifts from round to round (:func:`~tltreal.validation.rounds.round_schedule`). A recording
   wrapper keeps every decision's batch view and every outcome: each iteration's conditions (batch,
   per-request contexts, draft shape) and time.
2. **Simulated**: the same requests on one rollout worker, with the round's measured table
   (``calibrated``) or an analytic roofline of this device built from measured peak FLOP/s and copy
   bandwidth (``analytic``), and with acceptance either ``predicted`` (the acceptance model) or
   ``measured`` (each draft shape's accept-length distribution in that real run), which separates
   cost error from acceptance error.
3. **Stop or go on**: the headline median error's bootstrap interval over the rounds so far against
   ``--ci-width`` (:func:`stopping_row`).

Every time (runs, rows, profile) is on one clock, the wall clock or the engine thread's CPU time
(:mod:`tltreal.validation.clock`); on the thread clock each run's wall-clock time is kept beside it.

Reported: makespan error per (step, policy, round) for each (cost model, acceptance) pair and its
spread over the rounds (:func:`makespan_spread`, :func:`headline`) with its interval; the machine's
noise (identical runs over the rounds) beside it, and no error claimed below that noise
(:func:`noise_check`); the load average around each round (:func:`load_row`); the per-iteration
latency error of each cost model on the real iterations' own conditions (median and p90 of
|predicted / measured - 1|, pooled over rounds); accept-length error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd
import torch

from tltcore.acceptance import ChainAcceptance, TreeAcceptance
from tltcore.cost import CostModel, RooflineCostModel, TableCostModel, shape_fingerprint, table_frame
from tltcore.drafter.state import INITIAL_DRAFTER, DrafterState
from tltcore.engine_limits import EngineLimits
from tltcore.errors import InputError
from tltcore.hardware import GPUSpec
from tltcore.model_config import ModelConfig
from tltcore.model_shape import ModelShape
from tltcore.policy.base import NO_SD, SDConfig
from tltcore.policy.registry import make_policy, needs_cost_model, spec_shapes
from tltcore.step_simulator import SimulatedEngine, StepSimulator
from tltcore.summary import summarize_step
from tltreal.model.transformer import Transformer
from tltreal.model.weights import random_model
from tltreal.spec_decode.proposers import EagleDrafter
from tltreal.validation.profiler import (
    PROFILE_DEVICE,
    ProfileGrid,
    ProfilePoint,
    grid_points,
    measure_point,
    profile_metadata,
    profile_native,
    profile_points,
    profile_warmup,
)
from tltreal.validation.replay import (
    RealRun,
    RecordingPolicy,
    ReplayRequests,
    reference_run,
    replay_drafter,
    replay_requests,
    rotated,
    speculative_run,
    with_extra_tokens,
)
from tltreal.validation.rounds import StoppingRule, claim, headline_interval, round_schedule, run_noise

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
    grid_repeats: int = 1  # fresh engines per profile point within one round (the rounds repeat the profile)
    real_repeats: int = 3  # rounds at least: each runs every (step, policy) once and profiles the table once
    max_rounds: int | None = None  # rounds at most (None: exactly real_repeats), see tltreal.validation.rounds
    ci_width: float = 0.02  # stop once every headline's 95% interval over rounds is at most this wide
    device: str = "cpu"  # torch device of the native engine (checked by the CLI: tltcli.validate.torch_device)
    clock: str = "wall"  # what the runs and the profile are timed on: "wall" or "thread" (tltreal.validation.clock)

    @property
    def rule(self) -> StoppingRule:
        """When the rounds stop (:class:`~tltreal.validation.rounds.StoppingRule`)."""
        return StoppingRule(self.ci_width, self.real_repeats, max(self.real_repeats, self.max_rounds or 0))


def shape_of(cfg: ModelConfig, name: str = "native") -> ModelShape:
    """The simulator's view of the native model (cost-relevant numbers only)."""
    return ModelShape.from_config(cfg, name)


def scaled(workload, scale: float):
    """A step with prompt and response lengths multiplied by ``scale`` (at least one token each)."""
    prompts = np.maximum(1, np.rint(np.asarray(workload.prompt_tokens) * scale)).astype(np.int64)
    responses = np.maximum(1, np.rint(np.asarray(workload.response_tokens) * scale)).astype(np.int64)
    cap = None if workload.cap is None else max(1, int(np.rint(workload.cap * scale)))
    return replace(workload, prompt_tokens=prompts, response_tokens=responses, cap=cap)


def _real_run(step: int, spec: str, result, recorder: RecordingPolicy, repeat: int = 0) -> RealRun:
    rows, accepted = [], {}
    for view, outcome in zip(recorder.views, recorder.outcomes, strict=True):
        rows.append({"batch_size": view.batch_size, "contexts": view.context_lens, "config": outcome.config,
                     "seconds": outcome.elapsed_s, "accept_length": outcome.accept_length})
        if outcome.config.enabled:
            accepted.setdefault(outcome.config, []).extend(outcome.accepted_per_request)
    stage = result.events[result.events["kind"] == "stage"]
    return RealRun(step, spec, result.events, float((stage["t_end"] - stage["t_start"]).iloc[0]), pd.DataFrame(rows),
                   {c: np.asarray(v) for c, v in accepted.items()}, repeat, float(result.wall_s))


@runtime_checkable
class Progress(Protocol):
    """A progress display told each phase (with its size) and each unit done, e.g.
    :class:`tltcli.progress.PhaseProgress`."""

    def phase(self, name: str, total: int | None = None, unit: str = "units") -> None: ...

    def advance(self, n: int = 1) -> None: ...


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


def phases(progress: Progress | Callable[[str], None] | None) -> Progress:
    """``progress`` as an object with ``phase(name, total, unit)`` and ``advance(n)`` (e.g.
    :class:`tltcli.progress.PhaseProgress`): None is silent, a plain callable gets each phase's
    name."""
    if progress is None:
        return _Silent()
    if isinstance(progress, Progress):
        return progress
    return _Messages(progress)


def real_round(target: Transformer, requests: ReplayRequests, specs: Sequence[str], accept: Positional,
               reference, *, max_batch: int, seed: int, repeat: int = 0, clock: str = "wall",
               on_run: Callable[[], None] | None = None, cost_model: CostModel | None = None,
               drafter: EagleDrafter | None = None) -> list[RealRun]:
    """Every policy once on one step's requests, in the order :func:`rotated` by ``repeat`` (a slow
    spell of the machine then falls on another policy each round). ``reference`` is the plain run
    over :func:`with_extra_tokens` (``PINNED_DEPTH`` more tokens per request) that the pinned drafter
    reads and every speculative run must reproduce. Runs are timed on ``clock``
    (:mod:`tltreal.validation.clock`). ``on_run()`` is called after each run (progress).
    ``cost_model``: this engine's measured costs, for a policy that prices its decisions
    (:func:`~tltcore.policy.registry.needs_cost_model`); such a policy also gets the acceptance model
    as its prior and the replay's switch mode (``catch_up``) as the switch it prices. ``drafter``: the
    :func:`~tltreal.validation.replay.replay_drafter` the speculative runs pin (built here if None)."""
    probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)
    if drafter is None and any(spec != "no-sd" for spec in specs):
        drafter = replay_drafter(target, seed)
    runs = []
    for spec in rotated(specs, repeat):
        if needs_cost_model(spec) and cost_model is None:
            raise InputError(f"policy '{spec}' prices its decisions with this engine's cost table: profile "
                             "first (tlt real profile) or let tlt validate profile", field="policies")
        policy = make_policy(spec, seed=seed, accept_model=accept, cost_model=cost_model, switch="catch_up")
        recorder = RecordingPolicy(policy)
        if spec == "no-sd":
            result = reference_run(target, requests, max_batch=max_batch, policy=recorder, clock=clock)
        else:
            result = speculative_run(target, requests, reference, recorder, position_probs=probs,
                                     max_batch=max_batch, seed=seed, clock=clock, drafter=drafter)
        runs.append(_real_run(requests.step, spec, result, recorder, repeat))
        if on_run is not None:
            on_run()
    return runs


def load_row(repeat: int | None, phase: str) -> dict[str, object]:
    """The machine's load average (1, 5 and 15 minutes) now, for the report's noise check."""
    one, five, fifteen = os.getloadavg()
    return {"round": repeat, "phase": phase, "time_utc": datetime.now(UTC).strftime("%H:%M:%S"),
            "load1": one, "load5": five, "load15": fifteen}


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


def cpu_roofline(cfg: ModelConfig, seconds: float = 0.5, device: str = "cpu") -> RooflineCostModel:
    """An analytic roofline of ``device``: peak FLOP/s from a float32 matmul and bandwidth from a large
    copy, both measured now (on a CPU, on the threads torch uses)."""
    dev = torch.device(device)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    a = torch.randn(512, 512, device=dev)
    sync()
    flops, t0, n = 0.0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        a @ a
        n += 1
        sync()
    flops = n * 2 * 512**3 / (time.perf_counter() - t0)
    src = torch.empty(64 * 2**20 // 4, device=dev)
    dst = torch.empty_like(src)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        dst.copy_(src)
        n += 1
        sync()
    bandwidth = n * 2 * src.numel() * 4 / (time.perf_counter() - t0)
    spec = GPUSpec(f"{dev.type}-roofline", flops, bandwidth, 64e9, None, flops_efficiency=1.0,
                   bandwidth_efficiency=1.0, source=f"measured on {device} by tltreal.validation.validate.cpu_roofline")
    return RooflineCostModel(shape_of(cfg), spec, tp=1)


def profile_grid(runs: Sequence[RealRun], settings: NativeSettings,
                 extra_configs: Sequence[SDConfig] = (), engine_size: tuple[int, int] | None = None) -> ProfileGrid:
    """The grid over the batch sizes, contexts and draft shapes ``runs`` reached, plus
    ``extra_configs`` (the shapes a policy that prices its decisions may choose: it needs every one
    priced before it runs). ``engine_size``: the (max batch, max length) of the engine the table
    prices (:attr:`~tltreal.validation.profiler.ProfileGrid.engine_max_batch`); None: point-sized."""
    contexts = [max(c) for r in runs for c in r.iterations["contexts"] if len(c)]
    hi = int(max(contexts)) if contexts else 64
    grid_contexts = tuple(sorted({int(x) for x in np.geomspace(32, max(64, hi), 4).round()}))
    lengths = tuple(sorted({1, *(int(x) for x in np.geomspace(4, max(8, hi), 3).round())}))
    reached = [c for r in runs for c in r.iterations["config"]]
    configs = tuple(sorted({c for c in [*reached, *extra_configs] if c.enabled}))
    return ProfileGrid(batch_sizes=tuple(b for b in settings.grid_batches if b <= settings.max_batch),
                       contexts=grid_contexts, prefill_lengths=lengths, sd_configs=configs,
                       iterations=settings.grid_iterations, repeats=settings.grid_repeats, clock=settings.clock,
                       engine_max_batch=engine_size[0] if engine_size else None,
                       engine_max_len=engine_size[1] if engine_size else None)


def profile_table(target: Transformer, grid: ProfileGrid, settings: NativeSettings, accept: Positional,
                  command: str, *, seed: int | None = None, progress=None) -> tuple[pd.DataFrame, dict[str, str]]:
    """Profile the engine over ``grid`` (``progress``: see :func:`phases`; one phase, one unit per grid
    point); ``seed`` (default the settings') picks the profile's prompts."""
    probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)
    shown = phases(progress)
    shown.phase("profiling the engine", grid_points(grid), "grid points")
    df = profile_native(target, grid, position_probs=dict.fromkeys(grid.sd_configs, probs),
                        seed=settings.seed if seed is None else seed, on_point=shown.advance)
    meta = profile_metadata(target, command=command, model_fingerprint=shape_fingerprint(shape_of(settings.model)),
                            clock=settings.clock)
    return df, meta


def median_table(rounds: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The point-by-point median of the rounds' tables (same grid, same row order): the one table
    written beside the report for ``cost.table``."""
    out = rounds[0].copy()
    out["seconds"] = np.median(np.stack([r["seconds"].to_numpy(dtype=np.float64) for r in rounds]), axis=0)
    return out


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
    """Everything the report shows. ``tables`` holds each round's calibrated cost model (one given
    table stands for every round), used for every policy except ``no-sd`` when ``plain_tables`` is
    given (vLLM: an engine without a drafter is cheaper per step). ``load`` is the load average
    around each phase (:func:`load_row`); ``profiles`` every round's profiled rows with a ``round``
    column (None when a table was given)."""

    makespans: pd.DataFrame  # step, policy, repeat, real_s, then <cost>_<acceptance>_s and _err columns
    iterations: pd.DataFrame  # step, policy, cost, median_abs_err, p90_abs_err, n (pooled over rounds)
    acceptance: pd.DataFrame  # step, policy, real, then the sim's mean accept length per acceptance source
    real_runs: list
    sim_events: pd.DataFrame
    tables: list[TableCostModel]
    analytic: CostModel
    backend: str = "native"
    plain_tables: list[TableCostModel] | None = None
    load: pd.DataFrame = field(default_factory=pd.DataFrame)
    profiles: pd.DataFrame | None = None
    stopping: pd.DataFrame = field(default_factory=pd.DataFrame)  # per round: headlines, intervals, verdict
    order: pd.DataFrame = field(default_factory=pd.DataFrame)  # round, position, item: what ran when

    def cost(self, name: str, policy: str, repeat: int = 0) -> CostModel:
        """The cost model ``name`` (calibrated / analytic) used for ``policy``'s run of round ``repeat``."""
        if name == "analytic":
            return self.analytic
        tables = self.plain_tables if policy == "no-sd" and self.plain_tables is not None else self.tables
        return tables[min(repeat, len(tables) - 1)]

    @property
    def acceptance_sources(self) -> list[str]:
        return [c for c in self.acceptance.columns if c not in ("step", "policy", "real")]

    @property
    def rounds(self) -> int:
        return int(self.makespans["repeat"].nunique()) if len(self.makespans) else 0


def _simulate_run(w, spec: str, real: RealRun, result: ValidationResult, *,
                  accept_sources: Callable[[RealRun], dict[str, Positional | MeasuredAcceptance]],
                  engine: SimulatedEngine, simulate: StepSimulator, seed: int, deal_mode: str
                  ) -> tuple[dict, dict[str, float], list[pd.DataFrame]]:
    """One real run simulated with both cost models (the calibrated one of its own round) and every
    acceptance source: its makespan row, the simulated mean accept length per source (calibrated) and
    the simulated event logs."""
    row = {"step": w.step, "policy": spec, "repeat": real.repeat, "real_s": real.makespan, "real_wall_s": real.wall_s}
    accepts, logs = {}, []
    for cost_name in ("calibrated", "analytic"):
        cost = result.cost(cost_name, spec, real.repeat)
        for acc_name, acc in accept_sources(real).items():
            ev = simulate(w, spec, cost, acc, engine=engine, seed=seed, deal_mode=deal_mode)
            s = summarize_step(ev, gpus=1, tp=1)
            row[f"{cost_name}_{acc_name}_s"] = s.makespan_s
            row[f"{cost_name}_{acc_name}_err"] = s.makespan_s / real.makespan - 1
            if cost_name == "calibrated":
                accepts[acc_name] = s.mean_accept_length
                logs.append(ev.assign(policy=f"{spec} [sim {acc_name}]", repeat=real.repeat))
    return row, accepts, logs


def compare(steps: Sequence, specs: Sequence[str], runs: Sequence[RealRun], result: ValidationResult, *,
            accept_sources: Callable[[RealRun], dict[str, Positional | MeasuredAcceptance]],
            engine: SimulatedEngine, simulate: StepSimulator, seed: int, deal_mode: str,
            progress=None, cache: dict | None = None) -> ValidationResult:
    """Simulate every real run (every (step, policy, round)) with both cost models (the calibrated one
    of the run's own round) and every acceptance source (the run's own measured acceptance), and fill
    in ``result``'s makespan, per-iteration and accept-length tables. ``cache``: a dict kept between
    calls (the rounds of :func:`validate_native` compare after each round): a run already simulated
    is not simulated again."""
    by_key: dict[tuple[int, str], list[RealRun]] = {}
    for r in sorted(runs, key=lambda r: r.repeat):
        by_key.setdefault((r.step, r.policy), []).append(r)
    cache = {} if cache is None else cache
    make_rows, acc_rows, sim_logs = [], [], []
    shown = phases(progress)
    for w in steps:
        shown.phase(f"simulating step {w.step}", len(specs), "policies")
        for spec in specs:
            tries = by_key[(w.step, spec)]
            sim_accept: dict[str, list[float]] = {}
            for real in tries:
                key = (w.step, spec, real.repeat)
                if key not in cache:
                    cache[key] = _simulate_run(w, spec, real, result, accept_sources=accept_sources, engine=engine,
                                               simulate=simulate, seed=seed, deal_mode=deal_mode)
                row, accepts, logs = cache[key]
                make_rows.append(row)
                for acc_name, v in accepts.items():
                    sim_accept.setdefault(acc_name, []).append(v)
                sim_logs += logs
            # Accept length over every round's SD iterations (each round's run counts, none is chosen by
            # its timing).
            its = pd.concat([t.iterations for t in tries], ignore_index=True)
            sd = its[its["config"] != NO_SD] if len(its) else its
            real_accept = float(np.average(sd["accept_length"], weights=sd["batch_size"])) if len(sd) else np.nan
            acc_rows.append({"step": w.step, "policy": spec, "real": real_accept,
                             **{k: float(np.mean(v)) for k, v in sim_accept.items()}})
            shown.advance()
    iter_rows = []
    for (step, policy), tries in by_key.items():
        for cost_name in ("calibrated", "analytic"):
            err = np.abs(np.concatenate([iteration_errors(r, result.cost(cost_name, policy, r.repeat))
                                         for r in tries]))
            iter_rows.append({"step": step, "policy": policy, "cost": cost_name,
                              "median_abs_err": float(np.nanmedian(err)),
                              "p90_abs_err": float(np.nanpercentile(err, 90)), "n": int(np.isfinite(err).sum())})
    result.makespans, result.iterations = pd.DataFrame(make_rows), pd.DataFrame(iter_rows)
    result.acceptance, result.real_runs = pd.DataFrame(acc_rows), list(runs)
    result.sim_events = pd.concat(sim_logs, ignore_index=True)
    return result


# ---- spread and noise over the rounds --------------------------------------------------------------
def makespan_spread(makespans: pd.DataFrame) -> pd.DataFrame:
    """Per (step, policy), over the rounds: the real makespan's median, min and max, its noise
    ((max - min) / median), every simulated makespan's median and, for every error column, the
    median, min and max."""
    errs = [c for c in makespans.columns if c.endswith("_err")]
    sims = [c for c in makespans.columns if c.endswith("_s") and c not in ("real_s", "real_wall_s")]
    rows = []
    for (step, policy), g in makespans.groupby(["step", "policy"], sort=False):
        real = g["real_s"].to_numpy(dtype=np.float64)
        med = float(np.median(real))
        row = {"step": step, "policy": policy, "rounds": len(g), "real_s": med, "real_min_s": float(real.min()),
               "real_max_s": float(real.max()), "noise": float((real.max() - real.min()) / med) if med > 0 else np.nan}
        if "real_wall_s" in g:  # wall-clock noise, and the share of the wall time the thread did not run
            wall = g["real_wall_s"].to_numpy(dtype=np.float64)
            row["wall_s"] = float(np.median(wall))
            row["wall_noise"] = float((wall.max() - wall.min()) / np.median(wall))
            row["descheduled"] = float(np.median(1 - real / wall))
        row.update({c: float(g[c].median()) for c in sims})
        for c in errs:
            v = g[c].to_numpy(dtype=np.float64)
            row.update({c: float(np.median(v)), f"{c}_min": float(v.min()), f"{c}_max": float(v.max())})
        rows.append(row)
    return pd.DataFrame(rows)


def headline(makespans: pd.DataFrame, column: str) -> tuple[float, float, float]:
    """The median |makespan error| in ``column``: per (step, policy) the median over the rounds of
    each round's paired error (its run against its own table), then the median of their absolute
    values over (step, policy) (the report's table, summarised). With it, the spread a reader can
    repeat: the min and max over the rounds of each round alone (median |error| over (step, policy)),
    which carry the noise of single runs that the median over rounds averages out."""
    per_pair = makespans.groupby(["step", "policy"])[column].median().to_numpy(dtype=np.float64)
    per_round = makespans.groupby("repeat")[column].apply(lambda v: float(np.median(np.abs(v)))).to_numpy()
    return float(np.median(np.abs(per_pair))), float(per_round.min()), float(per_round.max())


@dataclass(frozen=True)
class NoiseCheck:
    """The machine's own noise (how much identical real runs moved over the rounds) beside the errors
    the report measures: an error smaller than the noise cannot be told from the machine's jitter, so
    it is not claimed (:func:`~tltreal.validation.rounds.claim`)."""

    median: float  # median over (step, policy) of the median over rounds of |run / median run - 1|
    worst: float  # the largest of them
    errors: dict[str, float]  # the headline calibrated error per acceptance source
    rounds: int
    range_median: float = float("nan")  # median over (step, policy) of (max - min) / median run (grows with rounds)

    @property
    def error(self) -> float:
        """The smallest headline calibrated error."""
        return min(self.errors.values())

    @property
    def claims(self) -> dict[str, str | None]:
        """Per acceptance source, the error as it may be stated, or None: below the noise, not claimed."""
        if self.rounds < 2:
            return {a: None for a in self.errors}
        return {a: claim(e, self.median) for a, e in self.errors.items()}

    @property
    def warning(self) -> str | None:
        refused = [a for a, c in self.claims.items() if c is None]
        if self.rounds < 2:
            return "one round only: no noise measured, so no error is claimed"
        if not refused:
            return None
        shown = ", ".join(f"{self.errors[a]:.1%} ({a} acceptance)" for a in refused)
        return (f"no error claimed for {shown}: identical runs vary by {self.median:.1%} (median over step and "
                f"policy of the median |run / median run - 1| over {self.rounds} rounds), more than the error, so "
                "this machine cannot tell that error from its own noise; rerun on a quieter machine")


def noise_check(makespans: pd.DataFrame, sources: Sequence[str]) -> NoiseCheck:
    """The noise of the real makespans over the rounds (:func:`~tltreal.validation.rounds.run_noise`),
    beside the headline calibrated error of each acceptance ``source``."""
    spread = makespan_spread(makespans)
    noise = run_noise(makespans).to_numpy(dtype=np.float64)
    return NoiseCheck(float(np.nanmedian(noise)) if np.isfinite(noise).any() else float("nan"),
                      float(np.nanmax(noise)) if np.isfinite(noise).any() else float("nan"),
                      {a: headline(makespans, f"calibrated_{a}_err")[0] for a in sources},
                      int(makespans["repeat"].nunique()),
                      float(np.nanmedian(spread["noise"].to_numpy(dtype=np.float64))))


def stopping_row(makespans: pd.DataFrame, sources: Sequence[str], rule: StoppingRule) -> dict[str, object]:
    """After a round: the rounds so far, each calibrated headline with its interval
    (:func:`~tltreal.validation.rounds.headline_interval`), and the stopping rule's verdict
    (``stop``: why, empty to go on)."""
    rounds = int(makespans["repeat"].nunique())
    row: dict[str, object] = {"rounds": rounds}
    intervals = []
    for a in sources:
        col = f"calibrated_{a}_err"
        lo, hi = headline_interval(makespans, col)
        row.update({f"{a}_err": headline(makespans, col)[0], f"{a}_lo": lo, f"{a}_hi": hi})
        intervals.append((lo, hi))
    row["stop"] = rule.reason(rounds, intervals) or ""
    return row


def _empty_result(tables: list[TableCostModel], analytic: CostModel, **kw) -> ValidationResult:
    return ValidationResult(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), [], pd.DataFrame(), tables, analytic, **kw)


@dataclass(frozen=True)
class RunItem:
    """One real run of a round's schedule: ``policy`` on ``step``'s requests; ``priced``: the policy
    prices its decisions with a cost table."""

    step: int
    policy: str
    priced: bool = False

    def __str__(self) -> str:
        return f"run step {self.step} {self.policy}"


def _item_name(item: RunItem | ProfilePoint) -> str:
    if isinstance(item, RunItem):
        return str(item)
    size = "prompt" if item.kind == "prefill" else "context"
    return f"profile {item.kind} batch {item.batch_size} {size} {item.size}"


def validate_native(workloads: Sequence, specs: Sequence[str], accept: Positional, settings: NativeSettings, *,
                    simulate: StepSimulator, table: TableCostModel | None = None, deal_mode: str = "shuffle",
                    command: str = "", progress=None
                    ) -> tuple[ValidationResult, pd.DataFrame | None, dict[str, str] | None]:
    """Run, profile (unless ``table``), simulate and compare, in rounds (module docstring and
    :mod:`tltreal.validation.rounds`): each round runs every (step, policy) once and measures every
    profile point once, all in one balanced order, then simulates its runs with its own table; rounds
    go on until :attr:`NativeSettings.rule` says stop. Returns the result and, when it profiled, the
    point-by-point median of the rounds' tables and its metadata (for the caller to write; every
    round's rows are in ``result.profiles``)."""
    shown = phases(progress)
    shown.phase("building the model, reference runs")
    torch.manual_seed(settings.seed)
    target = random_model(settings.model, seed=settings.seed, dtype=torch.float32).to(settings.device)
    steps = [scaled(w, settings.length_scale) for w in workloads]
    all_requests = {w.step: replay_requests(w, vocab_size=settings.model.vocab_size, seed=settings.seed,
                                            deal_mode=deal_mode) for w in steps}
    # The truth for the pinned drafter runs PINNED_DEPTH tokens past every response's end: a drafter
    # blind past the end would censor the measured acceptance of every request's last iterations.
    references = {step: reference_run(target, with_extra_tokens(r, PINNED_DEPTH), max_batch=settings.max_batch)
                  for step, r in all_requests.items()}
    # A policy that prices its decisions (cost-aware) needs a table before it runs: the previous
    # round's (the engine's own costs measured minutes before, as a user would profile before
    # deploying it), in the first round this round's, so it runs after the round's profile points.
    priced = [s for s in specs if needs_cost_model(s)]
    free = [s for s in specs if s not in priced]
    priced_shapes = sorted({c for s in priced for c in spec_shapes(s) or ()})
    drafter = replay_drafter(target, settings.seed)  # one for every speculative run, as a deployment loads one
    # Warm-up, untimed: every free policy once on every step (a process's first runs are slower); the
    # contexts and draft shapes they reach set the profile grid.
    shown.phase("warm-up runs (untimed; they set the profile grid)", len(free) * len(all_requests), "runs")
    warm = [run for step, r in all_requests.items()
            for run in real_round(target, r, free, accept, references[step], max_batch=settings.max_batch,
                                  seed=settings.seed, clock=settings.clock, on_run=shown.advance, drafter=drafter)]
    replay_size = (settings.max_batch, max(r.max_len for r in all_requests.values()) + 1)  # as replay's _engine
    grid = profile_grid(warm, settings, priced_shapes, replay_size) if table is None else None
    points = profile_points(grid) if grid is not None else []
    probs = accept.position_probs(PINNED_DEPTH, PINNED_TOPK)
    point_probs = dict.fromkeys(grid.sd_configs, probs) if grid is not None else {}
    meta = None
    if grid is not None:
        profile_warmup(target, grid, point_probs, settings.seed)
        meta = profile_metadata(target, command=command, model_fingerprint=shape_fingerprint(shape_of(settings.model)),
                                clock=settings.clock)
    analytic = cpu_roofline(settings.model, device=settings.device)
    runs_items = [RunItem(step, s) for step in all_requests for s in free]
    priced_items = [RunItem(step, s, priced=True) for step in all_requests for s in priced]
    runs: list[RealRun] = []
    rounds: list[pd.DataFrame] = []
    tables: list[TableCostModel] = [] if table is None else [table]
    loads: list[dict[str, object]] = []
    order_rows: list[dict[str, object]] = []
    stop_rows: list[dict[str, object]] = []
    cache: dict = {}
    rule = settings.rule
    result = _empty_result(tables, analytic)

    def sources(real: RealRun) -> dict[str, Positional | MeasuredAcceptance]:
        return {"predicted": accept, "measured": MeasuredAcceptance(real.accepted, accept)}

    repeat = 0
    while True:
        previous = tables[-1] if tables else None
        items = round_schedule(runs_items, points, priced_items, repeat, priced_table_ready=previous is not None)
        shown.phase(f"round {repeat + 1} (at least {rule.min_rounds}, at most {rule.max_rounds}): "
                    f"{len(runs_items) + len(priced_items)} real runs and {len(points)} profile points interleaved",
                    len(items), "runs and points")
        loads.append(load_row(repeat, "round start"))
        measured: dict[ProfilePoint, list[dict]] = {}
        for position, item in enumerate(items):
            order_rows.append({"round": repeat, "position": position, "item": _item_name(item)})
            if isinstance(item, ProfilePoint):
                measured[item] = measure_point(target, grid, item, point_probs,
                                               seed=settings.seed + repeat * settings.grid_repeats)
            else:
                cost_model = None
                if item.priced:  # the previous round's table, or (first round) this round's, complete by now
                    cost_model = previous if previous is not None else TableCostModel.from_frame(
                        table_frame([r for p in points for r in measured[p]]), meta, source="profile, round 1")
                runs += real_round(target, all_requests[item.step], [item.policy], accept, references[item.step],
                                   max_batch=settings.max_batch, seed=settings.seed, repeat=repeat,
                                   clock=settings.clock, cost_model=cost_model, drafter=drafter)
            shown.advance()
        loads.append(load_row(repeat, "round end"))
        if grid is not None:
            rows = table_frame([r for p in points for r in measured[p]])  # the table's row order, not the run order
            rounds.append(rows)
            tables.append(TableCostModel.from_frame(rows, meta, source=f"profile, round {repeat + 1}"))
        result.tables = tables
        compare(steps, specs, runs, result, engine=native_engine(settings.max_batch), simulate=simulate,
                seed=settings.seed, deal_mode=deal_mode, progress=shown, accept_sources=sources, cache=cache)
        stop_rows.append(stopping_row(result.makespans, result.acceptance_sources, rule))
        repeat += 1
        if stop_rows[-1]["stop"]:
            break
    loads.append(load_row(None, "end"))
    result.load, result.stopping, result.order = pd.DataFrame(loads), pd.DataFrame(stop_rows), pd.DataFrame(order_rows)
    if grid is not None:
        result.profiles = pd.concat([r.assign(round=i) for i, r in enumerate(rounds)], ignore_index=True)
    return result, (median_table(rounds) if rounds else None), meta


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
    """The vLLM backend's validation, in rounds as the native one: each round runs every policy once
    on every step, then profiles vLLM (a plain engine and one engine per draft length, the contexts
    the first round reached); each run is simulated with its round's tables and its own measured
    acceptance. ``workdir`` receives the HF model folders. Returns the result, the point-by-point
    median over the rounds of the profiled tables (``plain``, ``drafter``) and their metadata."""
    from pathlib import Path

    from tltreal.backends.vllm_backend import VllmSettings, profile_vllm, run_policies, vllm_metadata, write_models

    chains = vllm_chains(specs, settings.max_batch, settings.seed)
    steps = [scaled(w, settings.length_scale) for w in workloads]
    all_requests = [replay_requests(w, vocab_size=settings.model.vocab_size, seed=settings.seed, deal_mode=deal_mode)
                    for w in steps]
    longest = max(r.max_len for r in all_requests)
    vs = VllmSettings(model=settings.model, drafter=vllm.drafter, late_scale=vllm.late_scale,
                      max_batch=settings.max_batch, seed=settings.seed, clock=settings.clock,
                      max_model_len=max(VllmSettings.max_model_len, 2 ** int(np.ceil(np.log2(longest + 64)))))
    target_dir, draft_dir = write_models(Path(workdir), settings.model, seed=settings.seed,
                                         late_scale=vllm.late_scale)
    shown = phases(progress)
    prompts = [len(p) for r in all_requests for p in r.prompts]
    reference: dict[int, dict[int, list[int]]] = {}
    runs: list = []
    rounds: list[pd.DataFrame] = []
    loads: list[dict[str, object]] = []
    contexts: list[int] | None = None
    n = settings.real_repeats
    for repeat in range(n):
        loads.append(load_row(repeat, "real runs"))
        shown.phase(f"round {repeat + 1}/{n}: real runs on vLLM ({len(specs)} policies x {len(all_requests)} steps)")
        runs += run_policies(target_dir, draft_dir, vs, all_requests, specs, repeat=repeat, reference=reference)
        if contexts is None:
            seen = [max(c) for r in runs for c in r.iterations["contexts"] if len(c)]
            hi = int(max(seen)) if seen else 64
            contexts = sorted({int(x) for x in np.geomspace(16, max(32, hi), 4).round()})
        loads.append(load_row(repeat, "profile"))
        shown.phase(f"round {repeat + 1}/{n}: profiling vLLM")
        rounds.append(profile_vllm(target_dir, draft_dir, vs,
                                   batch_sizes=[b for b in settings.grid_batches if b <= settings.max_batch],
                                   contexts=contexts, chains=chains,
                                   prefill_lengths=sorted({1, int(np.median(prompts)), max(prompts)}),
                                   repeats=settings.grid_repeats, seed=settings.seed + repeat * settings.grid_repeats))
    loads.append(load_row(None, "end"))
    # A draft length a run never used (the sim's batch may differ) falls back to every run's acceptance.
    pooled = fitted_chain([r.accepted for r in runs])
    meta = vllm_metadata(vs, command=command, model_fingerprint=shape_fingerprint(shape_of(settings.model)))

    def split(rows: pd.DataFrame, name: str) -> pd.DataFrame:
        return rows[rows["engine"] == name].drop(columns="engine").reset_index(drop=True)

    per_round = {name: [split(rows, name) for rows in rounds] for name in ("plain", "drafter")}
    tables = {name: [TableCostModel.from_frame(t, meta, source=f"profile (vLLM, {name} engine), round {i + 1}")
                     for i, t in enumerate(per_round[name])] for name in ("plain", "drafter")}
    result = _empty_result(tables["drafter"], cpu_roofline(settings.model), backend="vllm",
                           plain_tables=tables["plain"],
                           load=pd.DataFrame(loads),
                           profiles=pd.concat([r.assign(round=i) for i, r in enumerate(rounds)], ignore_index=True))
    engine = SimulatedEngine(EngineLimits(max_batch=settings.max_batch, prefill_budget=vs.max_batched_tokens,
                                          switch="in_step"), acceptance_mode="stochastic", mixed_prefill=True)
    compare(steps, specs, runs, result, engine=engine, simulate=simulate, seed=settings.seed, deal_mode=deal_mode,
            progress=shown,
            accept_sources=lambda real: {"measured": MeasuredAcceptance(real.accepted, pooled)})
    return result, {name: median_table(t) for name, t in per_round.items()}, meta


__all__ = [
    "DEFAULT_MODEL",
    "PROFILE_DEVICE",
    "MeasuredAcceptance",
    "NativeSettings",
    "NoiseCheck",
    "RealRun",
    "ValidationResult",
    "VllmValidation",
    "compare",
    "cpu_roofline",
    "fitted_chain",
    "headline",
    "iteration_errors",
    "load_row",
    "makespan_spread",
    "median_table",
    "native_engine",
    "noise_check",
    "phases",
    "profile_grid",
    "profile_table",
    "real_round",
    "scaled",
    "shape_of",
    "validate_native",
    "validate_vllm",
    "vllm_chains",
]
