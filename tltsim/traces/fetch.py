"""`tlt trace fetch NAME`: download a catalogued public trace from its original source, check it, cache it.

A fresh clone has no ``../shared/traces``. Every catalogued trace whose bytes can be rebuilt from its
upstream repository carries a ``[traces.NAME.fetch]`` table: the upstream files (pinned to a commit)
with their size and sha256, and the converter (:mod:`tltsim.traces.upstream`) that turns them into
the canonical CSV the catalog's ``sha256`` describes. Fetching:

1. downloads each file with :mod:`urllib` (no extra dependency) into a temp folder (removed
   afterwards, or by the next fetch if this one was killed), refusing a server that announces or
   sends more bytes than the catalog says, a truncated body, or bytes whose sha256 differs;
2. converts them and checks the result against the catalog's sha256;
3. only then creates the cache folder (:func:`tltsim.traces.catalog.cache_dir`) if need be and moves
   the result in with an atomic rename.

So the cache holds a verified file or nothing: any failure (a refused checksum, a server that is
down, Ctrl-C) removes the temp folder. A cached file whose checksum matches is a cache hit: nothing is
downloaded unless ``--force``. ``$TLT_TRACE_MIRROR`` (or ``--mirror``) replaces
``https://raw.githubusercontent.com/`` with another base URL laid out the same way
(``OWNER/REPO/COMMIT/PATH``; ``http://``, ``https://`` or ``file://``): a mirror, or a local server in
the tests. ``$TLT_FETCH_TIMEOUT`` (seconds, default 300) is a deadline on the whole download, every
file of the trace from the first request to the last byte: each wait on the network gets only the time
left, so neither a server that never answers nor one that trickles a byte a second can keep the
command running past it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tltcore.deadline import bound_wait, left, seconds_from_env
from tltcore.errors import InputError
from tltcore.input_files import sha256_of
from tltsim.traces.catalog import CatalogEntry, cache_dir, catalog, find_file

GITHUB_RAW = "https://raw.githubusercontent.com/"
MIRROR_ENV = "TLT_TRACE_MIRROR"
TIMEOUT_ENV = "TLT_FETCH_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0  # the whole download: 16.6 MB (the largest trace) at 56 KB/s
#: Downloads at least this large show a progress bar (on a terminal's stderr).
PROGRESS_MIN_BYTES = 1 << 20
_CHUNK = 1 << 16
_TMP_PREFIX = ".tlt-fetch-"


@dataclass(frozen=True)
class FetchResult:
    """What :func:`fetch` did: the file now on the search path and whether it was downloaded."""

    path: Path | None
    downloaded: bool
    message: str


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def timeout_s() -> float:
    """The deadline on the whole download: ``$TLT_FETCH_TIMEOUT`` seconds, else 300."""
    return seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)


def source_url(base_url: str, path: str, mirror: str | None = None) -> str:
    """Where one upstream file is downloaded from: ``base_url + path``, with the GitHub raw prefix
    replaced by ``mirror`` (or ``$TLT_TRACE_MIRROR``) when one is given."""
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV) or None
    url = base_url + urllib.parse.quote(path)
    if mirror is not None and url.startswith(GITHUB_RAW):
        url = mirror.rstrip("/") + "/" + url[len(GITHUB_RAW):]
    try:
        parts = urllib.parse.urlsplit(url)
        scheme, _ = parts.scheme, parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", a port that is not a number
        raise InputError(f"cannot download '{url}': {_one_line(exc)}",
                         field="--mirror" if mirror is not None else "base_url") from None
    if scheme not in ("http", "https", "file"):
        raise InputError(f"cannot download '{url}': only http://, https:// and file:// URLs are supported",
                         field="--mirror" if mirror is not None else "base_url")
    return url


def _lookup(name: str) -> CatalogEntry:
    from tltcore.config import suggest

    entry = catalog().get(name)
    if entry is None:
        fetchable = [n for n, e in catalog().items() if e.fetch is not None and e.fetch.unavailable is None]
        raise InputError(f"unknown trace '{name}'{suggest(name, list(catalog()))}; downloadable traces: "
                         f"{', '.join(fetchable)} (tlt trace list shows all)")
    return entry


def _check_cache() -> Path:
    """The cache folder, checked before any download but not created: a failed fetch leaves no
    trace of itself, not even an empty folder. One line naming it when it cannot be written."""
    cache = cache_dir()
    if cache is None:
        raise InputError("no home folder to keep downloads in; set XDG_CACHE_HOME to a writable folder")
    if cache.exists() and not cache.is_dir():
        raise InputError("the trace cache is a file, not a folder; move it away or set XDG_CACHE_HOME",
                         path=cache)
    existing = cache
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"cannot write the trace cache ({existing} is not a writable folder); set XDG_CACHE_HOME "
                         "to a writable folder", path=cache)
    return cache


def _make_cache(cache: Path) -> None:
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write the trace cache ({_one_line(exc.strerror or exc)}); set XDG_CACHE_HOME to "
                         "a writable folder", path=cache) from None


def _sweep_stale(folder: Path) -> None:
    """Remove temp folders of fetches that were killed (their names carry the dead writer's pid)."""
    from tltcore.atomic import sweep_dead

    sweep_dead(folder, re.compile(rf"^{re.escape(_TMP_PREFIX)}.*-(\d+)-[A-Za-z0-9_]+$"))


@contextlib.contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int], None] | None]:
    """A rich download bar on stderr for large downloads on a terminal; nothing otherwise (so a
    failure in a script or a test stays one line)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    console = Console(stderr=True)
    if total < PROGRESS_MIN_BYTES or not console.is_terminal:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=console, transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda n: progress.advance(task, n)


def download(url: str, dest: Path, size: int, sha256: str, *, timeout: float, deadline: float | None = None,
             advance: Callable[[int], None] | None = None) -> None:
    """Stream ``url`` into ``dest``, refusing in one line anything but exactly ``size`` bytes with
    ``sha256``. Never reads more than ``size + 1`` bytes, whatever the server claims. The download
    must end by ``deadline`` (``time.monotonic``; default ``timeout`` seconds from now): each read
    takes what one wait on the network brings and the deadline is checked between reads, so the
    error names ``timeout``, the bound the user set, whatever the server's pace."""
    deadline = time.monotonic() + timeout if deadline is None else deadline
    late = InputError(f"{url}: download not finished within {timeout:g} s ({TIMEOUT_ENV} bounds the whole "
                      "download); nothing was cached")
    silent = InputError(f"{url}: no answer within {timeout:g} s ({TIMEOUT_ENV} bounds the whole download); nothing "
                        "was cached")
    answered = False
    request = urllib.request.Request(url, headers={"User-Agent": "tlt-trace-fetch"})
    try:
        if time.monotonic() >= deadline:
            raise late
        with urllib.request.urlopen(request, timeout=left(deadline)) as resp:
            answered = True
            announced = resp.headers.get("Content-Length")
            if announced is not None and announced.strip().isdigit() and int(announced) != size:
                raise InputError(f"{url}: the server announces {int(announced):,} bytes, the catalogued file has "
                                 f"{size:,}; refusing it (nothing was cached)")
            h, got = hashlib.sha256(), 0
            with dest.open("wb") as fh:
                while True:
                    if time.monotonic() >= deadline:
                        raise late
                    bound_wait(resp, deadline)
                    # read1: at most one wait on the socket (read(n) would wait until all n bytes came)
                    chunk = resp.read1(min(_CHUNK, size + 1 - got))
                    if not chunk:
                        break
                    got += len(chunk)
                    if got > size:
                        raise InputError(f"{url}: the server sent more than the catalogued {size:,} bytes; refusing "
                                         "it (nothing was cached)")
                    h.update(chunk)
                    fh.write(chunk)
                    if advance is not None:
                        advance(len(chunk))
    except InputError:
        raise
    except urllib.error.HTTPError as exc:
        raise InputError(f"{url}: the server answered HTTP {exc.code} {_one_line(exc.reason)} (nothing was cached)"
                         ) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise silent from None
        raise InputError(f"cannot download {url}: {_one_line(getattr(reason, 'strerror', None) or reason)} "
                         "(check the network or set TLT_TRACE_MIRROR; nothing was cached)") from None
    except TimeoutError:  # every wait ends at the deadline: a timeout is the deadline passing
        raise (late if answered else silent) from None
    except http.client.HTTPException as exc:
        raise InputError(f"{url}: broken HTTP response ({type(exc).__name__}: {_one_line(exc)}); nothing was "
                         "cached") from None
    except OSError as exc:
        raise InputError(f"cannot download {url}: {_one_line(exc.strerror or exc)} (nothing was cached)") from None
    except ValueError as exc:
        raise InputError(f"cannot download '{url}': {_one_line(exc)}") from None
    if got < size:
        raise InputError(f"{url}: download truncated at {got:,} of {size:,} bytes; refusing it (nothing was cached)")
    if h.hexdigest() != sha256:
        raise InputError(f"{url}: checksum mismatch (sha256 {h.hexdigest()[:16]}..., the catalog pins "
                         f"{sha256[:16]}...); refusing it (nothing was cached)")


