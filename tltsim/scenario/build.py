"""From a scenario to the simulation's inputs: acceptance and cost models, engine, workloads, policies."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tltcore.errors import InputError
from tltcore.policy.spec import PolicyBase, as_spec
from tltsim.scenario.schema import (
    Scenario,
    gpu_efficiencies,
    kind_acceptance,
    measured_profile,
    relocated,
    scenario_gpu,
)
from tltsim.scenario.workload import load_steps


@dataclass(frozen=True)
class SimInputs:
    """The resolved objects a scenario names: workloads, cost and acceptance models, engine."""

    scenario: Scenario
    workloads: tuple[Any, ...]  # tltsim.traces.workload.StepWorkload per simulated step
    cost: Any  # tltcore.cost.CostModel
    accept: Any  # tltcore.acceptance.AcceptanceModel
    engine: Any  # tltsim.rollout.EngineConfig
    drafter: Any  # tltcore.drafter.state.DrafterState

    @property
    def n_workers(self) -> int:
        return self.scenario.n_workers

    @property
    def workload(self) -> Any:
        """The first simulated step."""
        return self.workloads[0]

    @property
    def response_cap(self) -> int | None:
        """The engine's response cap over the simulated steps (``StepWorkload.cap``), None when a step
        shows none."""
        caps = [w.cap for w in self.workloads]
        return None if not caps or any(c is None for c in caps) else max(caps)


def drafter_acceptance(s: Scenario, drafter_kind: str | None = None):
    """The acceptance model the drafter kind ``drafter_kind`` (None: ``drafter.kind``) is priced with
    (:func:`tltcore.drafter.kinds.drafter_acceptance` decides): a measured profile, the n-gram drafter's
    own chain, the scenario's acceptance preset or the kind's published profile. With
    :func:`cost_model` and :meth:`~tltcore.drafter.dynamics.DrafterConfig.initial`, the one place a
    drafter kind is priced."""
    return kind_acceptance(s, drafter_kind)


def describe_acceptance(s: Scenario, drafter_kind: str | None = None) -> str:
    """Which acceptance prices the drafter, in words: the preset's name where it applies (what runs
    always printed), else the measured profile with its file, or the kind's published profile with its
    source, or the n-gram drafter's alpha."""
    from tltcore.drafter.kinds import drafter_kind as spec_of

    kind = drafter_kind or s.drafter.kind
    a = s.acceptance
    measured = measured_profile(a)
    if measured is not None:
        return measured.describe()
    spec = spec_of(kind)
    if spec.published(a.names_preset, False):
        assert spec.profile is not None
        return f"{kind} default: {spec.profile.label}"
    if kind == "ngram":  # its own chain, never the preset (which prices model-based drafters only)
        return f"n-gram chain, alpha {s.drafter.ngram_alpha:g} (drafter.ngram_alpha)"
    return a.preset


