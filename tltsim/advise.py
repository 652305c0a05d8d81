"""``tlt advise``: which speculative-decoding setting to run for these RL rollouts, and what it buys.

The question a user brings is "should I turn SD on for my RL rollouts, and how?". The answer is a
small simulated sweep on the user's own scenario (trace or length profile, model, GPU, layout,
drafter): every candidate setting of a grid (policy x elastic threshold x draft shape x switch mode)
at several simulation seeds, ranked by the median rollout makespan with its min-max spread.

Why a grid and not a search: the settings people can deploy are few (TLT's elastic BEG-MAB at some
threshold, a static tree or chain, vLLM's per-batch-size table, SGLang's adaptive EMA, our cost-aware
policy) and a grid of about a dozen keeps a bundled scenario's answer under a minute on one core.
Why several seeds: the dealing seed alone moves a speedup by several percent and can flip the order
of two settings (:mod:`tltsim.seeds`); a recommendation whose spread overlaps a runner-up's is said
to be a *tie within spread*.

What is pure here (no I/O, no printing): the grid (:func:`candidate_grid`), the tasks it runs
(:func:`plan_tasks`), one task's evaluation (:func:`evaluate_task`, top-level so that the sweep
machinery's local processes or Ray tasks run it as they run sweep points), the ranking with spreads
(:func:`rank`), the recommendation (:func:`recommend`) and the findings on where SD does not pay
(:func:`not_paying`). :func:`run_tasks` hands tasks to :mod:`tltsim.sweep.runner`'s executors.

The end-to-end speedup of a rollout policy is Amdahl's: the step's later phases (reward, old
log-probs, reference, actor update, weight sync; :func:`tltsim.rl.phases.phase_times`, the scenario's
``rl`` fields) are added to the rollout of the policy and of ``no-sd`` at the same seed, with the
drafter at the scenario's quality and its training in the rollout's bubbles (free). How the drafter
is kept fresh over RL steps is a separate comparison of the whole-RL-run presets
(:mod:`tltsim.rl.presets`: Spot Trainer, a serial training stage after each rollout, trained once
(frozen), model-free n-gram), which fix their own rollout policy (TLT's ``elastic+beg-mab``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from tltcore import config
from tltcore.errors import InputError
from tltcore.policy.registry import policy_spec
from tltcore.policy.spec import CostAwareSpec, ElasticSpec, with_base
from tltsim.scenario import BASELINE_POLICY, Scenario, SimInputs, compare_policies, prepare, with_values

#: Elastic thresholds the default grid tries with BEG-MAB (TLT's default is 32).
DEFAULT_THRESHOLDS: tuple[int, ...] = (16, 32, 64, 128)
#: Static draft shapes of the default grid: a 4-token chain (what vLLM can run) and TLT's 8_4_32 tree.
DEFAULT_SHAPES: tuple[str, ...] = ("4_1_4", "8_4_32")
#: Switch modes tried for the policies that switch SD on mid-rollout (elastic, cost-aware): TLT's
#: re-prefill of every live request and our native engine's drafter-only catch-up.
DEFAULT_SWITCHES: tuple[str, ...] = ("reprefill", "catch_up")
#: The threshold of the default elastic+static candidates (TLT's default).
ELASTIC_DEFAULT = 32
#: Presets compared for "how the drafter is kept fresh", in the order printed.
FRESHNESS_PRESETS: tuple[str, ...] = ("tlt", "tlt-no-spot", "tlt-periodic", "static-drafter", "tlt-base")
FRESHNESS_LABELS = {"tlt": "Spot Trainer (trains on released workers)",
                    "tlt-no-spot": "trained every step, as a serial stage after rollout",
                    "tlt-periodic": "retrained every spot.retrain_every steps (default 10, TLT's released "
                                    "cadence), as a serial stage",
                    "static-drafter": "frozen (trained once before RL)",
                    "tlt-base": "model-free n-gram drafter (nothing to train)",
                    "verl": "no SD (veRL)"}
#: A setting "pays" when its median rollout speedup is at least this: below, the gain is inside what
#: the dealing seed and the cost model's error move (a few percent), and a user should not bother.
PAYS = 1.02


# ---- the grid -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One setting of the grid: ``policy`` is the spec as simulated, ``switch`` the engine's switch
    mode it ran under (None: the policy never switches SD on mid-rollout, so every mode gives the
    same run), ``label`` how it is printed."""

    label: str
    policy: str
    switch: str | None


def kind_shapes(kind: str, quick: bool = False) -> tuple[str, ...]:
    """The static draft shapes the default grid tries for drafter ``kind`` (``quick``: its one shape of
    ``--quick``), as :mod:`tltcore.drafter.kinds` gives them: :data:`DEFAULT_SHAPES` for ``eagle``,
    ``eagle3``, ``draft-model`` and ``ngram``; chains for ``mtp`` (1 and 3 tokens: DeepSeek-V3's MTP is
    run with a few) and ``suffix``; block sizes for ``block`` (DSpark's 7, DFlash's 16-token block = 15)."""
    from tltcore.drafter.kinds import drafter_kind

    spec = drafter_kind(kind)
    return (spec.quick_shape,) if quick else spec.shapes


