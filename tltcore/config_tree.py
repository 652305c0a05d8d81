"""Generic machinery for typed configuration trees: nested frozen dataclasses <-> TOML data.

Schemas (e.g. :mod:`tltsim.scenario`) are plain nested dataclasses; this module knows nothing about
them. It gives every field a dotted path of any depth (``cost.table``, ``a.b.c.d``), builds a tree
from parsed TOML with one-line errors naming the file and the dotted field, applies overrides given
as text (command-line ``--set``, sweep axes), lists every path, and writes a tree back as TOML.

Field types understood: ``int``, ``float``, ``str``, ``bool``, ``X | None``, ``tuple[X, ...]`` of
those scalars, and nested dataclasses. From text: ``true/false/yes/no/1/0`` for bools; lists as a
TOML array (``[1, 2]``, ``["a", "b"]``) or comma-separated; ``none``/``null``/empty for an optional.
A schema can register a splitter for a list field whose items may contain commas (policy specs).
Unknown fields are refused naming the closest valid ones.
"""

from __future__ import annotations

import difflib
import json
import math
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from tltcore.errors import InputError
from tltcore.input_files import check_input

#: Config files (scenarios, sweep specs) are a few kB; anything larger is not one.
MAX_CONFIG_BYTES = 4 * 2**20
#: TOML integers are signed 64-bit; every int field is bounded by this before anything else.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"", "none", "null"}

Splitter = Callable[[str], list[str]]


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional(tp: Any) -> tuple[bool, Any]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


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


def suggest(name: str, valid: list[str]) -> str:
    """``" (did you mean x, y?)"`` for the closest valid names, or ``""``.

    Tried in order, first hit wins: a close spelling of the whole name; the same last dotted
    component (``engine.tp`` -> ``cluster.tp``); a close spelling of the part after the last ``/``
    (trace sources are ``origin/run``: ``verl_dapo_qwen2.5-32`` -> ``polytrace/verl_dapo_qwen2.5-32b``);
    the valid names containing it (case-insensitive, 3+ characters: ``dapo``).
    """
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
    if not close:
        tail = name.rsplit(".", 1)[-1]
        close = [v for v in valid if v.rsplit(".", 1)[-1] == tail][:3]
    if not close:
        by_tail: dict[str, list[str]] = {}
        for v in valid:
            by_tail.setdefault(v.rsplit("/", 1)[-1], []).append(v)
        tails = difflib.get_close_matches(name.rsplit("/", 1)[-1], list(by_tail), n=3, cutoff=0.6)
        close = [v for t in tails for v in by_tail[t]][:3]
    if not close and len(name.strip()) >= 3:
        close = [v for v in valid if name.strip().lower() in v.lower()][:3]
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _scalar(value: Any, tp: Any, *, from_text: bool, where: dict[str, Any]) -> Any:
    if tp is bool:
        if from_text and isinstance(value, str):
            key = value.strip().lower()
            if key in _TRUE | _FALSE:
                return key in _TRUE
        if isinstance(value, bool):
            return value
        raise InputError(f"must be true or false, got {value!r}", **where)
    if tp is int:
        if from_text and isinstance(value, str):
            try:
                value = int(value.strip().replace("_", ""))
            except ValueError:
                raise InputError(f"must be an integer, got {value!r}", **where) from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"must be an integer, got {value!r}", **where)
        if not INT_MIN <= value <= INT_MAX:
            raise InputError(f"{value} is outside the 64-bit integer range", **where)
        return value
    if tp is float:
        if from_text and isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise InputError(f"must be a number, got {value!r}", **where) from None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InputError(f"must be a finite number, got {value!r}", **where)
        return float(value)
    if tp is str:
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"must be a non-empty string, got {value!r}", **where)
        if "\x00" in value:
            raise InputError("must not contain NUL characters", **where)
        return value.strip()
    raise TypeError(f"unsupported field type {tp!r}")  # a bug in the schema, not user input


def _text_list(value: str, splitter: Splitter | None, where: dict[str, Any]) -> list[Any]:
    text = value.strip()
    if text.startswith("["):
        try:
            parsed = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"not a valid TOML array ({exc})", **where) from None
        return list(parsed)
    if not text:
        return []
    parts = splitter(text) if splitter is not None else text.split(",")
    return [p.strip() for p in parts if p.strip()]


def coerce(value: Any, tp: Any, *, from_text: bool, where: dict[str, Any], splitter: Splitter | None = None) -> Any:
    """``value`` as type ``tp`` or an InputError located by ``where`` (path/field kwargs)."""
    optional, base = _optional(tp)
    if optional and (value is None or (from_text and isinstance(value, str) and value.strip().lower() in _NONE)):
        return None
    if typing.get_origin(base) is tuple:
        item = typing.get_args(base)[0]
        if from_text and isinstance(value, str):
            value = _text_list(value, splitter, where)
            return tuple(coerce(v, item, from_text=isinstance(v, str), where=where) for v in value)
        if not isinstance(value, list | tuple):
            raise InputError(f"must be a list, got {value!r}", **where)
        return tuple(coerce(v, item, from_text=False, where=where) for v in value)
    return _scalar(value, base, from_text=from_text, where=where)


