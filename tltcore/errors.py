"""One exception type for bad user input.

Every reader, validator and config loader raises :class:`InputError` with a message that names the
file, row and field. The CLI turns it into one line on stderr and exit code 2, so users never see a
traceback for a malformed file and nothing is written.
"""

from __future__ import annotations

import sys


class InputError(ValueError):
    """Bad user input: a malformed file, an unknown name, an impossible configuration."""

    def __init__(self, message: str, *, path: object | None = None, row: int | None = None,
                 field: str | None = None) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = ": ".join([", ".join(where)]) if where else ""
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.message, self.path, self.row, self.field = message, path, row, field


EXIT_INPUT_ERROR = 2


def reason(exc: BaseException, limit: int | None = None, *, collapse: bool = False) -> str:
    """A library's exception as the reason part of a one-line error: its first line (``collapse``:
    all of it on one line), cut at ``limit`` characters; the exception's type name when it says
    nothing. Parsers' messages span lines and repeat the path the error line already names."""
    text = " ".join(str(exc).split()) if collapse else (str(exc).splitlines() or [""])[0]
    return (text or type(exc).__name__)[:limit]


def warn(message: str) -> None:
    """One ``tlt: warning:`` line on stderr: something was wrong or changes nothing, but the command
    goes on. (Bad input that stops a command is an :class:`InputError`; both are one line.)"""
    print(f"tlt: warning: {' '.join(message.split())}", file=sys.stderr, flush=True)
