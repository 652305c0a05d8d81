"""Scenarios: what to simulate, as typed dataclasses loaded from TOML and validated field by field.

A scenario names a trace step, a model, a cluster layout, engine limits, the SD policies to compare,
an acceptance preset and a seed. Every field has a dotted path (``cluster.tp``, ``trace.step``,
``policies``) used in error messages and by :func:`apply_override` (the CLI flags, and sweeps later).
Every run writes :func:`dump_toml` of the resolved scenario next to its results, so a results folder
can be re-run exactly: ``tlt sim run --scenario results/sim/<hash>/scenario.resolved.toml``.

Defaults (a scenario file may be empty) show the long tail on a real trace: all 4,768 AIME
responses of ``r1distill_qwen1.5b_aime_8samples`` (596 prompts x 8, up to 16K tokens) as one RL
step, Qwen2.5-7B on 64 H100 with TP 4 (16 instances), the veRL engine limits (``max_num_seqs``
1024, ``gpu_memory_utilization`` 0.9, ``max_num_batched_tokens`` 8192), ``no-sd`` vs
``elastic+beg-mab``, the paper-fitted tree acceptance (``paper-qwen32b``) in expected-value mode.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tltsim.acceptance import get_acceptance
from tltsim.errors import InputError
from tltsim.rollout import ACCEPTANCE_MODES, EngineConfig

DEFAULT_TRACE = "r1distill_qwen1.5b_aime_8samples"
DEFAULT_POLICIES = ("no-sd", "elastic+beg-mab")
BASELINE_POLICY = "no-sd"


@dataclass(frozen=True)
class TraceSection:
    """Which responses one RL step must generate.

    ``step`` is the trace step to simulate (None: the first). ``source`` keeps only rows whose
    ``source`` column equals it (traces that hold several runs). ``prompts_per_step``,
    ``samples`` and ``cap`` reshape the step (see ``tltsim.traces.workload.build_workload``);
    ``seed`` drives that sampling.
    """

    name: str = DEFAULT_TRACE
    step: int | None = None
    source: str | None = None
    prompts_per_step: int | None = None
    samples: int | None = None
    cap: int | None = None
    default_prompt_tokens: int = 128
    seed: int = 0


@dataclass(frozen=True)
class ModelSection:
    """Target model: a preset name (``Qwen2.5-7B``) or a path to an HF ``config.json``."""

    name: str = "Qwen2.5-7B"


@dataclass(frozen=True)
class ClusterSection:
    """``gpus`` GPUs of one kind, split into ``gpus / tp`` rollout instances."""

    gpu: str = "H100"
    gpus: int = 64
    tp: int = 4


@dataclass(frozen=True)
class EngineSection:
    """Per-instance engine limits (veRL's vLLM rollout defaults).

    ``max_batch``: running requests per instance (``max_num_seqs``); ``kv_mem_fraction``: share of
    GPU memory for weights + KV (``gpu_memory_utilization``), which sets the KV admission limit;
    ``prefill_budget``: tokens per prefill pass (``max_num_batched_tokens``).
    """

    max_batch: int = 1024
    kv_mem_fraction: float = 0.9
    prefill_budget: int = 8192


@dataclass(frozen=True)
class AcceptanceSection:
    """Acceptance preset and whether SD iterations emit the expected or a sampled accept length."""

    preset: str = "paper-qwen32b"
    mode: str = "expected"


@dataclass(frozen=True)
class Scenario:
    """Everything one ``tlt sim run`` needs. ``policies`` always gets ``no-sd`` as baseline."""

    trace: TraceSection = field(default_factory=TraceSection)
    model: ModelSection = field(default_factory=ModelSection)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    engine: EngineSection = field(default_factory=EngineSection)
    acceptance: AcceptanceSection = field(default_factory=AcceptanceSection)
    policies: tuple[str, ...] = DEFAULT_POLICIES
    seed: int = 0

    @property
    def n_instances(self) -> int:
        return self.cluster.gpus // self.cluster.tp


# ---- typed field access ---------------------------------------------------------------------------
_SECTIONS = {f.name: f for f in fields(Scenario)}


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_optional(tp: Any) -> tuple[bool, Any]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def _parse_text(value: str, kind: type, what: str, *, path: str | None, dotted: str) -> Any:
    """``kind(value)`` for a command-line override, or an InputError naming the field."""
    try:
        return kind(value.strip())
    except ValueError:
        raise InputError(f"must be {what}, got '{value}'", path=path, field=dotted) from None


def _coerce(value: Any, tp: Any, *, path: str | None, dotted: str, from_text: bool) -> Any:
    """``value`` as type ``tp`` (int, float, str, optional, tuple[str, ...]) or an InputError."""
    optional, base = _is_optional(tp)
    if optional and (value is None or (from_text and str(value).strip().lower() in ("", "none", "null"))):
        return None
    if typing.get_origin(base) is tuple:
        if from_text and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise InputError(f"must be a list of strings, got {value!r}", path=path, field=dotted)
        return tuple(value)
    if base is bool:
        if isinstance(value, bool):
            return value
        raise InputError(f"must be true or false, got {value!r}", path=path, field=dotted)
    if base is int:
        if from_text and isinstance(value, str):
            value = _parse_text(value, int, "an integer", path=path, dotted=dotted)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"must be an integer, got {value!r}", path=path, field=dotted)
        return value
    if base is float:
        if from_text and isinstance(value, str):
            value = _parse_text(value, float, "a number", path=path, dotted=dotted)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InputError(f"must be a finite number, got {value!r}", path=path, field=dotted)
        return float(value)
    if base is str:
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"must be a non-empty string, got {value!r}", path=path, field=dotted)
        return value.strip()
    raise TypeError(f"unsupported field type {tp!r}")  # a bug in this module, not user input


def _section_from(cls: type, data: Any, *, path: str | None, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise InputError(f"must be a table, got {type(data).__name__}", path=path, field=prefix)
    hints = _hints(cls)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise InputError(f"unknown key (valid: {', '.join(sorted(names))})", path=path,
                         field=f"{prefix}.{unknown[0]}")
    kwargs = {k: _coerce(v, hints[k], path=path, dotted=f"{prefix}.{k}", from_text=False)
              for k, v in data.items()}
    return cls(**kwargs)


def scenario_from_dict(data: dict[str, Any], *, path: str | Path | None = None) -> Scenario:
    """Build and validate a scenario from parsed TOML (errors name ``path`` and the dotted field)."""
    src = str(path) if path is not None else None
    unknown = sorted(set(data) - set(_SECTIONS))
    if unknown:
        raise InputError(f"unknown key (valid: {', '.join(_SECTIONS)})", path=src, field=unknown[0])
    hints = _hints(Scenario)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _section_from(tp, value, path=src, prefix=key)
        else:
            kwargs[key] = _coerce(value, tp, path=src, dotted=key, from_text=False)
    scenario = Scenario(**kwargs)
    validate(scenario, path=src)
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("scenario file not found", path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read scenario ({exc})", path=p) from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", path=p) from None
    return scenario_from_dict(data, path=p)


def apply_override(scenario: Scenario, dotted: str, value: Any, *, path: str | None = "override") -> Scenario:
    """A copy of ``scenario`` with the field at ``dotted`` (``cluster.tp``) set to ``value``.

    Strings are parsed by the field's type (``"8"`` -> 8, ``"a,b"`` -> a tuple), so command-line
    flags and sweep specs can pass text. The result is validated.
    """
    parts = dotted.split(".")
    if parts[0] not in _SECTIONS or len(parts) > 2:
        raise InputError(f"no scenario field '{dotted}'", path=path, field=dotted)
    from_text = isinstance(value, str)
    if len(parts) == 1:
        tp = _hints(Scenario)[parts[0]]
        if dataclasses.is_dataclass(tp):
            raise InputError("is a section; address one of its fields", path=path, field=dotted)
        new = replace(scenario, **{parts[0]: _coerce(value, tp, path=path, dotted=dotted, from_text=from_text)})
    else:
        section = getattr(scenario, parts[0])
        if not dataclasses.is_dataclass(section) or parts[1] not in {f.name for f in fields(section)}:
            raise InputError(f"no scenario field '{dotted}'", path=path, field=dotted)
        tp = _hints(type(section))[parts[1]]
        coerced = _coerce(value, tp, path=path, dotted=dotted, from_text=from_text)
        new = replace(scenario, **{parts[0]: replace(section, **{parts[1]: coerced})})
    validate(new, path=path)
    return new


def field_paths() -> list[str]:
    """Every addressable dotted field path."""
    out = []
    for f in fields(Scenario):
        tp = _hints(Scenario)[f.name]
        if dataclasses.is_dataclass(tp):
            out += [f"{f.name}.{g.name}" for g in fields(tp)]
        else:
            out.append(f.name)
    return out


# ---- validation -----------------------------------------------------------------------------------
def _bare(exc: InputError) -> str:
    """An InputError's message without its own location prefix (we re-locate it)."""
    text = str(exc)
    where = []
    if exc.path is not None:
        where.append(str(exc.path))
    if exc.row is not None:
        where.append(f"row {exc.row}")
    if exc.field is not None:
        where.append(f"field '{exc.field}'")
    prefix = ", ".join(where) + ": " if where else ""
    return text[len(prefix):] if prefix and text.startswith(prefix) else text


def _positive(value: int | None, dotted: str, path: str | None, minimum: int = 1) -> None:
    if value is not None and value < minimum:
        raise InputError(f"must be >= {minimum}, got {value}", path=path, field=dotted)


def validate(s: Scenario, *, path: str | None = None) -> None:
    """Check every field and the combinations (layout, weights vs memory, policy specs, names)."""
    from tltsim.hardware import get_gpu
    from tltsim.model_shape import get_model
    from tltsim.policy.registry import make_policy

    t = s.trace
    _positive(t.step, "trace.step", path, 0)
    _positive(t.prompts_per_step, "trace.prompts_per_step", path)
    _positive(t.samples, "trace.samples", path)
    _positive(t.cap, "trace.cap", path)
    _positive(t.default_prompt_tokens, "trace.default_prompt_tokens", path, 0)
    _positive(t.seed, "trace.seed", path, 0)
    _positive(s.seed, "seed", path, 0)
    c = s.cluster
    _positive(c.gpus, "cluster.gpus", path)
    _positive(c.tp, "cluster.tp", path)
    if c.gpus % c.tp:
        raise InputError(f"gpus={c.gpus} is not divisible by tp={c.tp}", path=path, field="cluster.gpus")
    e = s.engine
    _positive(e.max_batch, "engine.max_batch", path)
    _positive(e.prefill_budget, "engine.prefill_budget", path)
    if not 0 < e.kv_mem_fraction <= 1:
        raise InputError(f"must be in (0, 1], got {e.kv_mem_fraction}", path=path, field="engine.kv_mem_fraction")
    if s.acceptance.mode not in ACCEPTANCE_MODES:
        raise InputError(f"must be one of {', '.join(ACCEPTANCE_MODES)}, got '{s.acceptance.mode}'",
                         path=path, field="acceptance.mode")
    try:
        gpu = get_gpu(c.gpu)
    except InputError as exc:
        raise InputError(_bare(exc), path=path, field="cluster.gpu") from None
    try:
        model = get_model(s.model.name)
    except InputError as exc:
        raise InputError(_bare(exc), path=path, field="model.name") from None
    if model.num_attention_heads % c.tp:
        raise InputError(f"tp={c.tp} must divide the {model.num_attention_heads} attention heads of "
                         f"{model.name}", path=path, field="cluster.tp")
    weights = model.weight_bytes / c.tp
    if weights >= e.kv_mem_fraction * gpu.memory_bytes:
        raise InputError(
            f"{model.name} needs {weights / 1e9:.1f} GB of weights per GPU at tp={c.tp}, more than "
            f"{e.kv_mem_fraction:.0%} of {gpu.name}'s {gpu.memory_bytes / 1e9:.0f} GB; raise tp",
            path=path, field="cluster.tp")
    if not s.policies:
        raise InputError("needs at least one policy spec", path=path, field="policies")
    for spec in s.policies:
        try:
            make_policy(spec, seed=0, accept_model=_PROBE, cost_model=_PROBE)
        except InputError as exc:
            raise InputError(_bare(exc), path=path, field="policies") from None
    try:
        get_acceptance(s.acceptance.preset)
    except InputError as exc:
        raise InputError(_bare(exc), path=path, field="acceptance.preset") from None


_PROBE = object()  # stands in for the models when only the spec's syntax is being checked


# ---- resolved form --------------------------------------------------------------------------------
def resolved_dict(s: Scenario) -> dict[str, Any]:
    """The scenario as nested plain data, with ``no-sd`` first among the policies."""
    d = dataclasses.asdict(s)
    d["policies"] = list(policies_with_baseline(s.policies))
    return d


def policies_with_baseline(specs: tuple[str, ...]) -> tuple[str, ...]:
    """``specs`` with ``no-sd`` first (added when missing), duplicates dropped, order kept."""
    out = [BASELINE_POLICY]
    for spec in specs:
        if spec not in out:
            out.append(spec)
    return tuple(out)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("nan" if v != v else ("inf" if v > 0 else "-inf"))
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are valid TOML basic strings
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dump_toml(data: dict[str, Any]) -> str:
    """TOML text for nested plain data (top-level scalars first, then one table per dict).

    ``None`` values are omitted: TOML has no null, and every optional field defaults to None.
    """
    lines: list[str] = []
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    for k, v in data.items():
        if k not in tables and v is not None:
            lines.append(f"{k} = {_toml_value(v)}")
    for name, table in tables.items():
        lines.append("")
        lines.append(f"[{name}]")
        for k, v in table.items():
            if isinstance(v, dict):
                raise TypeError("nested tables deeper than one level are not supported")
            if v is not None:
                lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines).lstrip("\n") + "\n"


