"""`tlt model fetch ORG/NAME`: download a model's ``config.json`` from the Hugging Face hub, check it, write it.

On a machine with a network, ``https://huggingface.co/ORG/NAME/resolve/REVISION/config.json`` (or
``$HF_ENDPOINT`` instead of ``https://huggingface.co``, a mirror) is downloaded with :mod:`urllib` (no
extra dependency):

* ``$HF_TOKEN``, when set, is sent as ``Authorization: Bearer ...`` to the endpoint's host only (never
  to another host a redirect leads to) and never appears in any message;
* the download is bounded in time -- ``$TLT_FETCH_TIMEOUT`` seconds (default 60) from the first request
  to the last byte, each wait on the network getting only the time left, so neither a server that never
  answers nor one that trickles a byte a second keeps the command running -- and in size
  (:data:`MAX_CONFIG_BYTES`: real config.json files are a few KB);
* the bytes are read by :mod:`tltcore.model_config`, the reader every command uses, *before* anything is
  written: an HTML error page, a JSON without ``model_type`` or a config tlt cannot read is refused in one
  line and nothing is written;
* the file is written as the hub served it, byte for byte, atomically (:func:`tltcore.atomic.write_with`),
  with a hidden sidecar (``.config.json.tlt-fetch.json``: the URL, revision and sha256) that marks it as
  tlt's. An existing file is replaced only when its sidecar says tlt wrote exactly those bytes: a
  user's own config.json, or one they edited since, is never overwritten.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tltcore.deadline import bound_wait, left, seconds_from_env
from tltcore.errors import InputError
from tltcore.model_config import ModelConfig, parse_config_bytes

HF_ENDPOINT = "https://huggingface.co"
ENDPOINT_ENV = "HF_ENDPOINT"
TOKEN_ENV = "HF_TOKEN"
TIMEOUT_ENV = "TLT_FETCH_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
#: The largest config.json accepted (real ones are 1-20 KB; a multimodal one with every layer listed, ~50 KB).
MAX_CONFIG_BYTES = 1 << 20
WRITER = "tlt model fetch"
_CHUNK = 1 << 16
#: Hub repository ids: ``ORG/NAME``, letters, digits, ``-``, ``_``, ``.`` (the hub's own rule, 96 characters).
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


@dataclass(frozen=True)
class Fetched:
    """What :func:`fetch` wrote: the file, where it came from, and the model it describes."""

    path: Path
    url: str
    size: int
    config: ModelConfig

    def message(self) -> str:
        return f"{self.path}: config.json of {self.config.family} ('{self.config.model_type}'), {self.size:,} bytes " \
               f"from {self.url}"


def timeout_s() -> float:
    """The deadline on the whole download: ``$TLT_FETCH_TIMEOUT`` seconds, else 60."""
    return seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)


def config_url(repo_id: str, revision: str = "main", endpoint: str | None = None) -> str:
    """``ENDPOINT/ORG/NAME/resolve/REVISION/config.json``; the endpoint is ``$HF_ENDPOINT`` when set."""
    if not _REPO_ID.match(repo_id) or ".." in repo_id:
        raise InputError(f"'{repo_id}' is not a hub model id: give ORG/NAME (letters, digits, '-', '_', '.'), e.g. "
                         "Qwen/Qwen3-8B", field="ORG/NAME")
    if not revision.strip() or any(c in revision for c in "\x00\r\n") or len(revision) > 255:
        raise InputError(f"'{revision}' is not a branch, tag or commit", field="--revision")
    base = (endpoint if endpoint is not None else os.environ.get(ENDPOINT_ENV) or HF_ENDPOINT).rstrip("/")
    try:
        parts = urllib.parse.urlsplit(base)
        _ = parts.port
    except ValueError as exc:
        raise InputError(f"'{base}' is not a URL ({exc})", field=ENDPOINT_ENV) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"'{base}' is not an http:// or https:// URL", field=ENDPOINT_ENV)
    return f"{base}/{repo_id}/resolve/{urllib.parse.quote(revision, safe='')}/config.json"


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Redirects carry the token only to the host it was meant for (urllib would forward it anywhere)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise InputError(f"{req.full_url}: redirected to '{urllib.parse.urlsplit(newurl).scheme}:' (http and "
                             "https only); nothing was written")
        token = req.unredirected_hdrs.get("Authorization")
        if token and urllib.parse.urlsplit(newurl).netloc == urllib.parse.urlsplit(req.full_url).netloc:
            new.add_unredirected_header("Authorization", token)
        return new


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def download(url: str, *, token: str | None, timeout: float) -> bytes:
    """The body at ``url`` (at most :data:`MAX_CONFIG_BYTES`), within ``timeout`` seconds in all; every
    problem one line naming the URL (never the token)."""
    deadline = time.monotonic() + timeout
    late = InputError(f"{url}: download not finished within {timeout:g} s ({TIMEOUT_ENV} bounds it); nothing was "
                      "written")
    silent = InputError(f"{url}: no answer within {timeout:g} s ({TIMEOUT_ENV} bounds it); nothing was written")
    request = urllib.request.Request(url, headers={"User-Agent": "tlt-model-fetch", "Accept": "application/json"})
    if token:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(_SameHostAuth)
    answered = False
    chunks: list[bytes] = []
    got = 0
    try:
        with opener.open(request, timeout=left(deadline)) as resp:
            answered = True
            announced = resp.headers.get("Content-Length")
            if announced is not None and announced.strip().isdigit() and int(announced) > MAX_CONFIG_BYTES:
                raise InputError(f"{url}: the server announces {int(announced):,} bytes; a config.json is at most "
                                 f"{MAX_CONFIG_BYTES:,} (nothing was written)")
            while True:
                if time.monotonic() >= deadline:
                    raise late
                bound_wait(resp, deadline)
                chunk = resp.read1(min(_CHUNK, MAX_CONFIG_BYTES + 1 - got))
                if not chunk:
                    break
                got += len(chunk)
                if got > MAX_CONFIG_BYTES:
                    raise InputError(f"{url}: more than {MAX_CONFIG_BYTES:,} bytes: not a config.json (nothing was "
                                     "written)")
                chunks.append(chunk)
    except InputError:
        raise
    except urllib.error.HTTPError as exc:
        hint = {401: f"a gated or private model needs {TOKEN_ENV} (" + ("the one set was refused" if token else
                                                                          "none is set") + ")",
                403: f"access refused: accept the model's licence on the hub, with the account of {TOKEN_ENV}",
                404: "check ORG/NAME and --revision"}.get(exc.code, "")
        raise InputError(f"{url}: the server answered HTTP {exc.code} {_one_line(exc.reason)}"
                         f"{'; ' + hint if hint else ''} (nothing was written)") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise silent from None
        raise InputError(f"cannot download {url}: {_one_line(getattr(reason, 'strerror', None) or reason)} "
                         f"(check the network, or set {ENDPOINT_ENV} to a mirror; nothing was written)") from None
    except TimeoutError:
        raise (late if answered else silent) from None
    except http.client.HTTPException as exc:
        raise InputError(f"{url}: broken HTTP response ({type(exc).__name__}); nothing was written") from None
    except OSError as exc:
        raise InputError(f"cannot download {url}: {_one_line(exc.strerror or exc)} (nothing was written)") from None
    return b"".join(chunks)


def check_config(data: bytes, url: str) -> ModelConfig:
    """``data`` read as a config.json by the one reader; refused (naming ``url``) when it is not one."""
    try:
        raw = parse_config_bytes(data)
    except InputError as exc:
        start = data.lstrip()[:15].lower()
        what = " (an HTML page: the hub's error or login page?)" if start.startswith((b"<!doctype", b"<html")) else ""
        raise InputError(f"not a config.json: {exc.message}{what}; nothing was written", path=url) from None
    if "model_type" not in raw and not isinstance(raw.get("text_config"), dict):
        raise InputError("not a model's config.json (no model_type); nothing was written", path=url)
    try:
        return ModelConfig.from_dict(raw, path=url)
    except InputError as exc:
        raise InputError(f"{exc.message}; nothing was written", path=url, field=exc.field) from None


def sidecar(path: Path) -> Path:
    """The hidden file beside ``path`` that marks it as written by ``tlt model fetch``."""
    return path.with_name(f".{path.name}.tlt-fetch.json")


def fetched_from(path: Path) -> dict[str, Any] | None:
    """The sidecar's record when ``path`` holds exactly the bytes ``tlt model fetch`` wrote there."""
    try:
        record = json.loads(sidecar(path).read_bytes()[: 1 << 16])
        data = path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("writer") != WRITER:
        return None
    return record if record.get("sha256") == hashlib.sha256(data).hexdigest() else None


