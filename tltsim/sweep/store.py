"""The results of a sweep: a folder holding a Parquet dataset that only ever grows by whole files.

Layout of ``results/sweeps/<spec stem>/``::

    sweep.json            what this folder is (tool, spec name and checksum, tlt version, counts)
    spec.toml             the spec as last run, byte for byte
    base.resolved.toml    its base scenario, every field resolved
    points.parquet        the spec's points: key, axis values, why a point is invalid, its scenario
    results/part-*.parquet  result rows, one file per committed point (merged by ``compact``)

Why it cannot be corrupted by a crash: every file is written to a hidden temp name and renamed into
place (:func:`tltcore.atomic.write_with`), so a reader sees a whole file or none; the result files
themselves are the only record of what is finished (no separate index that could disagree with them
after a crash between two writes). A point may nevertheless end up in two files -- a crash between
a compaction's write and its deletes, two runs of one spec at once, a ``--retry-failed`` re-run of an
error -- so :meth:`SweepStore.read` keeps, per key, exactly one attempt: the newest successful one,
else the newest error. Readers never see a point twice.

What a damaged file does (a disk error, a user's tool, a copy cut short -- never tlt's own writes):
a part file that cannot be read, or lacks the key/status/bookkeeping columns, is reported in one
``tlt: warning:`` line naming it and read as if absent, so ``tlt sweep status`` and ``tlt report``
keep working on the other points and show the lost ones as pending. ``tlt sweep run`` moves such a
file aside (:meth:`SweepStore.quarantine_damaged`: renamed to ``*.parquet.damaged`` in place, never
deleted, so nothing is lost that could still be rescued) and evaluates its points again, because a
point without a readable result is simply a point to do. ``points.parquet`` is derived from the
spec, so a run rewrites it and ``status`` falls back to the points that have results.

Result columns: ``key``, ``status`` (``ok`` or ``error``), ``error`` (the message, empty when ok),
one column per axis field named by its dotted path (list values joined by ``;``), the evaluation's
own columns (``policy``, ``step``, ``makespan_s``, ``speedup``, ...), and the bookkeeping that proves
what ran when: ``attempt`` (unique per evaluation), ``row`` (position within the attempt),
``wall_s``, ``finished_at`` (Unix time) and ``host``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pandas as pd

from tltcore.atomic import check_path_text, folder_lock, sweep_dead, write_text, write_with
from tltcore.errors import InputError, warn

META = "sweep.json"
SPEC_COPY = "spec.toml"
BASE_COPY = "base.resolved.toml"
POINTS = "points.parquet"
RESULTS = "results"
PART_GLOB = "part-*.parquet"
BOOKKEEPING = ("attempt", "row", "wall_s", "finished_at", "host")
#: Columns every part file must have: without them its rows cannot be deduplicated or counted.
REQUIRED = ("key", "status", "attempt", "row", "finished_at")
DAMAGED_SUFFIX = ".damaged"
_STALE_TEMP = re.compile(r"^\..*\.tlt-tmp-(\d+)-[A-Za-z0-9_]+(\.[A-Za-z]+)?$")


def _why(exc: BaseException) -> str:
    """An exception as a short reason for a one-line message: pyarrow's repeat the path, can span
    lines and go on to advice about file formats; the first sentence is the reason."""
    text = " ".join(str(exc).split())
    text = re.sub(r"^Could not open Parquet input source '[^']*': ", "", text)
    text = text.split(". ")[0].rstrip(".")
    return (text[:120] + "...") if len(text) > 120 else (text or type(exc).__name__)


def cell(value: Any) -> Any:
    """An axis value as a Parquet cell: list values joined by ``;`` so columns stay groupable."""
    if isinstance(value, tuple | list):
        return ";".join(str(v) for v in value)
    return value


class SweepStore:
    """One sweep's results folder. Only the process running the sweep writes result files; any
    number of readers (``tlt sweep status``, reports) may read at the same time."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.results = self.root / RESULTS
        #: Damaged files seen by this store, and why; each is warned about once per store.
        self.damaged: dict[Path, str] = {}
        self._quiet = False

    # ---- opening ---------------------------------------------------------------------------------
    def is_sweep(self) -> bool:
        """Whether the folder holds a tlt sweep (its ``sweep.json`` says so)."""
        meta = self.meta()
        return meta.get("tool") == "tlt" and meta.get("kind") == "sweep"

    def check_writable(self, field: str = "--out", *, create: bool = True) -> None:
        """Refuse, before any work, a target that is a file or a folder of someone else's files: a
        sweep appends into its folder and must never mix its files with a user's."""
        root = self.root
        check_path_text(root, str(root), field)
        if root.exists() and not root.is_dir():
            raise InputError("exists and is not a folder; choose another path", path=root, field=field)
        if root.is_dir():
            try:
                names = sorted(p.name for p in root.iterdir())
            except PermissionError:
                raise InputError("is a folder tlt cannot read", path=root, field=field) from None
            if names and not self.is_sweep():
                shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                raise InputError(f"exists, is not empty ({shown}) and is not a tlt sweep folder; choose another path",
                                 path=root, field=field)
            if not os.access(root, os.W_OK | os.X_OK):
                raise InputError("folder is not writable", path=root, field=field)
        if not create:
            return
        try:
            self.results.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise InputError(f"cannot create the sweep folder ({why})", path=root, field=field) from None

    def write_meta(self, *, spec_text: str, spec_name: str, spec_sha256: str, base_toml: str,
                   points: pd.DataFrame, axis_fields: tuple[str, ...]) -> None:
        """Store the spec, its resolved base and its points beside the results (each file atomic)."""
        from tltcore import __version__

        write_text(self.root / SPEC_COPY, spec_text)
        write_text(self.root / BASE_COPY, base_toml)
        write_with(self.root / POINTS, lambda tmp: points.to_parquet(tmp, index=False))
        meta = {"tool": "tlt", "kind": "sweep", "version": __version__, "name": spec_name,
                "spec_sha256": spec_sha256, "points": len(points), "axes": list(axis_fields),
                "updated": time.time()}
        write_text(self.root / META, json.dumps(meta, indent=1) + "\n")

    def points(self) -> pd.DataFrame:
        """The stored points table (what ``status`` reads when given a folder)."""
        path = self.root / POINTS
        if path.exists() and not path.is_file():
            raise DamagedFile(path, "not a regular file")
        if not path.is_file():
            raise InputError(f"no {POINTS}: not a tlt sweep folder, or its first run never started", path=self.root)
        try:
            df = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ValueError, ... for a damaged file
            raise DamagedFile(path, _why(exc)) from None
        missing = [c for c in ("index", "key", "invalid") if c not in df.columns]
        if missing:
            raise DamagedFile(path, f"no {', '.join(missing)} column")
        return df

    def points_damage(self) -> str | None:
        """Why ``points.parquet`` cannot be read, or None if it is absent or readable."""
        if not (self.root / POINTS).exists() and not (self.root / POINTS).is_symlink():
            return None
        try:
            self.points()
        except DamagedFile as exc:
            return exc.reason
        except InputError:
            return "not a regular file"
        return None

    def meta(self) -> dict[str, Any]:
        """``sweep.json`` as a dict; {} when it is missing, not a regular file (a FIFO would block the
        read forever), not JSON or not an object."""
        path = self.root / META
        if not path.is_file():
            return {}
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}

    # ---- writing ---------------------------------------------------------------------------------
    def write_point(self, rows: pd.DataFrame, key: str) -> Path:
        """Commit one point's rows as one new file, atomically (temp name + rename)."""
        name = f"part-{time.time_ns():020d}-{os.getpid()}-{key}.parquet"
        return write_with(self.results / name, lambda tmp: rows.to_parquet(tmp, index=False))

    def quarantine_damaged(self) -> list[Path]:
        """Rename every unreadable part file to ``<name>.damaged`` (kept, never deleted) so that its
        points count as not done and a run evaluates them again; returns the new names.

        Renamed, not deleted: the file is tlt's own, but whatever is still in it is the user's to
        rescue; and renamed in place, because the sweep folder is what ``check_writable`` trusts."""
        moved = []
        self._quiet = True
        try:
            damaged = [p for p in self._parts() if self._read_file(p, list(REQUIRED)) is _DAMAGED]
        finally:
            self._quiet = False
        for p in damaged:
            dest = p.with_name(p.name + DAMAGED_SUFFIX)
            try:
                p.rename(dest)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise InputError(f"is damaged ({self.damaged[p]}) and cannot be moved aside "
                                 f"({exc.strerror or exc})", path=p) from None
            warn(f"{p} is damaged ({self.damaged[p]}); moved aside as {dest.name}, and its points are evaluated "
                 "again")
            moved.append(dest)
        return moved

    def remove_stale_temps(self) -> list[Path]:
        """Delete temp files of writers that died (SIGKILL mid-write); a live writer's are kept."""
        return [p for folder in (self.root, self.results) for p in sweep_dead(folder, _STALE_TEMP)]

    def compact(self) -> int:
        """Merge the part files into one (deduplicated) file; returns how many files it replaced.

        The merged file is committed before the parts are deleted, so a crash in between leaves
        duplicates that :meth:`read` drops, never a lost point. Parts written meanwhile by another
        run are not touched (only the files read are deleted)."""
        if not self.results.is_dir():
            return 0
        with folder_lock(self.results):  # two compactions never interleave
            read = [(p, self._read_file(p)) for p in self._parts()]
            # A damaged part is left where it is (a run moves it aside): compaction never deletes
            # what it could not read.
            files = [p for p, f in read if f is not _DAMAGED]
            frames = [f for _, f in read if f is not None and f is not _DAMAGED]
            if len(files) < 2:
                return 0
            merged = dedupe(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()
            name = f"part-{time.time_ns():020d}-{os.getpid()}-compact.parquet"
            write_with(self.results / name, lambda tmp: merged.to_parquet(tmp, index=False))
            for p in files:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            return len(files)

    # ---- reading ---------------------------------------------------------------------------------
    def _parts(self) -> list[Path]:
        if not self.results.is_dir():
            return []
        return sorted(p for p in self.results.glob(PART_GLOB) if p.is_file())

    def _damaged(self, path: Path, why: str) -> None:
        if path not in self.damaged:
            self.damaged[path] = why
            if not self._quiet:
                warn(f"{path} is damaged ({why}); its points count as not done: `tlt sweep run` with the same "
                     "spec and --out evaluates them again")

    def _read_file(self, path: Path, columns: list[str] | None = None) -> pd.DataFrame | None:
        """The file's rows; None if it vanished (compacted away between the listing and the read);
        ``_DAMAGED`` (and one warning) if it cannot be read or lacks the columns every part has."""
        try:
            df = pd.read_parquet(path, columns=columns)
        except FileNotFoundError:
            return None
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ValueError, ... for a damaged file
            if not path.exists():
                return None
            self._damaged(path, _why(exc))
            return _DAMAGED
        missing = [c for c in REQUIRED if c not in df.columns]
        if missing:
            self._damaged(path, f"no {', '.join(missing)} column")
            return _DAMAGED
        return df

    def read(self, columns: list[str] | None = None) -> pd.DataFrame:
        """Every result row, one attempt per key (see the module docstring). ``columns`` limits what
        is read (the bookkeeping columns needed for deduplication are always read)."""
        want = None if columns is None else list(dict.fromkeys(
            [*columns, "key", "status", "attempt", "row", "finished_at"]))
        for _ in range(5):  # a concurrent compaction may delete a listed file: list again
            files = self._parts()
            frames = [self._read_file(p, want) for p in files]
            if all(f is not None for f in frames):
                break
        frames = [f for f in frames if f is not None and f is not _DAMAGED and len(f)]
        if not frames:
            return pd.DataFrame(columns=want or ["key", "status", "error", *BOOKKEEPING])
        return dedupe(pd.concat(frames, ignore_index=True))

    def status_by_key(self) -> dict[str, str]:
        """``{key: "ok" | "error"}`` for every point with a result (cheap: four columns read)."""
        df = self.read(columns=["key", "status"])
        if df.empty:
            return {}
        firsts = df.drop_duplicates("key")
        return dict(zip(firsts["key"].astype(str), firsts["status"].astype(str), strict=True))


class DamagedFile(InputError):
    """A file of the sweep folder that cannot be read; ``reason`` says why in a few words."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"is damaged ({reason})", path=path)
        self.reason = reason


#: What ``_read_file`` returns for a damaged part (distinct from None, a part that vanished).
_DAMAGED = pd.DataFrame()


def dedupe(df: pd.DataFrame) -> pd.DataFrame:
    """Keep one attempt per key -- the newest ``ok`` one, else the newest error -- and each of its
    rows once (a compaction interrupted after its write leaves an attempt in two files)."""
    if df.empty:
        return df
    df = df.drop_duplicates(["attempt", "row"]).reset_index(drop=True)
    attempts = df.drop_duplicates("attempt")[["key", "attempt", "status", "finished_at"]].copy()
    attempts["_ok"] = attempts["status"].astype(str) == "ok"
    attempts = attempts.sort_values(["key", "_ok", "finished_at", "attempt"], kind="stable")
    chosen = set(attempts.drop_duplicates("key", keep="last")["attempt"])
    out = df[df["attempt"].isin(chosen)]
    return out.sort_values(["key", "row"], kind="stable").reset_index(drop=True)
