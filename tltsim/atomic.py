"""Atomic writes: temp file in the destination folder, then ``os.replace``.

A crash or a validation error half-way never leaves a truncated result behind, and a reader never
sees a partial file.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return write_with(path, lambda tmp: Path(tmp).write_bytes(data))


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_with(path: str | Path, writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp_path)`` and move the result onto ``path`` only if it succeeded.

    Use this for writers that want a file name (``df.to_parquet``, ``fig.savefig``); the hidden
    temporary name keeps the destination's suffix so format detection still works.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.tmp-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        writer(tmp_path)
        os.replace(tmp_path, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
    return path


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Build a whole results folder in a sibling temp folder and swap it in at the end.

    If the body raises, the temp folder is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
