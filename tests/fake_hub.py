"""A made-up Hugging Face hub on 127.0.0.1 for `tlt model fetch` tests (no machine here has internet).

:func:`serve_hub` serves ``files`` (``"ORG/NAME" -> config.json bytes``) at
``/MODE/ORG/NAME/resolve/REVISION/config.json``, so ``HF_ENDPOINT=http://127.0.0.1:PORT/MODE`` picks a
behaviour: ``ok``; ``auth`` (401 unless the bearer token is :data:`TOKEN`); ``html`` (a 200 login page);
``drip`` (the right length at a byte a second); ``stall`` (answers after 1.8 s, sends one byte, then
nothing); ``hang`` (accepts, never answers); ``big`` (announces
nothing and sends 2 MiB); ``redirect`` (302 to another server, given as ``redirect_to``). Every request's
path and ``Authorization`` header is recorded.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

TOKEN = "hf_test_secret_token_0123456789"
HTML = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Log in to continue</body></html>\n"


@dataclass
class Hub:
    url: str  # http://127.0.0.1:PORT; append /MODE
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Authorization header)


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes]
    release: threading.Event
    hub: Hub
    redirect_to: str | None

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)
        self.close_connection = True

    def do_GET(self) -> None:
        self.hub.requests.append((self.path, self.headers.get("Authorization")))
        parts = self.path.split("/")
        mode = parts[1] if len(parts) > 1 else ""
        repo = "/".join(parts[2:4]) if len(parts) > 5 and parts[4] == "resolve" else None
        body = self.files.get(repo or "")
        if mode == "hang":
            self.release.wait(30)
            return
        if mode == "redirect" and self.redirect_to is not None:
            self.send_response(302)
            self.send_header("Location", self.redirect_to + "/ok/" + "/".join(parts[2:]))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if mode == "auth" and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._send(401, b'{"error": "Access to model is restricted. You must be authenticated."}')
            return
        if mode == "html":
            self._send(200, HTML, "text/html")
            return
        if body is None or parts[-1] != "config.json":
            self._send(404, b'{"error": "Entry not found"}')
            return
        if mode == "big":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(b" " * (2 << 20))
            self.close_connection = True
            return
        if mode == "stall":  # answers late, sends one byte, then nothing: only a per-wait deadline ends it
            if self.release.wait(1.8):
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body[:1])
                self.wfile.flush()
            self.release.wait(30)
            return
        if mode == "drip":
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for i in range(min(len(body), 10)):
                if self.release.wait(1):
                    return
                try:
                    self.wfile.write(body[i:i + 1])
                except OSError:
                    return
            return
        self._send(200, body)


@contextlib.contextmanager
def serve_hub(files: dict[str, bytes], redirect_to: str | None = None) -> Iterator[Hub]:
    """The fake hub in a thread on 127.0.0.1, shut down on exit."""
    release = threading.Event()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    hub = Hub(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = type("Handler", (_Handler,), {"files": files, "release": release, "hub": hub,
                                                                "redirect_to": redirect_to})
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        release.set()
        server.shutdown()
        server.server_close()
