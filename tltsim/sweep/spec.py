"""Sweep specs: a base scenario plus axes, read from TOML and expanded into fully resolved points.

A spec names *what varies*; everything else comes from the base scenario, so a sweep over the
elastic threshold on the bundled PolyTrace scenario is a few lines::

    base = "dapo_qwen32b_polytrace"        # bundled scenario name or a path (relative to this file)

    [scenario]                              # optional overrides of the base, scenario-file syntax
    trace.prompts_per_step = 16

    [[axes]]                                # grid: the cartesian product of its lists
    kind = "grid"
    "cluster.gpu" = ["H100", "H20"]
    policies = ["elastic:8+beg-mab", "elastic:32+beg-mab"]

    [[axes]]                                # zip: parallel lists of equal length
    kind = "zip"
    "cluster.gpus" = [16, 32]
    "cluster.tp" = [2, 4]

    [[axes]]                                # random: n seeded samples
    kind = "random"
    n = 20
    seed = 0
    "cost.sd_overhead_s" = { loguniform = [1e-4, 1e-2] }
    "engine.catch_up_limit" = { int = [4, 64] }
    "acceptance.mode" = { choice = ["expected", "stochastic"] }

Axes combine by cartesian product. On a random axis ``seed = INT`` is the sampler's seed (TOML allows
one ``seed`` key per table), so vary the scenario's own ``seed`` on a grid or zip axis.

Every dotted path is checked up front (unknown ones suggest the closest valid field), and so is
every value's type. Range and combination checks (``gpus`` divisible by ``tp``, a known GPU) run per
point: a combination that cannot be simulated (``gpus = 8`` with ``tp = 16``) becomes a failed point
recorded with its reason, because one impossible corner must not stop a thousand-point sweep; a
value that *no* point can use (a misspelt GPU) is refused up front, naming the spec file and the axis.

A point's key is :func:`tltsim.scenario.scenario_hash` of its resolved scenario: the same scenario
(whatever axis produced it), trace content and tlt version always gets the same key, which is what
lets a re-run skip finished points and an edited spec reuse them.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tltcore import config, config_files
from tltcore.errors import InputError
from tltcore.input_files import check_input
from tltsim.scenario import (
    Scenario,
    load_scenario,
    scenario_from_dict,
    scenario_hash,
    scenario_toml,
    set_field,
    set_fields,
    setting_type,
    split_policy_specs,
    validate_data,
)
from tltsim.scenario.policy_paths import is_policy_path
from tltsim.scenario.resolve import FILE_FIELDS  # relative names resolve against the spec's folder

AXIS_KINDS = ("grid", "zip", "random")
DISTRIBUTIONS = ("uniform", "loguniform", "choice", "int")
TOP_LEVEL_KEYS = ("base", "scenario", "axes", "name", "description")
#: Key length: 64 bits of the scenario hash, so thousands of points never collide in practice.
KEY_LENGTH = 16
MAX_POINTS = 1_000_000
MAX_RANDOM_SAMPLES = 100_000


@dataclass(frozen=True)
class Distribution:
    """One field of a random axis: ``uniform``/``loguniform`` over [low, high], ``int`` over the
    inclusive integer range, or ``choice`` among ``choices``."""

    dist: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[Any, ...] = ()

    def draw(self, rng: np.random.Generator) -> Any:
        """One sample; floats keep 6 significant digits so result columns stay readable."""
        if self.dist == "choice":
            return self.choices[int(rng.integers(len(self.choices)))]
        if self.dist == "int":
            return int(rng.integers(int(self.low), int(self.high), endpoint=True))
        if self.dist == "loguniform":
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        return float(f"{x:.6g}")


@dataclass(frozen=True)
class Axis:
    """One axis of a spec. ``values`` maps each dotted field to its list (grid, zip); ``dists``
    maps each field to its distribution (random). ``index`` is the axis's position in the file."""

    index: int
    kind: str
    values: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    dists: Mapping[str, Distribution] = field(default_factory=dict)
    n: int = 0
    seed: int = 0

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.values) if self.kind != "random" else tuple(self.dists)

    @property
    def label(self) -> str:
        """How errors name this axis: ``axes[2] (zip)``."""
        return f"axes[{self.index}] ({self.kind})"

    def assignments(self) -> list[dict[str, Any]]:
        """The axis's settings, each a {dotted field: value} dict, in a fixed order."""
        return list(self.iter_assignments())

    def iter_assignments(self) -> Iterator[dict[str, Any]]:
        """:meth:`assignments` one at a time: a 1,000 x 1,000 grid axis is not built to show its first
        rows. Each call starts over (a random axis re-seeds), so the order is always the same."""
        if self.kind == "grid":
            names = list(self.values)
            for combo in itertools.product(*(self.values[n] for n in names)):
                yield dict(zip(names, combo, strict=True))
        elif self.kind == "zip":
            names = list(self.values)
            for i in range(len(self)):
                yield {n: self.values[n][i] for n in names}
        else:
            rng = np.random.default_rng(self.seed)
            for _ in range(self.n):
                yield {name: d.draw(rng) for name, d in self.dists.items()}

    def __len__(self) -> int:
        if self.kind == "grid":
            return math.prod(len(v) for v in self.values.values())
        if self.kind == "zip":
            return len(next(iter(self.values.values())))
        return self.n


