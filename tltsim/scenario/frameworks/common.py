"""What every RL framework mapper shares: reading the framework's YAML, Hydra-style overrides,
OmegaConf-style ``${...}`` interpolations, and the scenario file written with where each field came
from.

verl (Hydra) and NeMo-RL (OmegaConf + Hydra overrides) both keep their run in one YAML tree that
their launch scripts amend with ``key=value`` overrides. tlt has neither library (and a mapper needs
only a few keys), so this module reads the tree with PyYAML and resolves, on demand, just the keys a
mapper asks for, as OmegaConf would:

* ``${a.b}`` (absolute), ``${.b}`` / ``${..b}`` (relative to the key's own mapping, one level up per
  extra dot), ``${oc.select:a.b,default}``, strings with interpolations inside
  (``ckpt/${trainer.project_name}``), nested ones (``${mul:${a},${b}}``);
* NeMo-RL's arithmetic resolvers ``add``, ``sub``, ``mul``, ``div``, ``max`` (registered by
  ``nemo_rl/utils/config.py``, ``register_omegaconf_resolvers``);
* ``${oc.env:VAR}`` and unknown resolvers are left unresolved, with a note: the value depends on the
  machine the framework runs on. ``???`` (OmegaConf's "mandatory, not set") likewise.

An interpolation loop is an error naming the file and the key (OmegaConf refuses it too).

Overrides follow Hydra's command line: ``key=value`` sets a key that exists (Hydra refuses a new key
there), ``+key=value`` adds one that does not, ``++key=value`` sets or adds, ``~key`` removes; values
are read as YAML flow scalars (``8``, ``1e-6``, ``true``, ``null``, ``[a, b]``, ``'text'``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tltcore import config_files
from tltcore.errors import InputError

MISSING = "???"
#: The first line of every scenario file these commands write: how they know a file is theirs to replace.
MARKER = "# Written by tlt scenario from-"


# ---- the framework's config ---------------------------------------------------------------------------
def read_yaml_tree(path: str | Path, what: str) -> tuple[Path, dict[str, Any]]:
    """``(path, mapping)`` of a framework's YAML config (size-limited, a regular file, keys given twice
    refused, one line naming the file and line on any error); a file that is not a mapping is refused."""
    p, text = config_files.read_file(Path(path), {}, what)
    data = config_files.load_yaml_text(text, path=str(p))
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a YAML {type(data).__name__}"
        raise InputError(f"is {kind}, not a mapping of config sections", path=p)
    return p, data


def _split_key(dotted: str, *, where: str) -> list[str]:
    parts = dotted.strip().split(".")
    if not dotted.strip() or any(not part for part in parts):
        raise InputError(f"'{dotted}' is not a dotted key (a.b.c)", path=where)
    return parts


_HYDRA_COLON = re.compile(r"(?<=[\w\]}'\"]):(?!//)(?=\S)")


def parse_override_value(raw: str) -> Any:
    """A Hydra override's value as YAML flow reads it (``8``, ``1e-6``, ``True``, ``null``, ``[a,b]``,
    ``'quoted'``); text YAML would read as something else (``a: b``, a date) stays the text given."""
    text = raw.strip()
    if not text:
        return ""
    try:
        value = config_files.load_yaml_text(text, path=None)
        if isinstance(value, dict) and any(":" in str(k) for k in value):  # Hydra's {a:1}; YAML wants {a: 1}
            value = config_files.load_yaml_text(_HYDRA_COLON.sub(": ", text), path=None)
    except InputError:
        return text
    if isinstance(value, str | int | float | bool | list) or value is None:
        return value
    if isinstance(value, dict) and text.startswith("{"):
        return value
    return text


def apply_overrides(tree: dict[str, Any], overrides: Sequence[str], *, what: str) -> tuple[dict[str, Any],
                                                                                        dict[str, str]]:
    """``tree`` with Hydra-style ``overrides`` applied, and which key each override set (dotted key ->
    the override as given). A bad override is one line naming it."""
    out = json.loads(json.dumps(tree, default=str))  # a deep copy of plain data
    given: dict[str, str] = {}
    for text in overrides:
        where = f"override '{text}'"
        body = text.strip()
        if body.startswith("~"):
            parts = _split_key(body[1:].split("=", 1)[0], where=where)
            parent = _parent(out, parts, where=where, create=False)
            if parent is None or parts[-1] not in parent:
                raise InputError(f"removes {'.'.join(parts)}, which is not in the {what}", path=where)
            del parent[parts[-1]]
            given[".".join(parts)] = text
            continue
        mode = "++" if body.startswith("++") else "+" if body.startswith("+") else ""
        key, sep, raw = body[len(mode):].partition("=")
        if not sep:
            raise InputError("is not key=value (Hydra's override syntax: key=value, +key=value, ++key=value, ~key)",
                             path=where)
        parts = _split_key(key, where=where)
        parent = _parent(out, parts, where=where, create=bool(mode))
        exists = parent is not None and parts[-1] in parent
        if mode == "" and not exists:
            raise InputError(f"{'.'.join(parts)} is not in the {what}; Hydra refuses a new key without '+' "
                             f"(+{'.'.join(parts)}=...)", path=where)
        if mode == "+" and exists:
            raise InputError(f"{'.'.join(parts)} is already in the {what}; '+' adds a new key (use "
                             f"{'.'.join(parts)}=... or ++{'.'.join(parts)}=...)", path=where)
        assert parent is not None
        parent[parts[-1]] = parse_override_value(raw)
        given[".".join(parts)] = text
    return out, given


def _parent(tree: dict[str, Any], parts: list[str], *, where: str, create: bool) -> dict[str, Any] | None:
    node: Any = tree
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, dict):
            raise InputError(f"{'.'.join(parts[:i])} is not a mapping", path=where)
        if part not in node or node[part] is None:
            if not create:
                return None
            node[part] = {}
        node = node[part]
    if not isinstance(node, dict):
        raise InputError(f"{'.'.join(parts[:-1])} is not a mapping", path=where)
    return node


# ---- interpolations ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Found:
    """A key's value after interpolation; ``raw`` is what the file (or an override) said when it was an
    interpolation; ``keys`` every key read on the way (to name the overrides that set them)."""

    key: str
    value: Any
    raw: str | None = None
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Unresolved:
    """A key that is absent, unset (``???``) or whose interpolation cannot be resolved here, and why."""

    key: str
    why: str
    absent: bool = False


class _Unresolvable(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


_RESOLVER = re.compile(r"([A-Za-z_][\w.]*):(.*)\Z", re.S)


def _arith(op: Callable[[Any, Any], Any]) -> Callable[[list[Any]], Any]:
    def call(args: list[Any]) -> Any:
        if len(args) != 2 or not all(isinstance(a, int | float) and not isinstance(a, bool) for a in args):
            raise _Unresolvable(f"takes two numbers, got {args!r}")
        return op(args[0], args[1])
    return call


#: NeMo-RL's resolvers (nemo_rl/utils/config.py, register_omegaconf_resolvers): plain arithmetic.
ARITHMETIC = {"add": _arith(lambda a, b: a + b), "sub": _arith(lambda a, b: a - b),
              "mul": _arith(lambda a, b: a * b), "div": _arith(lambda a, b: a / b),
              "max": _arith(max)}


class ConfigTree:
    """A framework config (after overrides) whose keys resolve on demand (module docstring)."""

    def __init__(self, data: dict[str, Any], path: Path, *, overridden: dict[str, str] | None = None) -> None:
        self.data, self.path, self.overridden = data, path, dict(overridden or {})

    def get(self, key: str) -> Found | Unresolved:
        """The value at dotted ``key``, interpolations resolved; an interpolation loop raises."""
        try:
            value, keys = self._lookup(key.split("."), stack=())
        except _Unresolvable as exc:
            absent = exc.why == "absent"
            return Unresolved(key, f"is not in {self.path.name}" if absent else exc.why, absent=absent)
        raw = self._raw(key.split("."))
        shown = raw if isinstance(raw, str) and "${" in raw else None
        return Found(key, value, shown, keys)

    def value(self, key: str, default: Any = None) -> Any:
        """The resolved value at ``key``, or ``default`` when absent or unresolvable."""
        found = self.get(key)
        return found.value if isinstance(found, Found) else default

    def overrides_for(self, keys: Iterable[str]) -> list[str]:
        """The overrides that set any of ``keys`` (or a mapping above one of them), in the order given."""
        out = []
        for key in keys:
            for set_key, text in self.overridden.items():
                if (key == set_key or key.startswith(set_key + ".")) and text not in out:
                    out.append(text)
        return out

    # -- internals
    def _raw(self, parts: list[str]) -> Any:
        node: Any = self.data
        for part in parts:
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def _lookup(self, parts: list[str], stack: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        node: Any = self.data
        keys: tuple[str, ...] = ()
        for i, part in enumerate(parts):
            here = parts[:i]
            if isinstance(node, str) and "${" in node:
                node, more = self._resolve(node, here, stack)
                keys += more
            if not isinstance(node, dict) or part not in node:
                raise _Unresolvable("absent")
            node = node[part]
        dotted = ".".join(parts)
        keys += (dotted,)
        if isinstance(node, str):
            if node == MISSING:
                raise _Unresolvable(f"is {MISSING} (mandatory, never set: give it as an override)")
            if "${" in node:
                if dotted in stack:
                    loop = " -> ".join((*stack[stack.index(dotted):], dotted))
                    raise InputError(f"interpolation loop: {loop}", path=self.path, field=stack[0])
                node, more = self._resolve(node, parts, (*stack, dotted))
                keys += more
        return node, keys

    def _resolve(self, text: str, at: list[str], stack: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        """A string with interpolations, resolved; ``at`` is its own key (relative paths start there)."""
        pieces = _split_interpolations(text)
        if pieces is None:
            raise _Unresolvable(f"'{text}' has an unclosed ${{")
        keys: tuple[str, ...] = ()
        values = []
        for literal, inner in pieces:
            if inner is None:
                values.append(literal)
                continue
            value, more = self._interpolate(inner, at, stack)
            keys += more
            values.append(value)
        if len(values) == 1 and pieces[0][1] is not None:
            return values[0], keys
        return "".join(_as_text(v) for v in values), keys

    def _interpolate(self, inner: str, at: list[str], stack: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        m = _RESOLVER.match(inner.strip())
        if m is None:
            return self._node(inner.strip(), at, stack)
        name, body = m.group(1), m.group(2)
        args = _split_args(body)
        if name == "oc.env":
            raise _Unresolvable(f"${{{inner}}} reads the environment variable {args[0].strip() if args else ''} "
                                "where the framework runs")
        if name == "oc.select":
            if not args:
                raise _Unresolvable(f"${{{inner}}} names no key")
            try:
                return self._node(args[0].strip(), at, stack)
            except _Unresolvable as exc:
                if exc.why != "absent" and not exc.why.startswith(f"is {MISSING}"):
                    raise
                if len(args) < 2:
                    return None, ()
                return self._literal(args[1], at, stack)
        if name in ARITHMETIC:
            values, keys = [], ()
            for arg in args:
                value, more = self._literal(arg, at, stack)
                values.append(value)
                keys += more
            try:
                return ARITHMETIC[name](values), keys
            except _Unresolvable as exc:
                raise _Unresolvable(f"${{{inner}}} {exc.why}") from None
            except ZeroDivisionError:
                raise _Unresolvable(f"${{{inner}}} divides by zero") from None
        raise _Unresolvable(f"${{{inner}}} uses the resolver '{name}', which tlt does not evaluate")

    def _literal(self, text: str, at: list[str], stack: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        """A resolver argument: an interpolation, or a YAML scalar (quotes stripped)."""
        text = text.strip()
        if "${" in text:
            return self._resolve(text, at, stack)
        return parse_override_value(text), ()

    def _node(self, ref: str, at: list[str], stack: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        if ref.startswith("."):
            dots = len(ref) - len(ref.lstrip("."))
            base = at[:-1][: max(0, len(at) - dots)]  # ".x": a sibling; each further dot goes one level up
            parts = [*base, *ref[dots:].split(".")]
        else:
            parts = ref.split(".")
        if not all(parts):
            raise _Unresolvable(f"${{{ref}}} is not a key")
        return self._lookup(parts, stack)


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def _split_interpolations(text: str) -> list[tuple[str, str | None]] | None:
    """``text`` as (literal, None) and ("", inner) pieces for each top-level ``${inner}``; None when a
    ``${`` is never closed. ``\\${`` is a literal ``${``, as in OmegaConf."""
    out: list[tuple[str, str | None]] = []
    buf, i = "", 0
    while i < len(text):
        if text.startswith("\\${", i):
            buf += "${"
            i += 3
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                if text.startswith("${", j):
                    depth, j = depth + 1, j + 2
                    continue
                depth -= text[j] == "}"
                j += 1
            if depth:
                return None
            if buf:
                out.append((buf, None))
                buf = ""
            out.append(("", text[i + 2:j - 1]))
            i = j
        else:
            buf += text[i]
            i += 1
    if buf or not out:
        out.append((buf, None))
    return out


def _split_args(body: str) -> list[str]:
    """A resolver's arguments split at top-level commas (not inside ``${}``, brackets or quotes)."""
    args, buf, depth, quote = [], "", 0, ""
    for ch in body:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(buf)
            buf = ""
            continue
        buf += ch
    args.append(buf)
    return args


# ---- the mapping and the file written ------------------------------------------------------------------
@dataclass(frozen=True)
class Mapped:
    """A scenario field set from the framework's config: its value, where it came from (one line) and
    the config key to blame when the scenario refuses the value (``--set`` for a command-line setting)."""

    field: str
    value: Any
    source: str
    key: str


@dataclass(frozen=True)
class Note:
    """What could not be mapped (a key with no scenario field, an unresolvable value, a default kept)."""

    key: str
    why: str


@dataclass
class Conversion:
    """A framework config turned into scenario fields, with what could not be mapped. ``sets`` are the
    command line's ``--set`` fields: they win over anything mapped (and the mapping sees them, so a
    ``--set trace.name`` is the trace samples per prompt are fitted to)."""

    framework: str
    config: Path
    overrides: tuple[str, ...]
    sets: dict[str, Mapped] = field(default_factory=dict)
    mapped: list[Mapped] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def set(self, dotted: str, value: Any, source: str, key: str | None = None) -> None:
        if dotted in self.sets:
            return
        key = key or source.split(" ", 1)[0]
        self.mapped = [m for m in self.mapped if m.field != dotted] + [Mapped(dotted, value, source, key)]

    def note(self, key: str, why: str) -> None:
        self.notes.append(Note(key, " ".join(why.split())))

    def get(self, dotted: str) -> Any:
        every = [*self.mapped, *self.sets.values()]
        return next((m.value for m in reversed(every) if m.field == dotted), None)

    def fields(self) -> list[Mapped]:
        """Every field the scenario file sets: the mapped ones, then the ``--set`` ones."""
        return [*self.mapped, *self.sets.values()]

    def data(self) -> dict[str, Any]:
        """The fields as raw scenario data (nested sections)."""
        out: dict[str, Any] = {}
        for m in self.fields():
            *sections, name = m.field.split(".")
            node = out
            for s in sections:
                node = node.setdefault(s, {})
            node[name] = list(m.value) if isinstance(m.value, tuple) else m.value
        return out


def with_sets(conv: Conversion, sets: Sequence[str]) -> Conversion:
    """``conv`` with the command line's ``--set FIELD=VALUE`` settings (parsed by the field's type; a file
    name that exists here made absolute, so the scenario file reads the same file from any folder)."""
    from tltsim.scenario.resolve import FILE_FIELDS, parse_setting

    for text in sets:
        dotted, sep, raw = text.partition("=")
        dotted = dotted.strip()
        if not sep or not dotted:
            raise InputError(f"'{text}' is not FIELD=VALUE", path="--set")
        value = raw if dotted.startswith("policies.") else parse_setting(dotted, raw, path="--set")
        if dotted in FILE_FIELDS and isinstance(value, str) and Path(value).expanduser().exists():
            value = str(Path(value).expanduser().resolve())
        conv.sets[dotted] = Mapped(dotted, value, f"--set {text}", "--set")
    return conv


def checked(conv: Conversion) -> Any:
    """The scenario the fields make, validated; a refusal names the config key (or ``--set``) that gave
    the field, with the scenario field in the message."""
    from tltsim.scenario.resolve import validate_data

    try:
        return validate_data(conv.data())
    except InputError as exc:
        by_field = {m.field: m for m in conv.fields()}
        m = by_field.get(exc.field or "")
        if m is None and exc.field:  # a field nobody set, or one inside a section someone set
            m = next((x for f, x in by_field.items() if exc.field.startswith(f + ".")), None)
        if m is None:
            raise InputError(f"{exc.message} (scenario field {exc.field}, a tlt default)", path=conv.config,
                             field=None) from None
        if m.key == "--set":
            raise InputError(exc.message, path="--set", field=m.field) from None
        raise InputError(f"{exc.message} (scenario field {m.field}: {m.source})", path=conv.config,
                         field=m.key) from None


def source_text(tree: ConfigTree, found: Found) -> str:
    """One line for a field's comment: the key, its interpolation if any, the overrides that set it."""
    text = found.key + (f" = {found.raw}" if found.raw else "") + f" = {_as_text(found.value)}"
    given = tree.overrides_for(found.keys)
    if given:
        text += " (override " + ", ".join(given) + ")"
    return text


def section_order() -> list[str]:
    from tltsim.scenario.schema import Scenario

    return list(Scenario.model_fields)


def scenario_text(conv: Conversion, *, as_yaml: bool) -> str:
    """The scenario file: a header naming the source config, its overrides and what could not be mapped,
    then each field with a comment saying where it came from."""
    lines = [f"{MARKER}{conv.framework} (edit freely; the command replaces only files it wrote)",
             f"# source config: {conv.config}",
             "# overrides:" + ("" if conv.overrides else " none")]
    lines += [f"#   {_one_line(o)}" for o in conv.overrides]
    if conv.notes:
        lines.append("# not mapped (no scenario field, not resolvable here, or a default kept):")
        lines += [f"#   {_one_line(n.key)}: {_one_line(n.why)}" for n in conv.notes]
    order = section_order()
    top = [m for m in conv.fields() if "." not in m.field]
    by_section: dict[str, list[Mapped]] = {}
    for m in conv.fields():
        if "." in m.field:
            by_section.setdefault(m.field.split(".", 1)[0], []).append(m)
    if top:
        lines.append("")
    for m in sorted(top, key=lambda m: order.index(m.field)):
        lines.append(_line(m.field, m.value, m.source, as_yaml=as_yaml, indent=""))
    for section in sorted(by_section, key=order.index):
        lines += ["", f"{section}:" if as_yaml else f"[{section}]"]
        for m in by_section[section]:
            lines.append(_line(m.field.split(".", 1)[1], m.value, m.source, as_yaml=as_yaml,
                               indent="  " if as_yaml else ""))
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _line(key: str, value: Any, source: str, *, as_yaml: bool, indent: str) -> str:
    value = list(value) if isinstance(value, tuple) else value
    # JSON scalars and lists are YAML flow values
    text = f"{indent}{key}: {json.dumps(value)}" if as_yaml else config_files.dump_toml({key: value}).strip()
    return f"{text}  # {_one_line(source)}"


def written_by_us(path: Path) -> bool:
    """Whether ``path`` is a scenario file these commands wrote (its first line is :data:`MARKER`)."""
    try:
        with path.open("rb") as fh:
            first = fh.readline(4096).decode("utf-8", "replace")
    except OSError:
        return False
    return first.startswith(MARKER)
