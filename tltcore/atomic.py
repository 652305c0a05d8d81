"""Safe, atomic output: files and whole results folders.

The rules, because a results path is typed by a user who may point it at their own work:

* A results folder tlt creates carries a marker file (:data:`MARKER`) listing what tlt wrote in it
  and what *kind* of result it is (:data:`KINDS`: a simulated run, a report, a validation, ...).
  Only such a folder is ever replaced, only by a command writing the same kind, and only if it holds
  nothing but what the marker lists: ``tlt report r --out r_sim_run`` cannot replace a run with a report.
* A command never writes into a folder it reads, nor into a folder that contains it
  (``inputs=``): ``tlt report r --out r`` or ``--out r/inner`` is refused before any work; nor
  inside another results folder (``tlt advise --out r/inner`` where ``r`` is a ``tlt sim run``
  folder), which the next run into ``r`` would have to refuse or delete.
* Anything else that exists at the target -- a file, a folder with the user's files, a folder tlt
  wrote into which the user added a file -- is refused with one line unless ``force`` is given;
  ``force`` writes the new files *into* the folder (replacing same-named files) and never deletes.
* A folder is built in a hidden sibling temp folder and swapped in with ``rename`` at the end, so a
  crash or a validation error leaves the old results or the new ones, never half of each. Temp
  folders left by a killed run (their names carry the pid) are swept by the next run.
* Concurrent writers to one target are serialised by an advisory lock on the parent folder during
  the (short) commit, so four parallel sweeps onto one ``--out`` all finish and the last one wins.
* Files and folders get the permissions the user's umask gives, like any other program's output.

Every path problem (read-only, under a file, ``.``, empty, too long) is an :class:`InputError`
naming the path and the option, and it is raised before any expensive work when callers run
:func:`check_output_dir` / :func:`check_output_file` up front.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import psutil

from tltcore.errors import InputError

MARKER = ".tlt-results.json"
#: What a results folder can hold, by the command that writes it. A folder is only ever replaced by
#: a command of its own kind; a marker without a kind (tlt 0.2 and older) is replaced by none.
KINDS = {
    "sim-run": "tlt sim run",
    "sim-sensitivity": "tlt sim sensitivity",
    "sim-capacity": "tlt sim capacity",
    "advise": "tlt advise",
    "demo": "tlt demo",
    "report": "tlt report",
    "validation": "tlt validate",
    "paper-fidelity": "the paper-fidelity report",
    "cost-aware-matrix": "the cost-aware matrix report (python -m analysis.cost_aware_matrix)",
    "long-tail-strategies": "the long-tail strategies report (python -m analysis.long_tail_strategies)",
    "trace-plot": "tlt trace plot",
    "real-rl": "tlt real rl",
    "real-grpo": "tlt real grpo",
    "model": "a model export (pretrain, EAGLE export, save_pretrained)",
    "benchmark": "a benchmark",
    "gpu-campaign": "tlt gpu campaign",
    "attention-cpu": "the CPU attention report (python -m analysis.attention_cpu)",
}
_TMP = "tlt-tmp"
_OLD = "tlt-old"
_NAME_MAX = 255


def current_umask() -> int:
    """The process umask, read without changing it where the kernel reports it (Linux 4.7+).

    ``os.umask`` can only be read by setting it: for that instant another thread (a sweep's writer
    pool) would create files with umask 0, i.e. world-writable, so that is only the fallback.
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _chmod_default(path: Path, *, folder: bool) -> None:
    """mkstemp/mkdtemp create 0600/0700; give what a plain open()/mkdir() would under the umask."""
    os.chmod(path, (0o777 if folder else 0o666) & ~current_umask())


def _err(path: Path, message: str, field: str) -> InputError:
    return InputError(message, path=path, field=field)


def check_path_text(path: Path, raw: str, field: str) -> None:
    """Refuse a path no file system can hold (empty, NUL, a component over 255 bytes, 4 KiB in all)."""
    if raw.strip() == "":
        raise InputError("is empty; give a folder name", field=field)
    if "\x00" in raw:
        raise InputError("contains a NUL character", field=field)
    for part in path.parts:
        if len(os.fsencode(part)) > _NAME_MAX:
            raise _err(path, f"a path component is {len(os.fsencode(part))} bytes long; the file system allows "
                       f"{_NAME_MAX}", field)
    if len(os.fsencode(str(path.absolute()))) >= 4096:
        raise _err(path, "path is too long (4096 bytes or more)", field)


def _check_parent(path: Path, field: str) -> None:
    """The nearest existing ancestor must be a writable folder."""
    parent = path.absolute().parent
    while not parent.exists():
        if parent.is_symlink():
            raise _err(path, f"{parent} is a broken symbolic link", field)
        parent = parent.parent
    if not parent.is_dir():
        raise _err(path, f"{parent} is a file, so nothing can be created under it", field)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _err(path, f"folder {parent} is not writable", field)


