"""Configuration files: finding a config TOML by path or bundled name, reading it safely (a regular
file, UTF-8, at most :data:`MAX_CONFIG_BYTES`), parsing it (``tomllib``) and writing plain data back as
TOML (``tomli_w``) in the byte layout scenario hashes have always read. The typed tree these files
fill is :mod:`tltcore.config`."""

from __future__ import annotations

import math
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from tltcore.config import INT_MAX, INT_MIN, suggest
from tltcore.errors import InputError
from tltcore.input_files import check_input

MAX_CONFIG_BYTES = 4 * 2**20


def bundled_files(folder: Path) -> dict[str, Path]:
    """The ``*.toml`` files shipped in ``folder``, by name (file stem)."""
    return {p.stem: p for p in sorted(folder.glob("*.toml"))}


def find_file(name_or_path: str | Path, bundled: dict[str, Path], what: str) -> Path:
    """A file by path, or a bundled one by name (``.toml`` optional); an unknown name raises with
    the closest bundled names. ``what`` names the kind of file in the error (``scenario``)."""
    p = Path(name_or_path).expanduser()
    if p.exists() or p.parent != Path("."):
        return p
    stem = p.name.removesuffix(".toml")
    if stem in bundled:
        return bundled[stem]
    raise InputError(f"{what} file not found, and no bundled {what} of that name{suggest(stem, list(bundled))} "
                     f"(bundled: {', '.join(bundled) or 'none'})", path=p)


def read_file(name_or_path: str | Path, bundled: dict[str, Path], what: str) -> tuple[Path, str]:
    """``(path, text)`` of a config file found as :func:`find_file` does, read as UTF-8; a folder, a
    missing file or an unreadable one is one :class:`InputError` naming the path."""
    p = find_file(name_or_path, bundled, what)
    if p.is_dir():
        raise InputError(f"is a folder, not a {what} file", path=p)
    try:
        # A FIFO nobody writes blocks open() forever and /dev/zero never ends: refuse anything but a
        # regular file before opening it, and read at most MAX_CONFIG_BYTES.
        check_input(p, what=f"a {what} file", missing_ok=True)
        with p.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise InputError(f"is larger than {MAX_CONFIG_BYTES // 2**20} MiB; a {what} file is a few lines of TOML",
                             path=p)
        return p, data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text() would
    except FileNotFoundError:
        raise InputError(f"{what} file not found", path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} ({exc})", path=p) from None


def load_toml_text(text: str, *, path: str | None) -> dict[str, Any]:
    """Parse TOML text (a UTF-8 byte-order mark is ignored), errors as one line."""
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", path=path) from None


# ---- writing ----------------------------------------------------------------------------------------
_ARRAY = re.compile(r"= \[\n((?:    [^\n]*,\n)+)\]\n")


def _without_none(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_without_none(v) if isinstance(v, Mapping) else v) for k, v in data.items() if v is not None}


def dump_toml(data: Mapping[str, Any]) -> str:
    """TOML text for nested plain data (``tomli_w``): scalars first, then one ``[a.b]`` table per
    nested dict; ``None`` values omitted (TOML has no null; optional fields default to None). Arrays
    of scalars stay on one line (``policies = ["no-sd", "beg-mab"]``), as scenario hashes have always
    read them: tomli_w writes one item per line, and no item of a scalar array spans a line."""
    for v in _walk(data):
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{v} is not a finite number")
        if isinstance(v, int) and not isinstance(v, bool) and not INT_MIN <= v <= INT_MAX:
            raise ValueError(f"{v} does not fit a TOML integer")
    text = tomli_w.dumps(_without_none(data))
    return _ARRAY.sub(lambda m: "= [" + ", ".join(line.strip()[:-1] for line in m.group(1).splitlines()) + "]\n",
                      text)


def _walk(data: Any) -> typing.Iterator[Any]:
    if isinstance(data, Mapping):
        for v in data.values():
            yield from _walk(v)
    elif isinstance(data, list | tuple):
        for v in data:
            yield from _walk(v)
    else:
        yield data
