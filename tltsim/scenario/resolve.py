"""From a scenario file and settings (flags, ``--set``, sweep values) to one checked scenario.

Every layer works on the *raw* data (parsed TOML): the file's tables, then each dotted setting parsed
by its field's type and set in the data, then the whole tree validated once
(:func:`tltcore.config.validate_tree`), so the order of the settings never matters. Errors are one
line naming the file or the flag that set the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tltcore import config, config_files
from tltcore.errors import InputError
from tltsim.scenario.policy_paths import error_field, is_policy_path, policy_field_type, set_policy_field
from tltsim.scenario.schema import DEFAULT_POLICY_NAMES, Scenario, TraceSection


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


SPLITTERS = {"policies": split_policy_specs}
#: Fields whose values name files; relative ones resolve against the scenario file's folder.
FILE_FIELDS = ("trace.name", "trace.tokenizer", "model.name", "cost.table", "cluster.gpu_spec", "acceptance.profile")


def field_paths() -> list[str]:
    """Every addressable dotted field path (a policy's fields are ``policies.N.<field>`` besides)."""
    return config.field_paths(Scenario)


def set_field(data: dict[str, Any], dotted: str, value: Any, *, path: str | None) -> dict[str, Any]:
    """A copy of raw scenario ``data`` with the field at ``dotted`` set to ``value``: a field of a
    policy spec (``policies.1.threshold``, text parsed by its type) or any other field (a value
    already parsed, :func:`parse_setting`)."""
    if is_policy_path(dotted):
        return set_policy_field(data, dotted, value, path=path, defaults=DEFAULT_POLICY_NAMES)
    return config.set_dotted(data, dotted, value)


def set_fields(data: dict[str, Any], values: dict[str, Any], *, path: str | None) -> dict[str, Any]:
    """:func:`set_field` for each of ``values``, whole fields first and then fields inside policy
    specs, so ``policies`` and ``policies.0.threshold`` together mean the same in any order."""
    ordered = sorted(values.items(), key=lambda kv: is_policy_path(kv[0]))
    for dotted, value in ordered:
        data = set_field(data, dotted, value, path=path)
    return data


def setting_type(data: dict[str, Any], dotted: str, *, path: str | None, field: str | None = None) -> Any:
    """The declared type of the field at ``dotted`` in raw scenario ``data`` (a policy's field by the
    kind of the spec at that index); an unknown field or a section is refused."""
    if is_policy_path(dotted):
        return policy_field_type(data, dotted, path=path, defaults=DEFAULT_POLICY_NAMES)
    config.check_path(Scenario, dotted, path=path, field=field)
    return config.field_type(Scenario, dotted)


def parse_setting(dotted: str, value: Any, *, path: str | None) -> Any:
    """A setting's value as raw data for the field ``dotted`` (text parsed by the field's type); an
    unknown field or a section is refused."""
    config.check_path(Scenario, dotted, path=path)
    return config.parse_text(value, config.field_type(Scenario, dotted), where={"path": path, "field": dotted},
                             splitter=SPLITTERS.get(dotted))


def relative_to(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Raw scenario data with its relative file names (trace, model config, cost table, GPU spec)
    taken relative to ``base`` where a file exists there."""
    out = data
    for dotted in FILE_FIELDS:
        section, key = dotted.split(".")
        table = out.get(section)
        name = table.get(key) if isinstance(table, dict) else None
        if not isinstance(name, str) or not name.strip() or "\x00" in name or Path(name.strip()).is_absolute():
            continue
        try:
            candidate = base / name.strip()
            if candidate.exists():
                out = config.set_dotted(out, dotted, str(candidate.resolve()))
        except (OSError, ValueError):
            continue
    return out


def validate_data(data: Any, *, path: str | None = None) -> Scenario:
    """:func:`tltcore.config.validate_tree` for a scenario; an error inside a policy spec names the
    field without the spec kinds in pydantic's location (``policies.threshold``)."""
    try:
        return config.validate_tree(Scenario, data, path=path)
    except InputError as exc:
        if exc.field == error_field(exc.field):
            raise
        raise InputError(exc.message, path=exc.path, row=exc.row, field=error_field(exc.field)) from None


def scenario_from_dict(data: dict[str, Any], *, path: str | Path | None = None) -> Scenario:
    """Build and validate a scenario from parsed TOML (errors name ``path`` and the dotted field).
    Relative file names (trace, model config, cost table) resolve against ``path``'s folder when a
    file exists there."""
    if path is not None and isinstance(data, dict):
        data = relative_to(data, Path(path).parent)
    return validate_data(data, path=str(path) if path is not None else None)


BUNDLED_SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"


def bundled_scenarios() -> dict[str, Path]:
    """The example scenarios shipped with tlt, by name (``dapo_qwen32b_polytrace``)."""
    return config_files.bundled_files(BUNDLED_SCENARIOS)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file (TOML, or YAML for ``.yaml`` / ``.yml``), or a bundled one by
    name (a UTF-8 byte-order mark is fine), with the same checks as :func:`resolve` (which also reports
    what is set but unused)."""
    return resolve(path).scenario


def apply_override(scenario: Scenario, dotted: str, value: Any, *, path: str | None = "override") -> Scenario:
    """A copy of ``scenario`` with the field at ``dotted`` (any depth) set to ``value``; text is
    parsed by the field's type (``"8"`` -> 8, ``"true"`` -> True, ``"a,b"`` or ``["a", "b"]`` -> a
    tuple). The result is validated."""
    dotted = dotted.strip()
    raw = value if is_policy_path(dotted) else parse_setting(dotted, value, path=path)
    return validate_data(set_field(config.to_dict(scenario), dotted, raw, path=path), path=path)


def with_values(s: Scenario, values: dict[str, Any], *, path: str | None = None) -> Scenario:
    """A copy of ``s`` with the dotted fields of ``values`` set (Python values, not text), validated."""
    for dotted in values:
        if not is_policy_path(dotted):
            config.check_path(Scenario, dotted, path=path)
    plain = {dotted: list(value) if isinstance(value, tuple) else value for dotted, value in values.items()}
    return validate_data(set_fields(config.to_dict(s), plain, path=path), path=path)


def validate(s: Scenario, *, path: str | None = None) -> None:
    """Check every field's range and the combinations (layout, weights vs memory, policy specs,
    names) of a scenario built without validation (a sweep point); one built normally already is."""
    validate_data(config.to_dict(s), path=path)


# ---- one path from a file and settings to a checked scenario ---------------------------------------
#: Fields only whole RL runs (``presets``) read: set without presets, they change nothing.
RL_ONLY_FIELDS = ("drafter.stale_quality", "drafter.drift", "drafter.recovery_samples", "presets_policy")
RL_ONLY_SECTIONS = ("spot.", "rl.")


@dataclass(frozen=True)
class Resolved:
    """A scenario built from its layers (defaults, a scenario file, then settings such as
    command-line flags and ``--set``) and validated once, after every setting was applied.

    ``given`` maps each explicitly set dotted field to where it was set (the file's path or the
    flag), so an error found later (:func:`~tltsim.scenario.build.prepare`) still names the file or
    flag a user can fix; ``warnings`` are one line each (without the ``tlt: warning:`` prefix) for
    settings that are valid but change nothing."""

    scenario: Scenario
    given: dict[str, str]
    file: str | None = None
    flags: tuple[str, ...] = ()
    notes: tuple[tuple[str, str], ...] = ()  # (kind, warning): rl-only, policies, trace-seed

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


def _same(value: Any) -> Any:
    """A parsed setting as compared and shown in "given twice" (lists as tuples, as fields hold them)."""
    return tuple(value) if isinstance(value, list) else value


def resolve(scenario: str | Path | None = None, settings: Sequence[tuple[str, Any, str]] = ()) -> Resolved:
    """The one way from a scenario file (or the defaults) and ``(dotted field, value, source)``
    settings to a checked scenario: what ``tlt sim run`` flags, ``--set`` and ``tlt validate`` use,
    with the same validation that sweep points and files get.

    Every setting is applied to the raw data first and the result validated once, so their order
    never matters (``--set cost.model=table --set cost.table=X`` is the same as the reverse). A field
    given twice with different values is refused (which one wins would depend on the order); ``None``
    values are skipped (a flag not given). ``policies`` and ``presets`` set in the same layer are
    refused: a whole RL run takes each preset's own SD policy, so the policies would be silently
    ignored."""
    file: str | None = None
    given: dict[str, str] = {}
    data: dict[str, Any] = {}
    if scenario is not None:
        p, text = config_files.read_file(scenario, bundled_scenarios(), "scenario")
        file = str(p)
        data = relative_to(config_files.load_config_text(text, path=p), p.parent)
        given = dict.fromkeys(_leaf_paths(data), file)
    by_flag: dict[str, tuple[str, Any]] = {}
    flags: list[str] = []
    # whole fields first, then fields inside policy specs (which need the specs they are set in)
    for dotted, value, source in sorted(settings, key=lambda st: is_policy_path(st[0].strip())):
        if value is None:
            continue
        dotted = dotted.strip()
        parsed = value if is_policy_path(dotted) else parse_setting(dotted, value, path=source)
        if dotted in by_flag and _same(by_flag[dotted][1]) != _same(parsed):
            first, before = by_flag[dotted]
            raise InputError(f"given twice with different values ({first}: {_same(before)!r}, {source}: "
                             f"{_same(parsed)!r}); give it once (which one wins would depend on the order)",
                             path=source, field=dotted)
        by_flag[dotted] = (source, parsed)
        flags.append(source)
        data = set_field(data, dotted, parsed, path=source)
    data, gpu_notes = _gpu_layers(data, given, by_flag)
    given.update({dotted: source for dotted, (source, _) in by_flag.items()})
    _check_policies_vs_presets(data, given, by_flag)
    try:
        s = validate_data(data)
    except InputError as exc:
        raise _locate(exc, given, file, tuple(flags)) from None
    return Resolved(s, given, file, tuple(flags), tuple(gpu_notes + _notes(s, given, by_flag)))


def _is_gpu_spec(dotted: str) -> bool:
    return dotted == "cluster.gpu_spec" or dotted.startswith("cluster.gpu_spec.")


def _gpu_layers(data: dict[str, Any], given: dict[str, str],
                by_flag: dict[str, tuple[str, Any]]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """A GPU set on the command line replaces the scenario file's, whichever way each names it:
    ``--gpu-spec`` over the file's ``cluster.gpu`` preset, ``--gpu`` over the file's
    ``cluster.gpu_spec`` (each with a warning line). Given in the same layer, the two must agree
    (:class:`~tltsim.scenario.schema.ClusterSection` refuses a spec whose name is not ``gpu``).
    ``given`` holds the file's fields only here and loses the replaced ones."""
    flag_gpu, flag_spec = "cluster.gpu" in by_flag, "cluster.gpu_spec" in by_flag
    cluster = data.get("cluster")
    if flag_gpu == flag_spec or not isinstance(cluster, dict):
        return data, []
    if flag_spec and "cluster.gpu" in given:
        old, drop, by = cluster.get("gpu"), ["cluster.gpu"], by_flag["cluster.gpu_spec"][0]
        what = f"the scenario's cluster.gpu = '{old}' is replaced by the GPU spec {by} gives"
        cluster = {k: v for k, v in cluster.items() if k != "gpu"}
    elif flag_gpu and any(_is_gpu_spec(k) for k in given):
        drop, by = [k for k in given if _is_gpu_spec(k)], by_flag["cluster.gpu"][0]
        what = f"the scenario's cluster.gpu_spec is replaced by the preset {by} names"
        cluster = {k: v for k, v in cluster.items() if k != "gpu_spec"}
    else:
        return data, []
    where = given[drop[0]]
    for k in drop:
        given.pop(k, None)
    return {**data, "cluster": cluster}, [("gpu", f"{where}: {what}")]