def scenario_toml(s: Scenario) -> str:
    """The resolved scenario as TOML (what ``scenario.resolved.toml`` holds)."""
    return dump_toml(resolved_dict(s))


def scenario_hash(s: Scenario, length: int = 10) -> str:
    """Short content hash of the resolved scenario: the default results folder name."""
    return hashlib.sha256(scenario_toml(s).encode()).hexdigest()[:length]


# ---- building the simulation inputs ---------------------------------------------------------------
@dataclass(frozen=True)
class SimInputs:
    """The resolved objects a scenario names: workload, cost and acceptance models, engine."""

    scenario: Scenario
    workload: Any  # tltsim.traces.workload.StepWorkload
    cost: Any  # CostModel
    accept: Any  # AcceptanceModel
    engine: EngineConfig
    n_instances: int


def load_step(t: TraceSection) -> Any:
    """The trace step the scenario names, as a StepWorkload (errors name the ``trace.*`` field)."""
    from tltsim.traces import build_workload, load_trace

    try:
        df = load_trace(t.name, seed=t.seed)
    except InputError as exc:
        raise InputError(_bare(exc), path=exc.path, field="trace.name") from None
    if t.source is not None:
        sources = sorted(map(str, df["source"].unique()))
        if t.source not in sources:
            raise InputError(f"no source '{t.source}' in trace {t.name} (has {', '.join(sources)})",
                             field="trace.source")
        df = df[df["source"] == t.source]
    kwargs = dict(prompts_per_step=t.prompts_per_step, samples_per_prompt=t.samples, cap=t.cap,
                  default_prompt_tokens=t.default_prompt_tokens, seed=t.seed)
    trace_steps = sorted(int(x) for x in df["step"].unique())
    try:
        if t.step is not None and t.step in trace_steps and (len(trace_steps) > 1 or t.prompts_per_step is None):
            steps = build_workload(df, steps=[t.step], **kwargs)
        else:
            steps = build_workload(df, **kwargs)
    except InputError as exc:
        dotted = {"cap": "trace.cap", "prompts_per_step": "trace.prompts_per_step",
                  "samples_per_prompt": "trace.samples", "steps": "trace.step"}.get(exc.field or "", "trace")
        raise InputError(_bare(exc), field=dotted) from None
    if t.step is None:
        return steps[0]
    for w in steps:
        if w.step == t.step:
            return w
    raise InputError(f"trace {t.name} has no step {t.step} (steps: {[w.step for w in steps][:20]})",
                     field="trace.step")