def switches_sd_on(spec: str) -> bool:
    """Whether ``spec`` switches SD on mid-rollout (``Decision.switch_on``): the elastic wrapper and
    the cost-aware policy do; no-sd, static, bandits, tables and SGLang's EMA never do, so the
    engine's switch mode cannot change their run (only ``in_step`` would, by hiding catch-ups)."""
    typed = policy_spec(spec)
    return isinstance(typed, ElasticSpec) or isinstance(typed.base, CostAwareSpec)


def _with_switch(spec: str, switch: str) -> str:
    """The spec that prices ``switch``: cost-aware takes the engine's switch mode as an option."""
    typed = policy_spec(spec)
    if isinstance(typed.base, CostAwareSpec) and typed.base.switch is None and switch != "reprefill":
        return with_base(typed, switch=switch).name
    return spec


def default_policies(thresholds: Sequence[int] = DEFAULT_THRESHOLDS,
                     shapes: Sequence[str] = DEFAULT_SHAPES) -> tuple[str, ...]:
    """The default policy specs: TLT's elastic BEG-MAB at each threshold, our cost-aware policy, each
    static shape at every batch size and behind the elastic switch (a chain without hysteresis,
    ``elastic:32:1``, which vLLM can run), vLLM's default table and SGLang's adaptive EMA."""
    out = [BASELINE_POLICY, *(f"elastic:{t}+beg-mab" for t in thresholds), "cost-aware"]
    for shape in shapes:
        out.append(f"static:{shape}")
        chain = shape.split("_")[1] == "1"
        out.append(f"elastic:{ELASTIC_DEFAULT}:1+static:{shape}" if chain else f"elastic+static:{shape}")
    out += ["vllm-table", "sglang-ema"]
    return tuple(dict.fromkeys(out))


def candidate_grid(policies: Sequence[str], switches: Sequence[str]) -> tuple[Candidate, ...]:
    """Every (policy, switch mode) worth simulating: a policy that switches SD on runs under each
    mode, any other once (labelled without a mode). ``no-sd`` is always first."""
    if not switches:
        raise InputError("needs at least one switch mode", field="--switch")
    names = [policy_spec(p).name for p in policies]  # parsed once: each as results will label it
    out = [Candidate(BASELINE_POLICY, BASELINE_POLICY, None)]
    for spec in dict.fromkeys(names):
        if spec == BASELINE_POLICY:
            continue
        if switches_sd_on(spec):
            for m in dict.fromkeys(switches):
                label = spec if len(set(switches)) == 1 else f"{spec} ({m})"
                out.append(Candidate(label, _with_switch(spec, m), m))
        else:
            out.append(Candidate(spec, spec, None))
    return tuple(out)


@dataclass(frozen=True)
class Task:
    """One unit of work for the executors: the scenario with one switch mode, one simulation seed
    and the policies that run under it (``no-sd`` is added by the simulator)."""

    switch: str
    seed: int
    scenario: Scenario

    @property
    def key(self) -> str:
        return f"{self.switch}-seed{self.seed}"


def plan_tasks(s: Scenario, candidates: Sequence[Candidate], seeds: Sequence[int],
               switches: Sequence[str]) -> list[Task]:
    """One task per (switch mode, seed): the switch-free candidates run with the first mode."""
    modes = list(dict.fromkeys(switches))
    tasks = []
    for m in modes:
        specs = [c.policy for c in candidates if c.switch == m or (c.switch is None and m == modes[0])]
        specs = [p for p in specs if p != BASELINE_POLICY] or [BASELINE_POLICY]
        for k in seeds:
            sk = with_values(s, {"engine.switch": m, "seed": int(k), "policies": tuple(specs), "presets": ()})
            tasks.append(Task(m, int(k), sk))
    return tasks


# ---- one task -------------------------------------------------------------------------------------
def _inputs_key(s: Scenario) -> str:
    data = config.to_dict(s)
    for k in ("seed", "policies", "presets"):
        data.pop(k, None)
    return json.dumps(data, sort_keys=True, default=str)


@dataclass(frozen=True)
class _PrepareKey:
    """A scenario keyed by what :func:`tltsim.scenario.prepare` reads (:func:`_inputs_key`)."""

    key: str
    scenario: Scenario = field(compare=False, hash=False)


@functools.lru_cache(maxsize=4)
def _prepared(k: _PrepareKey) -> SimInputs:
    return prepare(k.scenario)


def inputs_for(s: Scenario) -> SimInputs:
    """The prepared inputs of ``s``, shared by every task that differs only in seed and policies
    (:func:`tltsim.scenario.prepare` reads neither; the trace is loaded once per process)."""
    inputs = _prepared(_PrepareKey(_inputs_key(s), s))
    return inputs if inputs.scenario == s else replace(inputs, scenario=s)