def cost_model(s: Scenario, drafter_kind: str | None = None):
    """The scenario's cost model (roofline with its constant overrides, a measured table, or the model
    calibrated on measured GPU profiles), for the drafter kind ``drafter_kind`` (None: ``drafter.kind``;
    see :mod:`tltcore.drafter.kinds`), on the scenario's GPU (:func:`~tltsim.scenario.schema.scenario_gpu`:
    its preset or its spec file). ``cost.model = "measured"`` prices a GPU without profiles of its own
    with the nearest measured architecture's calibration
    (:func:`tltcore.cost.measured.nearest_profile`), and falls back to the roofline when no profiles
    are found; :func:`describe_cost` says which served. Efficiencies someone set
    (:func:`~tltsim.scenario.schema.gpu_efficiencies`: ``cluster.*_efficiency``, else a spec file's)
    apply to the roofline and replace a *borrowed* calibration's fitted ones; a GPU's own measured fit
    keeps its own."""
    from tltcore.cost import RooflineCostModel, TableCostModel
    from tltcore.drafter.kinds import ModelFreeDraftCost, drafter_shape
    from tltcore.drafter.kinds import drafter_kind as spec_of
    from tltcore.model_shape import get_model

    kind = drafter_kind or s.drafter.kind
    spec = spec_of(kind)
    if s.cost.model == "table" and kind != "eagle":
        raise InputError(f"drafter kind '{kind}' needs the roofline cost model (a measured table holds one "
                         "drafter's costs)", field="drafter.kind")
    if s.cost.model == "table":
        from tltcore.cost import shape_fingerprint

        try:
            table = TableCostModel.from_file(s.cost.table)
            table.check_matches(model=shape_fingerprint(get_model(s.model.name)), device=scenario_gpu(s).name,
                                tp=s.cluster.tp)
        except InputError as exc:
            raise relocated(exc, path=exc.path, dotted="cost.table") from None
        return table
    gpu = scenario_gpu(s)
    effs = gpu_efficiencies(s)
    gpu = replace(gpu, **effs) if effs else gpu
    consts = {k: getattr(s.cost, k) for k in ("iteration_overhead_s", "draft_step_overhead_s", "sd_overhead_s",
                                               "kv_block_size") if getattr(s.cost, k) is not None}
    if s.cluster.expert_parallel:
        consts["expert_parallel"] = True
    if s.model.routing_skew:
        consts["routing_skew"] = s.model.routing_skew
    try:
        if kind == "draft-model":
            consts["drafter"] = get_model(s.drafter.draft_model)
        elif kind != "eagle" and not spec.model_free:  # eagle: the roofline's own default drafter, as always
            consts["drafter"] = drafter_shape(kind, get_model(s.model.name))
            if spec.parallel:
                consts["parallel_draft"] = True
        if s.cost.model == "measured":
            from tltcore.cost.measured import measured_cost_model

            roofline = measured_cost_model(get_model(s.model.name), gpu, s.cluster.tp,
                                           collectives=s.cost.collectives or "measured", **effs, **consts)
        else:
            roofline = RooflineCostModel(get_model(s.model.name), gpu, tp=s.cluster.tp, **consts)
        return ModelFreeDraftCost(roofline, s.drafter.ngram_lookup_s) if spec.model_free else roofline
    except InputError as exc:
        raise relocated(exc, path=None, dotted={"tp": "cluster.tp", "gpu": "cluster.gpu"}.get(
            exc.field or "", f"cost.{exc.field}" if exc.field else "model.name")) from None


def describe_cost(cost: Any) -> str:
    """Which cost model serves a run, in one line (what ``tlt sim run`` prints)."""
    from tltcore.cost import RooflineCostModel, TableCostModel
    from tltcore.cost.measured import MeasuredCostModel
    from tltcore.drafter.kinds import ModelFreeDraftCost

    inner = cost.base if isinstance(cost, ModelFreeDraftCost) else None
    note = ""
    if not isinstance(cost, RooflineCostModel | TableCostModel) and isinstance(inner, RooflineCostModel):
        cost, note = inner, " (model-free drafter)"
    if isinstance(cost, MeasuredCostModel):
        return f"cost model: {cost.source}{note}"
    if isinstance(cost, RooflineCostModel):
        return f"cost model: roofline (analytic; data-sheet peaks of {cost.gpu.name}){note}"
    if isinstance(cost, TableCostModel):
        made_by = cost.metadata.get("source") or cost.metadata.get("engine") or "measured"
        return f"cost model: table {cost.source or '(in memory)'} ({made_by})"
    return f"cost model: {type(cost).__name__}"


def _inner(cost: Any) -> Any:
    from tltcore.drafter.kinds import ModelFreeDraftCost

    return cost.base if isinstance(cost, ModelFreeDraftCost) else cost


def is_borrowed(cost: Any) -> bool:
    """Whether ``cost`` is calibrated on *another* GPU's profiles (the nearest measured architecture's,
    :func:`tltcore.cost.measured.nearest_profile`): its efficiencies are a guess, not a fit of this GPU."""
    from tltcore.cost.measured import MeasuredCostModel

    inner = _inner(cost)
    return isinstance(inner, MeasuredCostModel) and inner.calibration is not None and \
        inner.calibration.borrowed is not None


def describe_gpu(s: Scenario, cost: Any) -> str:
    """``gpu: MI300X (AMD Instinct MI300X data sheet; calibration borrowed from H100-SXM)``: the GPU, the
    source of its figures (a spec file says so) and what prices its kernels. What ``tlt sim run`` and
    ``tlt advise`` print and advise's README states."""
    from tltcore.cost import RooflineCostModel, TableCostModel
    from tltcore.cost.measured import MeasuredCostModel

    gpu = scenario_gpu(s)
    where = f"spec file: {gpu.source}" if s.cluster.gpu_spec is not None else (gpu.source or "no source")
    inner = _inner(cost)
    if isinstance(inner, MeasuredCostModel) and inner.calibration is not None:
        cal = inner.calibration
        if cal.borrowed:
            how = f"calibration borrowed from {cal.measured_on}, not measured on {gpu.name}"
        else:
            unused = ", ".join(gpu_efficiencies(s))
            how = "calibrated on its own measured profiles" + (
                f" (their fitted efficiencies, not the {unused} set)" if unused else "")
    elif isinstance(inner, TableCostModel):
        how = "priced by a measured table"
    elif isinstance(inner, RooflineCostModel):
        set_ = gpu_efficiencies(s)
        how = ("roofline at its data-sheet peaks, " + (", ".join(f"{k} {v:g}" for k, v in set_.items()) + " set"
               if set_ else "typical efficiencies"))
    else:
        how = type(inner).__name__
    return f"gpu: {gpu.name} ({where}; {how})"


