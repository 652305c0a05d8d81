"""``tlt trace import``: any trace tlt reads, written once as a canonical CSV with its provenance.

Why a file and not just ``--map`` every time: a canonical CSV is what a colleague, a bug report or a
catalog entry can take without the mapping, the tokenizer or the framework's folder. Why the
sidecar: a number in that CSV must be traceable to where it came from. ``FILE.provenance.json``
says, for each canonical column, the file column, mapping, value mapping or derived default it came
from; the source files with their sha256; the tokenizer (with its sha256) where tokens were counted;
the tlt version; and the sha256 of the CSV written, which is also how a later import recognises a
file it may replace (a file it did not write, or one edited since, is never overwritten).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tltcore.errors import InputError
from tltcore.input_files import sha256_of

WRITER = "tlt trace import"
SIDECAR_SUFFIX = ".provenance.json"


def sidecar(out: Path) -> Path:
    """The provenance file beside ``out`` (``rollouts.csv`` -> ``rollouts.csv.provenance.json``)."""
    return out.with_name(out.name + SIDECAR_SUFFIX)


def written_by_import(out: Path) -> bool:
    """Whether ``out`` is a CSV this command wrote and nobody changed since: its sidecar names the
    writer and the CSV's sha256."""
    try:
        meta = json.loads(sidecar(out).read_text(encoding="utf-8"))
        return isinstance(meta, dict) and meta.get("writer") == WRITER and meta.get("output_sha256") == sha256_of(out)
    except (OSError, ValueError):
        return False


def _our_sidecar(path: Path) -> bool:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("writer") == WRITER


@dataclass(frozen=True)
class Imported:
    out: Path
    provenance: Path
    rows: int
    columns: dict[str, str]


def import_trace(src: str | Path, out: str | Path, mapping: Mapping[str, str] | None = None, *,
                 tokenizer: str | Path | None = None) -> Imported:
    """Read ``src`` (a file or a framework's dump folder; catalog names too), write the canonical
    columns to ``out`` (CSV) and the provenance beside it, each atomically; nothing is written when
    reading fails."""
    from tltcore import __version__
    from tltcore.atomic import check_not_inputs, check_output_file, write_text
    from tltsim.traces.catalog import CatalogEntry, resolve
    from tltsim.traces.frameworks.tokens import tokenizer_file
    from tltsim.traces.readers import read_with_provenance
    from tltsim.traces.schema import TRACE_COLUMNS

    out = Path(out)
    if out.suffix.lower() != ".csv":
        raise InputError("the canonical trace is written as CSV: give a file name ending in .csv", path=out,
                         field="--out")
    found = resolve(src)
    if isinstance(found, CatalogEntry):
        raise InputError(f"'{found.name}' is a parametric length profile, not a file to import", field="SRC")
    check_output_file(out, writer=WRITER, written_by=written_by_import)
    check_output_file(sidecar(out), writer=WRITER, written_by=_our_sidecar)
    check_not_inputs(out, [found], field="--out")
    read = read_with_provenance(found, mapping, tokenizer=tokenizer)
    frame = read.frame[list(TRACE_COLUMNS)]
    write_text(out, frame.to_csv(index=False, lineterminator="\n"))
    tok = None
    if tokenizer is not None:
        tok_path = tokenizer_file(tokenizer)
        tok = {"path": str(tok_path), "sha256": sha256_of(tok_path)}
    meta = {
        "writer": WRITER,
        "tlt_version": __version__,
        "source": str(found),
        "framework": read.framework,
        "files": [{"path": str(p), "sha256": sha256_of(p)} for p in read.files],
        "mapping": dict(mapping or {}),
        "tokenizer": tok,
        "columns": {c: read.columns[c] for c in TRACE_COLUMNS},
        "rows": len(frame),
        "output": out.name,
        "output_sha256": sha256_of(out),
    }
    write_text(sidecar(out), json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return Imported(out, sidecar(out), len(frame), meta["columns"])