class SharedRuns:
    """The event logs of one scenario's runs at its own seed, kept while one ``tlt advise`` runs, so that
    its later parts reuse the grid's runs instead of simulating them again: the per-batch-size table
    is derived from the recommendation's run, and on a one-step workload the exports "re-simulated on
    every step" are the grid's own runs (issue 43: these repeats were a fifth of ``--quick``).

    Only runs of ``s`` itself are kept (any seed, policies, presets and switch mode; any other field
    changed, such as an unmeasured-input variant, is simulated as before and not kept): at most one
    log per (switch mode, policy) of the grid. A run is a pure function of the scenario's inputs,
    its switch mode, the policy and the seed, so a kept log is the log a new run would write; its
    ``run_id`` is relabelled to the asking run's. Runs in other processes (``--workers``) are not shared."""

    def __init__(self, s: Scenario) -> None:
        self.key, self.seed = _base_key(s), s.seed
        self.logs: dict[tuple[str, str], pd.DataFrame] = {}

    def run_policy(self, s: Scenario, spec: Any, inputs: SimInputs | None = None, *, run_id: str = "",
                   progress: Callable[[int], None] | None = None) -> pd.DataFrame:
        """:func:`tltsim.scenario.run_policy`, answered from the kept log when this run was simulated."""
        from tltcore.policy.spec import as_spec
        from tltsim.scenario import run_policy

        if s.seed != self.seed or _base_key(s) != self.key:
            return run_policy(s, spec, inputs, run_id=run_id, progress=progress)
        key = (s.engine.switch, as_spec(spec).name)
        kept = self.logs.get(key)
        if kept is None:
            kept = self.logs[key] = run_policy(s, spec, inputs, run_id=run_id, progress=progress)
        events = kept.copy()
        events["run_id"] = pd.array([run_id] * len(events), dtype="string")
        return events


_shared: list[SharedRuns] = []  # the advise under way in this process, if any


@contextlib.contextmanager
def sharing_runs(s: Scenario) -> Iterator[SharedRuns]:
    """Keep ``s``'s runs (:class:`SharedRuns`) for :func:`evaluate_task`, :func:`check_on_every_step`
    and :func:`run_policy` while the block runs; dropped after it."""
    _shared.append(SharedRuns(s))
    try:
        yield _shared[-1]
    finally:
        _shared.pop()


_pools: list[dict[tuple[str, int, str | None], Any]] = []  # run_tasks' pools kept by the advise under way


@contextlib.contextmanager
def keeping_workers() -> Iterator[None]:
    """Keep :func:`run_tasks`' worker pools from one call to the next while the block runs, and close
    them after it. A whole ``tlt advise`` calls it six times (the grid, the derived table, the
    unmeasured inputs, the drafter upkeep, ...): a pool per call started its worker processes anew,
    and each paid its warm-up again (the modules past the forkserver's preload, the calibration, the
    prepared trace): ~0.7 CPU s a worker, 12 workers. A pool whose call failed is closed at once."""
    _pools.append({})
    try:
        yield
    finally:
        for executor in _pools.pop().values():
            executor.close(cancel=False)


def run_policy(s: Scenario, spec: Any, inputs: SimInputs | None = None, *, run_id: str = "",
               progress: Callable[[int], None] | None = None) -> pd.DataFrame:
    """One policy's run, reused from the advise under way when it simulated it (:class:`SharedRuns`)."""
    from tltsim.scenario import run_policy as simulate

    if _shared:
        return _shared[-1].run_policy(s, spec, inputs, run_id=run_id, progress=progress)
    return simulate(s, spec, inputs, run_id=run_id, progress=progress)


def _base_key(s: Scenario) -> str:
    """What a run reads of ``s`` besides its seed, policies and switch mode (:func:`_inputs_key`)."""
    return _inputs_key(with_values(s, {"engine.switch": "reprefill"}))


def _switch_seconds(events: pd.DataFrame, n_workers: int) -> dict[str, float]:
    """Per policy, the mean seconds per worker spent bringing drafters up to date (re-prefill and
    catch-up): what switching SD on cost."""
    rows = events[events["kind"].isin(["switch_reprefill", "catch_up"])]
    dur = (rows["t_end"] - rows["t_start"]).groupby(rows["policy"]).sum()
    return {str(k): float(v) / max(1, n_workers) for k, v in dur.items()}


def sd_shares(summary: pd.DataFrame) -> dict[str, float]:
    """Per policy of a per-step summary, the share of its decode iterations that speculated (each
    step's ``sd_share`` weighted by its iterations; 0 where it decoded nothing)."""
    share = summary.assign(w=summary["decode_iterations"] * summary["sd_share"]).groupby("policy", sort=False)
    ratio = (share["w"].sum() / share["decode_iterations"].sum().replace(0, np.nan)).to_dict()
    return {str(k): 0.0 if pd.isna(v) else float(v) for k, v in ratio.items()}


