"""``tlt validate --strategy overprovision:eta=E,mode=resume``: partial rollout run for real and simulated.

The native engine runs K consecutive trace steps of partial rollout (:mod:`tltreal.engine.partial`;
carried requests resumed as re-submitted prompts, ``resume="resubmit"``, the re-prefill the simulator
models): each step launches its carried groups and fresh ones up to ``ceil(N (1 + eta))`` (the groups
the simulator's strategy launches, handed in as ``launch``), stops when N groups are complete, and
resumes the rest next step, re-prefilled. Between steps the target's weights change (a small seeded
perturbation, :func:`perturb`), so each step is a real policy version and each resumed request
continues under weights other than those that started it. Responses are forced to their traced
lengths (scaled, no end token), as ``tlt validate`` replays them, so the real and simulated runs serve
requests of the same lengths: the simulator's assumption that new weights end a response where the
old ones would have holds here by construction.

One known difference in what the two halves run: a response of one token ends at its prefill; the
simulator admits the next waiting requests at once (prefill priority), the engine decodes the running
batch first and admits at its next iteration. Scaled traces have a few such responses, so the
requests a later rollout holds can differ by a few tokens or one request (``counts_match`` says where;
without one-token responses the counts match exactly, ``tests/real/test_partial_validation.py``).

It runs in the rounds of :mod:`tltreal.validation.rounds`: each round runs the K-step trajectory once
and measures every point of the cost table once, in one balanced order that shifts from round to
round; the simulator (handed in as ``simulate``, e.g. ``tltsim.strategy.replay.simulate_resume``)
then runs the same strategy on the same requests with that round's measured table (``calibrated``)
and with the measured roofline (``analytic``). Rounds stop on the headline interval as the policy
validation does. No SD: the pinned drafter of the policy validation needs each request's reference
continuation under the weights of its step, which partial rollout changes mid-response (not built).

Reported per (round, step): the real and simulated makespans of the rollout (stopped at the N-th
complete group) and their error, and beside them what must match for the comparison to mean
anything: requests run, tokens prefilled (re-prefills included), samples trained and carried, and
trained tokens by lag, real against simulated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd
import torch

from tltcore.cost import CostModel, TableCostModel, shape_fingerprint, table_frame
from tltcore.dealing import deal
from tltcore.policy.base import NoSD
from tltcore.step_simulator import SimulatedEngine
from tltreal.engine.engine_config import EngineConfig
from tltreal.engine.partial import Member, PartialRollout
from tltreal.model.transformer import Transformer
from tltreal.model.weights import random_model
from tltreal.validation.clock import engine_class
from tltreal.validation.profiler import ProfilePoint, measure_point, profile_metadata, profile_points, profile_warmup
from tltreal.validation.replay import RecordingPolicy
from tltreal.validation.rounds import StoppingRule, headline_interval, headline_of, round_schedule, run_noise
from tltreal.validation.validate import (
    NativeSettings,
    _real_run,
    cpu_roofline,
    load_row,
    median_table,
    native_engine,
    phases,
    profile_grid,
    scaled,
    shape_of,
)

#: Relative size of the weight change between policy versions (each weight multiplied by 1 + this x a
#: standard normal draw). An assumption, not a measured figure: enough that every version's weights
#: differ, small enough that a random model stays a random model; the timings do not depend on it.
PERTURBATION = 1e-3


class Launched(Protocol):
    """A step's fresh groups (``tltsim.strategy.overprovision.LaunchedStep`` fits)."""

    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    batch_groups: int


#: ``(work, carried_groups, eta, seed) -> Launched``: the groups a step launches after the carried ones
#: (``tltsim.strategy.replay.fresh_groups``).
Launch = Callable[[Any, int, float, int], Launched]


class SimulatedStepRow(Protocol):
    """One simulated step (``tltsim.strategy.replay.SimulatedStep`` fits)."""

    step: int
    makespan_s: float
    requests: int
    prefill_tokens: int
    trained_samples: int
    trained_tokens: int
    carried_samples: int
    lag_tokens: dict[int, int]
    prefill_s: float
    decode_s: float