def fetch(repo_id: str, out: Path, *, revision: str = "main") -> Fetched:
    """Download, check and write ``repo_id``'s ``config.json`` at ``out`` (see the module's rules)."""
    from tltcore.atomic import check_output_file, write_with

    url = config_url(repo_id, revision)
    check_output_file(out, field="--out", writer=WRITER, written_by=lambda p: fetched_from(p) is not None)
    data = download(url, token=os.environ.get(TOKEN_ENV) or None, timeout=timeout_s())
    config = check_config(data, url)
    record = {"writer": WRITER, "repo_id": repo_id, "revision": revision, "url": url,
              "sha256": hashlib.sha256(data).hexdigest()}
    write_with(out, lambda tmp: Path(tmp).write_bytes(data), field="--out")
    write_with(sidecar(out), lambda tmp: Path(tmp).write_text(json.dumps(record, indent=1) + "\n"), field="--out")
    return Fetched(out, url, len(data), config)


__all__ = ["DEFAULT_TIMEOUT_S", "ENDPOINT_ENV", "HF_ENDPOINT", "MAX_CONFIG_BYTES", "TIMEOUT_ENV", "TOKEN_ENV",
           "WRITER", "Fetched", "check_config", "config_url", "download", "fetch", "fetched_from", "sidecar",
           "timeout_s"]
