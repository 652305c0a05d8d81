"""Shared machinery for typed configuration trees: pydantic models <-> TOML, dotted overrides.

Schemas (the scenario, :mod:`tltsim.scenario.schema`) are frozen pydantic v2 models
(:class:`ConfigModel`, ``extra="forbid"``) whose fields declare their own constraints (``Field(ge=,
le=)``, ``Literal[...]``, validators for cross-field rules); this module knows nothing about them. It
gives every leaf a dotted path of any depth (``cost.table``), reads TOML (``tomllib``, size-limited),
applies overrides given as text (``--set``, sweep axes) to the *raw* data before the whole tree is
validated once, turns the first pydantic error into one :class:`~tltcore.errors.InputError` line
naming the file and the dotted field (with "did you mean" for unknown keys), and writes TOML back
(``tomli_w``).

From text: ``true/false/yes/no/on/off/1/0`` for bools; lists as a TOML array (``[1, 2]``) or
comma-separated (a schema can pass a splitter for items that contain commas); ``none``/``null``/empty
for an optional field.
"""

from __future__ import annotations

import difflib
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Strict,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo

from tltcore.errors import InputError

#: Config files (scenarios, sweep specs) are a few kB; anything larger is not one.
#: Bounds shared by config sections: any per-sample, per-checkpoint or per-sync time (an hour is already
#: absurd), and a GPU count (10^12 must not allocate anything).
MAX_SECONDS = 3600.0
MAX_GPUS = 1_000_000
#: TOML integers are signed 64-bit; an int given as text is bounded by this before anything else.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"", "none", "null"}

Splitter = Callable[[str], list[str]]


# ---- field types ------------------------------------------------------------------------------------
def _clean_str(value: str) -> str:
    if not value.strip():
        raise InputError(f"must be a non-empty string, got {value!r}")
    if "\x00" in value:
        raise InputError("must not contain NUL characters")
    return value


#: Strict scalars: TOML's ``1.5`` is no int, ``"yes"`` no bool, ``5`` no string, ``nan`` no number.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict(), AllowInfNan(False)]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict(), AfterValidator(_clean_str)]


class Why:
    """Field metadata: the reason a range exists, shown in its error (``must be in [1, 100] (0
    epochs never update the actor), got 0``)."""

    def __init__(self, text: str) -> None:
        self.text = text


class ConfigModel(BaseModel):
    """A frozen config section: unknown keys refused, strings stripped. ``SECTION`` is its dotted
    place in the tree, so an error of a section built on its own (``RLPhaseConfig(ppo_epochs=0)``)
    still names ``rl.ppo_epochs``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    SECTION: typing.ClassVar[str] = ""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise input_error(exc, type(self), path=None, prefix=self.SECTION) from None

    # Only direct construction goes through this __init__: marked as pydantic's own, a section nested
    # in a tree is validated by the tree (its errors located there), not by a call to it.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @model_validator(mode="before")
    @classmethod
    def _strip(cls, data: Any) -> Any:
        return strip_strings(data)


def strip_strings(data: Any) -> Any:
    """A section's raw data with its strings (and list items) stripped, as a ``before`` validator."""
    if not isinstance(data, dict):
        return data
    out = {}
    for k, v in data.items():
        if isinstance(v, str):
            v = v.strip() or v  # a blank string is refused as the user typed it
        elif isinstance(v, list | tuple):
            v = type(v)((x.strip() or x) if isinstance(x, str) else x for x in v)
        out[k] = v
    return out


# ---- the tree's shape -------------------------------------------------------------------------------
def _fields(cls: Any) -> dict[str, FieldInfo] | None:
    """A model's (or pydantic dataclass's) fields, in its ``FIELD_ORDER`` when it declares one."""
    f = getattr(cls, "__pydantic_fields__", None)
    if not (isinstance(cls, type) and isinstance(f, dict)):
        return None
    order = getattr(cls, "FIELD_ORDER", None)
    return {name: f[name] for name in order} if order else f


def _section(annotation: Any) -> Any:
    return annotation if _fields(annotation) is not None else None


def field_paths(cls: type, prefix: str = "") -> list[str]:
    """Every addressable dotted path of the tree rooted at model ``cls``."""
    out: list[str] = []
    for name, info in (_fields(cls) or {}).items():
        dotted = f"{prefix}.{name}" if prefix else name
        sub = _section(info.annotation)
        out += field_paths(sub, dotted) if sub is not None else [dotted]
    return out


def field_info(cls: type, dotted: str) -> FieldInfo:
    """The field at ``dotted`` (KeyError when there is none)."""
    node: Any = cls
    info: FieldInfo | None = None
    for part in dotted.split("."):
        fields = _fields(node)
        if fields is None or part not in fields:
            raise KeyError(dotted)
        info = fields[part]
        node = info.annotation
    assert info is not None
    return info


