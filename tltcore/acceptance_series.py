"""Measured acceptance from a logged time series: a W&B run's per-position acceptance metrics.

Why: RL frameworks that run speculative decoding log acceptance per draft position every step
(``spec_decode/draft_acceptance_rate_pos_0``, ``..._pos_1``, ...) to W&B, and that history is what a
user has in hand, not a Prometheus scrape. This module turns such an export into the per-position
list :mod:`tltcore.acceptance_profile` prices.

Two layouts, detected by their columns:

* a **history table** (``run.history()`` / ``run.scan_history()`` saved as CSV or JSON lines, or a
  ``history.jsonl`` of an exporter): one row per logged step, a ``_step`` column, one column per metric;
* a **panel CSV** (the W&B UI's "Export panel data" / "Download CSV"): a ``Step`` column and columns named
  ``"<run name> - <metric>"``, with ``<metric>__MIN`` / ``__MAX`` companions that are dropped.

A per-position metric is a column whose name holds ``accept`` and ends in a position index:
``..._pos_3``, ``...pos3``, ``.../position_3``, ``..._pos-3``. The positions (0- or 1-based) must run
without gaps. One metric family only: a file with two (``rate`` and ``alpha``, or two runs in one panel
export) is refused, naming both, since picking one silently could price another drafter.

What the numbers mean is read from the family's name: ``alpha`` or ``conditional`` in it means
conditional ``alphas``; anything else is read as unconditional per-position ``rates`` (what vLLM logs
as "per-position acceptance rate", ``accepted_at_pos / drafts``), and the description says so. A
series is averaged over every logged step where all its positions have a value (the drafter changes
during RL, so the description gives the steps and each position's range over them).
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

from tltcore.errors import InputError
from tltcore.input_files import json_lines

#: A per-position acceptance column: the family (everything before the position) and the index.
_POSITION = re.compile(r"^(?P<family>.*accept.*?)[/_.\-]?(?:pos|position)[_\-]?(?P<pos>\d+)$", re.IGNORECASE)
#: The W&B UI's panel export prefixes each metric with the run's display name.
_RUN_PREFIX = " - "
_STEP_COLUMNS = ("_step", "Step", "step", "global_step", "trainer/global_step")
_COMPANION = ("__MIN", "__MAX")


@dataclass(frozen=True)
class Series:
    """One metric family's mean per position over the logged steps, and what it was read from."""

    key: str  # "alphas" or "rates"
    values: tuple[float, ...]
    family: str
    steps: int
    first_step: str
    last_step: str
    ranges: tuple[tuple[float, float], ...]

    def describe(self) -> str:
        """Which metric, over which steps, and how much position 1 moved (the drafter drifts in RL)."""
        lo, hi = self.ranges[0]
        span = f"steps {self.first_step}-{self.last_step}" if self.first_step != self.last_step else \
            f"step {self.first_step}"
        return (f"W&B series {self.family}*, mean of {self.steps:,} logged step{'s' if self.steps != 1 else ''} "
                f"({span}; position 1 ranged {lo:.3f}-{hi:.3f}), read as "
                f"{'conditional alphas' if self.key == 'alphas' else 'unconditional per-position rates'}")


def looks_like_series(columns: list[str]) -> bool:
    """Whether a table's columns hold per-position acceptance metrics (this module's layouts)."""
    return any(_position(c) is not None for c in columns)


def _metric_name(column: str) -> str:
    """``"run - spec/accept_pos_0"`` -> ``"spec/accept_pos_0"`` (a panel export's run prefix dropped)."""
    return column.split(_RUN_PREFIX, 1)[1] if _RUN_PREFIX in column else column


def _position(column: str) -> tuple[str, str, int] | None:
    """(run, family, position) of a per-position acceptance column, or None."""
    if column.endswith(_COMPANION):
        return None
    run = column.split(_RUN_PREFIX, 1)[0] if _RUN_PREFIX in column else ""
    m = _POSITION.match(_metric_name(column))
    if m is None:
        return None
    return run, m["family"].rstrip("/_.-"), int(m["pos"])


def _number(value: object, *, path: str, row: int, field: str) -> float | None:
    """A cell as a float in [0, 1], None where blank (W&B leaves a metric blank on steps it was not logged)."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "NaN", "nan")):
        return None
    if isinstance(value, bool):
        raise InputError(f"{value!r} is a boolean, not a probability", path=path, row=row, field=field)
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"not a number: {value!r}", path=path, row=row, field=field) from None
    if math.isnan(x):
        return None
    if not 0.0 <= x <= 1.0:
        raise InputError(f"{x:g} is not a probability in [0, 1]", path=path, row=row, field=field)
    return x


def read_series(rows: list[dict[str, object]], *, path: str) -> Series:
    """The per-position means of the one acceptance family in ``rows`` (module docstring)."""
    columns = list(dict.fromkeys(c for r in rows for c in r))
    found: dict[tuple[str, str], dict[int, str]] = {}
    for c in columns:
        hit = _position(c)
        if hit is not None:
            run, family, pos = hit
            found.setdefault((run, family), {})[pos] = c
    if not found:
        raise InputError("no per-position acceptance column (a name holding 'accept' and ending in _pos_N)",
                         path=path)
    if len(found) > 1:
        names = [f"{run + ' - ' if run else ''}{family}" for run, family in found]
        raise InputError(f"holds {len(found)} per-position acceptance families ({', '.join(names[:4])}); "
                         "export one run's one metric family", path=path, field=names[1])
    (_, family), by_pos = next(iter(found.items()))
    positions = sorted(by_pos)
    if positions[0] not in (0, 1) or positions != list(range(positions[0], positions[0] + len(positions))):
        raise InputError(f"positions {positions} do not run 0, 1, 2, ... (or 1, 2, 3, ...) without gaps",
                         path=path, field=by_pos[positions[0]])
    cols = [by_pos[p] for p in positions]
    step_col = next((c for c in _STEP_COLUMNS if c in columns), None)
    kept: list[list[float]] = []
    steps: list[str] = []
    for i, r in enumerate(rows, start=1):
        vals = [_number(r.get(c), path=path, row=i, field=c) for c in cols]
        if any(v is None for v in vals):
            continue  # a step where the metric was not logged (or only partly)
        kept.append([float(v) for v in vals])  # type: ignore[arg-type]
        steps.append(str(r.get(step_col, i)) if step_col else str(i))
    if not kept:
        raise InputError("no logged step has a value at every position", path=path, field=cols[0])
    means = tuple(sum(col) / len(col) for col in zip(*kept, strict=True))
    ranges = tuple((min(col), max(col)) for col in zip(*kept, strict=True))
    key = "alphas" if re.search(r"alpha|conditional", family, re.IGNORECASE) else "rates"
    return Series(key, means, family, len(kept), steps[0], steps[-1], ranges)


def rows_of_csv(text: str) -> list[dict[str, object]]:
    """A CSV's rows as dicts (header names stripped)."""
    reader = csv.DictReader(io.StringIO(text))
    return [{(k or "").strip(): v for k, v in rec.items()} for rec in reader]


def rows_of_jsonl(text: str, *, path: str) -> list[dict[str, object]]:
    """JSON lines (one logged step per line) as dicts; a bad line is one error naming its row."""
    return json_lines(text, path=path)


__all__ = ["Series", "looks_like_series", "read_series", "rows_of_csv", "rows_of_jsonl"]