@dataclass(frozen=True)
class SweepSpec:
    """A parsed spec: where it came from, its text (stored beside the results), the base scenario
    with the inline overrides applied, and the axes."""

    path: Path
    text: str
    name: str
    description: str
    base: str | None
    scenario: Scenario
    axes: tuple[Axis, ...]

    @property
    def axis_fields(self) -> tuple[str, ...]:
        """Every varied dotted field, in spec order: the result dataset's axis columns."""
        return tuple(f for a in self.axes for f in a.fields)

    @property
    def text_sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def size(self) -> int:
        """The number of axis combinations, without building one: the product of the axes' lengths.
        An upper bound on the points (combinations giving the same scenario are one point)."""
        return math.prod(len(a) for a in self.axes)


@dataclass(frozen=True)
class Point:
    """One fully resolved scenario of a sweep. ``invalid`` is the reason it cannot be simulated
    (it is recorded as a failed point without being evaluated), None when it can."""

    index: int
    key: str
    values: Mapping[str, Any]
    scenario: Scenario
    invalid: str | None = None


# ---- reading --------------------------------------------------------------------------------------
BUNDLED_SPECS = Path(__file__).resolve().parents[1] / "data" / "sweeps"


def bundled_specs() -> dict[str, Path]:
    """The example sweep specs shipped with tlt, by name."""
    return config_files.bundled_files(BUNDLED_SPECS)


def load_spec(name_or_path: str | Path) -> SweepSpec:
    """Read, check and return a sweep spec (one-line InputErrors naming the file and the axis)."""
    check_input(config_files.find_file(name_or_path, bundled_specs(), "sweep spec"), folder=None,
                what="a sweep spec file", missing_ok=True)
    p, text = config_files.read_file(name_or_path, bundled_specs(), "sweep spec")
    return parse_spec(text, path=p)