def evaluate_task(scenario: Scenario) -> pd.DataFrame:
    """Simulate one task (its policies against ``no-sd``, every step) and return one row per policy:
    ``policy``, ``switch``, ``seed``, the whole run's ``rollout_s`` and ``speedup`` over ``no-sd``,
    ``sd_share`` (share of decode iterations that speculated), ``accept``, ``switch_s`` (mean seconds
    per worker spent switching SD on), ``gpu_idle_s`` (idle GPU-seconds of the rollouts: what the energy
    estimate of :mod:`tltsim.units` reads) and ``warnings`` (JSON list of ``[kind, line]`` from
    :mod:`tltsim.run_warnings`). Top-level and scenario-driven: it runs in a sweep worker as is."""
    from tltcore.summary import run_totals
    from tltsim.run_warnings import scenario_warnings

    inputs = inputs_for(scenario)
    events, summary = compare_policies(scenario, inputs, run_one=run_policy)
    totals = run_totals(summary, gpus=scenario.cluster.gpus)
    sd_share = sd_shares(summary)
    switch_s = _switch_seconds(events, scenario.n_workers)
    warns: dict[str, list[list[str]]] = {}
    for w in scenario_warnings(inputs, events, summary):
        warns.setdefault(w.subject, []).append([w.kind, w.line()])
    out = totals[["policy", "rollout_s", "speedup", "mean_accept_length", "gpu_idle_s"]].rename(
        columns={"mean_accept_length": "accept"})
    out.insert(1, "switch", scenario.engine.switch)
    out.insert(2, "seed", scenario.seed)
    out["sd_share"] = [sd_share.get(p, 0.0) for p in out["policy"]]
    out["switch_s"] = [switch_s.get(p, 0.0) for p in out["policy"]]
    out["warnings"] = [json.dumps(warns.get(p, [])) for p in out["policy"]]
    return out


# ---- running the tasks ----------------------------------------------------------------------------
def run_tasks(tasks: Sequence[Task], evaluate: Callable[[Scenario], pd.DataFrame] | None = None, *,
              workers: int = 1, backend: str = "local", address: str | None = None,
              on_done: Callable[[Task], None] | None = None) -> pd.DataFrame:
    """Every task's rows, stacked in task order. One worker (or one task) on the local backend runs
    them in this process (no pool to start, the prepared trace and :class:`SharedRuns` shared);
    otherwise the sweep machinery's executors (:class:`tltsim.sweep.runner.LocalExecutor`: forkserver
    processes; :class:`~tltsim.sweep.runner.RayExecutor`: a local or existing Ray cluster) run them. A task that
    fails stops the run with its one-line error (a recommendation over a partial grid would mislead)."""
    from tltsim.sweep.runner import BACKENDS, LocalExecutor, RayExecutor, import_ray, run_task
    from tltsim.sweep.spec import Point

    if backend not in BACKENDS:
        raise InputError(f"must be one of {', '.join(BACKENDS)}, got '{backend}'", field="--executor")
    if workers < 1:
        raise InputError(f"must be >= 1, got {workers}", field="--workers")
    if address and backend != "ray":
        raise InputError("applies to --executor ray only", field="--address")
    evaluate = evaluate or evaluate_task
    results: dict[str, pd.DataFrame] = {}
    if not tasks:
        return pd.DataFrame()

    def keep(task: Task, outcome: Any) -> None:
        if not outcome.ok:
            raise InputError(f"simulating {task.key} failed: {outcome.error}", field="advise")
        results[task.key] = outcome.frame
        if on_done is not None:
            on_done(task)

    if backend == "local" and min(workers, len(tasks)) == 1:
        for t in tasks:
            keep(t, run_task(evaluate, t.key, t.scenario))
    else:
        if backend == "ray":
            try:
                import_ray()
            except InputError as exc:  # the sweep runner's message names its own option, --backend
                raise InputError(exc.message.replace("--backend", "--executor"), path="--executor") from None
        kept = _pools[-1] if _pools else None  # the pools of the advise under way (keeping_workers)
        key = (backend, workers, address)
        executor = kept.get(key) if kept is not None else None
        if executor is None:
            executor = (LocalExecutor(workers if kept is not None else min(workers, len(tasks))) if backend == "local"
                        else RayExecutor(workers, address))
            if kept is not None:
                kept[key] = executor
        clean = False
        try:
            by_key = {t.key: t for t in tasks}
            pending = {executor.submit(evaluate, Point(i, t.key, {}, t.scenario)): t
                       for i, t in enumerate(tasks)}
            while pending:
                for handle, outcome in executor.wait(list(pending)):
                    task = pending.pop(handle)
                    keep(by_key[task.key], outcome)
            clean = True
        finally:
            if kept is None or not clean:
                executor.close(cancel=not clean)
                if kept is not None:
                    kept.pop(key, None)
    return pd.concat([results[t.key] for t in tasks], ignore_index=True)