def _check_policies_vs_presets(data: dict[str, Any], given: dict[str, str],
                               by_flag: dict[str, tuple[str, Any]]) -> None:
    """Refuse ``policies`` given beside ``presets`` in the same layer, or on the command line over a
    scenario's presets: no preset run would use them. The default policies beside presets are what
    ``scenario.resolved.toml`` of every preset run states (a resolved file lists every field), so they
    are read back without a word."""
    presets, policies = data.get("presets"), data.get("policies")
    if not presets or "policies" not in given or not isinstance(policies, list | tuple):
        return
    if tuple(p.strip() if isinstance(p, str) else p for p in policies) == DEFAULT_POLICY_NAMES:
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
    rl_only = [f for f in given if f.startswith(RL_ONLY_SECTIONS) or f.split(".", 1)[0] in RL_ONLY_FIELDS
               or f in RL_ONLY_FIELDS]
    if rl_only and not s.presets:
        where = ", ".join(dict.fromkeys(given[f] for f in rl_only))
        shown = ", ".join(rl_only[:4]) + (f" and {len(rl_only) - 4} more" if len(rl_only) > 4 else "")
        verb = "is" if len(rl_only) == 1 else "are"
        out.append(("rl-only", f"{where}: {shown} {verb} used only by whole RL runs (presets, --preset); this run "
                    "compares rollout policies, so changing it does nothing"))
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