class StrategySimulator(Protocol):
    """The strategy simulated on given steps with a cost model (``tltsim.strategy.replay.simulate_resume``)."""

    def __call__(self, works: Sequence[Any], eta: float, cost: CostModel, *, engine: SimulatedEngine, seed: int,
                 deal_mode: str) -> Sequence[SimulatedStepRow]: ...


def perturb(target: Transformer, version: int, seed: int, scale: float = PERTURBATION) -> None:
    """Policy version ``version``'s weights: every parameter multiplied by ``1 + scale * N(0, 1)`` drawn
    from a generator seeded by ``(seed, version)`` (module docstring)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + version)
    with torch.no_grad():
        for p in target.parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype).to(p.device)
            p.mul_(1 + scale * noise)


def prompt_ids(vocab: int, length: int, seed: int, key: int, member: int) -> list[int]:
    """Seeded random token ids for member ``member`` of group ``key`` (run-wide key, launch order)."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + key) * 1_009 + member)
    return torch.randint(0, vocab, (max(1, length),), generator=g).tolist()


def lag_text(lags: dict[int, int]) -> str:
    """Trained tokens by lag as ``lag:tokens`` pairs, e.g. ``0:812 1:95``."""
    return " ".join(f"{k}:{v}" for k, v in sorted(lags.items()))


@dataclass(frozen=True)
class Trajectory:
    """One round's real run of every step: a row per step and each step's recorded run (profile grid)."""

    rows: list[dict[str, object]]
    runs: list[Any]


def real_trajectory(target: Transformer, steps: Sequence[Any], eta: float, launch: Launch, *, max_batch: int,
                    max_len: int, seed: int, deal_mode: str, clock: str, repeat: int = 0,
                    scale: float = PERTURBATION) -> Trajectory:
    """The K steps of partial rollout on the native engine (module docstring); the target's weights
    are restored at the end."""
    original = {k: v.clone() for k, v in target.state_dict().items()}
    vocab = target.cfg.vocab_size
    pool = PartialRollout()
    rows, runs = [], []
    try:
        for k, work in enumerate(steps):
            if k > 0:
                perturb(target, k, seed, scale)
            fresh = launch(work, len(pool.groups), eta, seed)
            gids = np.asarray(fresh.group_ids)
            for g in dict.fromkeys(gids.tolist()):
                idx = np.flatnonzero(gids == g)
                key = pool.next_key
                pool.launch([Member(prompt_ids(vocab, int(fresh.prompt_tokens[i]), seed, key, m),
                                    max(1, int(fresh.response_tokens[i]))) for m, i in enumerate(idx)])
            keys = np.asarray([key for key, _ in pool.pending()], dtype=np.int64)
            (order,) = deal(keys, 1, deal_mode, seed, int(work.step))
            recorder = RecordingPolicy(NoSD())
            cfg = EngineConfig(max_batch=max_batch, max_len=max_len, step=int(work.step), switch="catch_up")
            engine = engine_class(clock)(target, recorder, None, cfg)
            st = pool.step(engine, version=k, batch_groups=int(fresh.batch_groups), order=order.tolist(),
                           resume="resubmit")
            real_s = wall_s = prefill_s = decode_s = 0.0
            if st.result is not None:
                run = _real_run(int(work.step), "no-sd", st.result, recorder, repeat)
                runs.append(run)
                real_s, wall_s = run.makespan, run.wall_s
                ev = st.result.events
                span = ev["t_end"] - ev["t_start"]
                prefill_s = float(span[ev["kind"] == "prefill"].sum())
                decode_s = float(span[ev["kind"] == "decode"].sum())
            rows.append({"repeat": repeat, "step": int(work.step), "version": k, "real_s": real_s,
                         "real_wall_s": wall_s, "real_prefill_s": prefill_s, "real_decode_s": decode_s,
                         "real_requests": st.requests, "real_prefill_tokens": st.prefill_tokens,
                         "real_trained_samples": sum(len(g.responses) for g in st.trained),
                         "real_trained_tokens": sum(len(r.output) for g in st.trained for r in g.responses),
                         "real_carried_samples": st.carried_samples, "real_lag_tokens": lag_text(st.lag_tokens())})
    finally:
        target.load_state_dict(original)
    return Trajectory(rows, runs)