# ---- ranking --------------------------------------------------------------------------------------
def label_rows(rows: pd.DataFrame, candidates: Sequence[Candidate]) -> pd.DataFrame:
    """The task rows of the grid's candidates, labelled, with ``switch`` the candidate's mode (None for
    a setting that never switches); ``no-sd``'s repeat under a second switch mode (the simulator
    always adds it) and anything not in the grid are dropped."""
    by_run = {(c.policy, c.switch): c.label for c in candidates}
    first_mode = rows["switch"].iloc[0] if len(rows) else None
    labels = []
    for policy, switch in zip(rows["policy"], rows["switch"], strict=True):
        label = by_run.get((policy, switch))
        if label is None and switch == first_mode:
            label = by_run.get((policy, None))
        labels.append(label)
    mode_of = {c.label: c.switch for c in candidates}
    out = rows.assign(label=labels)
    out = out[out["label"].notna()].copy()
    out["switch"] = out["label"].map(mode_of)  # None: the setting never switches, so no mode applies
    order = {c.label: i for i, c in enumerate(candidates)}
    out["order"] = out["label"].map(order)
    return out.sort_values(["order", "seed"], kind="stable").drop(columns="order").reset_index(drop=True)


def with_end_to_end(rows: pd.DataFrame, later_s: float | None) -> pd.DataFrame:
    """``e2e_speedup`` per row: (no-sd's rollout + later phases) / (this rollout + later phases) at
    the same seed (Amdahl); NaN without the later phases' time."""
    base = rows[rows["policy"] == BASELINE_POLICY].drop_duplicates("seed").set_index("seed")["rollout_s"]
    b = rows["seed"].map(base).astype(float)
    if later_s is None or not math.isfinite(later_s):
        return rows.assign(e2e_speedup=np.nan)
    return rows.assign(e2e_speedup=(b + later_s) / (rows["rollout_s"] + later_s))


RANK_METRICS = ("rollout_s", "speedup", "e2e_speedup", "sd_share", "switch_s", "accept")


def rank(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate label with the median, min and max over seeds of each metric, ordered
    by median rollout makespan (fastest first; grid order breaks exact ties), with ``rank`` from 1."""
    from tltsim.seeds import aggregate

    agg = aggregate(rows, ["label"], RANK_METRICS)
    first = rows.drop_duplicates("label").set_index("label")
    agg["policy"] = agg["label"].map(first["policy"])
    agg["switch"] = agg["label"].map(first["switch"])
    agg["grid_order"] = range(len(agg))
    agg = agg.sort_values(["rollout_s_median", "grid_order"], kind="stable").reset_index(drop=True)
    agg.insert(0, "rank", range(1, len(agg) + 1))
    return agg.drop(columns="grid_order")


@dataclass(frozen=True)
class Recommendation:
    """The answer: the fastest candidate by median rollout makespan, with its spread over seeds, the
    candidates whose spread overlaps its own (``ties``: the order among them is not settled by these
    seeds), the runners-up, and whether SD pays at all here."""

    label: str
    policy: str
    switch: str | None
    rollout_s: tuple[float, float, float]
    speedup: tuple[float, float, float]
    e2e_speedup: tuple[float, float, float]
    ties: tuple[str, ...] = ()
    runners_up: tuple[str, ...] = ()
    sd_pays: bool = True

    @property
    def is_sd(self) -> bool:
        return self.policy != BASELINE_POLICY


def _triple(r: pd.Series | dict, metric: str) -> tuple[float, float, float]:
    return (float(r[f"{metric}_median"]), float(r[f"{metric}_min"]), float(r[f"{metric}_max"]))


def recommend(ranking: pd.DataFrame, *, runners_up: int = 3) -> Recommendation:
    """The top of :func:`rank`. SD "pays" when the best setting is not ``no-sd``, its median rollout
    speedup is at least :data:`PAYS` and its spread does not overlap ``no-sd``'s; otherwise ``no-sd``
    is recommended (switching SD on would buy nothing these seeds can tell apart from noise) and the
    best SD setting is the first runner-up."""
    if ranking.empty:
        raise InputError("no candidate was simulated", field="advise")
    rows = ranking.to_dict("records")
    best = rows[0]
    base = next(r for r in rows if r["policy"] == BASELINE_POLICY)
    overlaps_base = best["rollout_s_max"] >= base["rollout_s_min"]
    pays = best["policy"] != BASELINE_POLICY and best["speedup_median"] >= PAYS and not overlaps_base
    chosen = best if pays else base
    ties = tuple(r["label"] for r in rows if r is not chosen and r["rollout_s_min"] <= chosen["rollout_s_max"]
                 and r["rollout_s_max"] >= chosen["rollout_s_min"])
    others = tuple(r["label"] for r in rows if r is not chosen)[:runners_up]
    return Recommendation(chosen["label"], chosen["policy"], chosen["switch"] if isinstance(chosen["switch"], str)
                          else None,
                          _triple(chosen, "rollout_s"), _triple(chosen, "speedup"), _triple(chosen, "e2e_speedup"),
                          ties, others, pays)


# ---- where SD does not pay ------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """One line of "where SD does not pay and why": about a candidate (``subject``) or the GPU."""

    subject: str
    speedup: tuple[float, float, float] | None
    why: str


def _why(r: dict, warnings: Sequence[tuple[str, str]]) -> str:
    """The cause of one candidate's loss: a run warning when one names it (they say where and how
    much), else what the run's own numbers show."""
    for kind in ("sd_slower", "switch_never_fired", "switch_cost", "switch_late"):
        for k, line in warnings:
            if k == kind:
                return line.removeprefix(f"{r['policy']}: ")
    share = r.get("sd_share_median", 0.0) or 0.0
    if share == 0:
        return ("SD never ran: the running batch never got small enough for it to switch on, so this setting is "
                "no SD under another name")
    if share < 0.05:
        return (f"SD ran in only {100 * share:.1f}% of decode iterations: the running batch rarely got small enough "
                "for it to switch on, and the time it took to switch did not come back")
    return (f"SD ran in {100 * share:.0f}% of decode iterations with {r.get('accept_median', float('nan')):.2f} "
            "tokens per verify: not enough accepted tokens to pay for drafting and verification at these batch sizes")


