"""A download's deadline, shared by every fetcher (traces, model configs).

urllib takes one timeout and applies it to each wait on the socket, not to the download: a server that
sends a byte a second resets it forever. Each fetcher therefore computes one deadline for the whole
download (:func:`seconds_from_env`) and, before every read, shortens the socket's next wait to what is
left of it (:func:`bound_wait`).
"""

from __future__ import annotations

import os
import time

from tltcore.errors import InputError

MAX_SECONDS = 3600.0


def seconds_from_env(env: str, default: float) -> float:
    """The deadline on a whole download: ``$env`` seconds, else ``default``; refused in one line naming
    the variable unless a number in (0, 3600]."""
    raw = os.environ.get(env, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_SECONDS:
        raise InputError(f"'{raw}' is not a number of seconds in (0, {MAX_SECONDS:g}]", field=env)
    return value


def left(deadline: float) -> float:
    """Seconds until ``deadline`` (``time.monotonic``), at least a millisecond: a socket timeout of 0
    would mean non-blocking, not expired."""
    return max(deadline - time.monotonic(), 1e-3)


def bound_wait(resp: object, deadline: float) -> None:
    """Make the next wait on ``resp``'s socket end by ``deadline``. The socket sits behind the response's
    buffered reader (CPython's ``SocketIO._sock``); a ``file://`` response has none and never waits."""
    sock = getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(left(deadline))
