"""Where traces come from: the search path and the catalog of public traces.

Third-party trace files are never committed. They are found on a search path —
``$TLT_TRACE_PATH`` (``os.pathsep``-separated), then ``traces/`` and ``../shared/traces/`` of the
source checkout tlt runs from (of the current directory when tlt is installed from a wheel) — by
catalog name (``polytrace_rl_rollouts``), by file name, or by explicit path. Parametric profiles
(``intern_s1_math``) need no file at all. The catalog itself is package data
(``tltsim/data/catalog.toml``), so an installed tlt knows every trace by name.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tltsim.errors import InputError

CATALOG_FILE = Path(__file__).resolve().parents[1] / "data" / "catalog.toml"
_CHECKOUT = Path(__file__).resolve().parents[2]


def project_root() -> Path:
    """The source checkout tlt runs from, or the current directory for an installed package."""
    return _CHECKOUT if (_CHECKOUT / "pyproject.toml").is_file() else Path.cwd()


@dataclass(frozen=True)
class CatalogEntry:
    """One named trace: a public file (``file``) or a parametric profile (``file`` is None)."""

    name: str
    file: str | None
    origin: str
    license: str
    unit: str
    description: str
    sha256: str | None = None
    rows: int | None = None
    per_step: bool | None = None


def search_path() -> list[Path]:
    """Folders searched for trace files, in order."""
    env = os.environ.get("TLT_TRACE_PATH", "")
    dirs = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    root = project_root()
    dirs += [root / "traces", root.parent / "shared" / "traces"]
    return dirs


@cache
def catalog() -> dict[str, CatalogEntry]:
    """The catalog, keyed by name (files first, then profiles)."""
    with CATALOG_FILE.open("rb") as fh:
        data = tomllib.load(fh)
    entries: dict[str, CatalogEntry] = {}
    for section in ("traces", "profiles"):
        for name, fields in data.get(section, {}).items():
            entries[name] = CatalogEntry(name=name, file=fields.get("file"), origin=fields["origin"],
                                         license=fields["license"], unit=fields["unit"],
                                         description=fields["description"], sha256=fields.get("sha256"),
                                         rows=fields.get("rows"), per_step=fields.get("per_step"))
    return entries


def find_file(file_name: str) -> Path | None:
    """First match of ``file_name`` on the search path, or None."""
    for d in search_path():
        candidate = d / file_name
        if candidate.is_file():
            return candidate
    return None


def resolve(name_or_path: str | os.PathLike) -> Path | CatalogEntry:
    """A path to an existing file, or the catalog entry of a parametric profile.

    Tries, in order: an existing path; a catalog name; a file name on the search path.
    """
    text = str(name_or_path)
    as_path = Path(text).expanduser()
    if as_path.is_file():
        return as_path
    entry = catalog().get(text)
    if entry is not None:
        if entry.file is None:
            return entry
        found = find_file(entry.file)
        if found is None:
            raise InputError(f"trace '{text}' ({entry.file}) not found on the search path "
                             f"{[str(p) for p in search_path()]}; set TLT_TRACE_PATH")
        return found
    found = find_file(text)
    if found is not None:
        return found
    raise InputError(f"unknown trace '{text}': not a file, not in the catalog ({', '.join(catalog())}), "
                     "not on the search path")


def sha256_of(path: Path) -> str:
    """Checksum of a file, to tell whether a found copy is the catalogued one."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