def not_paying(ranking: pd.DataFrame, rows: pd.DataFrame, *, gpu_fact: str | None = None) -> list[Finding]:
    """The GPU-level fact first (``gpu_fact``: batch sizes where one SD iteration is slower than a
    plain one, :func:`gpu_slower_line`: the cause behind most losses), then every SD candidate whose
    median rollout speedup is below :data:`PAYS`, with why, the worst first: slower than no SD, or
    a tie with it (a gain under 2%, e.g. exactly 1x where an elastic switch never fired), which a
    user must not read as a setting that pays."""
    out: list[Finding] = [Finding("GPU", None, gpu_fact)] if gpu_fact else []
    warn_of: dict[str, list[tuple[str, str]]] = {}
    for label, text in zip(rows["label"], rows["warnings"], strict=True):
        for kind, line in json.loads(text):
            if (kind, line) not in warn_of.setdefault(label, []):
                warn_of[label].append((kind, line))
    losers = ranking[(ranking["policy"] != BASELINE_POLICY) & (ranking["speedup_median"] < PAYS)]
    for r in losers.sort_values("speedup_median", kind="stable").to_dict("records"):
        out.append(Finding(r["label"], _triple(r, "speedup"), _why(r, warn_of.get(r["label"], []))))
    return out


def gpu_slower_line(inputs: SimInputs, shapes: Sequence[str]) -> str | None:
    """One line naming, per draft shape of the grid, the batch sizes (1 to the engine's max batch) at
    which one SD iteration is slower than a plain one at the workload's typical context; None when SD
    is faster at every batch size for every shape."""
    from tltcore.policy.base import SDConfig
    from tltsim.run_warnings import sd_slower_batches, slow_span, typical_context

    s = inputs.scenario
    top = min(int(s.engine.max_batch), 1024)
    batches = sorted({1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024} & set(
        range(1, top + 1)) | {top})
    ctx = typical_context(inputs.workloads)
    slow = sd_slower_batches(inputs.cost, inputs.accept, [SDConfig.parse(x) for x in shapes], batches, ctx)
    if not slow:
        return None
    parts = [f"{name} at {slow_span(bs, batches)}" for name, bs in slow.items()]
    return (f"on {s.cluster.gpu} (TP {s.cluster.tp}, {s.model.name}, ~{ctx:,}-token contexts) one SD iteration is "
            f"slower than a plain one for {'; '.join(parts)}: speculation must stay off at those batch sizes")


def later_phase_seconds(inputs: SimInputs) -> tuple[float | None, str]:
    """Seconds of every simulated step's phases after rollout (reward, old log-probs, reference,
    actor update, weight sync) under the scenario's ``rl`` fields, and a note; None (with why) when
    the GPU has no analytic peaks to price them."""
    from tltcore.model_shape import get_model
    from tltsim.rl.phases import phase_times
    from tltsim.rl.run import LATER_PHASES
    from tltsim.scenario import scenario_gpu

    s = inputs.scenario
    try:
        model, gpu = get_model(s.model.name), scenario_gpu(s)
        total = 0.0
        for w in inputs.workloads:
            ph = phase_times(model, gpu, s.cluster.gpus, w.prompt_tokens, w.response_tokens, s.rl)
            total += sum(getattr(ph, p) for p in LATER_PHASES)
    except InputError as exc:
        return None, f"no end-to-end estimate: {exc.message}"
    return total, ""


# ---- the exports on every step of the workload ------------------------------------------------------
#: Steps of the workload an export is re-simulated on, at most (the first ones from the scenario's).
MAX_CHECK_STEPS = 8