def _read_marker(path: Path) -> tuple[str, list[str]] | None:
    """``(kind, entries)`` tlt recorded in results folder ``path`` (kind ``""`` for a folder written
    before kinds were recorded), or None if it is not a tlt results folder. One read of the marker."""
    try:
        data = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("tool") != "tlt" or not isinstance(data.get("entries"), list):
        return None
    kind = data.get("kind")
    return (kind if isinstance(kind, str) else ""), [str(e) for e in data["entries"]]


def read_marker(path: Path) -> list[str] | None:
    """The entries tlt wrote in results folder ``path``, or None if it is not a tlt results folder."""
    marker = _read_marker(path)
    return None if marker is None else marker[1]


def results_kind(path: Path) -> str | None:
    """The kind of results (:data:`KINDS`; ``""`` from before kinds were recorded) tlt wrote in folder
    ``path``, or None if it is not a tlt results folder. A marker that is not a regular file is none
    (a FIFO would block the read): for folders a user hands a command as input."""
    if not (path / MARKER).is_file():
        return None
    marker = _read_marker(path)
    return None if marker is None else marker[0]


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown results kind {kind!r}; one of {sorted(KINDS)}")  # a programming error


def _foreign_reason(path: Path, kind: str) -> str | None:
    """Why writing a ``kind`` results folder at ``path`` could destroy a user's data or another
    command's results; None if it cannot."""
    if path.is_symlink() and not path.exists():
        return "is a broken symbolic link"
    if not path.exists():
        return None
    if not path.is_dir():
        return "exists and is not a folder; choose another path (tlt never replaces a file with a folder)"
    try:
        names = sorted(p.name for p in path.iterdir())
    except PermissionError:
        return "is a folder tlt cannot read"
    if not names:
        return None
    marker = _read_marker(path)
    if marker is not None:
        held, entries = marker
        extra = sorted(set(names) - set(entries) - {MARKER})
        if held != kind:
            what = f"{held} results (written by {KINDS[held]})" if held in KINDS else (
                "results of an older tlt that did not record their kind" if held == "" else f"'{held}' results")
            return (f"holds {what}, not {kind} results; choose another path, or pass --force to write into it "
                    "without deleting anything")
        if not extra:  # tlt's own results of this kind, nothing added: safe to replace as a whole
            return None
        return (f"is a tlt results folder to which other files were added ({', '.join(extra[:3])}"
                f"{', ...' if len(extra) > 3 else ''}); move them away, choose another path, or pass --force "
                "to write into it without deleting anything")
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return (f"exists, is not empty ({shown}) and was not created by tlt; choose another path or pass --force "
            "to write into it without deleting anything")


def check_not_inputs(path: str | Path, inputs: Iterable[str | Path], *, field: str = "--out") -> None:
    """Refuse an output that is, lies inside, or contains one of the ``inputs`` a command reads:
    writing it would replace (or plant a folder inside) the very results being read. An input that
    is not on disk (a bundled scenario's or a catalogued trace's name) cannot be overlapped."""
    out = Path(os.path.realpath(path))
    for given in inputs:
        if not os.path.exists(given):
            continue
        src = Path(os.path.realpath(given))
        if out == src:
            raise _err(Path(path), f"is the input {given} itself; a command never writes into what it reads: "
                                   "choose another folder", field)
        if src in out.parents:
            raise _err(Path(path), f"lies inside the input {given}; a command never writes into what it reads: "
                                   "choose a folder outside it", field)
        if out in src.parents:
            raise _err(Path(path), f"contains the input {given}, which writing it would replace; choose another "
                                   "folder", field)


def check_output_dir(path: str | Path, force: bool = False, *, kind: str, field: str = "--out",
                     inputs: Iterable[str | Path] = ()) -> Path:
    """Refuse, with one line, a results-folder target that could not be written, whose contents a
    run would destroy, that holds another command's results, or that is (inside) one of the
    ``inputs`` the command reads. Call it before the expensive work so a bad ``--out`` fails in
    milliseconds."""
    _check_kind(kind)
    raw = str(path)
    path = Path(path)
    check_path_text(path, raw, field)
    check_not_inputs(path, inputs, field=field)
    here = path.absolute() == Path.cwd() or path.absolute() in Path.cwd().parents or str(path) in (".", "..")
    if here and not force:
        raise _err(path, "is the current folder or one of its parents; give a new folder name "
                       "(or --force to write into it)", field)
    reason = _foreign_reason(path, kind)
    if reason is not None and (not force or not path.is_dir()):
        raise _err(path, reason, field)
    holder = _enclosing_results(path)
    if holder is not None:
        raise _err(path, f"lies inside {holder}, a results folder of {KINDS.get(results_kind(holder) or '', 'tlt')}: "
                   "the next run into that folder would have to delete it (or refuse); give a folder outside it",
                   field)
    if path.exists() and path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise _err(path, "folder is not writable", field)
    _check_parent(path, field)
    return path