def fetch(name: str, *, force: bool = False, mirror: str | None = None) -> FetchResult:
    """Make catalogued trace ``name`` available on the search path, downloading it if need be.

    Returns without touching the network when the trace needs no file (a parametric profile), is
    already in the cache with the catalogued checksum, or is found elsewhere on the search path with
    it (``force`` downloads a fresh copy into the cache in both cases). Refuses, in one line, an
    unknown name, an entry that cannot be rebuilt from upstream, and every download problem.
    """
    entry = _lookup(name)
    if entry.file is None:
        return FetchResult(None, False, f"{name} is a parametric profile: nothing to download, use it by name")
    spec = entry.fetch
    found = find_file(entry.file)
    cache = cache_dir()
    cached = cache / entry.file if cache is not None else None
    ok = found is not None and sha256_of(found) == entry.sha256
    if spec is None or spec.unavailable is not None:
        if ok and found is not None:
            return FetchResult(found, False, f"{name} is already available at {found}; nothing to download")
        why = spec.unavailable if spec is not None else "the catalog has no download source for it"
        raise InputError(f"cannot fetch '{name}': {why}")
    if ok and found is not None and not force:
        where = "cache hit" if found == cached else "already available"
        return FetchResult(found, False, f"{name}: {where} at {found} (sha256 ok); nothing downloaded "
                                         "(--force downloads it again)")
    cache = _check_cache()
    target = cache / entry.file
    if target.is_dir():
        raise InputError("is a folder where the downloaded trace would go; move it away", path=target, field="cache")
    timeout = timeout_s()
    deadline = time.monotonic() + timeout  # one deadline for every file of the trace
    urls = [(path, source_url(spec.base_url, path, mirror), size, sha) for path, size, sha in spec.files]
    total = sum(size for _, _, size, _ in urls)
    # Downloads go to the system temp folder; only the verified result enters the cache (write_with:
    # a temp name beside the target, then an atomic rename).
    scratch = Path(tempfile.gettempdir())
    _sweep_stale(scratch)
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{name[:60]}-{os.getpid()}-", dir=scratch))
    try:
        local: dict[str, Path] = {}
        with _progress(total, f"fetching {name}") as advance:
            for i, (path, url, size, sha) in enumerate(urls):
                local[path] = tmp / f"{i:04d}{Path(path).suffix[:16]}"
                download(url, local[path], size, sha, timeout=timeout, deadline=deadline, advance=advance)
        if spec.convert:
            from tltsim.traces.upstream import convert

            data = convert(spec.convert, local)
        else:
            data = next(iter(local.values())).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256:
            raise InputError(f"cannot fetch '{name}': the converted file has sha256 {digest[:16]}..., the catalog "
                             f"pins {str(entry.sha256)[:16]}...; nothing was cached")
        from tltcore.atomic import write_with

        _make_cache(cache)
        write_with(target, lambda p: Path(p).write_bytes(data), field="cache")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    note = ""
    shadow = find_file(entry.file)
    if shadow is not None and shadow != target:
        note = f"; note: {shadow} comes first on the search path"
    first_path, first_url = urls[0][0], urls[0][1]
    origin = first_url[: len(first_url) - len(urllib.parse.quote(first_path))]
    return FetchResult(target, True, f"fetched {name}: {target} ({len(urls)} file(s), {total:,} bytes from "
                                     f"{origin}, sha256 ok){note}")
