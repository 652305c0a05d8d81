"""A made-up upstream for `tlt trace fetch` tests: no machine here has internet, and no third-party
data may enter the repository.

:func:`make_upstream` writes a small file in the upstream layout of the AIME trace
(task-hardness-analysis ``per_record_stats.csv``) under a mirror tree ``OWNER/REPO/COMMIT/PATH`` and a
catalog (``$TLT_TRACE_CATALOG``) whose entries point at it: ``fake_aime`` (good), ``fake_badsum`` (the
catalog pins another sha256), ``fake_gone`` (a file the mirror lacks), ``fake_unavailable`` (cannot be
rebuilt), ``fake_noconvert`` (stored as is) and a profile. :func:`serve` serves a folder over HTTP on
127.0.0.1 with hostile modes chosen by the first path component (``/ok/``, ``/404/``, ``/lie/``, ``/drip/``...).
:func:`fresh_clone_env` is the environment of a clone with no ``../shared`` and an empty cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tltsim.traces.upstream import task_hardness_aime

BASE = "https://raw.githubusercontent.com/someone/aime-lengths/0123456789abcdef0123456789abcdef01234567/"
UPSTREAM_PATH = "reports/run 1/per_record_stats.csv"  # a space: URLs must be quoted
HEADER = ("path,year,model,gpu,problem,correct,tok_len,reported_completion_tokens,tokens_from_logprobs,"
          "length_consistent,len_chars,mean_token_logprob,mean_negative_logprob")


def upstream_csv() -> bytes:
    """Two AIME problems x 8 generations, listed twice (experiment_archive/ and results/) as upstream."""
    lines = [HEADER]
    for prefix in ("experiment_archive/run0", "results"):
        for year, part, problem in (("2001", "II", "3"), ("1999", "I", "12")):
            for k in (7, 0, 3, 1, 2, 4, 6, 5):
                tok = 16000 if (k == 7 and year == "2001") else 1000 + 37 * k + int(problem)
                path = (f"{prefix}/self_classification/aime/deepseek-ai_X/temp_0.6/{year}/{part}/{problem}/gen_{k}/"
                        "result.json")
                lines.append(f"{path},{year},m,,{problem},{k % 2 == 0},{tok},{tok},{tok},True,{3 * tok},-0.3,0.3")
    return ("\r\n".join(lines) + "\r\n").encode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Upstream:
    mirror: Path  # folder laid out as OWNER/REPO/COMMIT/PATH
    catalog: Path
    raw: bytes  # the upstream file
    converted: bytes  # what fake_aime becomes in the cache

    def file_url(self) -> str:
        return self.mirror.as_uri()


def make_upstream(root: Path) -> Upstream:
    raw = upstream_csv()
    mirror = root / "mirror"
    dest = mirror / BASE.removeprefix("https://raw.githubusercontent.com/") / UPSTREAM_PATH
    dest.parent.mkdir(parents=True)
    dest.write_bytes(raw)
    converted = task_hardness_aime({UPSTREAM_PATH: dest})
    files = f'files = [{{ path = "{UPSTREAM_PATH}", bytes = {len(raw)}, sha256 = "{sha(raw)}" }}]'
    common = 'origin = "made up"\nlicense = "none"\nunit = "tokens"\ndescription = "test"\n'
    catalog = root / "catalog.toml"
    catalog.write_text(f"""
[traces.fake_aime]
file = "fake_aime.csv"
{common}rows = 16
sha256 = "{sha(converted)}"
[traces.fake_aime.fetch]
base_url = "{BASE}"
convert = "task_hardness_aime"
{files}

[traces.fake_badsum]
file = "fake_badsum.csv"
{common}sha256 = "{sha(converted)}"
[traces.fake_badsum.fetch]
base_url = "{BASE}"
convert = "task_hardness_aime"
files = [{{ path = "{UPSTREAM_PATH}", bytes = {len(raw)}, sha256 = "{'0' * 64}" }}]

[traces.fake_wrongconvert]
file = "fake_wrongconvert.csv"
{common}sha256 = "{'1' * 64}"
[traces.fake_wrongconvert.fetch]
base_url = "{BASE}"
convert = "task_hardness_aime"
{files}

