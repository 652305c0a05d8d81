"""Bytes of trace files: decompression (gzip, zstd, with a size cap) and JSON lines.

Shared by the file readers (:mod:`tltsim.traces.readers`) and the framework dump readers
(:mod:`tltsim.traces.frameworks`), which is why it sits below both.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path

from tltcore.errors import InputError, reason
from tltsim.traces.schema import column_name

#: Compressed text formats: ``.csv.gz``, ``.jsonl.zst``... (Parquet compresses inside the file).
COMPRESSIONS = (".gz", ".zst")
#: Most bytes a compressed trace may expand to. 4 GiB is ~10x the largest public RL trace we know
#: of as plain text, and what a 128 GiB machine holds several times over as a DataFrame; a
#: "decompression bomb" (a few KB that expand to terabytes) stops here with one line instead of
#: filling memory.
MAX_DECOMPRESSED = 4 * 2**30
_CHUNK = 1 << 20
_BOM = "\ufeff"


def trace_format(path: Path) -> tuple[str, str | None]:
    """``(format suffix, compression suffix or None)``: ``data.jsonl.zst`` -> ``(".jsonl", ".zst")``."""
    suffixes = [x.lower() for x in path.suffixes]
    if len(suffixes) >= 2 and suffixes[-1] in COMPRESSIONS:
        return suffixes[-2], suffixes[-1]
    return (suffixes[-1] if suffixes else ""), None


def decompress(path: Path, compression: str, limit: int | None = None) -> bytes:
    """The decompressed bytes of ``path`` (gzip from the standard library, zstd from the
    ``zstandard`` package), refused past ``limit`` bytes (default :data:`MAX_DECOMPRESSED`) and on a
    corrupt or truncated stream, as one line naming the file."""
    limit = MAX_DECOMPRESSED if limit is None else limit
    kind = "gzip" if compression == ".gz" else "zstd"
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)  # BadGzipFile is an OSError
    out = bytearray()
    with path.open("rb") as raw:
        try:
            if compression == ".gz":
                stream: io.BufferedIOBase | gzip.GzipFile = gzip.GzipFile(fileobj=raw)
            else:
                import zstandard

                errors += (zstandard.ZstdError,)
                stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
            with stream:
                while chunk := stream.read(_CHUNK):
                    out += chunk
                    if len(out) > limit:
                        raise InputError(f"{kind} file expands to more than {limit:,} bytes (the limit "
                                         "tltsim.traces.textio.MAX_DECOMPRESSED); decompress it and cut it, or "
                                         "convert it to Parquet", path=path)
        except errors as exc:
            raise InputError(f"cannot decompress {kind} file: {reason(exc)}", path=path) from None
    return bytes(out)


class _DuplicateKey(Exception):
    pass


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def json_records(path: Path, data: bytes) -> list[dict[str, object]]:
    """The JSON objects of JSON-lines ``data`` (read from ``path``), one per non-blank line; errors
    name the file and the line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        row = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})", path=path,
                         row=row) from None
    records = []
    for lineno, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        line = line.lstrip(_BOM)  # a BOM opens the file, or each file that was concatenated into it
        if not line.strip():
            continue
        try:
            obj = json.loads(line, object_pairs_hook=_unique_object)
        except _DuplicateKey as exc:
            key = str(exc.args[0])
            raise InputError(f"key {column_name(key)} appears more than once in one object; keep one", path=path,
                             row=lineno, field=column_name(key)[1:-1]) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON ({exc.msg})", path=path, row=lineno) from None
        except (ValueError, RecursionError) as exc:  # >4300-digit integers, absurd nesting
            msg = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
            raise InputError(f"invalid JSON ({msg})", path=path, row=lineno) from None
        if not isinstance(obj, dict):
            raise InputError("line is not a JSON object", path=path, row=lineno)
        records.append(obj)
    if not records:
        raise InputError("trace has no rows", path=path)
    return records


def read_json_lines(path: Path) -> list[dict[str, object]]:
    """The objects of one JSON-lines file, plain or compressed (``.gz``, ``.zst``): what the
    framework dump readers parse."""
    _, compression = trace_format(path)
    if path.stat().st_size == 0:
        raise InputError("file is empty", path=path)
    return json_records(path, decompress(path, compression) if compression else path.read_bytes())