@dataclass
class PartialValidation:
    """Every round's rows (``rows``: per (round, step) real and simulated, ``partial_rollout.csv``), the
    per-step spread over rounds, the load around each round, the stopping rows and each round's table."""


    eta: float
    rows: pd.DataFrame
    load: pd.DataFrame = field(default_factory=pd.DataFrame)
    stopping: pd.DataFrame = field(default_factory=pd.DataFrame)
    tables: list[TableCostModel] = field(default_factory=list)
    median_table: pd.DataFrame | None = None  # the point-by-point median of the rounds' tables (cost_table.parquet)
    meta: dict[str, str] = field(default_factory=dict)  # the profile's metadata (stored with that table)

    def spread(self) -> pd.DataFrame:
        """Per step over the rounds: the real makespan (median, min, max), its noise (median |run /
        median run - 1|), each simulated makespan's median and each error's median, min and max, and
        where the time went (prefill passes and decode iterations, real and calibrated, medians), and
        whether every round's counts matched."""
        out = []
        noise = run_noise(self.rows.assign(policy="no-sd"))
        for step, g in self.rows.groupby("step", sort=False):
            real = g["real_s"].to_numpy(dtype=np.float64)
            row: dict[str, object] = {"step": step, "rounds": len(g), "real_s": float(np.median(real)),
                                      "real_min_s": float(real.min()), "real_max_s": float(real.max()),
                                      "noise": float(noise.loc[(step, "no-sd")])}
            for cost in ("calibrated", "analytic"):
                err = g[f"{cost}_err"].to_numpy(dtype=np.float64)
                row.update({f"{cost}_s": float(g[f"{cost}_s"].median()), f"{cost}_err": float(np.median(err)),
                            f"{cost}_err_min": float(err.min()), f"{cost}_err_max": float(err.max())})
            for part in ("real_prefill_s", "calibrated_prefill_s", "real_decode_s", "calibrated_decode_s"):
                row[part] = float(g[part].median())
            row["counts_match"] = bool(g["counts_match"].all())
            out.append(row)
        return pd.DataFrame(out)

    def headline(self, cost: str = "calibrated") -> tuple[float, float, float]:
        """The median |error| over steps of each step's median over rounds, with the min and max of
        each round alone (the same median over that round's steps)."""
        frame = self.rows.assign(policy="no-sd")
        per_round = frame.groupby("repeat")[f"{cost}_err"].apply(lambda v: float(np.median(np.abs(v))))
        return headline_of(_matrix(frame, f"{cost}_err")), float(per_round.min()), float(per_round.max())

    @property
    def noise(self) -> float:
        """The machine's noise: median over steps of the median |run / median run - 1| over rounds."""
        v = run_noise(self.rows.assign(policy="no-sd")).to_numpy(dtype=np.float64)
        return float(np.nanmedian(v)) if np.isfinite(v).any() else float("nan")


def _matrix(frame: pd.DataFrame, column: str) -> np.ndarray:
    return frame.pivot_table(index=["step", "policy"], columns="repeat", values=column,
                             aggfunc="first").to_numpy(dtype=np.float64)


#: What must be equal real and simulated for the makespans to be comparable: the requests each rollout ran
#: and the tokens it prefilled (re-prefills included), the samples and tokens trained (the same groups:
#: their lengths differ) and carried, and the trained tokens by lag (each stop at the same token).
MATCHED = ("requests", "prefill_tokens", "trained_samples", "trained_tokens", "carried_samples", "lag_tokens")


def _compare(trajectory: Trajectory, sims: dict[str, Sequence[SimulatedStepRow]]) -> list[dict[str, object]]:
    """Each real step beside its simulated twins: errors, and whether the counts match."""
    out = []
    for i, row in enumerate(trajectory.rows):
        cal = sims["calibrated"][i]
        r = dict(row)
        for cost, steps in sims.items():
            s = steps[i]
            r[f"{cost}_s"] = s.makespan_s
            real = float(row["real_s"])  # type: ignore[arg-type]
            r[f"{cost}_err"] = s.makespan_s / real - 1 if real > 0 else (0.0 if s.makespan_s == 0 else np.inf)
        r.update({"calibrated_prefill_s": cal.prefill_s, "calibrated_decode_s": cal.decode_s,
                  "sim_requests": cal.requests, "sim_prefill_tokens": cal.prefill_tokens,
                  "sim_trained_samples": cal.trained_samples, "sim_trained_tokens": cal.trained_tokens,
                  "sim_carried_samples": cal.carried_samples, "sim_lag_tokens": lag_text(cal.lag_tokens)})
        r["counts_match"] = all(r[f"real_{c}"] == r[f"sim_{c}"] for c in MATCHED)
        out.append(r)
    return out


