"""A scenario's identity: its resolved TOML (``scenario.resolved.toml``) and content hash."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from tltcore import config, config_files
from tltsim.scenario.schema import BASELINE_POLICY, Scenario


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

    d = config.to_dict(s)
    d["policies"] = list(policies_with_baseline(s.policies))
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
    h.update(trace_fingerprint(s.trace.name, s.trace.seed).encode())
    h.update(__version__.encode())
    if s.cost.table is not None and Path(s.cost.table).is_file():
        h.update(_file_sha256(str(Path(s.cost.table).resolve()), Path(s.cost.table).stat().st_mtime_ns).encode())
    if s.cost.model == "measured":  # which model served: calibrated constants, or the roofline fallback
        from tltsim.scenario.build import cost_fingerprint

        h.update(cost_fingerprint(s).encode())
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
