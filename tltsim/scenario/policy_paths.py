"""Dotted paths into the scenario's typed policy specs: ``policies.1.threshold``, ``presets_policy.inner.eps``.

A scenario's ``policies`` is a list of typed specs (:mod:`tltcore.policy.spec`), so their fields have
dotted paths as every other field does: ``--set policies.1.threshold=8`` and a sweep axis over
``policies.1.inner.eps`` reach them. The generic machinery (:mod:`tltcore.config`) addresses tables
only; this module adds the list index and the spec's kind, which decides what fields exist
(``threshold`` only on an ``elastic`` spec). ``policies.N`` alone replaces the whole spec.

Settings work on the raw data, as every other setting does: the spec at the index (shorthand text
or a table) becomes a table of the fields it gives, the field is set in it, and the whole scenario is
validated once afterwards.
"""

from __future__ import annotations

from typing import Any

from tltcore import config
from tltcore.errors import InputError
from tltcore.policy.spec import KIND_CLASSES, ElasticSpec, PolicyBase, parse_policy

#: Scenario fields holding policy specs: a list of them, and one.
POLICY_LIST, POLICY_ONE = "policies", "presets_policy"


def is_policy_path(dotted: str) -> bool:
    """True for a dotted path *inside* a policy field (``policies.0``, ``presets_policy.threshold``)."""
    head = dotted.split(".", 1)[0]
    return head in (POLICY_LIST, POLICY_ONE) and "." in dotted


def _split(dotted: str, *, path: str | None) -> tuple[str, int | None, list[str]]:
    """``policies.1.inner.eps`` -> ("policies", 1, ["inner", "eps"])."""
    head, *rest = dotted.split(".")
    if head == POLICY_ONE:
        return head, None, rest
    if not rest or not rest[0].isdigit():
        raise InputError("a policy is addressed by its index: policies.0, policies.1.threshold", path=path,
                         field=dotted)
    return head, int(rest[0]), rest[1:]


def _as_table(raw: Any, *, path: str | None, dotted: str) -> dict[str, Any]:
    """A spec's raw data (shorthand text or a table) as a table of the fields it gives."""
    if isinstance(raw, PolicyBase):
        return raw.model_dump(exclude_none=True)
    if isinstance(raw, str):
        try:
            return parse_policy(raw).model_dump(exclude_none=True)
        except InputError as exc:
            raise InputError(exc.message, path=path, field=dotted) from None
    if isinstance(raw, dict):
        return dict(raw)
    raise InputError(f"must be a policy spec (text or a table with kind), got {raw!r}", path=path, field=dotted)


def _leaf(table: dict[str, Any], parts: list[str], *, path: str | None, dotted: str) -> tuple[type, dict, str]:
    """(the spec class, the table holding the leaf, the leaf's name) for ``parts`` under ``table``."""
    node = table
    for i, part in enumerate(parts):
        kind = node.get("kind")
        cls = KIND_CLASSES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise InputError(f"the policy here has no known kind ({kind!r})", path=path, field=dotted)
        fields = [f for f in cls.model_fields if f != "kind"]
        if part not in fields:
            where = ", ".join(fields) or "none (it has no options)"
            raise InputError(f"'{kind}' has no field '{part}'{config.suggest(part, fields)}; its fields: {where}",
                             path=path, field=dotted)
        if i == len(parts) - 1:
            return cls, node, part
        if cls is not ElasticSpec or part != "inner":
            raise InputError(f"'{part}' is a field, not a table", path=path, field=dotted)
        node[part] = _as_table(node.get(part), path=path, dotted=dotted)
        node = node[part]
    raise InputError("address a field of the policy (policies.0.threshold) or the whole of it (policies.0)",
                     path=path, field=dotted)


def error_field(dotted: str | None) -> str | None:
    """A validation error's field with the spec kinds pydantic puts in its location dropped
    (``policies.elastic.inner.beg-mab.eps`` -> ``policies.inner.eps``): the kind is no field a user
    can set."""
    if dotted is None or dotted.split(".", 1)[0] not in (POLICY_LIST, POLICY_ONE):
        return dotted
    return ".".join(p for p in dotted.split(".") if p not in KIND_CLASSES)


def set_policy_field(data: dict[str, Any], dotted: str, value: Any, *, path: str | None,
                     defaults: tuple[str, ...]) -> dict[str, Any]:
    """A copy of raw scenario ``data`` with the policy field at ``dotted`` set to ``value`` (text
    parsed by the field's type, as ``--set`` gives it; a whole spec as given). ``defaults`` are the
    policies a scenario has when ``data`` names none."""
    head, index, parts = _split(dotted, path=path)
    out = dict(data)
    if index is None:
        current = out.get(head)
        if current is None:
            raise InputError(f"{POLICY_ONE} is not set; set it whole first (--set {POLICY_ONE}=elastic+beg-mab)",
                             path=path, field=dotted)
        out[head] = _with_field(current, parts, value, path=path, dotted=dotted)
        return out
    specs = list(out.get(head, defaults) if isinstance(out.get(head, defaults), list | tuple) else [])
    if index >= len(specs):
        raise InputError(f"there are {len(specs)} policies (policies.0 to policies.{len(specs) - 1}); "
                         f"no index {index}", path=path, field=dotted)
    specs[index] = value if not parts else _with_field(specs[index], parts, value, path=path, dotted=dotted)
    out[head] = specs
    return out


def _with_field(raw: Any, parts: list[str], value: Any, *, path: str | None, dotted: str) -> dict[str, Any]:
    table = _as_table(raw, path=path, dotted=dotted)
    cls, node, leaf = _leaf(table, parts, path=path, dotted=dotted)
    tp = cls.model_fields[leaf].annotation
    parsed = config.parse_text(value, tp, where={"path": path, "field": dotted})
    node[leaf] = config.check_type(cls, leaf, parsed, path=path, field=dotted)
    return table


def policy_field_type(data: dict[str, Any], dotted: str, *, path: str | None, defaults: tuple[str, ...]) -> Any:
    """The declared type of the policy field at ``dotted`` in raw scenario ``data`` (a whole spec:
    ``str``, its shorthand); an InputError naming ``dotted`` when there is none."""
    head, index, parts = _split(dotted, path=path)
    if not parts:
        return str
    raw = data.get(head) if index is None else None
    if index is not None:
        specs = data.get(head, defaults)
        if not isinstance(specs, list | tuple) or index >= len(specs):
            raise InputError(f"no policy at index {index}", path=path, field=dotted)
        raw = specs[index]
    if raw is None:
        raise InputError(f"{head} is not set", path=path, field=dotted)
    cls, _, leaf = _leaf(_as_table(raw, path=path, dotted=dotted), parts, path=path, dotted=dotted)
    return cls.model_fields[leaf].annotation


__all__ = ["POLICY_LIST", "POLICY_ONE", "error_field", "is_policy_path", "policy_field_type", "set_policy_field"]
