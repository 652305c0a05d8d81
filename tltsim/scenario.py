"""Scenarios: what to simulate, as a typed tree of frozen dataclasses loaded from TOML.

A scenario names the trace steps, the model, the cluster layout, the engine limits, the cost and
acceptance models, the drafter, the SD policies to compare and a seed. Every field has a dotted path
(``cluster.tp``, ``cost.sd_overhead_s``, ``policies``) used in error messages, by ``--set`` and by
sweeps; the generic machinery (parsing, overrides, TOML) is :mod:`tltcore.config_tree`, this module
is the schema, its validation and the step from a scenario to simulation inputs.

Every model constant a user may question is a field: GPU efficiencies, SD overheads, the switch
re-prefill budget fraction, the drafter's quality, the acceptance parameters. Scenarios (plain
frozen dataclasses), never closures, cross process boundaries: a worker process rebuilds its inputs
with :func:`prepare`.

Defaults (a scenario file may be empty) show the long tail on a real trace: all 4,768 AIME
responses of ``r1distill_qwen1.5b_aime_8samples`` (596 prompts x 8, up to 16K tokens) as one RL
step, Qwen2.5-7B on 64 H100 with TP 4 (16 rollout workers), the veRL engine limits
(``max_num_seqs`` 1024, ``gpu_memory_utilization`` 0.9, ``max_num_batched_tokens`` 8192), ``no-sd``
vs ``elastic+beg-mab``, the paper-fitted tree acceptance in expected-value mode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from tltcore import config_tree
from tltcore.errors import InputError

DEFAULT_TRACE = "r1distill_qwen1.5b_aime_8samples"
DEFAULT_POLICIES = ("no-sd", "elastic+beg-mab")
BASELINE_POLICY = "no-sd"

# Bounds checked before anything is built from a number (a GPU count of 10^12 must not allocate).
MAX_GPUS = 1_000_000
MAX_TP = 1024
MAX_BATCH = 1_000_000
MAX_PREFILL_BUDGET = 10**8
MAX_STEPS = 10_000  # ~0.1 s per small step and policy: 10^4 steps is already tens of minutes
MAX_PROMPTS = 10**7
MAX_WORKERS = 65_536  # rollout workers (gpus / tp); each costs milliseconds even when it gets no prompt
MAX_RESPONSES = 10**7  # responses over all simulated steps, checked before any step is built
MAX_SECONDS = 3600.0  # any per-sample, per-checkpoint or per-sync time: an hour is already absurd
MAX_SEED = 2**63 - 1
CUDA_GRAPH_MODES = ("none", "decode", "naive", "bucketed")


@dataclass(frozen=True)
class TraceSection:
    """Which responses the RL steps must generate.

    ``name``: a catalog name, a file on the trace search path, or a path (relative paths are taken
    relative to the scenario file when a file exists there). ``step``: the first trace step to
    simulate (None: the first); ``num_steps``: how many consecutive steps. ``source`` keeps only rows
    whose ``source`` column equals it. ``prompts_per_step``, ``samples``, ``expand_samples``
    (with ``dispersion_sigma``), ``cap`` and ``snap_capped`` reshape the steps (see
    ``tltsim.traces.workload``); ``deal``: ``shuffle`` (a data loader's seeded shuffle, the default)
    or ``trace`` (trace order) decides which worker serves which prompt group.

    ``seed`` (``trace.seed``) decides *which responses* make up the workload, and nothing else: the
    prompt groups ``prompts_per_step`` samples, the siblings ``expand_samples`` draws and the rows a
    parametric profile generates. A trace used whole draws nothing, so ``trace.seed`` changes
    nothing there (``tlt sim run`` warns). Dealing groups to workers, stochastic acceptance and the
    policies' exploration follow the scenario's top-level ``seed``.
    """

    name: str = DEFAULT_TRACE
    step: int | None = None
    num_steps: int = 1
    source: str | None = None
    prompts_per_step: int | None = None
    samples: int | None = None
    expand_samples: int | None = None
    dispersion_sigma: float = 0.33
    cap: int | None = None
    snap_capped: bool = True
    default_prompt_tokens: int = 128
    deal: str = "shuffle"
    seed: int = 0


@dataclass(frozen=True)
class ModelSection:
    """Target model: a preset name (``Qwen2.5-7B``) or a path to an HF ``config.json``."""

    name: str = "Qwen2.5-7B"


@dataclass(frozen=True)
class ClusterSection:
    """``gpus`` GPUs of one kind, split into ``gpus / tp`` rollout workers. The efficiencies
    override the GPU preset's achieved fractions of peak FLOP/s and HBM bandwidth (None: preset)."""

    gpu: str = "H100"
    gpus: int = 64
    tp: int = 4
    flops_efficiency: float | None = None
    bandwidth_efficiency: float | None = None


@dataclass(frozen=True)
class EngineSection:
    """Per-worker engine limits (veRL's vLLM rollout defaults) and how SD switches on.

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

    max_batch: int = 1024
    kv_mem_fraction: float = 0.9
    prefill_budget: int = 8192
    switch: str = "reprefill"
    switch_prefill_fraction: float = 0.25
    catch_up_limit: int = 16
    mixed_prefill: bool = False
    cuda_graphs: str = "none"


@dataclass(frozen=True)
class CostSection:
    """The cost model. ``model``: ``roofline`` (analytic) or ``table`` (measured times from the CSV
    at ``table``). The constants override the roofline's defaults (None: default); see
    ``tltcore.cost.roofline``."""

    model: str = "roofline"
    table: str | None = None
    iteration_overhead_s: float | None = None
    draft_step_overhead_s: float | None = None
    sd_overhead_s: float | None = None
    kv_block_size: int | None = None


@dataclass(frozen=True)
class AcceptanceSection:
    """Acceptance preset, whether SD iterations emit the expected or a sampled accept length, and
    optional overrides of the tree model's parameters (None: the preset's)."""

    preset: str = "paper-qwen32b"
    mode: str = "expected"
    coverage: float | None = None
    rank_ratio: float | None = None
    depth_decay: float | None = None
    depth_power: float | None = None


@dataclass(frozen=True)
class DrafterSection:
    """The drafter the workers hold (:class:`~tltcore.drafter.state.DrafterState`): ``quality``
    multiplies every per-position acceptance (1 = as fitted, < 1 = stale); ``position_scale``
    refines it per draft position.

    Whole RL runs (``presets``) start from ``quality`` (the drafter trained for the initial policy)
    and move it (:mod:`tltcore.drafter.dynamics`): each policy update decays it toward
    ``stale_quality`` by the fraction ``drift``, training recovers it toward ``quality`` with
    ``recovery_samples`` samples per e-folding. ``kind`` (:mod:`tltcore.drafter.kinds`): ``eagle``
    (TLT's one-layer drafter), ``draft-model`` (the separate LM ``draft_model``) or ``ngram``
    (model-free, chain acceptance ``ngram_alpha``, ``ngram_lookup_s`` of CPU per SD iteration); a
    preset names its own kind."""

    quality: float = 1.0
    position_scale: tuple[float, ...] = ()
    kind: str = "eagle"
    draft_model: str = "Qwen2.5-0.5B"
    stale_quality: float = 0.89
    drift: float = 0.3
    recovery_samples: float = 400.0
    ngram_alpha: float = 0.5
    ngram_lookup_s: float = 5e-5


@dataclass(frozen=True)
class SpotSection:
    """Drafter training (:mod:`tltsim.spot.analytic_trainer`, :mod:`tltsim.spot.coverage`). ``min_workers``
    released workers start the Spot Trainer; each trains ``samples_per_s`` samples per second (None:
    the paper's reference, 29.6 with ``packing``, 13.3 without); a session stops after
    ``max_samples`` samples (200 training steps x 4 samples); a checkpoint every
    ``checkpoint_every`` samples blocks training for ``selective_checkpoint_s`` (trainable weights,
    asynchronous) or ``full_checkpoint_s``. ``one_step_offset`` mixes the previous step's complete
    responses into the data buffer (DataCoverage); ``window_tokens`` is one training sample's length.
    ``bubble_budget``: samples per step of the ``speco-bubble`` preset's fixed-budget training."""

    min_workers: int = 1
    packing: bool = True
    samples_per_s: float | None = None
    max_samples: int = 800
    checkpoint_every: int = 64
    selective_checkpoint: bool = True
    selective_checkpoint_s: float = 0.097
    full_checkpoint_s: float = 0.893
    one_step_offset: bool = True
    window_tokens: int = 512
    bubble_budget: int = 256


@dataclass(frozen=True)
class RLSection:
    """The phases of an RL step after rollout (:mod:`tltsim.rl.phases`), in whole RL runs, and the
    tokens per GPU per micro-batch of the actor update that its memory check assumes
    (``micro_batch_tokens``, veRL's ``ppo_max_token_len_per_gpu``; :mod:`tltsim.rl.gpu_memory`)."""

    reward_s_per_sample: float = 0.01
    reward_parallelism: int = 64
    reference: bool = True
    old_log_prob: bool = True
    ppo_epochs: int = 1
    activation_recompute: bool = True
    train_mfu: float = 0.35
    forward_mfu: float = 0.45
    weight_sync_overhead_s: float = 3.0
    micro_batch_tokens: int = 32768


@dataclass(frozen=True)
class Scenario:
    """Everything one ``tlt sim run`` needs. ``policies`` always gets ``no-sd`` as baseline.
    With ``presets`` (:mod:`tltsim.rl.presets`) the run is whole RL steps instead (rollout, drafter
    training, reward, log-probs, actor update, weight sync), ``verl`` is the baseline and
    ``policies`` is not used (each preset names its own SD policy).

    ``seed`` is the simulation's seed: which worker serves which prompt group (``trace.deal =
    "shuffle"``), the stochastic accept lengths and the policies' own randomness. It never changes
    which responses are simulated; that is ``trace.seed``."""

    trace: TraceSection = field(default_factory=TraceSection)
    model: ModelSection = field(default_factory=ModelSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    engine: EngineSection = field(default_factory=EngineSection)
    cost: CostSection = field(default_factory=CostSection)
    acceptance: AcceptanceSection = field(default_factory=AcceptanceSection)
    drafter: DrafterSection = field(default_factory=DrafterSection)
    spot: SpotSection = field(default_factory=SpotSection)
    rl: RLSection = field(default_factory=RLSection)
    policies: tuple[str, ...] = DEFAULT_POLICIES
    presets: tuple[str, ...] = ()
    seed: int = 0

    @property
    def n_workers(self) -> int:
        return self.cluster.gpus // self.cluster.tp


# ---- reading and overriding ------------------------------------------------------------------------
def split_policy_specs(text: str) -> list[str]:
    """Split ``"no-sd,beg-mab:arms=8_4_32,4_2_6"`` into specs: a comma starts a new spec only where
    the next piece begins with a policy or wrapper name (commas inside option values stay)."""
    from tltcore.policy.registry import POLICY_NAMES, WRAPPER_NAMES

    starts = POLICY_NAMES + WRAPPER_NAMES
    out: list[str] = []
    for piece in text.split(","):
        name = piece.strip().split(":", 1)[0].split("+", 1)[0]
        if out and name not in starts:
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


_SPLITTERS = {"policies": split_policy_specs}


def field_paths() -> list[str]:
    """Every addressable dotted field path."""
    return config_tree.field_paths(Scenario)


def scenario_from_dict(data: dict[str, Any], *, path: str | Path | None = None) -> Scenario:
    """Build and validate a scenario from parsed TOML (errors name ``path`` and the dotted field).
    Relative file names (trace, model config, cost table) resolve against ``path``'s folder when a
    file exists there."""
    src = str(path) if path is not None else None
    scenario = config_tree.from_dict(Scenario, data, path=src)
    if path is not None:
        scenario = _relative_to(scenario, Path(path).parent)
    validate(scenario, path=src)
    return scenario


def _relative_to(s: Scenario, base: Path) -> Scenario:
    def resolve(name: str | None) -> str | None:
        if name is None or Path(name).is_absolute():
            return name
        candidate = base / name
        return str(candidate.resolve()) if candidate.exists() else name

    return replace(s, trace=replace(s.trace, name=resolve(s.trace.name)),
                   model=replace(s.model, name=resolve(s.model.name)),
                   cost=replace(s.cost, table=resolve(s.cost.table)))


BUNDLED_SCENARIOS = Path(__file__).resolve().parent / "data" / "scenarios"


def bundled_scenarios() -> dict[str, Path]:
    """The example scenarios shipped with tlt, by name (``dapo_qwen32b_polytrace``)."""
    return config_tree.bundled_files(BUNDLED_SCENARIOS)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file, or a bundled one by name (a UTF-8 byte-order mark is
    fine), with the same checks as :func:`resolve` (which also reports what is set but unused)."""
    return resolve(path).scenario


def apply_override(scenario: Scenario, dotted: str, value: Any, *, path: str | None = "override") -> Scenario:
    """A copy of ``scenario`` with the field at ``dotted`` (any depth) set to ``value``; text is
    parsed by the field's type (``"8"`` -> 8, ``"true"`` -> True, ``"a,b"`` or ``["a", "b"]`` -> a
    tuple). The result is validated."""
    new = config_tree.override(scenario, dotted.strip(), value, path=path, splitters=_SPLITTERS)
    validate(new, path=path)
    return new


# ---- one path from a file and settings to a checked scenario ---------------------------------------
#: Fields only whole RL runs (``presets``) read: set without presets, they change nothing.
RL_ONLY_FIELDS = ("drafter.stale_quality", "drafter.drift", "drafter.recovery_samples")
RL_ONLY_SECTIONS = ("spot.", "rl.")


@dataclass(frozen=True)
class Resolved:
    """A scenario built from its layers (defaults, a scenario file, then settings such as
    command-line flags and ``--set``) and validated once, after every setting was applied.

    ``given`` maps each explicitly set dotted field to where it was set (the file's path or the
    flag), so an error found later (:func:`prepare`) still names the file or flag a user can fix;
    ``warnings`` are one line each (without the ``tlt: warning:`` prefix) for settings that are valid
    but change nothing."""

    scenario: Scenario
    given: dict[str, str]
    file: str | None = None
    flags: tuple[str, ...] = ()
    notes: tuple[tuple[str, str], ...] = ()  # (kind, warning): rl-only, stale-default, policies, trace-seed

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(text for _, text in self.notes)

    def locate(self, exc: InputError) -> InputError:
        """``exc`` located at the file or flag that set its field (a path it already names, e.g. a
        cost table's, is kept); a field nobody set is blamed on the file, else on the flags given."""
        return _locate(exc, self.given, self.file, self.flags)


def _locate(exc: InputError, given: dict[str, str], file: str | None, flags: tuple[str, ...]) -> InputError:
    if exc.path is not None:
        return exc
    where = given.get(exc.field or "") or file or (", ".join(dict.fromkeys(flags)) if flags else None)
    return InputError(exc.message, path=where, row=exc.row, field=exc.field)


def _leaf_paths(data: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the leaves of parsed TOML (every table is a section)."""
    out: list[str] = []
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        out += _leaf_paths(value, dotted) if isinstance(value, dict) else [dotted]
    return out


def _get(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = getattr(tree, part)
    return tree


def resolve(scenario: str | Path | None = None, settings: Sequence[tuple[str, Any, str]] = ()) -> Resolved:
    """The one way from a scenario file (or the defaults) and ``(dotted field, value, source)``
    settings to a checked scenario: what ``tlt sim run`` flags, ``--set`` and ``tlt validate`` use,
    with the same :func:`validate` that sweep points and files get.

    Every setting is applied first and the result validated once, so their order never matters
    (``--set cost.model=table --set cost.table=X`` is the same as the reverse). A field given twice
    with different values is refused (which one wins would depend on the order); ``None`` values
    are skipped (a flag not given). ``policies`` and ``presets`` set in the same layer are refused:
    a whole RL run takes each preset's own SD policy, so the policies would be silently ignored."""
    file: str | None = None
    given: dict[str, str] = {}
    if scenario is not None:
        p, text = config_tree.read_file(scenario, bundled_scenarios(), "scenario")
        file = str(p)
        data = config_tree.load_toml_text(text, path=file)
        s = _relative_to(config_tree.from_dict(Scenario, data, path=file), p.parent)
        given = dict.fromkeys(_leaf_paths(data), file)
    else:
        s = Scenario()
    by_flag: dict[str, tuple[str, Any]] = {}
    flags: list[str] = []
    for dotted, value, source in settings:
        if value is None:
            continue
        dotted = dotted.strip()
        new = config_tree.override(s, dotted, value, path=source, splitters=_SPLITTERS)
        parsed = _get(new, dotted)
        if dotted in by_flag and by_flag[dotted][1] != parsed:
            first, before = by_flag[dotted]
            raise InputError(f"given twice with different values ({first}: {before!r}, {source}: {parsed!r}); give "
                             "it once (which one wins would depend on the order)", path=source, field=dotted)
        by_flag[dotted] = (source, parsed)
        flags.append(source)
        s = new
    given.update({dotted: source for dotted, (source, _) in by_flag.items()})
    _check_policies_vs_presets(s, given, by_flag)
    try:
        validate(s)
    except InputError as exc:
        raise _locate(exc, given, file, tuple(flags)) from None
    return Resolved(s, given, file, tuple(flags), tuple(_notes(s, given, by_flag)))


def _check_policies_vs_presets(s: Scenario, given: dict[str, str], by_flag: dict[str, tuple[str, Any]]) -> None:
    """Refuse ``policies`` given beside ``presets`` in the same layer, or on the command line over a
    scenario's presets: no preset run would use them. The default policies beside presets are what
    ``scenario.resolved.toml`` of every preset run states (a resolved file lists every field), so they
    are read back without a word."""
    if not s.presets or "policies" not in given or s.policies == DEFAULT_POLICIES:
        return
    policies_flag, presets_flag = "policies" in by_flag, "presets" in by_flag
    if policies_flag or not presets_flag:  # same layer, or --policy over a file's presets
        where = given["presets"] if "presets" in given else given["policies"]
        raise InputError(f"policies ({given['policies']}) are not used with presets ({where}): each preset runs its "
                         "own SD policy (tlt sim run --help lists them); give policies or presets, not both (--set "
                         "presets= clears a scenario's presets)", path=given["policies"], field="policies")


def _notes(s: Scenario, given: dict[str, str], by_flag: dict[str, tuple[str, Any]]) -> list[tuple[str, str]]:
    """``(kind, one line)`` for each setting that is valid but changes nothing in this run."""
    out = []
    rl_only = [f for f in given if f.startswith(RL_ONLY_SECTIONS) or f in RL_ONLY_FIELDS]
    if rl_only and not s.presets:
        where = ", ".join(dict.fromkeys(given[f] for f in rl_only))
        shown = ", ".join(rl_only[:4]) + (f" and {len(rl_only) - 4} more" if len(rl_only) > 4 else "")
        verb = "is" if len(rl_only) == 1 else "are"
        out.append(("rl-only", f"{where}: {shown} {verb} used only by whole RL runs (presets, --preset); this run "
                    "compares rollout policies, so changing it does nothing"))
    d = s.drafter
    if s.presets and d.stale_quality > d.quality:  # only the default gets here (validate refuses a set one)
        out.append(("stale-default", f"{given.get('drafter.quality', given['presets'])}: drafter.quality = "
                    f"{d.quality:g} is below the default drafter.stale_quality = {d.stale_quality:g}, so the "
                    "drafter never goes stale in these RL runs; set drafter.stale_quality <= drafter.quality"))
    if s.presets and "policies" in given and "policies" not in by_flag:
        out.append(("policies", f"{given['policies']}: field 'policies' is not used: {given['presets']} runs whole "
                    "RL runs of presets, each with its own SD policy"))
    if "trace.seed" in given and not _trace_draws(s.trace):
        out.append(("trace-seed", f"{given['trace.seed']}: field 'trace.seed' changes nothing here: it picks which "
                    "responses are simulated (trace.prompts_per_step, trace.expand_samples, parametric profiles) and "
                    f"{s.trace.name} is used whole; the top-level seed deals groups to workers"))
    return out


def _trace_draws(t: TraceSection) -> bool:
    """Whether ``trace.seed`` can change the workload: steps sampled, samples expanded, or a
    generated (parametric) profile. An unknown trace counts as drawing (its error comes later)."""
    if t.prompts_per_step is not None or t.expand_samples is not None:
        return True
    from tltsim.traces.catalog import CatalogEntry
    from tltsim.traces.catalog import resolve as resolve_trace

    try:
        return isinstance(resolve_trace(t.name), CatalogEntry)
    except (InputError, OSError):
        return True


# ---- validation -----------------------------------------------------------------------------------
def _relocated(exc: InputError, *, path: str | None, dotted: str) -> InputError:
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


def _in_range(value: float | None, dotted: str, path: str | None, lo: float, hi: float) -> None:
    if value is not None and not lo <= value <= hi:
        raise InputError(f"must be in [{lo:g}, {hi:g}], got {value}", path=path, field=dotted)


def _one_of(value: str, choices: tuple[str, ...], dotted: str, path: str | None) -> None:
    if value not in choices:
        hint = config_tree.suggest(value, list(choices))
        raise InputError(f"must be one of {', '.join(choices)}, got '{value}'{hint}", path=path, field=dotted)


def validate(s: Scenario, *, path: str | None = None) -> None:
    """Check every field's range and the combinations (layout, weights vs memory, policy specs,
    names). Cheap: builds no workload and no cost model."""
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model
    from tltcore.policy.registry import check_spec
    from tltsim.rollout import ACCEPTANCE_MODES, DEAL_MODES, SWITCH_MODES

    t = s.trace
    _in_range(t.step, "trace.step", path, 0, 10**9)
    _in_range(t.num_steps, "trace.num_steps", path, 1, MAX_STEPS)
    _in_range(t.prompts_per_step, "trace.prompts_per_step", path, 1, MAX_PROMPTS)
    _in_range(t.samples, "trace.samples", path, 1, 1024)
    _in_range(t.expand_samples, "trace.expand_samples", path, 1, 1024)
    _in_range(t.dispersion_sigma, "trace.dispersion_sigma", path, 0, 5)
    _in_range(t.cap, "trace.cap", path, 1, 10**7)
    _in_range(t.default_prompt_tokens, "trace.default_prompt_tokens", path, 0, 10**7)
    _in_range(t.seed, "trace.seed", path, 0, MAX_SEED)
    _one_of(t.deal, DEAL_MODES, "trace.deal", path)
    _in_range(s.seed, "seed", path, 0, MAX_SEED)
    c = s.cluster
    _in_range(c.gpus, "cluster.gpus", path, 1, MAX_GPUS)
    _in_range(c.tp, "cluster.tp", path, 1, MAX_TP)
    if c.gpus % c.tp:
        raise InputError(f"gpus={c.gpus} is not divisible by tp={c.tp}", path=path, field="cluster.gpus")
    if s.n_workers > MAX_WORKERS:
        raise InputError(f"gpus / tp = {s.n_workers:,} rollout workers; the simulator takes at most {MAX_WORKERS:,} "
                         "(raise cluster.tp or lower cluster.gpus)", path=path, field="cluster.gpus")
    _in_range(c.flops_efficiency, "cluster.flops_efficiency", path, 1e-3, 1)
    _in_range(c.bandwidth_efficiency, "cluster.bandwidth_efficiency", path, 1e-3, 1)
    e = s.engine
    _in_range(e.max_batch, "engine.max_batch", path, 1, MAX_BATCH)
    _in_range(e.prefill_budget, "engine.prefill_budget", path, 1, MAX_PREFILL_BUDGET)
    _in_range(e.catch_up_limit, "engine.catch_up_limit", path, 1, 10**7)
    if not 0 < e.kv_mem_fraction <= 1:
        raise InputError(f"must be in (0, 1], got {e.kv_mem_fraction}", path=path, field="engine.kv_mem_fraction")
    if not 0 < e.switch_prefill_fraction <= 1:
        raise InputError(f"must be in (0, 1], got {e.switch_prefill_fraction}", path=path,
                         field="engine.switch_prefill_fraction")
    _one_of(e.switch, SWITCH_MODES, "engine.switch", path)
    _one_of(e.cuda_graphs, CUDA_GRAPH_MODES, "engine.cuda_graphs", path)
    co = s.cost
    _one_of(co.model, ("roofline", "table"), "cost.model", path)
    if co.model == "table" and co.table is None:
        raise InputError("cost.model = 'table' needs cost.table = PATH to a calibration table", path=path,
                         field="cost.table")
    for name in ("iteration_overhead_s", "draft_step_overhead_s", "sd_overhead_s"):
        _in_range(getattr(co, name), f"cost.{name}", path, 0, 10)
    _in_range(co.kv_block_size, "cost.kv_block_size", path, 1, 4096)
    a = s.acceptance
    _one_of(a.mode, ACCEPTANCE_MODES, "acceptance.mode", path)
    for name in ("coverage", "rank_ratio"):
        _in_range(getattr(a, name), f"acceptance.{name}", path, 0, 1)
    for name in ("depth_decay", "depth_power"):
        _in_range(getattr(a, name), f"acceptance.{name}", path, 0, 100)
    _check_paths(s, path)
    d = s.drafter
    _in_range(d.quality, "drafter.quality", path, 0, 10)
    for v in d.position_scale:
        _in_range(v, "drafter.position_scale", path, 0, 10)
    _check_rl_sections(s, path)
    try:
        gpu = get_gpu(c.gpu)
    except InputError as exc:
        raise _relocated(exc, path=path, dotted="cluster.gpu") from None
    try:
        model = get_model(s.model.name)
    except InputError as exc:
        raise _relocated(exc, path=path, dotted="model.name") from None
    if model.num_attention_heads % c.tp:
        raise InputError(f"tp={c.tp} must divide the {model.num_attention_heads} attention heads of "
                         f"{model.name}", path=path, field="cluster.tp")
    weights = model.weight_bytes / c.tp
    if weights >= e.kv_mem_fraction * gpu.memory_bytes:
        raise InputError(
            f"{model.name} needs {weights / 1e9:.1f} GB of weights per GPU at tp={c.tp}, more than "
            f"{e.kv_mem_fraction:.0%} of {gpu.name}'s {gpu.memory_bytes / 1e9:.0f} GB; raise cluster.tp",
            path=path, field="cluster.tp")
    if not s.policies:
        raise InputError("needs at least one policy spec", path=path, field="policies")
    for spec in s.policies:
        try:
            check_spec(spec)
        except InputError as exc:
            raise _relocated(exc, path=path, dotted="policies") from None
    try:
        accept = acceptance_model(a)
        from tltcore.drafter.state import DrafterState

        accept.check_drafter(DrafterState(quality=d.quality, position_scale=d.position_scale))
    except InputError as exc:
        params = ("coverage", "rank_ratio", "depth_decay", "depth_power")
        dotted = f"acceptance.{exc.field}" if exc.field in params else (
            "drafter.quality" if exc.field == "drafter.quality" else "acceptance.preset")
        raise _relocated(exc, path=path, dotted=dotted) from None


def _check_rl_sections(s: Scenario, path: str | None) -> None:
    """The whole-RL-run fields: drafter kind and dynamics, Spot Trainer, RL phases, presets."""
    from tltcore.drafter.kinds import DRAFTER_KINDS, ngram_acceptance
    from tltcore.model_shape import get_model
    from tltsim.rl.presets import get_preset

    d = s.drafter
    _one_of(d.kind, DRAFTER_KINDS, "drafter.kind", path)
    _in_range(d.ngram_lookup_s, "drafter.ngram_lookup_s", path, 0, 1)
    # The floor a drafter never trained again decays to. Above the trained ceiling it would be clamped
    # to it (no staleness at all), so a value the user set there is refused. The default riding above
    # a lowered drafter.quality is not: applied one at a time (apply_override), --set drafter.quality=0.7
    # --set drafter.stale_quality=0.6 passes through it; resolve() warns when a whole RL run meets it.
    if d.stale_quality != DrafterSection.stale_quality and not 0 <= d.stale_quality <= d.quality:
        raise InputError(f"must be in [0, drafter.quality = {d.quality:g}] (a stale drafter is never better than "
                         f"the trained one), got {d.stale_quality:g}", path=path, field="drafter.stale_quality")
    sp = s.spot
    _in_range(sp.min_workers, "spot.min_workers", path, 1, MAX_GPUS)
    if sp.min_workers > s.n_workers:
        raise InputError(f"{sp.min_workers:,} released workers can never gather: the cluster has {s.n_workers:,} "
                         f"rollout workers (cluster.gpus / cluster.tp = {s.cluster.gpus} / {s.cluster.tp}), so the "
                         "Spot Trainer would train 0 samples", path=path, field="spot.min_workers")
    _in_range(sp.samples_per_s, "spot.samples_per_s", path, 1e-6, 1e6)
    _in_range(sp.max_samples, "spot.max_samples", path, 1, 10**9)  # 0: a session that trains nothing
    _in_range(sp.checkpoint_every, "spot.checkpoint_every", path, 1, 10**9)
    _in_range(sp.window_tokens, "spot.window_tokens", path, 1, 10**7)
    _in_range(sp.bubble_budget, "spot.bubble_budget", path, 1, 10**9)  # 0: speco-bubble would train nothing
    for name in ("selective_checkpoint_s", "full_checkpoint_s"):
        _in_range(getattr(sp, name), f"spot.{name}", path, 0, MAX_SECONDS)
    r = s.rl
    _in_range(r.reward_s_per_sample, "rl.reward_s_per_sample", path, 0, MAX_SECONDS)
    _in_range(r.reward_parallelism, "rl.reward_parallelism", path, 1, 10**7)
    _in_range(r.weight_sync_overhead_s, "rl.weight_sync_overhead_s", path, 0, MAX_SECONDS)
    try:
        ngram_acceptance(d.ngram_alpha)
        drafter_dynamics(s)
        trainer_config(s)
        rl_phase_config(s)
        _in_range(s.rl.micro_batch_tokens, "rl.micro_batch_tokens", path, 1, 10**8)
        for name in s.presets:
            get_preset(name)
    except InputError as exc:
        raise _relocated(exc, path=path, dotted=exc.field or "presets") from None
    try:
        get_model(d.draft_model)
    except InputError as exc:
        raise _relocated(exc, path=path, dotted="drafter.draft_model") from None


def _check_paths(s: Scenario, path: str | None) -> None:
    """Refuse a FIFO, a device or a socket where a file is read (trace, model config, cost table):
    reading one would hang on a pipe nobody writes or never end on ``/dev/zero``."""
    import stat

    from tltcore.input_files import file_kind

    for dotted, name in (("trace.name", s.trace.name), ("model.name", s.model.name), ("cost.table", s.cost.table)):
        if name is None:
            continue
        try:
            mode = Path(name).expanduser().stat().st_mode
        except (OSError, ValueError):
            continue  # not a path (a catalog or preset name) or unreadable: the reader says which
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InputError(f"'{name}' is {file_kind(mode)}, not a regular file: reading it would block or never "
                             "end", path=path, field=dotted)


def drafter_dynamics(s: Scenario):
    """The scenario's :class:`~tltcore.drafter.dynamics.DrafterDynamics` (ceiling = ``drafter.quality``)."""
    from tltcore.drafter.dynamics import DrafterDynamics

    d = s.drafter
    return DrafterDynamics(trained_quality=d.quality, stale_quality=min(d.stale_quality, d.quality), drift=d.drift,
                           recovery_samples=d.recovery_samples)


def trainer_config(s: Scenario, *, bubble: bool = False):
    """The Spot Trainer's :class:`~tltsim.spot.analytic_trainer.TrainerConfig` (``bubble``: the fixed-budget,
    fully-checkpointed training of ``speco-bubble``)."""
    from tltsim.spot.analytic_trainer import TrainerConfig

    sp = s.spot
    rate = sp.samples_per_s if sp.samples_per_s is not None else (29.6 if sp.packing else 13.3)
    selective = sp.selective_checkpoint and not bubble
    return TrainerConfig(samples_per_s=rate, max_samples=sp.bubble_budget if bubble else sp.max_samples,
                         checkpoint_every=sp.checkpoint_every,
                         checkpoint_s=sp.selective_checkpoint_s if selective else sp.full_checkpoint_s,
                         selective=selective)


def rl_phase_config(s: Scenario):
    """The scenario's :class:`~tltsim.rl.phases.RLPhaseConfig`."""
    from tltsim.rl.phases import RLPhaseConfig

    fields = config_tree.to_dict(s.rl)
    del fields["micro_batch_tokens"]
    return RLPhaseConfig(**fields)


# ---- resolved form and identity -------------------------------------------------------------------
def policies_with_baseline(specs: tuple[str, ...]) -> tuple[str, ...]:
    """``specs`` with ``no-sd`` first (added when missing), duplicates dropped, order kept."""
    out = [BASELINE_POLICY]
    for spec in specs:
        if spec not in out:
            out.append(spec)
    return tuple(out)


def resolved_dict(s: Scenario) -> dict[str, Any]:
    """The scenario as nested plain data, with ``no-sd`` first among the policies."""
    from tltsim.rl.presets import presets_with_baseline

    d = config_tree.to_dict(s)
    d["policies"] = list(policies_with_baseline(s.policies))
    if s.presets:
        d["presets"] = list(presets_with_baseline(s.presets))
    return d


def scenario_toml(s: Scenario) -> str:
    """The resolved scenario as TOML (what ``scenario.resolved.toml`` holds)."""
    return config_tree.dump_toml(resolved_dict(s))


def scenario_hash(s: Scenario, length: int = 10) -> str:
    """Short content hash of a run: the resolved scenario, the trace's content and the package
    version. Editing a trace file or upgrading tlt gives a new results folder, never a silently
    overwritten one."""
    from tltcore import __version__

    h = hashlib.sha256(scenario_toml(s).encode())
    h.update(trace_fingerprint(s.trace.name, s.trace.seed).encode())
    h.update(__version__.encode())
    if s.cost.table is not None and Path(s.cost.table).is_file():
        h.update(_file_sha256(str(Path(s.cost.table).resolve()), Path(s.cost.table).stat().st_mtime_ns).encode())
    return h.hexdigest()[:length]


def trace_fingerprint(name: str, seed: int) -> str:
    """The trace file's sha256, or the parametric profile's name and seed."""
    from tltsim.traces.catalog import CatalogEntry, resolve

    found = resolve(name)
    if isinstance(found, CatalogEntry):
        return f"profile:{found.name}:{seed}"
    return _file_sha256(str(found.resolve()), found.stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _file_sha256(path: str, mtime_ns: int) -> str:
    """Checksum cached by (path, modification time): a sweep hashes the same trace thousands of times."""
    from tltcore.input_files import sha256_of

    return sha256_of(Path(path))


# ---- building the simulation inputs ---------------------------------------------------------------
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


def load_steps(t: TraceSection) -> tuple[Any, ...]:
    """The trace steps the scenario names, as StepWorkloads (errors name the ``trace.*`` field)."""
    from tltsim.traces import build_workload, load_trace

    try:
        df = load_trace(t.name, seed=t.seed)
    except InputError as exc:
        raise InputError(str(exc), field="trace.name") from None
    if t.source is not None:
        sources = sorted(map(str, df["source"].unique()))
        if t.source not in sources:
            raise InputError(f"no source '{t.source}' in trace {t.name} (has {', '.join(sources)})"
                             f"{config_tree.suggest(t.source, sources)}", field="trace.source")
        df = df[df["source"] == t.source]
    kwargs = dict(prompts_per_step=t.prompts_per_step, samples_per_prompt=t.samples, expand_to=t.expand_samples,
                  dispersion_sigma=t.dispersion_sigma, cap=t.cap, snap_capped=t.snap_capped,
                  default_prompt_tokens=t.default_prompt_tokens, seed=t.seed)
    trace_steps = sorted(int(x) for x in df["step"].unique())
    first = t.step if t.step is not None else (trace_steps[0] if len(trace_steps) > 1 else 0)
    per_step = len(trace_steps) > 1 or (t.prompts_per_step is None and t.num_steps == 1)
    _check_workload_size(df, t, per_step, first)
    try:
        if per_step:
            if first not in trace_steps:
                raise InputError(f"trace {t.name} has no step {first} (steps: {trace_steps[:20]})", field="trace.step")
            wanted = [s for s in trace_steps if s >= first][:t.num_steps]
            if len(wanted) < t.num_steps:
                raise InputError(f"trace {t.name} has only {len(wanted)} steps from step {first} "
                                 f"(steps: {trace_steps[:20]})", field="trace.num_steps")
            steps = build_workload(df, steps=wanted, **kwargs)
        else:  # one snapshot: sample steps of prompts_per_step groups
            steps = build_workload(df, num_steps=first + t.num_steps, **kwargs)[first:]
    except InputError as exc:
        fields = {"cap": "trace.cap", "prompts_per_step": "trace.prompts_per_step",
                  "expand_samples": "trace.expand_samples", "dispersion_sigma": "trace.dispersion_sigma",
                  "samples_per_prompt": "trace.samples", "steps": "trace.step"}
        raise _relocated(exc, path=None, dotted=fields.get(exc.field or "", exc.field or "trace")) from None
    return tuple(steps)


def _check_workload_size(df: Any, t: TraceSection, per_step: bool, first: int) -> None:
    """Refuse, before a single step is built, a workload of more than :data:`MAX_RESPONSES` responses
    (steps x prompt groups x samples): cutting a one-step trace into 10,000 steps of 596 groups would
    otherwise spend minutes building steps and hours simulating them, with no word."""
    group_sizes = df.groupby(["step", "group_id"], sort=False).size()
    if group_sizes.empty:
        return
    per_group = float(group_sizes.mean())
    if t.samples is not None:
        per_group = min(per_group, t.samples)
    if t.expand_samples is not None:
        per_group *= t.expand_samples
    groups = group_sizes.groupby(level=0).size()
    if per_step:
        chosen = [int(g) for step, g in groups.items() if int(step) >= first][:t.num_steps]
    else:
        chosen = [int(groups.max())] * t.num_steps
    limit = t.prompts_per_step if t.prompts_per_step is not None else max(chosen, default=0)
    total = sum(min(g, limit) for g in chosen) * per_group
    if total > MAX_RESPONSES:
        raise InputError(f"{len(chosen):,} steps of up to {min(max(chosen), limit):,} prompt groups x "
                         f"{per_group:g} samples is {total:,.0f} responses to simulate; the simulator takes at most "
                         f"{MAX_RESPONSES:,} (lower trace.num_steps, trace.prompts_per_step or "
                         "trace.expand_samples)", field="trace.num_steps")


def acceptance_model(a: AcceptanceSection):
    """The acceptance preset with the section's parameter overrides applied."""
    from tltcore.acceptance import TreeAcceptance, get_acceptance

    model = get_acceptance(a.preset)
    overrides = {k: getattr(a, k) for k in ("coverage", "rank_ratio", "depth_decay", "depth_power")
                 if getattr(a, k) is not None}
    if not overrides:
        return model
    if not isinstance(model, TreeAcceptance):
        raise InputError(f"parameter overrides apply to tree presets; '{a.preset}' is a chain model",
                         field="acceptance.preset")
    return replace(model, **overrides)


def cost_model(s: Scenario, drafter_kind: str | None = None):
    """The scenario's cost model (roofline with its constant overrides, or a measured table), for the
    drafter kind ``drafter_kind`` (None: ``drafter.kind``; see :mod:`tltcore.drafter.kinds`)."""
    from tltcore.cost import RooflineCostModel, TableCostModel
    from tltcore.drafter.kinds import ModelFreeDraftCost
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model

    kind = drafter_kind or s.drafter.kind
    if s.cost.model == "table" and kind != "eagle":
        raise InputError(f"drafter kind '{kind}' needs the roofline cost model (a measured table holds one "
                         "drafter's costs)", field="drafter.kind")
    if s.cost.model == "table":
        from tltcore.cost import shape_fingerprint

        try:
            table = TableCostModel.from_file(s.cost.table)
            table.check_matches(model=shape_fingerprint(get_model(s.model.name)), device=get_gpu(s.cluster.gpu).name,
                                tp=s.cluster.tp)
        except InputError as exc:
            raise _relocated(exc, path=exc.path, dotted="cost.table") from None
        return table
    gpu = get_gpu(s.cluster.gpu)
    effs = {k: v for k, v in (("flops_efficiency", s.cluster.flops_efficiency),
                              ("bandwidth_efficiency", s.cluster.bandwidth_efficiency)) if v is not None}
    gpu = replace(gpu, **effs) if effs else gpu
    consts = {k: getattr(s.cost, k) for k in ("iteration_overhead_s", "draft_step_overhead_s", "sd_overhead_s",
                                               "kv_block_size") if getattr(s.cost, k) is not None}
    if kind == "draft-model":
        consts["drafter"] = get_model(s.drafter.draft_model)
    try:
        roofline = RooflineCostModel(get_model(s.model.name), gpu, tp=s.cluster.tp, **consts)
        return ModelFreeDraftCost(roofline, s.drafter.ngram_lookup_s) if kind == "ngram" else roofline
    except InputError as exc:
        raise _relocated(exc, path=None, dotted={"tp": "cluster.tp", "gpu": "cluster.gpu"}.get(
            exc.field or "", f"cost.{exc.field}" if exc.field else "model.name")) from None


def prepare(s: Scenario) -> SimInputs:
    """Resolve names into models, load the workloads and check that every request fits a worker's
    KV cache before anything runs."""
    from tltcore.drafter.state import DrafterState
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model
    from tltsim.rl.gpu_memory import kv_capacity_tokens
    from tltsim.rollout import EngineConfig

    model, gpu = get_model(s.model.name), get_gpu(s.cluster.gpu)
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
    e = s.engine
    engine = EngineConfig(max_batch=e.max_batch, kv_capacity_tokens=kv, prefill_budget=e.prefill_budget,
                          switch=e.switch, switch_prefill_fraction=e.switch_prefill_fraction,
                          catch_up_limit=e.catch_up_limit, acceptance_mode=s.acceptance.mode,
                          mixed_prefill=e.mixed_prefill)
    drafter = DrafterState(quality=s.drafter.quality, position_scale=s.drafter.position_scale)
    return SimInputs(scenario=s, workloads=workloads, cost=cost, accept=acceptance_model(s.acceptance),
                     engine=engine, drafter=drafter)


def graph_memory_bytes(s: Scenario) -> float:
    """Per-GPU bytes of the rollout engine's CUDA graphs under ``engine.cuda_graphs``."""
    from tltcore.model_shape import get_model
    from tltsim.rl.gpu_memory import PAPER_ARMS, cuda_graph_bytes

    mode = s.engine.cuda_graphs
    if mode == "none":
        return 0.0
    strategies = None if mode == "decode" else PAPER_ARMS
    return cuda_graph_bytes(get_model(s.model.name), s.cluster.tp, strategies, "naive" if mode == "decode" else mode)


def make_policies(spec: str, inputs: SimInputs) -> list[Any]:
    """One fresh policy per worker, seeded from (scenario seed, worker)."""
    from tltcore.policy.registry import make_policy

    return [make_policy(spec, seed=inputs.scenario.seed * 1_000_003 + w, accept_model=inputs.accept,
                        cost_model=inputs.cost) for w in range(inputs.n_workers)]


def run_policy(s: Scenario, spec: str, inputs: SimInputs | None = None, *, run_id: str = "",
               progress=None) -> Any:
    """Simulate every step of the scenario under one policy spec; returns the event log.
    ``progress(n)`` is called as ``n`` more responses finish. Top-level and scenario-driven, so it
    runs in another process as is."""
    from tltsim.rollout import RolloutRun

    inputs = inputs or prepare(s)
    run = RolloutRun(make_policies(spec, inputs), cost=inputs.cost, accept=inputs.accept, engine=inputs.engine,
                     seed=s.seed, deal_mode=s.trace.deal, run_id=run_id, policy_name=spec, drafter=inputs.drafter)
    for w in inputs.workloads:
        run.step(w, progress)
    return run.events()


_Run = TypeVar("_Run")


def run_each(s: Scenario, names: Sequence[str], run_one: Callable[..., _Run], inputs: SimInputs | None = None, *,
             progress: Callable[[int], None] | None = None,
             on_each: Callable[[str], None] | None = None) -> tuple[SimInputs, list[_Run]]:
    """``run_one(s, name, inputs, run_id=, progress=)`` for each name in order: the loop both
    :func:`compare_policies` and :func:`tltsim.rl.run.compare_presets` run, kept in one place so
    that every compared policy or preset sees the same prepared workloads and is labelled with the
    same run id (the scenario hash). ``on_each(name)`` is called before each. Returns the inputs
    (prepared here when not given) with the results."""
    inputs = inputs or prepare(s)
    run_id = scenario_hash(s)
    results = []
    for name in names:
        if on_each is not None:
            on_each(name)
        results.append(run_one(s, name, inputs, run_id=run_id, progress=progress))
    return inputs, results


def compare_policies(s: Scenario, inputs: SimInputs | None = None, *, progress=None,
                     on_policy=None) -> tuple[Any, Any]:
    """Run every policy of the scenario (``no-sd`` first) on the same workloads and return (one event
    log, the per-(policy, step) summary with speedups over ``no-sd`` and the capped-response count):
    what ``tlt sim run`` and ``tlt demo`` both report. ``on_policy(spec)`` is called before each."""
    import pandas as pd

    from tltcore.summary import summary_table

    inputs, logs = run_each(s, policies_with_baseline(s.policies), run_policy, inputs, progress=progress,
                            on_each=on_policy)
    events = pd.concat(logs, ignore_index=True)
    summary = summary_table(events, gpus=s.cluster.gpus, tp=s.cluster.tp, baseline=BASELINE_POLICY)
    capped = {w.step: w.capped for w in inputs.workloads}
    summary["capped_responses"] = [capped.get(step, 0) for step in summary["step"]]
    return events, summary
