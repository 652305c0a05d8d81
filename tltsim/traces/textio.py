"""Bytes of trace files: decompression (gzip, zstd, with a size cap) and JSON lines.

Shared by the file readers (:mod:`tltsim.traces.readers`) and the framework dump readers
(:mod:`tltsim.traces.frameworks`), which is why it sits below both.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from tltcore.errors import InputError, reason
from tltcore.input_files import json_lines

#: Compressed text formats: ``.csv.gz``, ``.jsonl.zst``... (Parquet compresses inside the file).
COMPRESSIONS = (".gz", ".zst")
#: Most bytes a compressed trace may expand to. 4 GiB is ~10x the largest public RL trace we know
#: of as plain text, and what a 128 GiB machine holds several times over as a DataFrame; a
#: "decompression bomb" (a few KB that expand to terabytes) stops here with one line instead of
#: filling memory.
MAX_DECOMPRESSED = 4 * 2**30
_CHUNK = 1 << 20


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


def json_records(path: Path, data: bytes) -> list[dict[str, object]]:
    """The JSON objects of JSON-lines ``data`` (read from ``path``), one per non-blank line
    (:func:`tltcore.input_files.json_lines`); a trace with none is refused."""
    records = json_lines(data, path=path)
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
