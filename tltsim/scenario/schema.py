"""The scenario's schema: one frozen pydantic model per section, constraints on the fields.

Every section is the class the runtime code takes as it is: ``drafter`` is
:class:`~tltcore.drafter.dynamics.DrafterConfig` (which also moves the drafter's quality), ``spot``
the analytic Spot Trainer's :class:`~tltsim.spot.analytic_trainer.SpotTrainerConfig`, ``rl`` the RL
phase model's :class:`~tltsim.rl.phases.RLPhaseConfig`, ``engine`` an
:class:`~tltcore.engine_limits.EngineLimits` (plus the simulation's memory, CUDA-graph and
mixed-prefill settings). Ranges and choices are declared on the fields (``Field(ge=, le=)``,
``Literal``), combinations in validators; what needs the world (presets, model and GPU names, files,
policy specs) is :func:`check_names`, run by the scenario's own validator, so a :class:`Scenario`
that exists is valid.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.dataclasses import dataclass as config_dataclass

from tltcore.config import MAX_GPUS, ConfigModel, Float, Int, Str, strip_strings
from tltcore.drafter.dynamics import DEFAULT_STALE_QUALITY, DrafterConfig
from tltcore.engine_limits import EngineLimits
from tltcore.errors import InputError
from tltcore.gpu_spec import GPUSheet
from tltcore.hardware import GPUSpec
from tltcore.policy.spec import AnySpec, PolicySpec, parse_policy
from tltsim.rl.phases import RLPhaseConfig
from tltsim.spot.analytic_trainer import SpotTrainerConfig

DEFAULT_TRACE = "r1distill_qwen1.5b_aime_8samples"
#: The policies a scenario compares when it names none, as the shorthand a scenario file would give.
DEFAULT_POLICY_NAMES = ("no-sd", "elastic+beg-mab")
DEFAULT_POLICIES: tuple[AnySpec, ...] = tuple(parse_policy(name) for name in DEFAULT_POLICY_NAMES)
BASELINE_POLICY = "no-sd"

# Bounds checked before anything is built from a number (a GPU count of 10^12 must not allocate).
MAX_TP = 1024
MAX_BATCH = 1_000_000
MAX_PREFILL_BUDGET = 10**8
MAX_STEPS = 10_000  # ~0.1 s per small step and policy: 10^4 steps is already tens of minutes
MAX_PROMPTS = 10**7
MAX_WORKERS = 65_536  # rollout workers (gpus / tp); each costs milliseconds even when it gets no prompt
MAX_RESPONSES = 10**7  # responses over all simulated steps, checked before any step is built
MAX_SEED = 2**63 - 1
CUDA_GRAPH_MODES = ("none", "decode", "naive", "bucketed")

DealMode = Literal["shuffle", "trace"]  # tltcore.dealing.DEAL_MODES
SwitchMode = Literal["reprefill", "catch_up", "in_step"]  # tltcore.engine_limits.SWITCH_MODES
AcceptanceMode = Literal["expected", "stochastic"]  # tltsim.rollout.ACCEPTANCE_MODES
CudaGraphMode = Literal["none", "decode", "naive", "bucketed"]


def _trace_map(value: Any) -> Any:
    """``trace.map`` as ``{canonical: spec}``, checked: a table (scenario file), or text as ``--set
    trace.map=...`` gives it (``response_tokens=len,hit_cap=finish_reason:length``, or a TOML inline
    table). An empty table is None: no mapping, and the resolved scenario (hash) stays as without."""
    from tltsim.traces.mapping import check_mapping, parse_mapping

    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            import tomllib

            try:
                value = tomllib.loads(f"v = {text}")["v"]
            except tomllib.TOMLDecodeError as exc:
                raise InputError(f"not a valid TOML inline table ({exc})", field="trace.map") from None
        else:
            return parse_mapping([p for p in text.split(",") if p.strip()], field="trace.map") or None
    if isinstance(value, dict):
        return {k: m.text for k, m in check_mapping(value, field="trace.map").items()} or None
    return value  # None, or a wrong type pydantic names


class TraceSection(ConfigModel):
    """Which responses the RL steps must generate.

    ``name``: a catalog name, a file on the trace search path, or a path (relative paths are taken
    relative to the scenario file when a file exists there). ``step``: the first trace step to
    simulate (None: the first); ``num_steps``: how many consecutive steps. ``source`` keeps only rows
    whose ``source`` column equals it. ``prompts_per_step``, ``samples``, ``expand_samples``
    (with ``dispersion_sigma``), ``cap`` and ``snap_capped`` reshape the steps (see
    ``tltsim.traces.workload``); ``deal``: ``shuffle`` (a data loader's seeded shuffle, the default)
    or ``trace`` (trace order) decides which worker serves which prompt group.

    ``map`` (``trace.map``): a foreign file's columns as canonical ones, ``{response_tokens =
    "response_length", hit_cap = "finish_reason:length"}`` (syntax: :mod:`tltsim.traces.mapping`;
    ``--map`` on the command line sets it). ``tokenizer``: a ``tokenizer.json`` (or its folder) that
    counts the tokens of a rollout dump holding text only (verl's). Both default to None, which the
    resolved scenario leaves out, so scenarios without them keep their hash.

    ``seed`` (``trace.seed``) decides *which responses* make up the workload, and nothing else: the
    prompt groups ``prompts_per_step`` samples, the siblings ``expand_samples`` draws and the rows a
    parametric profile generates. A trace used whole draws nothing, so ``trace.seed`` changes
    nothing there (``tlt sim run`` warns). Dealing groups to workers, stochastic acceptance and the
    policies' exploration follow the scenario's top-level ``seed``.
    """

    SECTION = "trace"

    name: Str = DEFAULT_TRACE
    step: Int | None = Field(None, ge=0, le=10**9)
    num_steps: Int = Field(1, ge=1, le=MAX_STEPS)
    source: Str | None = None
    prompts_per_step: Int | None = Field(None, ge=1, le=MAX_PROMPTS)
    samples: Int | None = Field(None, ge=1, le=1024)
    expand_samples: Int | None = Field(None, ge=1, le=1024)
    dispersion_sigma: Float = Field(0.33, ge=0, le=5)
    cap: Int | None = Field(None, ge=1, le=10**7)
    snap_capped: bool = Field(True, strict=True)
    default_prompt_tokens: Int = Field(128, ge=0, le=10**7)
    deal: DealMode = "shuffle"
    seed: Int = Field(0, ge=0, le=MAX_SEED)
    map: Annotated[dict[str, str] | None, BeforeValidator(_trace_map)] = None
    tokenizer: Str | None = None


class ModelSection(ConfigModel):
    """Target model: a preset name (``Qwen2.5-7B``), a hub id of the bundled catalog
    (``Qwen/Qwen3-30B-A3B``, ``tlt model list``) or a path to an HF ``config.json``.

    ``routing_skew`` (MoE models only; None: 0, uniform routing): how unevenly the router spreads tokens
    over experts, as the exponent of a Zipf popularity (:mod:`tltcore.cost.moe`). Real routers are neither
    uniform nor Zipf and nobody measured yours, so ``tlt advise`` varies it."""

    SECTION = "model"

    name: Str = "Qwen2.5-7B"
    routing_skew: Float | None = Field(None, ge=0, le=8)


def _gpu_sheet(value: Any) -> Any:
    """A ``cluster.gpu_spec`` given as a path: the file's validated content (errors name the file)."""
    if isinstance(value, str):
        from tltcore.gpu_spec import load_gpu_sheet

        try:
            return load_gpu_sheet(value)
        except InputError as exc:
            if exc.field is not None:
                raise
            # the file itself is wrong (missing, a folder, not TOML): name it and the field that named it
            raise InputError(exc.message, path=exc.path, row=exc.row, field="cluster.gpu_spec") from None
    return value


GPUSheetField = Annotated[GPUSheet | None, BeforeValidator(_gpu_sheet)]


class ClusterSection(ConfigModel):
    """``gpus`` GPUs of one kind, split into ``gpus / tp`` rollout workers.

    ``gpu`` names a preset (:func:`tltcore.hardware.get_gpu`); ``gpu_spec`` describes any GPU by its
    data sheet instead (:class:`~tltcore.gpu_spec.GPUSheet`: a path to a spec file, relative to the
    scenario file as trace paths are, or an inline table). The scenario keeps the spec's content, not
    its path, so ``scenario.resolved.toml`` reruns anywhere and the scenario hash follows the file;
    with a spec, ``gpu`` is its name. The efficiencies override the achieved fractions of peak FLOP/s
    and HBM bandwidth (None: the preset's, the spec's, or for a GPU priced from another GPU's
    calibration the borrowed fit's; a GPU's own measured fit keeps its own).

    ``expert_parallel`` (MoE models; None: off): each worker places its routed experts whole over its
    ``tp`` GPUs and dispatches tokens to them by all-to-all, instead of slicing every expert over the
    TP group (:mod:`tltcore.cost.moe`).

    ``usd_per_gpu_hour`` (None: the bundled on-demand list price, :mod:`tltcore.prices`) prices the
    GPU-hours ``tlt advise`` and ``tlt sim run`` print; ``usd_per_kwh`` (None: no energy cost) prices
    their energy. Neither changes a simulation; None keeps every existing scenario's hash."""

    SECTION = "cluster"

    gpu: Str = "H100"
    gpus: Int = Field(64, ge=1, le=MAX_GPUS)
    tp: Int = Field(4, ge=1, le=MAX_TP)
    flops_efficiency: Float | None = Field(None, ge=1e-3, le=1)
    bandwidth_efficiency: Float | None = Field(None, ge=1e-3, le=1)
    gpu_spec: GPUSheetField = None
    expert_parallel: bool | None = Field(None, strict=True)
    usd_per_gpu_hour: Float | None = Field(None, gt=0, le=1000)
    usd_per_kwh: Float | None = Field(None, gt=0, le=10)

    @model_validator(mode="before")
    @classmethod
    def _spec_names_the_gpu(cls, data: Any) -> Any:
        """With a GPU spec, ``gpu`` is the spec's name: refused when it names another GPU (which of
        the two is meant would be a guess)."""
        if not isinstance(data, dict) or data.get("gpu_spec") is None:
            return data
        sheet = _gpu_sheet(data["gpu_spec"])
        name = sheet.name if isinstance(sheet, GPUSheet) else (
            sheet.get("name") if isinstance(sheet, dict) else None)
        gpu = data.get("gpu")
        if isinstance(name, str) and isinstance(gpu, str) and gpu.strip() != name.strip():
            raise InputError(f"'{gpu}' is not the GPU spec's name '{name.strip()}': cluster.gpu names a preset and "
                             "cluster.gpu_spec describes a GPU by its data sheet; give one of them", field="gpu")
        out = {**data, "gpu_spec": sheet}
        if isinstance(name, str):
            out["gpu"] = name
        return out

    @model_validator(mode="after")
    def _layout(self) -> ClusterSection:
        if self.gpus % self.tp:
            raise InputError(f"gpus={self.gpus} is not divisible by tp={self.tp}", field="gpus")
        if self.n_workers > MAX_WORKERS:
            raise InputError(f"gpus / tp = {self.n_workers:,} rollout workers; the simulator takes at most "
                             f"{MAX_WORKERS:,} (raise cluster.tp or lower cluster.gpus)", field="gpus")
        return self

    @property
    def n_workers(self) -> int:
        return self.gpus // self.tp


@config_dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class EngineSection(EngineLimits):
    """Per-worker engine limits (veRL's vLLM rollout defaults) and how SD switches on: the shared
    :class:`~tltcore.engine_limits.EngineLimits` themselves, with the scenario's defaults, plus what
    only the simulation has.

    ``max_batch``: running requests per worker (``max_num_seqs``); ``kv_mem_fraction``: share of GPU
    memory for weights + KV (``gpu_memory_utilization``), which sets the KV admission limit;
    ``prefill_budget``: tokens per prefill pass (``max_num_batched_tokens``). ``switch``:
    ``reprefill`` (TLT: live requests re-prefilled through target and drafter, in passes of
    ``switch_prefill_fraction`` of the budget) or ``catch_up`` (the native engine: a drafter-only
    pass) or ``in_step`` (vLLM: the drafter runs every iteration, so the switch costs nothing extra);
    ``catch_up_limit``: tokens a request's drafter may miss before it is caught up apart;
    ``mixed_prefill``: requests admitted while others decode join the decode iteration (as vLLM
    schedules them) and pay only their marginal prefill cost. ``cuda_graphs``: what the engine's
    captured CUDA graphs take from the KV cache (:func:`tltsim.rl.gpu_memory.cuda_graph_bytes`): ``none``
    (not modelled), ``decode`` (plain decode graphs only), ``naive`` (BEG-MAB's four tree strategies
    captured at every SD batch size) or ``bucketed`` (TLT: each only for its bucket).
    """

    SECTION: ClassVar[str] = "engine"
    #: The order scenario files (and so scenario hashes) have always listed the fields in; the
    #: inherited limits come first in the class.
    FIELD_ORDER: ClassVar[tuple[str, ...]] = ("max_batch", "kv_mem_fraction", "prefill_budget", "switch",
                                              "switch_prefill_fraction", "catch_up_limit", "mixed_prefill",
                                              "cuda_graphs")

    max_batch: Int = Field(1024, ge=1, le=MAX_BATCH)
    prefill_budget: Int = Field(8192, ge=1, le=MAX_PREFILL_BUDGET)
    switch: SwitchMode = "reprefill"
    switch_prefill_fraction: Float = Field(0.25, gt=0, le=1)
    catch_up_limit: Int = Field(16, ge=1, le=10**7)
    kv_mem_fraction: Float = Field(0.9, gt=0, le=1)
    mixed_prefill: bool = Field(False, strict=True)
    cuda_graphs: CudaGraphMode = "none"

    @model_validator(mode="before")
    @classmethod
    def _strip(cls, data: Any) -> Any:
        return strip_strings(data)


class CostSection(ConfigModel):
    """The cost model. ``model``: ``measured`` (the default: kernels calibrated on measured GPU
    profiles, :mod:`tltcore.cost.measured`, where the GPU has them -- H100, A100, A40 -- and the
    analytic roofline elsewhere; every run says which served), ``roofline`` (analytic, from the data
    sheet, on every GPU) or ``table`` (measured times from the CSV at ``table``). The calibrated model
    is the default because on the GPUs it covers its per-layer error is 3-4% against the roofline's
    9-24%. The constants override the roofline's defaults (None: default); see
    ``tltcore.cost.roofline``; they apply to ``measured`` too.

    ``collectives`` (``measured`` model only): the TP all-reduce times. None means ``measured`` (the
    node's measured NCCL table): the default because it is the only collective time here that was
    measured, and it is the default of ``tlt cost build`` too, so a scenario and a table built for it
    price the same iteration alike. ``analytic`` (latency + ring bandwidth from the data sheet) is
    closer for engines that run a custom all-reduce inside CUDA graphs (vLLM, SGLang) at small
    messages. None rather than a written default keeps every existing scenario's resolved TOML,
    hence its hash, unchanged."""

    SECTION = "cost"

    model: Literal["roofline", "table", "measured"] = "measured"
    table: Str | None = None
    collectives: Literal["measured", "analytic"] | None = None
    iteration_overhead_s: Float | None = Field(None, ge=0, le=10)
    draft_step_overhead_s: Float | None = Field(None, ge=0, le=10)
    sd_overhead_s: Float | None = Field(None, ge=0, le=10)
    kv_block_size: Int | None = Field(None, ge=1, le=4096)

    @model_validator(mode="after")
    def _table(self) -> CostSection:
        if self.model == "table" and self.table is None:
            raise InputError("cost.model = 'table' needs cost.table = PATH to a calibration table", field="table")
        if self.collectives is not None and self.model != "measured":
            raise InputError(f"applies to cost.model = 'measured' only (this scenario's is '{self.model}')",
                             field="collectives")
        return self


_PROBABILITY = Annotated[float, Field(allow_inf_nan=False, strict=True)]
#: Tree-model parameters an acceptance section may override.
TREE_PARAMS = ("coverage", "rank_ratio", "depth_decay", "depth_power")


class AcceptanceSection(ConfigModel):
    """Acceptance preset, whether SD iterations emit the expected or a sampled accept length, and
    optional overrides of the tree model's parameters (None: the preset's).

    A measured per-position profile replaces the preset (and a drafter kind's published default,
    :mod:`tltcore.drafter.kinds`) for every kind: ``profile`` names a file (TOML/JSON/CSV list of
    conditional ``alphas`` or per-position ``rates``, or vLLM's Prometheus metrics text;
    :mod:`tltcore.acceptance_profile`), ``alphas`` gives the conditional list inline. One of the two,
    and then no preset or tree parameter of its own (two acceptance models for one drafter). None
    keeps every existing scenario's resolved TOML, hence its hash, unchanged."""

    SECTION = "acceptance"

    preset: Str = "paper-qwen32b"
    mode: AcceptanceMode = "expected"
    coverage: Float | None = Field(None, ge=0, le=1)
    rank_ratio: Float | None = Field(None, ge=0, le=1)
    depth_decay: Float | None = Field(None, ge=0, le=100)
    depth_power: Float | None = Field(None, ge=0, le=100)
    profile: Str | None = None
    alphas: tuple[_PROBABILITY, ...] | None = None

    @field_validator("alphas")
    @classmethod
    def _alphas(cls, v: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if v is None:
            return v
        if not v:
            raise InputError("must hold at least one probability (or leave it out)")
        for i, x in enumerate(v):
            if not 0 <= x <= 1:
                raise InputError(f"position {i + 1} is {x:g}, not a probability in [0, 1]")
        return v

    @model_validator(mode="after")
    def _one_model(self) -> AcceptanceSection:
        measured = [k for k in ("profile", "alphas") if getattr(self, k) is not None]
        if len(measured) > 1:
            raise InputError("acceptance.profile and acceptance.alphas both give a measured profile; give one",
                             field="alphas")
        if measured:
            own = [k for k in TREE_PARAMS if getattr(self, k) is not None]
            if self.preset != AcceptanceSection.model_fields["preset"].default:
                own.insert(0, "preset")
            if own:
                raise InputError(f"acceptance.{measured[0]} is a measured profile; acceptance.{own[0]} names another "
                                 "acceptance model for the same drafter: give one", field=own[0])
        return self

    @property
    def measured(self) -> bool:
        """Whether a measured profile (``profile`` or ``alphas``) prices the drafter."""
        return self.profile is not None or self.alphas is not None

    @property
    def names_preset(self) -> bool:
        """Whether the section names an acceptance model of its own (a preset other than the default, or
        tree parameters): then it applies to every model-based drafter kind, not only ``eagle``."""
        return (self.preset != AcceptanceSection.model_fields["preset"].default
                or any(getattr(self, k) is not None for k in TREE_PARAMS))


def acceptance_model(a: AcceptanceSection) -> Any:
    """The acceptance preset with the section's parameter overrides applied: here, beside the
    section, because the scenario's own check (:func:`check_names`) builds it too."""
    from dataclasses import replace

    from tltcore.acceptance import TreeAcceptance, get_acceptance

    model = get_acceptance(a.preset)
    overrides = {k: getattr(a, k) for k in TREE_PARAMS if getattr(a, k) is not None}
    if not overrides:
        return model
    if not isinstance(model, TreeAcceptance):
        raise InputError(f"parameter overrides apply to tree presets; '{a.preset}' is a chain model",
                         field="acceptance.preset")
    return replace(model, **overrides)


class Scenario(ConfigModel):
    """Everything one ``tlt sim run`` needs. ``policies`` always gets ``no-sd`` as baseline; each is a
    typed spec (:mod:`tltcore.policy.spec`), given as its shorthand text (``"elastic:16+beg-mab"``) or
    as a table (``{kind = "elastic", threshold = 16, inner = {kind = "beg-mab"}}``), and its fields
    have dotted paths (``policies.1.threshold``, :mod:`~tltsim.scenario.policy_paths`).
    With ``presets`` (:mod:`tltsim.rl.presets`) the run is whole RL steps instead (rollout, drafter
    training, reward, log-probs, actor update, weight sync), ``verl`` is the baseline and
    ``policies`` is not used (each preset names its own SD policy).

    ``presets_policy`` (None: each preset's own) replaces TLT's ``elastic+beg-mab`` rollout in the
    presets that differ only in drafter upkeep (:func:`tltsim.rl.presets.rollout_policy`): how to keep
    the drafter fresh compared under the SD setting a user will run.

    ``seed`` is the simulation's seed: which worker serves which prompt group (``trace.deal =
    "shuffle"``), the stochastic accept lengths and the policies' own randomness. It never changes
    which responses are simulated; that is ``trace.seed``."""

    trace: TraceSection = Field(default_factory=TraceSection)
    model: ModelSection = Field(default_factory=ModelSection)
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    engine: EngineSection = Field(default_factory=EngineSection)
    cost: CostSection = Field(default_factory=CostSection)
    acceptance: AcceptanceSection = Field(default_factory=AcceptanceSection)
    drafter: DrafterConfig = Field(default_factory=DrafterConfig)
    spot: SpotTrainerConfig = Field(default_factory=SpotTrainerConfig)
    rl: RLPhaseConfig = Field(default_factory=RLPhaseConfig)
    policies: tuple[PolicySpec, ...] = DEFAULT_POLICIES
    presets: tuple[Str, ...] = ()
    presets_policy: PolicySpec | None = None
    seed: Int = Field(0, ge=0, le=MAX_SEED)

    @property
    def n_workers(self) -> int:
        return self.cluster.gpus // self.cluster.tp

    @model_validator(mode="after")
    def _combinations(self) -> Scenario:
        sp = self.spot
        if sp.min_workers > self.n_workers:
            raise InputError(f"{sp.min_workers:,} released workers can never gather: the cluster has "
                             f"{self.n_workers:,} rollout workers (cluster.gpus / cluster.tp = {self.cluster.gpus} / "
                             f"{self.cluster.tp}), so the Spot Trainer would train 0 samples", field="spot.min_workers")
        if not self.policies:
            raise InputError("needs at least one policy spec", field="policies")
        check_names(self)
        return self


def cluster_gpu(c: ClusterSection) -> GPUSpec:
    """The cluster's GPU: its ``gpu_spec`` when it has one, else the preset ``gpu``. The one place a
    scenario's GPU is resolved (everything that prices or sizes on the scenario's GPU calls this or
    :func:`scenario_gpu`). ``cluster.*_efficiency`` are not applied here: the cost model decides
    what they override (:func:`tltsim.scenario.build.cost_model`)."""
    if c.gpu_spec is not None:
        return c.gpu_spec.to_spec()
    from tltcore.hardware import get_gpu

    return get_gpu(c.gpu)


def scenario_gpu(s: Scenario) -> GPUSpec:
    """:func:`cluster_gpu` of the scenario's cluster."""
    return cluster_gpu(s.cluster)


def gpu_efficiencies(s: Scenario) -> dict[str, float]:
    """The efficiencies someone *set* for the scenario's GPU: ``cluster.*_efficiency``, else the ones
    its spec file gives (a spec's measured fraction of peak), by field name; the defaults are not here."""
    sheet = s.cluster.gpu_spec
    out = {}
    for name in ("flops_efficiency", "bandwidth_efficiency"):
        value = getattr(s.cluster, name)
        if value is None and sheet is not None:
            value = getattr(sheet, name)
        if value is not None:
            out[name] = value
    return out


def relocated(exc: InputError, *, path: str | None, dotted: str) -> InputError:
    """``exc`` re-located at the scenario field ``dotted`` (its own location prefix dropped)."""
    text = str(exc)
    where = [str(exc.path)] if exc.path is not None else []
    if exc.row is not None:
        where.append(f"row {exc.row}")
    if exc.field is not None:
        where.append(f"field '{exc.field}'")
    prefix = ", ".join(where) + ": " if where else ""
    bare = text[len(prefix):] if prefix and text.startswith(prefix) else text
    return InputError(bare, path=path, field=dotted)


def relocated_model(exc: InputError, *, dotted: str) -> InputError:
    """A model's error as its reader said it -- the ``config.json`` and the key in it -- with the
    scenario field that named the model at the end (``..., field 'foo': is not supported ... (scenario
    field model.name)``); an error that names no file (an unknown name) is :func:`relocated` there."""
    if exc.path is None:
        return relocated(exc, path=None, dotted=dotted)
    return InputError(f"{exc.message} (scenario field {dotted})", path=exc.path, field=exc.field)


def measured_profile(a: AcceptanceSection) -> Any:
    """The measured profile the section gives (:class:`tltcore.acceptance_profile.MeasuredProfile`:
    read from ``acceptance.profile``, or ``acceptance.alphas`` inline), or None."""
    from tltcore.acceptance_profile import MeasuredProfile, load_acceptance_profile

    if a.profile is not None:
        return load_acceptance_profile(a.profile)
    if a.alphas is not None:
        return MeasuredProfile(tuple(a.alphas), "acceptance.alphas", "alphas")
    return None


def kind_acceptance(s: Scenario, kind: str | None = None) -> Any:
    """The acceptance model a drafter of ``kind`` (None: ``drafter.kind``) is priced with under ``s``:
    :func:`tltcore.drafter.kinds.drafter_acceptance` decides between the measured profile, the n-gram
    chain, the section's preset and the kind's published profile. Here, beside the section, because
    the scenario's own check builds it too."""
    from tltcore.drafter.kinds import drafter_acceptance

    a = s.acceptance
    measured = measured_profile(a)
    preset = acceptance_model(a) if measured is None else None
    return drafter_acceptance(kind or s.drafter.kind, s.drafter.ngram_alpha, preset, preset_named=a.names_preset,
                              measured=measured.model() if measured is not None else None)


def check_names(s: Scenario) -> None:
    """What the fields' own constraints cannot see: the files named (no FIFO or device), the GPU,
    model and draft-model presets, the layout against the model (heads, weights vs memory), the
    presets, and the acceptance the drafter is priced with (a measured profile read and checked, the
    preset with its overrides) against the drafter's quality. Cheap: builds no workload and no cost model."""
    from tltcore.drafter.kinds import ngram_acceptance
    from tltcore.model_shape import get_model
    from tltsim.rl.presets import get_preset

    _check_paths(s)
    c, e, d = s.cluster, s.engine, s.drafter
    try:
        ngram_acceptance(d.ngram_alpha)
        for name in s.presets:
            get_preset(name)
    except InputError as exc:
        raise relocated(exc, path=None, dotted=exc.field or "presets") from None
    try:
        get_model(d.draft_model)
    except InputError as exc:
        raise relocated_model(exc, dotted="drafter.draft_model") from None
    try:
        gpu = cluster_gpu(c)
    except InputError as exc:
        raise relocated(exc, path=None, dotted="cluster.gpu") from None
    try:
        model = get_model(s.model.name)
    except InputError as exc:
        raise relocated_model(exc, dotted="model.name") from None
    if (c.expert_parallel or s.model.routing_skew) and model.moe is None:
        field = "cluster.expert_parallel" if c.expert_parallel else "model.routing_skew"
        raise InputError(f"applies to mixture-of-experts models; {model.name} is dense", field=field)
    if model.num_attention_heads % c.tp:
        raise InputError(f"tp={c.tp} must divide the {model.num_attention_heads} attention heads of "
                         f"{model.name}", field="cluster.tp")
    weights = model.weight_bytes / c.tp
    if weights >= e.kv_mem_fraction * gpu.memory_bytes:
        raise InputError(
            f"{model.name} needs {weights / 1e9:.1f} GB of weights per GPU at tp={c.tp}, more than "
            f"{e.kv_mem_fraction:.0%} of {gpu.name}'s {gpu.memory_bytes / 1e9:.0f} GB; raise cluster.tp",
            field="cluster.tp")
    try:
        measured_profile(s.acceptance)
    except InputError as exc:  # the file and its field inside the message: validation keeps only the field
        raise InputError(str(exc), field="acceptance.profile") from None
    try:
        kind_acceptance(s).check_drafter(d.initial())
    except InputError as exc:
        dotted = f"acceptance.{exc.field}" if exc.field in TREE_PARAMS else (
            "drafter.quality" if exc.field == "drafter.quality" else "acceptance.preset")
        raise relocated(exc, path=None, dotted=dotted) from None


def _check_paths(s: Scenario) -> None:
    """Refuse a FIFO, a device or a socket where a file is read (trace, model config, cost table):
    reading one would hang on a pipe nobody writes or never end on ``/dev/zero``."""
    import stat
    from pathlib import Path

    from tltcore.input_files import file_kind

    for dotted, name in (("trace.name", s.trace.name), ("trace.tokenizer", s.trace.tokenizer),
                         ("model.name", s.model.name), ("cost.table", s.cost.table),
                         ("acceptance.profile", s.acceptance.profile)):
        if name is None:
            continue
        try:
            mode = Path(name).expanduser().stat().st_mode
        except (OSError, ValueError):
            continue  # not a path (a catalog or preset name) or unreadable: the reader says which
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InputError(f"'{name}' is {file_kind(mode)}, not a regular file: reading it would block or never "
                             "end", field=dotted)


__all__ = [
    "BASELINE_POLICY",
    "CUDA_GRAPH_MODES",
    "DEFAULT_POLICIES",
    "DEFAULT_POLICY_NAMES",
    "DEFAULT_STALE_QUALITY",
    "DEFAULT_TRACE",
    "MAX_BATCH",
    "MAX_PREFILL_BUDGET",
    "MAX_PROMPTS",
    "MAX_RESPONSES",
    "MAX_SEED",
    "MAX_STEPS",
    "MAX_TP",
    "MAX_WORKERS",
    "TREE_PARAMS",
    "AcceptanceSection",
    "ClusterSection",
    "CostSection",
    "DrafterConfig",
    "EngineSection",
    "ModelSection",
    "RLPhaseConfig",
    "Scenario",
    "SpotTrainerConfig",
    "TraceSection",
    "acceptance_model",
    "check_names",
    "cluster_gpu",
    "gpu_efficiencies",
    "kind_acceptance",
    "measured_profile",
    "relocated",
    "scenario_gpu",
]