def prepare(s: Scenario) -> SimInputs:
    """Resolve names into models and load the workload."""
    from tltsim.cost_model import RooflineCostModel
    from tltsim.hardware import get_gpu
    from tltsim.model_shape import get_model

    model, gpu = get_model(s.model.name), get_gpu(s.cluster.gpu)
    try:
        cost = RooflineCostModel(model, gpu, tp=s.cluster.tp)
    except InputError as exc:
        raise InputError(_bare(exc), field=f"cluster.{exc.field}" if exc.field in ("tp", "gpu") else "model")\
            from None
    kv = cost.kv_capacity_tokens(s.engine.kv_mem_fraction)
    if kv < 1:
        raise InputError("no GPU memory left for the KV cache", field="engine.kv_mem_fraction")
    engine = EngineConfig(max_batch=s.engine.max_batch, kv_capacity_tokens=kv,
                          prefill_budget=s.engine.prefill_budget, acceptance_mode=s.acceptance.mode)
    return SimInputs(scenario=s, workload=load_step(s.trace), cost=cost,
                     accept=get_acceptance(s.acceptance.preset), engine=engine, n_instances=s.n_instances)


def policy_factory(spec: str, inputs: SimInputs):
    """A factory of one fresh policy per instance, seeded from (scenario seed, instance)."""
    from tltsim.policy.registry import make_policy

    def make(instance: int):
        return make_policy(spec, seed=inputs.scenario.seed * 1_000_003 + instance,
                           accept_model=inputs.accept, cost_model=inputs.cost)

    return make