def workload_steps(s: Scenario) -> tuple[Scenario, str]:
    """``s`` set to simulate every step its workload offers from its first (at most
    :data:`MAX_CHECK_STEPS`), and which steps in words: the trace's steps from ``trace.step`` on, or
    for one snapshot cut into steps of ``trace.prompts_per_step`` groups, as many such steps as it
    holds. An export tuned on one step must also hold on the steps it was not tuned on."""
    from tltsim.scenario import trace_rows

    t = s.trace
    df = trace_rows(t)
    steps = sorted(int(x) for x in df["step"].unique())
    if len(steps) > 1:
        first = t.step if t.step is not None else steps[0]
        later = [k for k in steps if k >= first]
        n = min(len(later), MAX_CHECK_STEPS)
        return with_values(s, {"trace.step": first, "trace.num_steps": n}), (
            f"trace steps {later[0]}-{later[n - 1]}" if n > 1 else f"trace step {later[0]}")
    if t.prompts_per_step is None:  # the trace's one step, which s already simulates unless told otherwise
        return (s if t.num_steps is None else with_values(s, {"trace.num_steps": 1})), "the trace's one step"
    groups = int(df.groupby("step")["group_id"].nunique().max())
    n = max(1, min(groups // t.prompts_per_step, MAX_CHECK_STEPS))
    first = t.step or 0
    return with_values(s, {"trace.step": first, "trace.num_steps": n}), (
        f"{n} steps of {t.prompts_per_step} prompt groups sampled from the trace's one snapshot")


@dataclass(frozen=True)
class StepCheck:
    """Speedups over no SD per workload step (first seed) of the recommendation and its exports."""

    steps: str  # which steps, in words (workload_steps)
    seed: int
    table: pd.DataFrame  # columns label, policy, switch, step, speedup


def check_on_every_step(s: Scenario, runs: Sequence[tuple[str, str, str | None]], seed: int) -> StepCheck:
    """Re-simulate each ``(label, policy spec, switch mode)`` of ``runs`` against no SD on every step of
    the workload (:func:`workload_steps`) at ``seed``: per step, its rollout speedup."""
    sk, words = workload_steps(s)
    frames = []
    by_mode: dict[str, list[tuple[str, str]]] = {}
    for label, spec, mode in runs:
        by_mode.setdefault(mode or s.engine.switch, []).append((label, spec))
    for mode, items in by_mode.items():
        specs = tuple(dict.fromkeys(spec for _, spec in items if spec != BASELINE_POLICY)) or (BASELINE_POLICY,)
        run = with_values(sk, {"engine.switch": mode, "seed": int(seed), "policies": specs, "presets": ()})
        _, summary = compare_policies(run, inputs_for(run), run_one=run_policy)
        for label, spec in items:
            part = summary[summary["policy"] == spec]
            frames.append(pd.DataFrame({"label": label, "policy": spec, "switch": mode,
                                        "step": part["step"].to_numpy(), "speedup": part["speedup"].to_numpy()}))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["label", "policy", "switch", "step", "speedup"])
    return StepCheck(words, int(seed), table)


# ---- how the drafter is kept fresh ----------------------------------------------------------------
@dataclass(frozen=True)
class Freshness:
    """The whole-RL-run comparison of drafter upkeep: per preset the end-to-end and rollout speedup
    over veRL (median, min, max over seeds), or why it was not run."""

    steps: int
    table: pd.DataFrame = field(default_factory=pd.DataFrame)
    skipped: str = ""
    rollout: str = ""  # which rollout policy the presets ran (upkeep_rollout)
    note: str = ""  # why the comparison shows nothing (empty_upkeep), or ""


def freshness_tasks(s: Scenario, seeds: Sequence[int], steps: int, rec: Recommendation | None = None
                    ) -> tuple[list[Task], str]:
    """The preset runs (one task per seed, :data:`FRESHNESS_PRESETS` against ``verl``) over ``steps``
    RL steps, or no tasks and why: a trace that offers one step (a single snapshot without
    ``trace.prompts_per_step``) cannot show a drafter going stale. With ``rec`` an SD recommendation,
    the presets that differ only in upkeep run it (``presets_policy``, under its switch mode): the
    upkeep a user should pick is the one for the setting they will run, not TLT's."""
    if steps < 2:
        return [], "not run (--rl-steps below 2: a drafter only goes stale after an actor update)"
    import contextlib
    import io

    values: dict[str, Any] = {"trace.num_steps": steps, "presets": FRESHNESS_PRESETS, "policies": (BASELINE_POLICY,)}
    if rec is not None and rec.is_sd:
        values["presets_policy"] = rec.policy
        if rec.switch is not None:
            values["engine.switch"] = rec.switch
    sk = with_values(s, values)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the one-snapshot warning: said below in our words
            n = len(inputs_for(sk).workloads)
    except InputError as exc:
        return [], f"not run: {exc.message}"
    if n < 2:
        return [], (f"not run: the trace '{s.trace.name}' gives one RL step; set trace.prompts_per_step "
                    "(--set trace.prompts_per_step=64) to sample several")
    return [Task("presets", int(k), with_values(sk, {"seed": int(k)})) for k in seeds], ""


def evaluate_presets(scenario: Scenario) -> pd.DataFrame:
    """One preset task: :func:`tltsim.rl.run.compare_presets`'s per-preset summary with the seed and
    each preset's run warnings (``warnings``: JSON list of ``[kind, line]``, as :func:`evaluate_task`)."""
    from tltsim.rl.run import compare_presets
    from tltsim.run_warnings import scenario_warnings

    inputs = inputs_for(scenario)
    events, _, summary = compare_presets(scenario, inputs)
    warns: dict[str, list[list[str]]] = {}
    for w in scenario_warnings(inputs, events, summary):
        warns.setdefault(w.subject, []).append([w.kind, w.line()])
    return summary.assign(seed=scenario.seed, warnings=[json.dumps(warns.get(str(p), [])) for p in summary["preset"]])


def upkeep_labels(retrain_every: int, steps: int) -> dict[str, str]:
    """:data:`FRESHNESS_LABELS` with ``tlt-periodic``'s cadence, and where a run of ``steps`` RL steps
    is too short for it to retrain at all (then it is the frozen drafter, and says so)."""
    never = " (never within these steps: the frozen drafter)" if retrain_every > steps else ""
    return {**FRESHNESS_LABELS,
            "tlt-periodic": f"retrained every {retrain_every} steps, as a serial stage{never}"}


def upkeep_rollout(rec: Recommendation) -> str:
    """Which rollout policy the upkeep comparison ran, in words."""
    from tltsim.rl.presets import TLT_ROLLOUT

    if rec.is_sd:
        return f"the recommended {rec.label} rollout"
    return f"TLT's {TLT_ROLLOUT} rollout (no SD is recommended)"


def empty_upkeep(table: pd.DataFrame, s: Scenario, steps: int) -> str:
    """Why the upkeep comparison compares nothing, or "": when a frozen drafter (``static-drafter``)
    runs exactly as fast as one the Spot Trainer keeps fresh (``tlt``), the choice of upkeep does not
    matter under this scenario, and a table of equal numbers must say so and why."""
    med = table.set_index("preset")["speedup_median"] if "speedup_median" in table else pd.Series(dtype=float)
    if not {"tlt", "static-drafter"} <= set(med.index) or not math.isclose(
            float(med["tlt"]), float(med["static-drafter"]), rel_tol=1e-9, abs_tol=0.0):
        return ""
    accept = table.set_index("preset").get("mean_accept_length_median", pd.Series(dtype=float))
    d = s.drafter
    if "tlt" in accept.index and not math.isfinite(float(accept["tlt"])):
        why = "the rollout policy never switched SD on, so no drafter was ever used"
    elif d.drift == 0:
        why = "drafter.drift = 0: the policy never moves away from the drafter, so it never goes stale"
    elif d.floor >= d.quality:
        why = (f"the stale floor ({d.floor:g}) equals drafter.quality ({d.quality:g}): a stale drafter is as good "
               "as a fresh one")
    else:
        why = f"over {steps} RL steps the drafter's staleness does not change any rollout's makespan"
    return f"every upkeep gives the same result, so this comparison shows nothing here: {why}"


def freshness_table(rows: pd.DataFrame, labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Per preset (best end-to-end first), the median, min and max over seeds of the end-to-end and
    rollout speedups over veRL, with what the preset does to keep the drafter fresh (``labels``, by
    default :data:`FRESHNESS_LABELS`; :func:`upkeep_labels` for the run's own cadence)."""
    from tltsim.seeds import aggregate

    ok = rows[rows["status"] == "ok"]
    agg = aggregate(ok, ["preset"], ("speedup", "rollout_speedup", "mean_accept_length"))
    agg["upkeep"] = agg["preset"].map(labels or FRESHNESS_LABELS)
    agg = agg[agg["preset"] != "verl"].sort_values("speedup_median", ascending=False, kind="stable")
    oom = rows[rows["status"] != "ok"].drop_duplicates("preset")
    if len(oom):
        agg = pd.concat([agg, pd.DataFrame({"preset": oom["preset"], "upkeep": oom["note"]})], ignore_index=True)
    return agg.reset_index(drop=True)


__all__ = [
    "DEFAULT_SHAPES",
    "DEFAULT_SWITCHES",
    "DEFAULT_THRESHOLDS",
    "FRESHNESS_PRESETS",
    "PAYS",
    "Candidate",
    "Finding",
    "Freshness",
    "Recommendation",
    "StepCheck",
    "Task",
    "candidate_grid",
    "check_on_every_step",
    "default_policies",
    "empty_upkeep",
    "evaluate_presets",
    "evaluate_task",
    "freshness_table",
    "freshness_tasks",
    "gpu_slower_line",
    "inputs_for",
    "kind_shapes",
    "label_rows",
    "later_phase_seconds",
    "not_paying",
    "plan_tasks",
    "rank",
    "recommend",
    "run_tasks",
    "switches_sd_on",
    "upkeep_labels",
    "upkeep_rollout",
    "with_end_to_end",
    "workload_steps",
]
