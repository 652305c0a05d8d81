"""Column and value mappings: how a foreign trace's columns become the canonical ones.

One syntax for the command line (``--map CANONICAL=SPEC``, repeatable) and the scenario
(``[trace] map = {CANONICAL = "SPEC"}``), parsed here and nowhere else:

* ``response_tokens=response_length``: the file's column ``response_length`` is read as
  ``response_tokens`` (a rename).
* ``hit_cap=finish_reason:length``: a *value mapping*. ``hit_cap`` is true on the rows whose
  ``finish_reason`` is ``length`` and false on every other row. Several values are separated by
  ``|`` (``hit_cap=finish_reason:length|abort``). Values are compared as text, exactly (case and
  spaces count); a JSON ``true`` reads as ``True``.

Only ``hit_cap`` takes a value mapping: it is the one boolean column, and a value mapping is the
question "which values mean capped". On a count column (``response_tokens``) a value mapping would
have to invent a number, so it is refused. A column whose name contains ``:`` cannot be mapped (the
colon starts the values); rename it in the file.

Why text, not a parsed structure, is what the scenario holds: ``scenario.resolved.toml`` then
records the mapping exactly as the user wrote it, and the scenario hash follows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tltcore.errors import InputError, warn
from tltsim.traces.schema import TRACE_COLUMNS, column_names

#: The one canonical column a value mapping may fill: a boolean read as "is the value one of these".
VALUE_MAPPED = ("hit_cap",)


@dataclass(frozen=True)
class ColumnMap:
    """One canonical column's source: a file ``column``, and for a value mapping the ``values`` that
    mean true (empty: the column is read as it is)."""

    canonical: str
    column: str
    values: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The mapping as the user writes it after ``CANONICAL=``."""
        return self.column + (":" + "|".join(self.values) if self.values else "")


def parse_spec(canonical: str, spec: object, *, field: str, item: str | None = None) -> ColumnMap:
    """``spec`` (``"response_length"`` or ``"finish_reason:length|abort"``) for ``canonical``,
    checked; errors name ``field`` (``--map`` or ``trace.map``) and the item as given."""
    shown = item if item is not None else f"{canonical} = {spec!r}"
    if canonical not in TRACE_COLUMNS:
        raise InputError(f"column mapping '{shown}': '{canonical}' is not a canonical column {list(TRACE_COLUMNS)}",
                         field=field)
    if not isinstance(spec, str):
        raise InputError(f"column mapping '{shown}': the file column must be text, got {type(spec).__name__}",
                         field=field)
    column, sep, values_text = spec.partition(":")
    column = column.strip()
    if not column:
        raise InputError(f"column mapping '{shown}' names no file column", field=field)
    if not sep:
        return ColumnMap(canonical, column)
    if canonical not in VALUE_MAPPED:
        raise InputError(f"column mapping '{shown}': a value mapping (COLUMN:VALUE) fills a boolean column only "
                         f"({', '.join(VALUE_MAPPED)}); {canonical} reads a column as it is: {canonical}=COLUMN",
                         field=field)
    values = tuple(v.strip() for v in values_text.split("|"))
    if not all(values):
        raise InputError(f"column mapping '{shown}': give the value(s) that mean true after ':', separated by '|' "
                         f"(e.g. {canonical}={column}:length)", field=field)
    return ColumnMap(canonical, column, tuple(dict.fromkeys(values)))


def parse_mapping(items: Iterable[str] | None, *, field: str = "--map") -> dict[str, str]:
    """``["response_tokens=output_len", "hit_cap=finish_reason:length"]`` as ``{canonical: spec}``,
    each checked (:func:`parse_spec`), each canonical column once, each file column once."""
    mapping: dict[str, str] = {}
    for item in items or []:
        canon, sep, spec = item.partition("=")
        canon, spec = canon.strip(), spec.strip()
        if not sep or not canon or not spec:
            raise InputError(f"column mapping '{item}' is not of the form canonical=foreign", field=field)
        parsed = parse_spec(canon, spec, field=field, item=item)
        if canon in mapping:
            raise InputError(f"'{canon}' is mapped twice ('{mapping[canon]}' and '{spec}'); give one "
                             f"--map {canon}=COLUMN", field=field)
        mapping[canon] = parsed.text
    check_mapping(mapping, field=field)
    return mapping