def run_scenario(s: Scenario, inputs: SimInputs | None = None, *, progress=None) -> list[Any]:
    """Simulate the scenario's step once per policy (``no-sd`` first) on the same workload.

    ``progress(spec)`` is called before each policy (for progress bars).
    """
    from tltsim.rollout import simulate_step

    inputs = inputs or prepare(s)
    results = []
    for spec in policies_with_baseline(s.policies):
        if progress is not None:
            progress(spec)
        results.append(simulate_step(inputs.workload, n_instances=inputs.n_instances, cost=inputs.cost,
                                     accept=inputs.accept, policy_factory=policy_factory(spec, inputs),
                                     engine=inputs.engine, seed=s.seed, policy_name=spec))
    return results


def compare_policies(s: Scenario, inputs: SimInputs | None = None, *, progress=None) -> tuple[Any, Any]:
    """Run every policy of the scenario and return (one event log, the per-policy summary table with
    speedups over ``no-sd``): what ``tlt sim run`` and ``tlt demo`` both report."""
    import pandas as pd

    from tltsim.summary import summary_table

    results = run_scenario(s, inputs, progress=progress)
    events = pd.concat([r.events for r in results], ignore_index=True)
    return events, summary_table(events, gpus=s.cluster.gpus, tp=s.cluster.tp, baseline=BASELINE_POLICY)
