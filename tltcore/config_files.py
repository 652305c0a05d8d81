"""Configuration files: finding a config TOML by path or bundled name, reading it safely (a regular
file, UTF-8, at most :data:`MAX_CONFIG_BYTES`), parsing it (``tomllib``, or YAML for a ``.yaml`` /
``.yml`` file, :func:`load_yaml_text`) and writing plain data back as TOML (``tomli_w``) in the byte
layout scenario hashes have always read. The typed tree these files fill is :mod:`tltcore.config`."""

from __future__ import annotations

import math
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w
import yaml

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


#: Suffixes read as YAML (:func:`load_config_text`); every other file is TOML.
YAML_SUFFIXES = (".yaml", ".yml")


def is_yaml(path: str | Path) -> bool:
    """Whether ``path`` names a YAML file (by its suffix, case-insensitive)."""
    return Path(path).suffix.lower() in YAML_SUFFIXES


def load_config_text(text: str, *, path: str | Path) -> dict[str, Any]:
    """A config file's text parsed by its suffix: YAML (:func:`load_yaml_text`, ``toml_types``: only
    what TOML can say) for ``.yaml`` / ``.yml``, else TOML. Either way the top level is a table."""
    if not is_yaml(path):
        return load_toml_text(text, path=str(path))
    data = load_yaml_text(text, path=str(path), toml_types=True)
    if data is None:  # an empty file (or comments only), as an empty TOML file is
        return {}
    if not isinstance(data, dict):
        raise InputError(f"is a YAML {_yaml_kind(data)}, not a mapping of sections (trace:, model:, ...)",
                         path=path)
    return data


def _yaml_kind(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(value), "value")


class _YamlError(yaml.MarkedYAMLError):
    """A value YAML can say and this file may not, at its line."""


# YAML 1.1 (PyYAML) reads ``1e-6`` as a string: a float needs a dot there. YAML 1.2, OmegaConf (which
# verl and NeMo-RL configs are written for) and TOML read it as a number, so these loaders do too.
_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+
                      |[-+]?\.[0-9][0-9_]*[eE][-+]?[0-9]+)$""", re.X)


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (TOML refuses it too; PyYAML
    would keep the last silently) and reading ``1e-6`` as a float."""

    toml_types = False


class _TomlTypesLoader(_ConfigLoader):
    """:class:`_ConfigLoader` that refuses, at its line, what a TOML file could not say: null, dates
    and times, binary, sets, ordered maps, non-string keys and integers beyond 64 bits."""

    toml_types = True


def _refuse(loader: yaml.SafeLoader, node: yaml.Node, what: str) -> None:
    raise _YamlError(None, None, what, node.start_mark)


def _mapping(loader: _ConfigLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    own = {id(k) for k, _ in node.value}
    loader.flatten_mapping(node)  # `<<: *anchor` merge keys: merged pairs first, the node's own override them
    out: dict[Any, Any] = {}
    merged: set[Any] = set()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            if loader.toml_types or not isinstance(key, int | bool):
                _refuse(loader, key_node, f"key {key!r} is not a string; keys are names (quote it)")
            key = str(key).lower() if isinstance(key, bool) else str(key)
        if key in out and key not in merged:
            _refuse(loader, key_node, f"key '{key}' is given twice in this mapping")
        if id(key_node) in own:
            merged.discard(key)
        else:
            merged.add(key)
        out[key] = loader.construct_object(value_node, deep=True)
    return out


def _toml_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    value = yaml.SafeLoader.construct_yaml_int(loader, node)
    if not INT_MIN <= value <= INT_MAX:
        _refuse(loader, node, f"{value} does not fit a 64-bit integer (TOML's)")
    return value


_ConfigLoader.add_constructor("tag:yaml.org,2002:map", _mapping)
_ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
_TomlTypesLoader.add_constructor("tag:yaml.org,2002:int", _toml_int)
for _tag, _what in (("null", "null has no TOML equivalent: leave the key out for the field's default"),
                    ("timestamp", "a date or time has no scenario field: quote it if it is a name"),
                    ("binary", "binary data has no scenario field"),
                    ("set", "a set has no TOML equivalent: give a list"),
                    ("omap", "an ordered map has no TOML equivalent: give a mapping"),
                    ("pairs", "a list of pairs has no TOML equivalent: give a mapping")):
    _TomlTypesLoader.add_constructor(f"tag:yaml.org,2002:{_tag}",
                                     lambda loader, node, _what=_what: _refuse(loader, node, _what))


def load_yaml_text(text: str, *, path: str | None, toml_types: bool = False) -> Any:
    """Parse YAML text with PyYAML's safe loader (one document; a UTF-8 byte-order mark is ignored),
    errors as one line naming ``path`` and the line: a syntax error, a key given twice, a tag that
    builds an object. ``toml_types``: also refuse what TOML could not say (null, dates, sets, ...),
    for files that stand in for a TOML one (a scenario); framework configs are read without it."""
    loader = (_TomlTypesLoader if toml_types else _ConfigLoader)(text.removeprefix("\ufeff"))
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = " ".join(filter(None, (exc.context, exc.problem)))
        prefix = "" if isinstance(exc, _YamlError) else "not valid YAML: "
        raise InputError(f"{prefix}{where}{what}", path=path) from None
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML ({' '.join(str(exc).split())})", path=path) from None
    except RecursionError:
        raise InputError("not valid YAML: nested too deeply", path=path) from None
    finally:
        loader.dispose()


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