def _enclosing_results(path: Path) -> Path | None:
    """The nearest folder above ``path`` that is a tlt results folder, or None. A results folder holds
    only what tlt listed in its marker, so writing another one inside it would make the next run into
    it refuse (a user file there) or, forced, delete the nested results."""
    for parent in path.absolute().parents:
        if results_kind(parent) is not None:
            return parent
    return None


def check_output_file(path: str | Path, *, field: str = "--out", writer: str = "",
                      written_by: Callable[[Path], bool] | None = None) -> Path:
    """Refuse a file target that is a folder, lies under a file, or cannot be written; with
    ``written_by``, also an existing file that ``written_by(path)`` does not recognise as one the
    command ``writer`` wrote (a command never replaces a file it did not create)."""
    raw = str(path)
    path = Path(path)
    check_path_text(path, raw, field)
    if path.is_dir():
        raise _err(path, "is a folder; give a file name", field)
    if path.exists() and not os.access(path, os.W_OK):
        raise _err(path, "file is not writable", field)
    _check_parent(path, field)
    if written_by is not None and path.exists() and not written_by(path):
        raise _err(path, f"exists and was not written by {writer}; remove it or choose another file name", field)
    return path


def _os_error(path: Path, exc: OSError, field: str) -> InputError:
    why = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted",
           errno.EROFS: "read-only file system", errno.ENOSPC: "no space left on device",
           errno.ENAMETOOLONG: "name too long", errno.ENOTDIR: "a parent is not a folder",
           errno.EDQUOT: "disk quota exceeded"}.get(exc.errno or 0, exc.strerror or type(exc).__name__)
    return _err(path, f"cannot write: {why}", field)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return write_with(path, lambda tmp: Path(tmp).write_bytes(data))


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_with(path: str | Path, writer: Callable[[Path], object], *, field: str = "--out") -> Path:
    """Call ``writer(tmp_path)`` and move the result onto ``path`` only if it succeeded.

    Use this for writers that want a file name (``df.to_parquet``, ``fig.savefig``); the hidden
    temporary name keeps the destination's suffix so format detection still works. A folder at
    ``path`` is refused, never replaced.
    """
    path = check_output_file(path, field=field)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_dead(path.parent, _file_temp_pattern(path))  # a killed earlier writer's temp file
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:100]}.{_TMP}-{os.getpid()}-", suffix=path.suffix[:20],
                                   dir=path.parent)
    except OSError as exc:
        raise _os_error(path, exc, field) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        writer(tmp_path)
        _chmod_default(tmp_path, folder=False)
        os.replace(tmp_path, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
    return path


def _temp_prefix(path: Path, kind: str) -> str:
    """Hidden sibling name carrying the writer's pid (so a later run can tell a dead writer's temp)."""
    return f".{path.name[:80]}.{kind}-{os.getpid()}-"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a temp name's writer may still be writing)."""
    return psutil.pid_exists(pid)


def sweep_dead(folder: Path, pattern: re.Pattern[str]) -> list[Path]:
    """Remove the entries of ``folder`` whose name matches ``pattern`` (group 1: the writer's pid)
    and whose writer is gone: what a SIGKILLed writer (or a scheduler's SIGTERM before cleanup)
    stranded. A live writer's temp and anything behind a symbolic link are left alone. The one
    sweep behind every tlt writer: results folders, single files, sweep parts, drafter checkpoints."""
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for p in entries:
        m = pattern.match(p.name)
        if not m or p.is_symlink() or pid_alive(int(m.group(1))):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()
        removed.append(p)
    return removed


def sweep_stale(path: Path) -> list[Path]:
    """Remove the temp folders of killed writers of results folder ``path`` (see :func:`sweep_dead`)."""
    name = re.escape(path.name[:80])
    return sweep_dead(path.parent, re.compile(rf"^\.{name}\.(?:{_TMP}|{_OLD})-(\d+)-[A-Za-z0-9_]+$"))


def _file_temp_pattern(path: Path) -> re.Pattern[str]:
    """The names :func:`write_with` gives its temp files for ``path`` (``mkstemp``'s random part)."""
    return re.compile(rf"^\.{re.escape(path.stem[:100])}\.{_TMP}-(\d+)-[A-Za-z0-9_]+{re.escape(path.suffix[:20])}$")


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``folder`` itself: serialises concurrent commits into it and
    leaves no file behind. (filelock needs a lock file of its own, which would litter a user's
    folder, and cannot lock a directory, so this is ``flock`` on the folder's descriptor.)"""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write_marker(tmp: Path, kind: str) -> None:
    entries = sorted(p.name for p in tmp.iterdir() if p.name != MARKER)
    from tltcore import __version__

    marker = {"tool": "tlt", "kind": kind, "version": __version__, "entries": entries}
    (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")


def _merge_into(src: Path, dest: Path) -> None:
    """Move every entry of ``src`` into the existing folder ``dest``; same-named files are replaced
    (atomically, one by one), nothing else in ``dest`` is touched."""
    for item in sorted(src.iterdir()):
        target = dest / item.name
        if item.is_dir() and not item.is_symlink():
            if target.is_dir() and not target.is_symlink():
                _merge_into(item, target)
                continue
            if target.exists() or target.is_symlink():
                raise InputError(f"{target} exists and is not a folder; tlt will not replace it", field="--out")
        elif target.is_dir() and not target.is_symlink():
            raise InputError(f"{target} is a folder; tlt will not replace it with a file", field="--out")
        os.replace(item, target)


def _commit(tmp: Path, path: Path, force: bool, field: str, kind: str) -> None:
    with folder_lock(path.parent):
        reason = _foreign_reason(path, kind)  # again, under the lock: another writer may have been faster
        if reason is not None:
            if not (force and path.is_dir()):
                raise _err(path, reason, field)
            _merge_into(tmp, path)
            shutil.rmtree(tmp, ignore_errors=True)
            return
        _write_marker(tmp, kind)
        old = None
        if path.exists() and not any(path.iterdir()):
            try:
                path.rmdir()  # an empty folder: take its place
            except OSError:  # a mount point: fill it instead
                _merge_into(tmp, path)
                shutil.rmtree(tmp, ignore_errors=True)
                return
        elif path.exists():  # tlt's own results: set aside, swap, then delete
            old = Path(tempfile.mkdtemp(prefix=_temp_prefix(path, _OLD), dir=path.parent))
            os.replace(path, old / "x")
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(path: str | Path, *, kind: str, force: bool = False, field: str = "--out",
               inputs: Iterable[str | Path] = ()) -> Iterator[Path]:
    """Build a whole ``kind`` results folder in a hidden sibling temp folder and swap it in at the end.

    If the body raises (an error, Ctrl-C, SIGTERM via the CLI), the temp folder is removed and
    ``path`` is untouched. See the module docstring for what may be replaced and what is refused.
    """
    path = check_output_dir(path, force, kind=kind, field=field, inputs=inputs)
    if path.is_symlink():
        path = Path(os.path.realpath(path))  # replace what the link points at, keep the user's link
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path)
        tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(path, _TMP), dir=path.parent))
        _chmod_default(tmp, folder=True)
    except OSError as exc:
        raise _os_error(path, exc, field) from None
    try:
        yield tmp
        _commit(tmp, path, force, field, kind)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def open_results_dir(path: str | Path, *, kind: str, force: bool = False, field: str = "--out",
                     inputs: Iterable[str | Path] = ()) -> bool:
    """Prepare ``path`` for a ``kind`` results folder written in place, file by file, rather than swapped
    in at the end (:func:`atomic_dir`): for a long measurement whose partial results must survive a
    kill (a GPU campaign stopped at its machine's time limit keeps every stage it finished).

    The refusals are :func:`check_output_dir`'s. A folder holding this kind's own results (nothing
    added) is emptied of the entries its marker lists, then marked anew; an empty or new folder is
    created and marked. Returns whether the folder is marked: False when ``force`` writes into a
    folder tlt did not create (nothing is deleted there, and no marker claims the user's files).
    Call :func:`mark_results_dir` after each file written, so the marker lists what is there."""
    path = check_output_dir(path, force, kind=kind, field=field, inputs=inputs)
    if path.exists() and _foreign_reason(path, kind) is not None:  # forced into someone else's folder
        return False
    try:
        held = _read_marker(path) if path.is_dir() else None
        for name in (held[1] if held is not None else ()):
            entry = path / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            elif entry.exists() or entry.is_symlink():
                entry.unlink()
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _os_error(path, exc, field) from None
    mark_results_dir(path, kind)
    return True


def mark_results_dir(path: str | Path, kind: str) -> None:
    """Rewrite the marker of a folder opened by :func:`open_results_dir`, listing what it holds now."""
    _check_kind(kind)
    path = Path(path)
    entries = sorted(p.name for p in path.iterdir() if p.name != MARKER and _TMP not in p.name)
    from tltcore import __version__

    marker = {"tool": "tlt", "kind": kind, "version": __version__, "entries": entries}
    write_text(path / MARKER, json.dumps(marker, indent=1) + "\n")