def _dataclass_type(tp: Any) -> type | None:
    return tp if isinstance(tp, type) and is_dataclass(tp) else None


def from_dict(cls: type, data: Any, *, path: str | None, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from parsed TOML, recursively; errors name ``path`` and the field."""
    if not isinstance(data, Mapping):
        raise InputError(f"must be a table, got {type(data).__name__}", path=path, field=prefix or None)
    hints = _hints(cls)
    names = [f.name for f in fields(cls)]
    for key in data:
        if key not in names:
            dotted = f"{prefix}.{key}" if prefix else str(key)
            valid = [f"{prefix}.{n}" if prefix else n for n in names]
            raise InputError(f"unknown field{suggest(dotted, valid)}; valid here: {', '.join(names)}", path=path,
                             field=dotted)
    kwargs = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else key
        sub = _dataclass_type(hints[key])
        if sub is not None:
            kwargs[key] = from_dict(sub, value, path=path, prefix=dotted)
        else:
            kwargs[key] = coerce(value, hints[key], from_text=False, where={"path": path, "field": dotted})
    return cls(**kwargs)


def field_paths(cls: type, prefix: str = "") -> list[str]:
    """Every addressable dotted path of the tree rooted at dataclass ``cls``."""
    out = []
    for f in fields(cls):
        dotted = f"{prefix}.{f.name}" if prefix else f.name
        sub = _dataclass_type(_hints(cls)[f.name])
        out += field_paths(sub, dotted) if sub is not None else [dotted]
    return out


def field_type(cls: type, dotted: str) -> Any:
    """The declared type of the leaf at ``dotted`` (KeyError when there is none)."""
    node: Any = cls
    for part in dotted.split("."):
        if _dataclass_type(node) is None or part not in {f.name for f in fields(node)}:
            raise KeyError(dotted)
        node = _hints(node)[part]
    return node


def override(tree: Any, dotted: str, value: Any, *, path: str | None = "override",
             splitters: Mapping[str, Splitter] | None = None) -> Any:
    """A copy of ``tree`` with the leaf at ``dotted`` set to ``value`` (parsed by the field's type
    when it is text)."""
    valid = field_paths(type(tree))
    if dotted not in valid:
        is_section = any(v.startswith(dotted + ".") for v in valid)
        why = "is a section; address one of its fields" if is_section else f"no such field{suggest(dotted, valid)}"
        raise InputError(why, path=path, field=dotted)
    tp = field_type(type(tree), dotted)
    splitter = (splitters or {}).get(dotted)
    new_value = coerce(value, tp, from_text=isinstance(value, str), where={"path": path, "field": dotted},
                       splitter=splitter)
    return _set(tree, dotted.split("."), new_value)


def _set(node: Any, parts: list[str], value: Any) -> Any:
    if len(parts) == 1:
        return replace(node, **{parts[0]: value})
    return replace(node, **{parts[0]: _set(getattr(node, parts[0]), parts[1:], value)})


def to_dict(tree: Any) -> dict[str, Any]:
    """The tree as nested plain data (tuples as lists)."""
    def plain(v: Any) -> Any:
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        return v

    return {k: (to_dict(v) if is_dataclass(v) else plain(v)) for k, v in
            ((f.name, getattr(tree, f.name)) for f in fields(tree))}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if not INT_MIN <= v <= INT_MAX:
            raise ValueError(f"{v} does not fit a TOML integer")
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{v} is not a finite number")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are valid TOML basic strings
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dump_toml(data: Mapping[str, Any]) -> str:
    """TOML text for nested plain data: scalars first, then one ``[a.b]`` table per nested dict.
    ``None`` values are omitted (TOML has no null; optional fields default to None)."""
    lines: list[str] = []

    def table(node: Mapping[str, Any], name: str) -> None:
        scalars = [(k, v) for k, v in node.items() if not isinstance(v, Mapping) and v is not None]
        if name and (scalars or not any(isinstance(v, Mapping) for v in node.values())):
            lines.extend(["", f"[{name}]"])
        lines.extend(f"{_key(k)} = {_toml_value(v)}" for k, v in scalars)
        for k, v in node.items():
            if isinstance(v, Mapping):
                table(v, f"{name}.{_key(k)}" if name else _key(k))

    table(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)


def load_toml_text(text: str, *, path: str | None) -> dict[str, Any]:
    """Parse TOML text (a UTF-8 byte-order mark is ignored), errors as one line."""
    try:
        return tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", path=path) from None

