"""RL frameworks' rollout dump folders, read as traces: which framework wrote a folder, and its reader.

A folder given as a trace is recognised by its files' names (each framework names its per-step files
its own way) and read by that framework's module; the result is a raw table with canonical columns
(``step``, ``prompt_id``, ``response_tokens``...) that :func:`tltsim.traces.schema.normalize`
validates like any file. What each column came from is recorded in :attr:`Dump.provenance`, for
``tlt trace import``.

* verl (``trainer.rollout_data_dir``): :mod:`tltsim.traces.frameworks.verl`.
* NeMo-RL (``train_data_step{N}.jsonl`` in the logger's log folder):
  :mod:`tltsim.traces.frameworks.nemo_rl`.
* OpenRLHF writes no per-sample rollout file (its PPO trainer logs only aggregates such as
  ``eval_response_length_mean``, openrlhf/trainer/ppo_trainer.py), so there is nothing to detect;
  docs/guide/bring-your-own-trace.md says how to log lengths yourself.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tltcore.errors import InputError
from tltsim.traces.frameworks import nemo_rl, verl
from tltsim.traces.frameworks.base import Dump, DumpFormat, group_ids


def _formats() -> tuple[DumpFormat, ...]:
    return (verl.FORMAT, nemo_rl.FORMAT)


def _steps(folder: Path, fmt: DumpFormat) -> tuple[tuple[int, Path], ...]:
    found = []
    for p in folder.iterdir():
        m = fmt.pattern.fullmatch(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    return tuple(sorted(found))


def detect(folder: Path) -> tuple[DumpFormat, tuple[tuple[int, Path], ...]]:
    """The framework that wrote ``folder`` and its ``(step, file)`` pairs; one line when none or
    several match (a folder mixing two frameworks' files is ambiguous, not merged)."""
    try:
        matches = [(fmt, steps) for fmt in _formats() if (steps := _steps(folder, fmt))]
    except OSError as exc:
        raise InputError(f"cannot list the folder: {exc.strerror or exc}", path=folder) from None
    if len(matches) == 1:
        return matches[0]
    if matches:
        names = " and ".join(f"{fmt.framework} ({fmt.what})" for fmt, _ in matches)
        raise InputError(f"folder holds rollout dumps of {names}; give a folder of one framework", path=folder)
    names = sorted(p.name for p in folder.iterdir())
    shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "") if names else "none"
    expected = "; ".join(f"{fmt.framework}: {fmt.what}" for fmt in _formats())
    raise InputError(f"no rollout dump files in this folder (expected {expected}; files found: {shown})", path=folder)


def dump_files(folder: Path) -> tuple[Path, ...]:
    """The files a dump folder's trace is read from, in step order (for checksums and caching)."""
    return tuple(p for _, p in detect(folder)[1])


def load_dump(folder: Path, *, tokenizer: str | Path | None = None) -> Dump:
    """The dump in ``folder`` read by its framework's reader."""
    fmt, steps = detect(folder)
    return fmt.read(steps, None if tokenizer is None else Path(tokenizer))


def read_dump(folder: Path, *, tokenizer: str | Path | None = None) -> pd.DataFrame:
    """The raw table of the dump in ``folder`` (:func:`load_dump` without the provenance)."""
    return load_dump(folder, tokenizer=tokenizer).frame


__all__ = ["Dump", "DumpFormat", "detect", "dump_files", "group_ids", "load_dump", "read_dump"]