def check_mapping(mapping: Mapping[str, object], *, field: str = "trace.map") -> dict[str, ColumnMap]:
    """The parsed form of a ``{canonical: spec}`` table (a scenario's ``trace.map``), checked."""
    parsed = {canon: parse_spec(str(canon), spec, field=field) for canon, spec in mapping.items()}
    seen: dict[str, str] = {}
    for canon, m in parsed.items():
        if m.column in seen:
            raise InputError(f"'{seen[m.column]}' and '{canon}' are both mapped to column '{m.column}'; a "
                             "column can feed one canonical column only: drop one of the two mappings", field=field)
        seen[m.column] = canon
    return parsed


def _check_collisions(maps: Mapping[str, ColumnMap], columns: pd.Index, path: Path) -> None:
    """A foreign name that is itself a canonical column of the file would lose that column's data."""
    for canon, m in maps.items():
        foreign = m.column
        if foreign != canon and foreign in TRACE_COLUMNS and foreign in columns and foreign not in maps:
            raise InputError(
                f"'{canon}={foreign}' reads the file's own {foreign} column as {canon}, leaving {foreign} "
                f"without data; map {foreign} too (--map {foreign}=OTHER) or map {canon} to a non-canonical "
                "column", path=path, field="--map")


def _value_mapped(raw: pd.DataFrame, m: ColumnMap, path: Path) -> pd.Series:
    """``"true"``/``"false"`` per row: whether the row's ``m.column`` is one of ``m.values``. A
    missing cell is an error (capped or not is unknown there); no row matching is a warning (a typo
    in the value would otherwise read as "nothing was capped")."""
    cells = raw[m.column]
    missing = cells.isna().to_numpy(bool)
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise InputError(f"value is missing; {m.canonical}={m.text} needs a value on every row", path=path,
                         row=i + 1, field=m.column)
    text = cells.astype("string").str.strip()
    hit = text.isin(m.values).to_numpy(bool)
    if not hit.any():
        seen = sorted(map(str, text.unique()))[:8]
        warn(f"{path}: no row has {m.column} = {' or '.join(m.values)}, so no response is marked {m.canonical} "
             f"(values seen: {', '.join(seen)})")
    return pd.Series(np.where(hit, "true", "false"), index=raw.index, dtype="string")


def apply_mapping(raw: pd.DataFrame, mapping: Mapping[str, str], path: Path) -> pd.DataFrame:
    """``raw`` with the mapped file columns renamed (or value-mapped) to their canonical names;
    canonical columns of the file that a mapping replaces are dropped."""
    maps = check_mapping(mapping, field="--map")
    absent = [m.column for m in maps.values() if m.column not in raw.columns]
    if absent:
        raise InputError(f"mapped column(s) {absent} not in file; found {column_names(raw.columns)}", path=path,
                         field=absent[0])
    _check_collisions(maps, raw.columns, path)
    sources = {m.column for m in maps.values()}
    out = raw.drop(columns=[c for c in maps if c in raw.columns and c not in sources])
    renames = {m.column: canon for canon, m in maps.items() if not m.values}
    for canon, m in maps.items():
        if m.values:
            out[canon] = _value_mapped(raw, m, path)  # the source column stays, as an extra column
    return out.rename(columns=renames)


def describe(mapping: Mapping[str, str] | None) -> str:
    """The mapping in one line, as ``--map`` options (for messages and provenance)."""
    return " ".join(f"--map {k}={v}" for k, v in (mapping or {}).items()) or "(none)"


__all__ = ["VALUE_MAPPED", "ColumnMap", "apply_mapping", "check_mapping", "describe", "parse_mapping", "parse_spec"]
