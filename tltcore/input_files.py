"""What tlt may read: a regular file (or a folder where one is asked for), checked before opening.

A FIFO nobody writes to blocks a read forever, ``/dev/zero`` never ends one, and a socket cannot be
read at all: every reader of a user-named path (scenario and sweep-spec files, model configs, prompt
files, results folders' files) asks :func:`check_input` first, so such a path is one clear line
instead of a hang or a ``MemoryError``.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from tltcore.errors import InputError


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in the words an error line uses."""
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def check_input(path: str | Path, field: str | None = None, *, folder: bool | None = False, what: str = "a file",
                missing_ok: bool = False) -> Path:
    """Refuse, in one line naming ``path`` (and ``field``), an input that is missing, not a regular
    file (``folder=False``), not a folder (``True``) or neither (``None``). ``what`` says what was
    expected ("a sweep spec file"); ``missing_ok`` leaves a missing path to the caller to explain."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if missing_ok:
            return path
        raise InputError("not found", path=path, field=field) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or type(exc).__name__}", path=path, field=field) from None
    if stat.S_ISDIR(mode):
        if folder is False:
            raise InputError(f"is a folder; give {what}", path=path, field=field)
        return path
    if not stat.S_ISREG(mode):
        raise InputError(f"is {file_kind(mode)}, not a regular file: reading it would block or never end; give "
                         f"{what}", path=path, field=field)
    if folder is True:
        raise InputError("is a file; give a folder", path=path, field=field)
    return path


def sha256_of(path: str | Path) -> str:
    """A file's SHA-256: whether a found trace is the catalogued one, whether a companion file is
    still the one tlt wrote, what a scenario's table was."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def json_lines(text: str, *, path: str | Path, what: str = "") -> list[dict[str, object]]:
    """JSON lines as dicts (blank lines skipped); a line that is not a JSON object is one
    :class:`InputError` naming the file and its row. ``what`` prefixes the messages (``upstream``)."""
    import json

    prefix = f"{what} " if what else ""
    rows: list[dict[str, object]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{prefix}file is not JSON lines ({exc.msg})", path=path, row=i) from None
        if not isinstance(obj, dict):
            raise InputError(f"{prefix}line is not a JSON object", path=path, row=i)
        rows.append(obj)
    return rows