def validate_partial(workloads: Sequence[Any], eta: float, settings: NativeSettings, *, launch: Launch,
                     simulate: StrategySimulator, deal_mode: str = "shuffle", command: str = "",
                     progress=None) -> PartialValidation:
    """Run the K-step partial rollout for real and profile the cost table, interleaved, in rounds;
    simulate each round's trajectory with its table; stop on the headline interval (module docstring)."""
    shown = phases(progress)
    shown.phase("building the model, warm-up trajectory (untimed; it sets the profile grid)")
    torch.manual_seed(settings.seed)
    target = random_model(settings.model, seed=settings.seed, dtype=torch.float32).to(settings.device)
    steps = [scaled(w, settings.length_scale) for w in workloads]
    max_len = max(int(np.max(np.asarray(w.prompt_tokens) + np.asarray(w.response_tokens))) for w in steps) + 1
    common = dict(max_batch=settings.max_batch, max_len=max_len, seed=settings.seed, deal_mode=deal_mode,
                  clock=settings.clock)
    warm = real_trajectory(target, steps, eta, launch, **common)
    grid = profile_grid(warm.runs, settings, (), (settings.max_batch, max_len))
    points = profile_points(grid)
    profile_warmup(target, grid, {}, settings.seed)
    meta = profile_metadata(target, command=command, model_fingerprint=shape_fingerprint(shape_of(settings.model)),
                            clock=settings.clock)
    analytic = cpu_roofline(settings.model, device=settings.device)
    engine = native_engine(settings.max_batch)
    rule: StoppingRule = settings.rule
    result = PartialValidation(eta, pd.DataFrame())
    rows: list[dict[str, object]] = []
    loads, stops, rounds = [], [], []
    repeat = 0
    while True:
        items: list[Any] = round_schedule(["trajectory"], points, [], repeat, priced_table_ready=True)
        shown.phase(f"round {repeat + 1} (at least {rule.min_rounds}, at most {rule.max_rounds}): "
                    f"{len(steps)} partial-rollout steps and {len(points)} profile points interleaved",
                    len(items), "runs and points")
        loads.append(load_row(repeat, "round start"))
        measured: dict[ProfilePoint, list[dict]] = {}
        trajectory = None
        for item in items:
            if isinstance(item, ProfilePoint):
                measured[item] = measure_point(target, grid, item, {}, seed=settings.seed + repeat)
            else:
                trajectory = real_trajectory(target, steps, eta, launch, repeat=repeat, **common)
            shown.advance()
        loads.append(load_row(repeat, "round end"))
        assert trajectory is not None
        frame = table_frame([r for p in points for r in measured[p]])
        rounds.append(frame)
        table = TableCostModel.from_frame(frame, meta, source=f"profile, round {repeat + 1}")
        result.tables.append(table)
        sims = {name: simulate(steps, eta, cost, engine=engine, seed=settings.seed, deal_mode=deal_mode)
                for name, cost in (("calibrated", table), ("analytic", analytic))}
        rows += _compare(trajectory, sims)
        result.rows = pd.DataFrame(rows)
        lo, hi = headline_interval(result.rows.assign(policy="no-sd"), "calibrated_err")
        stops.append({"rounds": repeat + 1, "calibrated_err": result.headline()[0], "lo": lo, "hi": hi,
                      "stop": rule.reason(repeat + 1, [(lo, hi)]) or ""})
        repeat += 1
        if stops[-1]["stop"]:
            break
    loads.append(load_row(None, "end"))
    result.load, result.stopping = pd.DataFrame(loads), pd.DataFrame(stops)
    result.median_table, result.meta = median_table(rounds), meta
    return result
