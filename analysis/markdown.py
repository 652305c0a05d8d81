"""Markdown tables for the generated reports (one formatter, so every report prints numbers alike)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import pandas as pd


def markdown_table(df: pd.DataFrame, formats: Mapping[str, str] | str = "", nan: str = "–") -> str:
    """``df`` as a Markdown table. Floats are formatted with ``formats`` (one spec for every column,
    or a spec per column name; missing columns print as ``str``), NaN as ``nan``; integers only in
    columns ``formats`` names (``{"n": ","}`` for thousands separators); anything else as ``str``."""
    cols = [str(c) for c in df.columns]

    def spec(col: str) -> str:
        return formats.get(col, "") if isinstance(formats, Mapping) else formats

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        cells = [(nan if math.isnan(v) else format(v, spec(c))) if isinstance(v, float)
                 else format(v, spec(c)) if isinstance(v, numbers.Integral) and not isinstance(v, bool)
                 and isinstance(formats, Mapping) and c in formats else str(v)
                 for c, v in zip(cols, row, strict=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