def field_type(cls: type, dotted: str) -> Any:
    """The declared type of the leaf at ``dotted`` (KeyError when there is none)."""
    return field_info(cls, dotted).annotation


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _optional(tp: Any) -> tuple[bool, Any]:
    tp = _unwrap(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, _unwrap(args[0])
    return False, tp


def scalar_kind(tp: Any) -> Any:
    """``int``/``float``/``bool``/``str`` for a leaf type (``Literal`` of strings is ``str``), or
    ``tuple`` for a list field; ``Optional`` dropped."""
    base = _optional(tp)[1]
    if typing.get_origin(base) is Literal:
        return str
    if typing.get_origin(base) is tuple:
        return tuple
    return base


# ---- text values ------------------------------------------------------------------------------------
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


def _text_scalar(value: str, base: Any, where: dict[str, Any]) -> Any:
    """Text parsed as ``base``; text that does not parse is kept, for validation to refuse with the
    field's own message (``must be an integer, got '2.5'``)."""
    key = value.strip()
    if base is bool:
        return key.lower() in _TRUE if key.lower() in _TRUE | _FALSE else value
    if base is int:
        try:
            number = int(key.replace("_", ""))
        except ValueError:
            return value
        if not INT_MIN <= number <= INT_MAX:
            raise InputError(f"{number} is outside the 64-bit integer range", **where)
        return number
    if base is float:
        try:
            return float(key)
        except ValueError:
            return value
    return key


def parse_text(value: Any, tp: Any, *, where: dict[str, Any], splitter: Splitter | None = None) -> Any:
    """``value`` for a field of type ``tp`` as raw (TOML-like) data: text is parsed by the field's
    type, anything else is kept as it is; validation of the whole tree comes after."""
    if not isinstance(value, str):
        return list(value) if isinstance(value, tuple) else value
    optional, base = _optional(tp)
    if optional and value.strip().lower() in _NONE:
        return None
    if typing.get_origin(base) is tuple:
        item = _optional(typing.get_args(base)[0])[1]
        return [_text_scalar(v, scalar_kind(item), where) if isinstance(v, str) else v
                for v in _text_list(value, splitter, where)]
    return _text_scalar(value, scalar_kind(base), where)


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of nested raw data with ``dotted`` set to ``value`` (missing tables created; a non-table
    in the way is replaced, validation names it)."""
    head, _, rest = dotted.partition(".")
    out = dict(data)
    if not rest:
        out[head] = value
    else:
        sub = out.get(head)
        out[head] = set_dotted(sub if isinstance(sub, dict) else {}, rest, value)
    return out


def check_path(cls: type, dotted: str, *, path: str | None, what: str = "no such field",
               field: str | None = None) -> None:
    """Refuse a dotted path that is no leaf of ``cls``: a section, or unknown (with suggestions); the
    error names ``field`` (default: the path itself)."""
    valid = field_paths(cls)
    if dotted in valid:
        return
    is_section = any(v.startswith(dotted + ".") for v in valid)
    why = "is a section; address one of its fields" if is_section else f"{what}{suggest(dotted, valid)}"
    raise InputError(why, path=path, field=field or dotted)


# ---- validation and its errors ------------------------------------------------------------------------
def validate_tree(cls: type[BaseModel], data: Any, *, path: str | None = None) -> Any:
    """``cls`` built and validated from raw data; the first problem as one InputError."""
    if not isinstance(data, Mapping):
        raise InputError(f"must be a table, got {type(data).__name__}", path=path)
    try:
        return cls.model_validate(dict(data))
    except ValidationError as exc:
        raise input_error(exc, cls, path=path) from None


@cache
def _adapter(cls: type, dotted: str) -> TypeAdapter:
    """The leaf's type with its strictness but none of its range constraints (a sweep axis checks the
    type of each value up front, the ranges per point)."""
    info = field_info(cls, dotted)
    keep = [m for m in info.metadata
            if not isinstance(m, annotated_types.BaseMetadata) or isinstance(m, Strict | AllowInfNan)]
    return TypeAdapter(Annotated[info.annotation, *keep] if keep else info.annotation)


def check_type(cls: type, dotted: str, value: Any, *, path: str | None, field: str) -> Any:
    """``value`` (raw data) checked against the type of the leaf at ``dotted`` (not its range);
    returns it as that type (``1`` -> ``1.0`` for a float, a list as a tuple)."""
    try:
        return _adapter(cls, dotted).validate_python(value)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        raise InputError(_message(err, field_info(cls, dotted)), path=path, field=field) from None


def _bounds(info: FieldInfo | None) -> tuple[Any, Any, bool, bool, str | None]:
    lo = hi = None
    lo_open = hi_open = False
    why = None
    for m in info.metadata if info is not None else ():
        if isinstance(m, annotated_types.Ge):
            lo = m.ge
        elif isinstance(m, annotated_types.Gt):
            lo, lo_open = m.gt, True
        elif isinstance(m, annotated_types.Le):
            hi = m.le
        elif isinstance(m, annotated_types.Lt):
            hi, hi_open = m.lt, True
        elif isinstance(m, Why):
            why = m.text
    return lo, hi, lo_open, hi_open, why


def _range_message(info: FieldInfo | None, value: Any) -> str:
    lo, hi, lo_open, hi_open, why = _bounds(info)
    if info is not None and scalar_kind(info.annotation) is float and isinstance(value, int):
        value = float(value)
    note = f" ({why})" if why else ""
    if lo is not None and hi is not None:
        return f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}{note}, got {value}"
    if lo is not None:
        return f"must be {'>' if lo_open else '>='} {lo:g}{note}, got {value}"
    return f"must be {'<' if hi_open else '<='} {hi:g}{note}, got {value}"


def _choices(info: FieldInfo | None) -> list[str]:
    base = _optional(info.annotation)[1] if info is not None else None
    return [str(a) for a in typing.get_args(base)] if typing.get_origin(base) is Literal else []


def _message(err: Mapping[str, Any], info: FieldInfo | None, valid_here: list[str] | None = None,
             dotted: str = "") -> str:
    kind, value = err["type"], err.get("input")
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer, got {value!r}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, got {value!r}"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"must be a finite number, got {value!r}"
    if kind in ("string_type", "string_too_short"):
        return f"must be a non-empty string, got {value!r}"
    if kind in ("tuple_type", "list_type"):
        return f"must be a list, got {value!r}"
    if kind in ("model_type", "dataclass_type", "model_attributes_type", "dict_type"):
        return f"must be a table, got {type(value).__name__}"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        names = valid_here or []
        prefix = dotted.rsplit(".", 1)[0] + "." if "." in dotted else ""
        return f"unknown field{suggest(dotted, [prefix + n for n in names])}; valid here: {', '.join(names)}"
    if kind == "literal_error":
        if not isinstance(value, str):
            return f"must be a non-empty string, got {value!r}"
        choices = _choices(info)
        return f"must be one of {', '.join(choices)}, got '{value}'{suggest(value, choices)}"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        if info is None:
            return str(err.get("msg", kind))
        return _range_message(info, value)
    error = (err.get("ctx") or {}).get("error")
    if isinstance(error, InputError):
        return error.message
    if isinstance(error, BaseException):
        return str(error)
    return str(err.get("msg", kind))


def input_error(exc: ValidationError, cls: type, *, path: str | None, prefix: str = "") -> InputError:
    """The first error of ``exc`` (raised validating ``cls``) as one InputError naming the dotted field."""
    err = exc.errors(include_url=False)[0]
    parts = [str(p) for p in err["loc"] if not isinstance(p, int)]
    node: Any = cls
    info: FieldInfo | None = None
    section_fields: list[str] = list(_fields(cls) or {})
    for i, part in enumerate(parts):
        fields = _fields(node)
        if fields is None or part not in fields:
            info = None
            if fields is not None and i == len(parts) - 1:
                section_fields = list(fields)
            break
        info = fields[part]
        node = info.annotation
        if _fields(node) is not None:
            section_fields = list(_fields(node) or {})
    error = (err.get("ctx") or {}).get("error")
    if isinstance(error, InputError) and error.path is not None:
        # a validator that read another file (a GPU spec file) names that file and its field, not this tree's
        return InputError(error.message, path=error.path, row=error.row, field=error.field)
    if isinstance(error, InputError) and error.field:  # a validator names the field, relative to its section
        parts = [*parts, *error.field.split(".")]
    dotted = ".".join([prefix, *parts] if prefix else parts)
    message = _message(err, info, section_fields, dotted)
    return InputError(message, path=path, field=dotted or None)


# ---- unchecked trees ----------------------------------------------------------------------------------
def construct(cls: type, data: Mapping[str, Any]) -> Any:
    """``cls`` built from already type-checked raw data *without* validation (a sweep point that is
    invalid still has a scenario to list and a key): nested sections built the same way."""
    fields = _fields(cls) or {}
    values = {}
    for name, info in fields.items():
        if name not in data:
            continue
        value = data[name]
        sub = _section(info.annotation)
        if sub is not None and isinstance(value, Mapping):
            value = construct(sub, value)
        elif isinstance(value, list):
            value = tuple(value)
        values[name] = value
    if issubclass(cls, BaseModel):
        return cls.model_construct(**values)
    obj = object.__new__(cls)  # a pydantic dataclass section
    for name, info in fields.items():
        default = info.get_default(call_default_factory=True)
        object.__setattr__(obj, name, values.get(name, default))
    return obj


def to_dict(tree: Any) -> dict[str, Any]:
    """The tree as nested plain data (tuples as lists), fields in declaration order."""
    def plain(v: Any) -> Any:
        if _fields(type(v)) is not None:
            return to_dict(v)
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        return v

    return {name: plain(getattr(tree, name)) for name in (_fields(type(tree)) or {})}


# ---- did you mean ------------------------------------------------------------------------------------
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