def parse_spec(text: str, *, path: Path) -> SweepSpec:
    """Parse spec text; ``path`` locates errors and relative file names."""
    data = config_files.load_toml_text(text, path=str(path))
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise InputError(f"unknown top-level key{config.suggest(key, list(TOP_LEVEL_KEYS))}; valid: "
                             f"{', '.join(TOP_LEVEL_KEYS)}", path=path, field=key)
    base = data.get("base")
    if base is not None and (not isinstance(base, str) or not base.strip()):
        raise InputError("must be a scenario name or path", path=path, field="base")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise InputError("must be a string", path=path, field=key)
    scenario = _base_scenario(base, data.get("scenario", {}), path)
    raw_axes = data.get("axes", [])
    if isinstance(raw_axes, Mapping):
        raw_axes = [raw_axes]
    if not isinstance(raw_axes, list):
        raise InputError("must be a table or an array of tables ([[axes]])", path=path, field="axes")
    base_data = config.to_dict(scenario)
    axes = tuple(_parse_axis(i, raw, path, base_data) for i, raw in enumerate(raw_axes))
    seen: dict[str, Axis] = {}
    for axis in axes:
        for name in axis.fields:
            if name in seen:
                raise InputError(f"varied by both {seen[name].label} and {axis.label}; a field may be on one axis "
                                 "only", path=path, field=f"axes[{axis.index}].{name}")
            seen[name] = axis
    total = math.prod(len(a) for a in axes)  # counted, never built: a 10^12 grid is refused at once
    if total > MAX_POINTS:
        raise InputError(f"expands to {total:,} points, more than {MAX_POINTS:,}", path=path, field="axes")
    return SweepSpec(path=path, text=text, name=str(data.get("name", path.stem)),
                     description=str(data.get("description", "")), base=base, scenario=scenario, axes=axes)


