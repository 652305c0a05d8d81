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


def quoted_name(name: object) -> str:
    """A column or key name for a one-line message: quoted, control characters escaped, long names cut."""
    text = repr(str(name))
    return text if len(text) <= 60 else text[:57] + "...'"


class _DuplicateKey(Exception):
    pass


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def json_lines(data: bytes | str, *, path: str | Path) -> list[dict[str, object]]:
    """The JSON objects of JSON-lines ``data`` read from ``path``, one per non-blank line (none for an
    empty file). Every problem is one :class:`InputError` naming the file and the line: bytes that are
    not UTF-8, invalid JSON, a line that is not an object, a key given twice in one object (``json``
    would keep the last silently). A byte-order mark opening the file, or each file concatenated into
    it, is ignored."""
    import json

    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            row = data.count(b"\n", 0, exc.start) + 1
            raise InputError(f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})", path=path,
                             row=row) from None
    else:
        text = data
    records: list[dict[str, object]] = []
    for lineno, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        line = line.lstrip("\ufeff")
        if not line.strip():
            continue
        try:
            obj = json.loads(line, object_pairs_hook=_unique_object)
        except _DuplicateKey as exc:
            key = quoted_name(exc.args[0])
            raise InputError(f"key {key} appears more than once in one object; keep one", path=path, row=lineno,
                             field=key[1:-1]) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON ({exc.msg})", path=path, row=lineno) from None
        except (ValueError, RecursionError) as exc:  # >4300-digit integers, absurd nesting
            msg = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
            raise InputError(f"invalid JSON ({msg})", path=path, row=lineno) from None
        if not isinstance(obj, dict):
            raise InputError("line is not a JSON object", path=path, row=lineno)
        records.append(obj)
    return records
