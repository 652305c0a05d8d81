"""A scenario's identity: its resolved TOML (``scenario.resolved.toml``) and content hash."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tltcore import config, config_files
from tltcore.errors import InputError
from tltcore.policy.spec import AnySpec, NoSDSpec, PolicyBase, as_spec
from tltsim.scenario.schema import Scenario


def policies_with_baseline(specs: tuple[AnySpec, ...]) -> tuple[AnySpec, ...]:
    """``specs`` with ``no-sd`` first (added when missing), duplicates (same name) dropped, order kept."""
    out: dict[str, AnySpec] = {"no-sd": NoSDSpec()}
    for spec in specs:
        out.setdefault(spec.name, spec)
    return tuple(out.values())


def policy_names(specs: tuple[AnySpec, ...]) -> tuple[str, ...]:
    """The specs' names: the text results are labelled with."""
    return tuple(spec.name for spec in specs)


def _name(spec: object) -> object:
    """A spec as the resolved file writes it: its shorthand text. A sweep point that failed
    validation holds the raw text or table it was given: a table that is a valid spec is written as
    its text, any other as it is (unset fields dropped; TOML has no null)."""
    if isinstance(spec, PolicyBase):
        return spec.name
    if isinstance(spec, dict):
        try:
            return as_spec(spec).name
        except (InputError, ValidationError):
            return {k: _name(v) for k, v in spec.items() if v is not None}
    return spec


def resolved_dict(s: Scenario) -> dict[str, Any]:
    """The scenario as nested plain data, policies as their shorthand text with ``no-sd`` first."""
    from tltsim.rl.presets import presets_with_baseline

    d = config.to_dict(s)
    names: list[object] = ["no-sd"]
    for name in map(_name, s.policies):
        if name not in names:
            names.append(name)
    d["policies"] = names
    d["presets_policy"] = _name(s.presets_policy)
    if s.presets:
        d["presets"] = list(presets_with_baseline(s.presets))
    return d


def scenario_toml(s: Scenario) -> str:
    """The resolved scenario as TOML (what ``scenario.resolved.toml`` holds)."""
    return config_files.dump_toml(resolved_dict(s))


def scenario_hash(s: Scenario, length: int = 10) -> str:
    """Short content hash of a run: the resolved scenario, the trace's content and the package
    version (and, for ``cost.model = "measured"``, which model served: a run that fell back to the
    roofline for want of profiles never shares a folder with a calibrated one). Editing a trace file
    or upgrading tlt gives a new results folder, never a silently
    overwritten one."""
    from tltcore import __version__

    h = hashlib.sha256(scenario_toml(s).encode())
    h.update(trace_fingerprint(s.trace.name, s.trace.seed, tokenizer=s.trace.tokenizer).encode())
    h.update(__version__.encode())
    if s.cost.table is not None and Path(s.cost.table).is_file():
        h.update(_file_sha256(str(Path(s.cost.table).resolve()), Path(s.cost.table).stat().st_mtime_ns).encode())
    if s.cost.model == "measured":  # which model served: calibrated constants, or the roofline fallback
        from tltsim.scenario.build import cost_fingerprint

        h.update(cost_fingerprint(s).encode())
    return h.hexdigest()[:length]


def trace_fingerprint(name: str, seed: int, *, tokenizer: str | None = None) -> str:
    """The trace file's sha256, or the parametric profile's name and seed. A framework's dump folder
    is the sha256 of its files' names and checksums; a tokenizer (which sets the token counts) adds
    its file's checksum. A trace file without a tokenizer fingerprints as it always did."""
    from tltsim.traces.catalog import CatalogEntry, resolve

    found = resolve(name)
    if isinstance(found, CatalogEntry):
        return f"profile:{found.name}:{seed}"
    if found.is_dir():
        from tltsim.traces.frameworks import dump_files

        h = hashlib.sha256()
        for f in dump_files(found):
            h.update(f"{f.name}\0{_file_sha256(str(f.resolve()), f.stat().st_mtime_ns)}\n".encode())
        text = "dump:" + h.hexdigest()
    else:
        text = _file_sha256(str(found.resolve()), found.stat().st_mtime_ns)
    if tokenizer is not None:
        from tltsim.traces.frameworks.tokens import tokenizer_file

        tok = tokenizer_file(tokenizer)
        text += ":tokenizer:" + _file_sha256(str(tok.resolve()), tok.stat().st_mtime_ns)
    return text


@lru_cache(maxsize=64)
def _file_sha256(path: str, mtime_ns: int) -> str:
    """Checksum cached by (path, modification time): a sweep hashes the same trace thousands of times."""
    from tltcore.input_files import sha256_of

    return sha256_of(Path(path))