[traces.fake_noconvert]
file = "fake_noconvert.csv"
{common}sha256 = "{sha(raw)}"
[traces.fake_noconvert.fetch]
base_url = "{BASE}"
{files}

[traces.fake_gone]
file = "fake_gone.csv"
{common}sha256 = "{sha(converted)}"
[traces.fake_gone.fetch]
base_url = "{BASE}"
convert = "task_hardness_aime"
files = [{{ path = "not/there.csv", bytes = 10, sha256 = "{'2' * 64}" }}]

[traces.fake_unavailable]
file = "fake_unavailable.csv"
{common}sha256 = "{'3' * 64}"
[traces.fake_unavailable.fetch]
unavailable = "it was resampled; ask a colleague"

[traces.fake_nosource]
file = "fake_nosource.csv"
{common}sha256 = "{'4' * 64}"

[profiles.intern_s1_math]
{common}""")
    return Upstream(mirror, catalog, raw, converted)


def fresh_clone_env(root: Path, upstream: Upstream | None = None) -> dict[str, str]:
    """Environment of a clone without ``../shared``: an empty shared folder, an empty cache, no
    TLT_TRACE_PATH; with ``upstream``, its catalog and a file:// mirror."""
    (root / "no-shared").mkdir(exist_ok=True)
    env = {"TLT_SHARED_DIR": str(root / "no-shared"), "XDG_CACHE_HOME": str(root / "cache"), "TLT_TRACE_PATH": "",
           "TLT_FETCH_TIMEOUT": "3"}
    if upstream is not None:
        env |= {"TLT_TRACE_CATALOG": str(upstream.catalog), "TLT_TRACE_MIRROR": upstream.file_url()}
    return env


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves ``directory`` below a first path component that picks the behaviour."""

    release: threading.Event
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _body(self, rel: str) -> bytes | None:
        path = Path(self.directory) / rel
        return path.read_bytes() if path.is_file() else None

    def do_GET(self) -> None:
        from urllib.parse import unquote

        self.requests.append(self.path)
        _, mode, rest = self.path.split("/", 2)
        body = self._body(unquote(rest))
        if mode == "hang":  # accept, never answer
            self.release.wait(30)
            return
        if mode == "drip" and body is not None:  # the right length at a byte a second: no wait is long
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(min(len(body), 10)):  # then it hangs up: a client without a deadline fails in 10 s
                if self.release.wait(1):
                    return
                try:
                    self.wfile.write(body[i:i + 1])
                except OSError:  # the client gave up
                    return
            return
        if mode == "garbage":
            self.wfile.write(b"this is not HTTP\r\n\r\n")
            return
        if mode in ("404", "500") or body is None:
            self.send_error(int(mode) if mode in ("404", "500") else 404)
            return
        if mode == "redirect-file":
            self.send_response(302)
            self.send_header("Location", "file:///etc/passwd")
            self.end_headers()
            return
        self.send_response(200)
        if mode == "lie":
            self.send_header("Content-Length", str(10**12))
        elif mode == "short":
            self.send_header("Content-Length", str(len(body)))
            body = body[: len(body) // 2]
        elif mode == "nolen-short":
            body = body[: len(body) // 2]
        elif mode == "nolen-long":
            body = body + b"x" * 100_000
        elif mode == "corrupt":
            self.send_header("Content-Length", str(len(body)))
            body = bytes([body[0] ^ 1]) + body[1:]
        else:
            self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)
        self.close_connection = True


@dataclass
class Server:
    url: str  # http://127.0.0.1:PORT; append /MODE to pick a behaviour
    requests: list[str]  # every path asked for, in order


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[Server]:
    """An HTTP server on 127.0.0.1 serving ``directory`` in a thread, shut down on exit."""
    release, requests = threading.Event(), []
    handler = type("Handler", (_Handler,), {"release": release, "requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(directory)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Server(f"http://127.0.0.1:{server.server_address[1]}", requests)
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A local port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
