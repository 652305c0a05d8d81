"""Where traces come from: the search path and the catalog of public traces.

Third-party trace files are never committed. They are found on a search path —
``$TLT_TRACE_PATH`` (``os.pathsep``-separated), then ``traces/`` and ``../shared/traces/`` of the
source checkout tlt runs from (of the current directory when tlt is installed from a wheel), then
the download cache ``$XDG_CACHE_HOME/tlt/traces`` (default ``~/.cache/tlt/traces``) that
``tlt trace fetch`` fills — by catalog name (``polytrace_rl_rollouts``), by file name, or by explicit
path. The cache comes last so that a checkout next to ``../shared`` behaves exactly as before; every
copy is checked against the same catalog sha256, so which one wins does not change the data.
``$TLT_SHARED_DIR`` replaces ``../shared`` (tests point it at an empty folder to act as a fresh clone).
Parametric profiles (``intern_s1_math``) need no file at all. The catalog itself is package data
(``tltsim/data/catalog.toml``), so an installed tlt knows every trace by name.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tltcore.errors import InputError
from tltcore.shared_paths import project_root

CATALOG_FILE = Path(__file__).resolve().parents[1] / "data" / "catalog.toml"
CATALOG_ENV = "TLT_TRACE_CATALOG"


def shared_dir() -> Path:
    """The team's shared folder (``../shared`` beside the checkout), or ``$TLT_SHARED_DIR``: one
    search-path rule for traces, paper tables and GPU profiles, :func:`tltcore.shared_paths.shared_dir`.

    Overridable so tests can act as a fresh clone on a machine that has ``../shared``.
    """
    from tltcore.shared_paths import shared_dir as _shared

    return _shared()


def cache_dir() -> Path | None:
    """Where ``tlt trace fetch`` keeps downloads: ``$XDG_CACHE_HOME/tlt/traces``, else
    ``~/.cache/tlt/traces`` (the XDG base-directory rule: a relative XDG_CACHE_HOME is ignored).
    None when there is no home folder to put it in."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "tlt" / "traces"
    try:
        return Path.home() / ".cache" / "tlt" / "traces"
    except RuntimeError:  # no HOME and no passwd entry
        return None


@dataclass(frozen=True)
class FetchSpec:
    """How ``tlt trace fetch`` rebuilds a catalogued file from its original source.

    ``files`` are ``(path, bytes, sha256)`` below ``base_url`` (pinned to a commit); ``convert`` names
    the converter in :mod:`tltsim.traces.upstream`. ``unavailable`` (instead of files) says why the
    entry cannot be downloaded and how to get it.
    """

    base_url: str = ""
    convert: str = ""
    files: tuple[tuple[str, int, str], ...] = ()
    unavailable: str | None = None


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
    fetch: FetchSpec | None = None


def search_path() -> list[Path]:
    """Folders searched for trace files, in order."""
    env = os.environ.get("TLT_TRACE_PATH", "")
    dirs = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    root = project_root()
    dirs += [root / "traces", shared_dir() / "traces"]
    cache = cache_dir()
    if cache is not None:
        dirs.append(cache)
    return dirs


def catalog() -> dict[str, CatalogEntry]:
    """The catalog, keyed by name (files first, then profiles).

    ``$TLT_TRACE_CATALOG`` names another catalog file instead of the packaged one (a private list of
    traces, or a test's small entries with made-up upstream files).
    """
    path = Path(os.environ.get(CATALOG_ENV) or CATALOG_FILE)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = 0
    return _load_catalog(path, stamp)


@cache
def _load_catalog(path: Path, stamp: int) -> dict[str, CatalogEntry]:
    """The parsed catalog; ``stamp`` (the file's mtime) makes an edited file be read again."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"cannot read the trace catalog: {exc}", path=path, field=CATALOG_ENV) from None
    entries: dict[str, CatalogEntry] = {}
    for section in ("traces", "profiles"):
        for name, fields in data.get(section, {}).items():
            entries[name] = CatalogEntry(name=name, file=fields.get("file"), origin=fields["origin"],
                                         license=fields["license"], unit=fields["unit"],
                                         description=fields["description"], sha256=fields.get("sha256"),
                                         rows=fields.get("rows"), per_step=fields.get("per_step"),
                                         fetch=_fetch_spec(fields.get("fetch")))
    return entries


def _fetch_spec(raw: dict | None) -> FetchSpec | None:
    if raw is None:
        return None
    files = tuple((f["path"], int(f["bytes"]), f["sha256"]) for f in raw.get("files", []))
    return FetchSpec(base_url=raw.get("base_url", ""), convert=raw.get("convert", ""), files=files,
                     unavailable=raw.get("unavailable"))


def how_to_get(entry: CatalogEntry) -> str:
    """One clause telling a user how to obtain a catalogued file that is not on the search path."""
    if entry.fetch is not None and entry.fetch.unavailable is None:
        return f"tlt trace fetch {entry.name}"
    if entry.fetch is not None:
        return "not downloadable: see tlt trace fetch " + entry.name
    return "put it in a folder on TLT_TRACE_PATH"


def find_file(file_name: str) -> Path | None:
    """First match of ``file_name`` on the search path, or None."""
    for d in search_path():
        candidate = d / file_name
        if candidate.is_file():
            return candidate
    return None


def resolve(name_or_path: str | os.PathLike) -> Path | CatalogEntry:
    """A path to an existing file or folder (an RL framework's rollout dump), or the catalog entry
    of a parametric profile.

    Tries, in order: an existing path; a catalog name; a file name on the search path.
    """
    text = str(name_or_path)
    as_path = Path(text).expanduser()
    if as_path.is_file() or as_path.is_dir():
        return as_path
    entry = catalog().get(text)
    if entry is not None:
        if entry.file is None:
            return entry
        found = find_file(entry.file)
        if found is None:
            raise InputError(f"trace '{text}' ({entry.file}) is not downloaded: {how_to_get(entry)} "
                             f"(searched {', '.join(str(p) for p in search_path())}; or set TLT_TRACE_PATH)")
        return found
    found = find_file(text)
    if found is not None:
        return found
    from tltcore.config import suggest

    raise InputError(f"unknown trace '{text}'{suggest(text, list(catalog()))}: not a file, not in the catalog "
                     f"({', '.join(catalog())}), not on the search path")