def _base_scenario(base: str | None, inline: Any, path: Path) -> Scenario:
    """The base scenario (a bundled name, or a path relative to the spec's folder, or the defaults)
    with the spec's inline ``[scenario]`` table merged over it."""
    if not isinstance(inline, Mapping):
        raise InputError("must be a table of scenario fields", path=path, field="scenario")
    start = Scenario()
    if base is not None:
        beside = path.parent / base
        try:
            start = load_scenario(beside if beside.is_file() else base)
        except InputError as exc:  # name the spec too: the user typed `base` there
            raise InputError(str(exc), path=path, field="base") from None
    if not inline:
        return start
    merged = _deep_merge(config.to_dict(start), inline)
    return scenario_from_dict(merged, path=path)


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"cluster": {"gpu": [...]}}`` (TOML's ``cluster.gpu = [...]``) -> ``{"cluster.gpu": [...]}``; a
    table whose keys are distribution names is a leaf (a random axis's ``{uniform = [a, b]}``)."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        dotted = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and not (set(v) & set(DISTRIBUTIONS)):
            out.update(_flatten(v, dotted))
        else:
            out[dotted] = v
    return out


def _check_field(name: str, where: str, path: Path, base: dict[str, Any]) -> Any:
    """The type of the field ``name`` (a policy's field by the kind of the base scenario's spec at
    that index: ``policies.1.threshold``); an unknown one is refused naming the axis."""
    if not is_policy_path(name):
        config.check_path(Scenario, name, path=str(path), what="unknown scenario field", field=where)
    try:
        return setting_type(base, name, path=str(path), field=where)
    except InputError as exc:
        raise InputError(exc.message, path=path, field=where) from None


def _coerce(name: str, value: Any, where: str, path: Path, base: dict[str, Any]) -> Any:
    """A value as its field's type (its range is checked per point); text goes through the field's
    parser (``"a,b"`` for a list). A policy's field is checked by setting it in the base scenario."""
    if is_policy_path(name):
        try:
            set_field(base, name, value, path=str(path))
        except InputError as exc:
            raise InputError(exc.message, path=path, field=where) from None
        return value
    tp = config.field_type(Scenario, name)
    splitter = split_policy_specs if name == "policies" else None
    raw = config.parse_text(value, tp, where={"path": path, "field": where}, splitter=splitter)
    value = config.check_type(Scenario, name, raw, path=str(path), field=where)
    if name in FILE_FIELDS and isinstance(value, str) and not Path(value).is_absolute():
        beside = path.parent / value
        if beside.exists():
            value = str(beside.resolve())
    return value


def _parse_axis(index: int, raw: Any, path: Path, base: dict[str, Any]) -> Axis:
    prefix = f"axes[{index}]"
    if not isinstance(raw, Mapping):
        raise InputError("must be a table", path=path, field=prefix)
    kind = raw.get("kind", "grid")
    if kind not in AXIS_KINDS:
        raise InputError(f"kind must be one of {', '.join(AXIS_KINDS)}, got {kind!r}"
                         f"{config.suggest(str(kind), list(AXIS_KINDS))}", path=path, field=f"{prefix}.kind")
    # ``seed`` is also a scenario field: on a random axis an integer is the sampler's seed and a
    # distribution table samples the scenario's seed; elsewhere it is the scenario's seed.
    reserved = {"kind"} | ({"n"} if kind == "random" else set())
    if kind == "random" and not isinstance(raw.get("seed"), Mapping):
        reserved.add("seed")
    items = _flatten({k: v for k, v in raw.items() if k not in reserved})
    if kind != "random" and "n" in raw:
        raise InputError(f"'n' (number of samples) belongs to random axes only (this axis is {kind})", path=path,
                         field=f"{prefix}.n")
    if not items:
        raise InputError(f"a {kind} axis needs at least one dotted field", path=path, field=prefix)
    if kind == "random":
        return _parse_random(index, raw, items, path, base)
    values: dict[str, tuple[Any, ...]] = {}
    for name, vals in items.items():
        where = f"{prefix}.{name}"
        _check_field(name, where, path, base)
        if not isinstance(vals, list) or not vals:
            raise InputError(f"must be a non-empty list of values, got {vals!r}", path=path, field=where)
        values[name] = tuple(_coerce(name, v, where, path, base) for v in vals)
    if kind == "zip":
        lengths = {n: len(v) for n, v in values.items()}
        if len(set(lengths.values())) > 1:
            first = next(iter(lengths))
            odd = next(n for n, k in lengths.items() if k != lengths[first])
            raise InputError(f"zip lists must have equal lengths: {first} has {lengths[first]}, {odd} has "
                             f"{lengths[odd]}", path=path, field=f"{prefix}.{odd}")
    return Axis(index=index, kind=kind, values=values)


def _parse_random(index: int, raw: Mapping[str, Any], items: dict[str, Any], path: Path,
                  base_data: dict[str, Any]) -> Axis:
    prefix = f"axes[{index}]"
    n = raw.get("n")
    seed = raw.get("seed", 0) if not isinstance(raw.get("seed"), Mapping) else 0
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RANDOM_SAMPLES:
        raise InputError(f"a random axis needs n = number of samples in [1, {MAX_RANDOM_SAMPLES:,}], got {n!r}",
                         path=path, field=f"{prefix}.n")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError(f"must be a non-negative integer, got {seed!r}", path=path, field=f"{prefix}.seed")
    dists: dict[str, Distribution] = {}
    for name, spec in items.items():
        where = f"{prefix}.{name}"
        tp = _check_field(name, where, path, base_data)
        base = config.scalar_kind(tp)
        if not isinstance(spec, Mapping) or len(spec) != 1 or next(iter(spec)) not in DISTRIBUTIONS:
            raise InputError("must be one distribution: { uniform = [low, high] }, { loguniform = [low, high] }, "
                             "{ int = [low, high] } or { choice = [values] }", path=path, field=where)
        dist, arg = next(iter(spec.items()))
        if not isinstance(arg, list) or not arg:
            raise InputError(f"{dist} needs a non-empty list, got {arg!r}", path=path, field=where)
        if dist == "choice":
            dists[name] = Distribution("choice", choices=tuple(_coerce(name, v, where, path, base_data)
                                                               for v in arg))
            continue
        if base not in (int, float) or (dist != "int" and base is int):
            allowed = "int or choice" if base is int else "choice"
            raise InputError(f"{dist} does not fit this {getattr(base, '__name__', base)} field; use {allowed}",
                             path=path, field=where)
        if len(arg) != 2 or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in arg):
            raise InputError(f"{dist} needs [low, high] numbers, got {arg!r}", path=path, field=where)
        low, high = float(arg[0]), float(arg[1])
        if not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise InputError(f"{dist} needs finite low <= high, got {arg!r}", path=path, field=where)
        if dist == "loguniform" and low <= 0:
            raise InputError(f"loguniform needs low > 0, got {arg!r}", path=path, field=where)
        if dist == "int" and not (low.is_integer() and high.is_integer()):
            raise InputError(f"int needs integer bounds, got {arg!r}", path=path, field=where)
        dists[name] = Distribution(dist, low=low, high=high)
    return Axis(index=index, kind="random", dists=dists, n=n, seed=seed)


# ---- expanding ------------------------------------------------------------------------------------
def point_key(s: Scenario) -> str:
    """The result key of a scenario: its content hash (resolved fields, trace checksum, version).
    A scenario whose trace cannot even be resolved still gets a stable key from its fields alone."""
    try:
        return scenario_hash(s, length=KEY_LENGTH)
    except (InputError, OSError):
        return "x" + hashlib.sha256(scenario_toml(s).encode()).hexdigest()[:KEY_LENGTH - 1]


def _combos(axes: tuple[Axis, ...]) -> Iterator[tuple[dict[str, Any], ...]]:
    """``itertools.product`` of the axes' assignments (same order), without building any axis's list:
    ``product`` would first materialise every axis."""
    if not axes:
        yield ()
        return
    for head in axes[0].iter_assignments():
        for rest in _combos(axes[1:]):
            yield (head, *rest)


def _resolve(spec: SweepSpec) -> Iterator[tuple[tuple[dict[str, Any], ...], Point, InputError | None, bool]]:
    """(the axis assignments, the point, why it is invalid, whether its key is new) per combination,
    in order. A repeated key (same scenario from another combination) gets index -1 and is dropped by
    the callers. Lazy: listing the first rows of a huge grid resolves only those."""
    seen: set[str] = set()
    base = config.to_dict(spec.scenario)
    for combo in _combos(spec.axes):
        values: dict[str, Any] = {}
        for assignment in combo:
            values.update(assignment)
        data = base
        error: InputError | None = None
        try:
            data = set_fields(base, values, path=None)
            s = validate_point(data)
        except InputError as exc:
            error = exc
            s = config.construct(Scenario, data)  # invalid, but listed with its key
        key = point_key(s)
        first = key not in seen
        seen.add(key)
        yield combo, Point(index=len(seen) - 1 if first else -1, key=key, values=values, scenario=s,
                           invalid=None if error is None else str(error)), error, first


def validate_point(data: dict[str, Any]) -> Scenario:
    """A point's scenario from its raw data (the base with the axes' values set), validated."""
    return validate_data(data)


def iter_points(spec: SweepSpec) -> Iterator[Point]:
    """:func:`expand`'s points one at a time, without its check that every axis value is usable by
    some point (that needs them all): what ``tlt sweep points`` uses to show the head of a big grid."""
    for _, point, _, first in _resolve(spec):
        if first:
            yield point


def expand(spec: SweepSpec) -> list[Point]:
    """Every point of the spec, in a fixed order, duplicates (same key) dropped.

    Raises an InputError naming the spec file and the axis for a value that no point can use; other
    invalid combinations become points with ``invalid`` set."""
    points: list[Point] = []
    # (axis, field, value) -> [value, some point using it is valid, first error of a point using it]
    usage: dict[tuple[int, str, str], list[Any]] = {}
    for combo, point, error, first in _resolve(spec):
        for axis, assignment in zip(spec.axes, combo, strict=True):
            for name, value in assignment.items():
                if axis.kind == "random" and axis.dists[name].dist != "choice":
                    continue  # drawn numbers are not the user's typing: an unusable draw is just a failed point
                entry = usage.setdefault((axis.index, name, repr(value)), [value, False, None])
                entry[1] = entry[1] or error is None
                entry[2] = entry[2] or error
        if first:
            points.append(point)
    unusable = [(k, v) for k, v in usage.items() if not v[1]]
    if unusable:
        # blame the value of the field the error names, when an axis varies it (not an innocent neighbour)
        (axis_index, name, _), (value, _, error) = next(
            ((k, v) for k, v in unusable if v[2].field == k[1]), unusable[0])
        axis = spec.axes[axis_index]
        raise InputError(f"{axis.label}: value {value!r} makes every point invalid: {error}", path=spec.path,
                         field=f"axes[{axis_index}].{name}")
    return points
