"""What every framework dump reader returns and shares (below the readers and the dispatch)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass(frozen=True)
class Dump:
    """A dump folder read: the raw table, the files it came from (step order), the framework and,
    per canonical column, where its values came from (one phrase each)."""

    frame: pd.DataFrame
    files: tuple[Path, ...]
    framework: str
    provenance: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DumpFormat:
    """One framework's dump layout: the pattern of its per-step file names (group 1 is the step)
    and the reader of the matching files."""

    framework: str
    what: str  # the files as a user knows them, for messages
    pattern: re.Pattern[str]
    read: Callable[[tuple[tuple[int, Path], ...], Path | None], Dump]


def group_ids(keys: list[object], step: int) -> list[str]:
    """One prompt id per row: rows with the same key (the prompt's text or token ids) share it,
    numbered in order of first appearance (``s3p0``, ``s3p1``...). Why not the key itself: prompts
    are long text; why the step in it: the same prompt drawn in two steps is two groups."""
    seen: dict[object, str] = {}
    return [seen.setdefault(k, f"s{step}p{len(seen)}") for k in keys]
