"""The files ``tlt real generate --out OUT`` writes, and whether a file beside OUT is tlt's to replace.

Beside the event log a run writes its generated tokens and its resolved settings; the settings record
each written file's digest, so a later run to the same ``--out`` can tell its own unchanged companion
(replaced) from a user's file of the same name (refused, unless ``--force``, which never deletes).
Kept apart from the engine so the command checks all of this before torch is imported.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from tltcore.errors import InputError
from tltcore.input_files import sha256_of

GENERATE_COMMAND = "tlt real generate"


def generate_outputs(out: Path) -> dict[str, Path]:
    """Every file ``tlt real generate --out OUT`` writes: the event log, the generated tokens
    (``<stem>.tokens.jsonl``) and the resolved settings with the written files' digests
    (``<stem>.config.json``)."""
    return {"events": out, "tokens": out.with_name(out.stem + ".tokens.jsonl"),
            "config": out.with_name(out.stem + ".config.json")}


def recorded_outputs(config: Path) -> dict[str, str] | None:
    """``{file name: sha256}`` that a ``tlt real generate`` run recorded in its ``<stem>.config.json``;
    None if that file is not one tlt wrote (or is not a regular file, or is damaged)."""
    try:
        info = os.stat(config)
        if not stat.S_ISREG(info.st_mode) or info.st_size > 1 << 24:
            return None
        data = json.loads(config.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("tool") != "tlt" or data.get("command") != GENERATE_COMMAND:
        return None
    files = data.get("files")
    if not isinstance(files, dict):
        return None
    return {str(k): str(v) for k, v in files.items()}


def _is_tlts(path: Path, recorded: dict[str, str] | None) -> bool:
    """Whether companion ``path`` is what tlt's last run to this --out wrote there, unchanged."""
    if recorded is None or path.name not in recorded:
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and sha256_of(path) == recorded[path.name]
    except OSError:
        return False


def check_generate_outputs(out: Path, force: bool, inputs: Iterable[Path | None]) -> dict[str, Path]:
    """Check every file ``tlt real generate --out`` writes before any work: each must be a writable
    file path that is not an input; ``--out`` itself was named by the user and may be replaced, but a
    companion file beside it is replaced only if tlt wrote it (its ``.config.json`` records the digest)
    or with ``--force``. One line naming the file otherwise."""
    from tltcore.atomic import check_not_inputs, check_output_file

    if out.suffix not in (".parquet", ".csv"):
        raise InputError(f"'{out.suffix or out.name}' is not .parquet or .csv", field="--out")
    files = generate_outputs(out)
    given = [p for p in inputs if p is not None]
    for path in files.values():
        check_output_file(path, field="--out")
        check_not_inputs(path, given, field="--out")
    if force:
        return files
    config = files["config"]
    recorded = recorded_outputs(config) if os.path.lexists(config) else {}
    for path in (config, files["tokens"]):
        if not os.path.lexists(path):
            continue
        mine = recorded is not None if path == config else _is_tlts(path, recorded)
        if not mine:
            raise InputError(f"would overwrite {path}, which tlt did not write (or which changed since); move it, "
                             "choose another --out, or pass --force to overwrite it", path=out, field="--out")
    return files