def is_calibrated(cost: Any) -> bool:
    """Whether the model calibrated on measured GPU profiles prices ``cost`` (under a model-free
    drafter's wrapper too), not the roofline it falls back to nor a measured table."""
    from tltcore.cost.measured import MeasuredCostModel
    from tltcore.drafter.kinds import ModelFreeDraftCost

    inner = cost.base if isinstance(cost, ModelFreeDraftCost) else cost
    return isinstance(inner, MeasuredCostModel) and inner.calibration is not None


def cost_fingerprint(s: Scenario) -> str:
    """What decides a ``cost.model = "measured"`` run's costs beyond its scenario: the calibration's
    one-line description (fitted constants, collectives) or the roofline fallback's reason."""
    try:
        return describe_cost(cost_model(s))
    except InputError as exc:  # prepare() reports it in context; the hash only needs to differ
        return f"unbuildable: {exc.message}"


def prepare(s: Scenario) -> SimInputs:
    """Resolve names into models, load the workloads and check that every request fits a worker's
    KV cache before anything runs."""
    from tltcore.model_shape import get_model
    from tltsim.rl.gpu_memory import kv_capacity_tokens
    from tltsim.rollout import EngineConfig

    model, gpu = get_model(s.model.name), scenario_gpu(s)
    cost = cost_model(s)
    kv = kv_capacity_tokens(model, gpu, s.cluster.tp, s.engine.kv_mem_fraction, graph_memory_bytes(s))
    if kv < 1:
        raise InputError(f"{model.name}'s weights leave no room for a KV cache on {s.cluster.tp} x {gpu.name}; "
                         "raise cluster.tp or engine.kv_mem_fraction", field="cluster.tp")
    workloads = load_steps(s.trace)
    for w in workloads:
        need = int((w.prompt_tokens + w.response_tokens).max()) if w.n_requests else 0
        if need > kv:
            raise InputError(
                f"a response of step {w.step} needs {need:,} KV tokens (prompt + response) but a rollout worker "
                f"({s.cluster.tp} x {gpu.name}, {s.engine.kv_mem_fraction:.0%} of memory) holds {kv:,}; raise "
                "cluster.tp (more GPUs per worker) or engine.kv_mem_fraction, or set trace.cap", field="cluster.tp")
    engine = EngineConfig.of(s.engine, kv_capacity_tokens=kv, acceptance_mode=s.acceptance.mode,
                             mixed_prefill=s.engine.mixed_prefill)
    return SimInputs(scenario=s, workloads=workloads, cost=cost, accept=drafter_acceptance(s),
                     engine=engine, drafter=s.drafter.initial())


def graph_memory_bytes(s: Scenario) -> float:
    """Per-GPU bytes of the rollout engine's CUDA graphs under ``engine.cuda_graphs``."""
    from tltcore.model_shape import get_model
    from tltsim.rl.gpu_memory import PAPER_ARMS, cuda_graph_bytes

    mode = s.engine.cuda_graphs
    if mode == "none":
        return 0.0
    strategies = None if mode == "decode" else PAPER_ARMS
    return cuda_graph_bytes(get_model(s.model.name), s.cluster.tp, strategies, "naive" if mode == "decode" else mode)


def make_policies(spec: PolicyBase | str, inputs: SimInputs) -> list[Any]:
    """One fresh policy per worker, seeded from (scenario seed, worker); text is parsed once here."""
    from tltcore.policy.registry import make_policy

    cap, typed = inputs.response_cap, as_spec(spec)
    return [make_policy(typed, seed=inputs.scenario.seed * 1_000_003 + w, accept_model=inputs.accept,
                        cost_model=inputs.cost, switch=inputs.scenario.engine.switch, response_cap=cap)
            for w in range(inputs.n_workers)]
