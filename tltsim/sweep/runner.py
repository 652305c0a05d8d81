"""Run a sweep's points on local worker processes or on Ray, committing each result as it arrives.

:func:`evaluate_point` is the one function that turns a scenario into result rows; everything else
here is scheduling and bookkeeping, so plugging in another evaluation (the whole-RL-run presets)
means swapping that function or passing ``evaluate=`` to :func:`run_sweep`.

Why the loop looks the way it does:

* Only this (driver) process writes results, one atomic file per point as soon as the point is back
  (see :mod:`tltsim.sweep.store`): a SIGKILL loses at most the points still in flight, and a re-run
  skips every point that has a file.
* Work is handed out through a window of at most ~2 tasks per worker, so Ctrl-C, ``--limit`` and a
  dying worker waste little, and a 100k-point sweep does not queue 100k pickled scenarios.
* An exception inside a point's evaluation is that point's result (``status = "error"`` with the
  message); the sweep goes on. A local worker process that dies outright (killed by the OOM killer)
  breaks the pool and cannot be blamed on one point, so the run stops with a one-line error: the
  finished points are saved and the next run resumes.
* Local workers come from a ``forkserver`` (never ``fork`` from a process that runs a progress-bar
  thread or Ray's threads); they ignore SIGINT so that Ctrl-C is handled once, by the driver, which
  cancels what is queued and stops the workers.
* Evaluation is deterministic given the scenario (its seeds are fields), so the local and the Ray
  backend give identical rows for the same spec.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from tltcore.errors import InputError, warn
from tltsim.scenario import Scenario, scenario_toml
from tltsim.sweep.spec import Point, SweepSpec, expand
from tltsim.sweep.store import POINTS, SweepStore, cell

BACKENDS = ("local", "ray")
DEFAULT_SWEEPS = Path("results/sweeps")

Evaluator = Callable[[Scenario], pd.DataFrame]


def evaluate_point(scenario: Scenario) -> pd.DataFrame:
    """Simulate one point; the single swappable evaluation of a sweep.

    With ``presets`` (whole RL runs): every preset against ``verl`` on the same workloads,
    :func:`tltsim.rl.run.compare_presets`'s per-preset summary (end-to-end ``speedup``,
    ``rollout_speedup``, time per phase, accept length; an out-of-memory preset is a row with
    ``run_status = "oom"``, since ``status`` is the sweep's own column). Otherwise: every policy
    against ``no-sd`` for the rollout alone, :func:`tltsim.scenario.compare_policies`'s summary, one
    row per (policy, step) with makespan, speedup, GPU idle share, accept length and tokens/s."""
    if scenario.presets:
        from tltsim.rl.run import compare_presets

        _, _, summary = compare_presets(scenario)
        return summary.rename(columns={"status": "run_status"})
    from tltsim.scenario import compare_policies

    _, summary = compare_policies(scenario)
    return summary


def default_workers() -> int:
    """min(usable cores, 4): more processes than cores only adds memory and context switches."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


@dataclass(frozen=True)
class PointResult:
    """What came back for one point from wherever it ran."""

    key: str
    frame: pd.DataFrame | None
    error: str | None
    traceback: str
    wall_s: float
    host: str
    attempt: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def ok(self) -> bool:
        return self.error is None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_task(evaluate: Evaluator | None, key: str, scenario: Scenario) -> PointResult:
    """Evaluate one point where it runs (worker process or Ray task), catching its failure.

    Top-level so that it pickles by reference; ``evaluate=None`` means this module's
    :func:`evaluate_point`, looked up at call time."""
    fn = evaluate if evaluate is not None else globals()["evaluate_point"]
    host = f"{socket.gethostname()}:{os.getpid()}"
    t0 = time.perf_counter()
    try:
        frame = fn(scenario)
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"the evaluation returned {type(frame).__name__}, not a pandas DataFrame")
        if frame.empty:
            raise ValueError("the evaluation returned no rows")
    except Exception as exc:  # a point's failure is its result; the sweep goes on
        tb = "".join(traceback.format_exception(exc)[-20:])
        return PointResult(key, None, _one_line(exc), tb, time.perf_counter() - t0, host)
    return PointResult(key, frame.reset_index(drop=True), None, "", time.perf_counter() - t0, host)


def result_rows(point: Point, outcome: PointResult, axis_fields: Sequence[str]) -> pd.DataFrame:
    """The rows stored for one point: key, status, error, axis columns, the evaluation's columns,
    bookkeeping (see :mod:`tltsim.sweep.store`)."""
    head: dict[str, Any] = {"key": point.key, "status": "ok" if outcome.ok else "error",
                            "error": outcome.error or ""}
    for name in axis_fields:
        head[name] = cell(point.values.get(name))
    frame = outcome.frame if outcome.frame is not None else pd.DataFrame(index=[0])
    n = len(frame)
    tail = {"attempt": outcome.attempt, "row": range(n), "wall_s": outcome.wall_s, "finished_at": time.time(),
            "host": outcome.host, "traceback": outcome.traceback}
    fixed = {**head, **tail}
    body = frame.drop(columns=[c for c in frame.columns if c in fixed])
    out = pd.concat([pd.DataFrame({k: v for k, v in head.items()}, index=range(n)), body.reset_index(drop=True),
                     pd.DataFrame({k: v for k, v in tail.items()}, index=range(n))], axis=1)
    return out


def points_frame(spec: SweepSpec, points: Sequence[Point]) -> pd.DataFrame:
    """One row per point: index, key, axis values, invalid reason, resolved scenario TOML."""
    rows = []
    for p in points:
        row: dict[str, Any] = {"index": p.index, "key": p.key}
        row.update({name: cell(p.values.get(name)) for name in spec.axis_fields})
        row["invalid"] = p.invalid or ""
        row["scenario"] = scenario_toml(p.scenario)
        rows.append(row)
    return pd.DataFrame(rows, columns=["index", "key", *spec.axis_fields, "invalid", "scenario"])


# ---- backends -------------------------------------------------------------------------------------
class PointExecutor(Protocol):
    """Where points run. ``submit`` returns a handle; ``wait`` blocks until at least one handle is
    done and returns (handle, outcome) pairs; ``close`` stops everything, cancelling queued work."""

    slots: int

    def submit(self, evaluate: Evaluator | None, point: Point) -> Any: ...

    def wait(self, handles: Iterable[Any]) -> list[tuple[Any, PointResult]]: ...

    def close(self, *, cancel: bool) -> None: ...


class SweepAborted(InputError):
    """The run cannot go on (a worker process died); finished points are saved."""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalExecutor:
    """``concurrent.futures.ProcessPoolExecutor`` on this machine, started from a forkserver."""

    def __init__(self, workers: int) -> None:
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else None)
        if ctx.get_start_method() == "forkserver":
            # Workers fork from a server that has already imported the simulator: no per-worker import.
            ctx.set_forkserver_preload(["tltsim.sweep.runner"])
        self.slots = workers
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint)

    def submit(self, evaluate: Evaluator | None, point: Point) -> Future:
        return self.pool.submit(run_task, evaluate, point.key, point.scenario)

    def wait(self, handles: Iterable[Future]) -> list[tuple[Future, PointResult]]:
        done, _ = wait_futures(list(handles), return_when=FIRST_COMPLETED)
        out = []
        for fut in done:
            try:
                out.append((fut, fut.result()))
            except BrokenProcessPool:
                raise SweepAborted("a worker process died (killed, or out of memory?); the finished points are "
                                   "saved: run the same command again to resume") from None
        return out

    def close(self, *, cancel: bool) -> None:
        if not cancel:
            self.pool.shutdown(wait=True)
            return
        processes = list(getattr(self.pool, "_processes", {}).values())  # no public API before Python 3.14
        self.pool.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            if proc.is_alive():
                proc.terminate()
        for proc in processes:
            proc.join(timeout=5)


def import_ray() -> Any:
    """Ray, imported only when asked for: the local backend must work without it."""
    try:
        import ray
    except ImportError:
        raise InputError("Ray is not installed; pip install 'tlt[ray]' (or pip install ray), or use --backend "
                         "local", path="--backend") from None
    return ray


#: Seconds to wait for a TCP connection to a Ray cluster's address before giving up with an error.
RAY_CONNECT_TIMEOUT_S = 10.0


def check_reachable(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """One clear error, within ``timeout_s``, when nothing listens at a Ray ``host:port`` address
    (``ray.init`` itself retries an unreachable address for minutes). ``auto`` and addresses
    without a port are left to Ray."""
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise InputError(f"cannot reach a Ray cluster at {address} ({reason} after at most {timeout_s:g} s); "
                         "is `ray start --head` running there, and is the port the GCS port (default 6379)?",
                         path="--address") from None


class RayExecutor:
    """Ray tasks, on an existing cluster (``address``) or on a local Ray started here with
    ``workers`` CPUs. A Ray this process did not start is left running."""

    def __init__(self, workers: int, address: str | None = None) -> None:
        ray = self.ray = import_ray()
        self.started = False
        if not ray.is_initialized():
            if address:
                check_reachable(address)
            try:
                if address:
                    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
                else:
                    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise InputError(f"cannot start or reach Ray: {_one_line(exc)}", path="--address" if address
                                 else "--backend") from None
            self.started = True
        cpus = int(ray.cluster_resources().get("CPU", workers) or workers)
        self.slots = max(1, cpus)
        self.task = ray.remote(num_cpus=1, max_retries=1)(run_task)
        self.inflight: set[Any] = set()

    def submit(self, evaluate: Evaluator | None, point: Point) -> Any:
        ref = self.task.remote(evaluate, point.key, point.scenario)
        self.inflight.add(ref)
        return ref

    def wait(self, handles: Iterable[Any]) -> list[tuple[Any, PointResult]]:
        refs = list(handles)
        done, _ = self.ray.wait(refs, num_returns=1)
        out = []
        for ref in done:
            self.inflight.discard(ref)
            try:
                out.append((ref, self.ray.get(ref)))
            except Exception as exc:  # the task's worker died (e.g. OOM) after its retry: the point's result
                out.append((ref, PointResult("", None, _one_line(exc), "", 0.0, "ray")))
        return out

    def close(self, *, cancel: bool) -> None:
        if cancel:  # on a cluster we did not start, queued and running tasks would go on without us
            for ref in self.inflight:
                with contextlib.suppress(Exception):
                    self.ray.cancel(ref, force=True)
        if self.started:
            self.ray.shutdown()


# ---- the run --------------------------------------------------------------------------------------
@dataclass
class RunReport:
    """What one ``run_sweep`` call did."""

    out: Path
    total: int  # points in the spec
    skipped: int  # already had a result
    planned: int  # evaluated (or recorded as invalid) in this run
    ok: int = 0
    failed: int = 0
    pending: int = 0  # left for a later run (held back by --limit); total = skipped + ok + failed + pending
    wall_s: float = 0.0

    @property
    def points_per_min(self) -> float:
        n = self.ok + self.failed
        return 60.0 * n / self.wall_s if n and self.wall_s > 0 else float("nan")


Progress = Callable[[Point, PointResult], None]


def plan(spec: SweepSpec, store: SweepStore, *, retry_failed: bool = False,
         points: list[Point] | None = None) -> tuple[list[Point], list[Point], list[Point]]:
    """(all points, invalid points still to record, valid points still to evaluate)."""
    points = expand(spec) if points is None else points
    status = store.status_by_key()
    invalid = [p for p in points if p.invalid is not None and p.key not in status]
    todo = [p for p in points if p.invalid is None and (
        p.key not in status or (retry_failed and status[p.key] == "error"))]
    return points, invalid, todo


def run_sweep(spec: SweepSpec, out: str | Path | None = None, *, backend: str = "local", workers: int | None = None,
              address: str | None = None, retry_failed: bool = False, limit: int | None = None,
              evaluate: Evaluator | None = None, progress: Progress | None = None,
              on_start: Callable[[int, int], None] | None = None) -> RunReport:
    """Evaluate the spec's points that have no result yet (and its errors, with ``retry_failed``),
    committing each as it finishes. ``limit`` caps the evaluations of this run; ``progress`` is
    called once per committed point; ``on_start(to_do, already_done)`` before the first."""
    if backend not in BACKENDS:
        raise InputError(f"must be one of {', '.join(BACKENDS)}, got '{backend}'", path="--backend")
    if workers is not None and workers < 1:
        raise InputError(f"must be >= 1, got {workers}", path="--workers")
    if limit is not None and limit < 1:
        raise InputError(f"must be >= 1 (leave it out to run every point), got {limit}", path="--limit")
    if address and backend != "ray":
        raise InputError("applies to --backend ray only", path="--address")
    if backend == "ray":
        import_ray()  # a missing Ray fails before anything is written
    out = Path(out) if out is not None else DEFAULT_SWEEPS / spec.path.stem
    store = SweepStore(out)
    store.check_writable(create=False)  # a bad --out fails before the expansion
    points = expand(spec)  # a bad value fails before anything is created
    store.check_writable()
    store.remove_stale_temps()
    # A damaged result file is moved aside (one warning each) so its points are planned again; a
    # damaged points.parquet is said once and rebuilt from the spec just below.
    store.quarantine_damaged()
    why = store.points_damage()
    if why is not None:
        warn(f"{store.root / POINTS} is damaged ({why}); rebuilt from the spec")
    store.write_meta(spec_text=spec.text, spec_name=spec.name, spec_sha256=spec.text_sha256,
                     base_toml=scenario_toml(spec.scenario), points=points_frame(spec, points),
                     axis_fields=spec.axis_fields)
    points, invalid, todo = plan(spec, store, retry_failed=retry_failed, points=points)
    # Every point is in exactly one of: done before (skipped), evaluated now (ok / failed), pending
    # (held back by --limit, or not finished). Held-back points are pending, never "done before".
    skipped = len(points) - len(invalid) - len(todo)
    if limit is not None:
        todo = todo[:limit]
    report = RunReport(out=out, total=len(points), skipped=skipped, planned=len(invalid) + len(todo))
    if on_start is not None:
        on_start(report.planned, report.skipped)
    t0 = time.perf_counter()

    def commit(point: Point, outcome: PointResult) -> None:
        store.write_point(result_rows(point, outcome, spec.axis_fields), point.key)
        if outcome.ok:
            report.ok += 1
        else:
            report.failed += 1
        if progress is not None:
            progress(point, outcome)

    for p in invalid:  # cannot be simulated: recorded without a worker
        commit(p, PointResult(p.key, None, p.invalid, "", 0.0, f"{socket.gethostname()}:{os.getpid()}"))
    if todo:
        n_workers = workers or default_workers()
        runner: PointExecutor = (LocalExecutor(min(n_workers, len(todo))) if backend == "local"
                           else RayExecutor(n_workers, address))
        clean = False
        try:
            _drive(runner, todo, evaluate, commit)
            clean = True
        finally:
            runner.close(cancel=not clean)
    report.wall_s = time.perf_counter() - t0
    report.pending = report.total - report.skipped - report.ok - report.failed
    store.compact()
    return report


def _drive(runner: PointExecutor, todo: Sequence[Point], evaluate: Evaluator | None,
           commit: Callable[[Point, PointResult], None]) -> None:
    """Keep ~2 tasks per slot in flight, committing each outcome as it arrives."""
    window = 2 * runner.slots
    queue = iter(todo)
    inflight: dict[Any, Point] = {}

    def top_up() -> None:
        while len(inflight) < window:
            point = next(queue, None)
            if point is None:
                return
            inflight[runner.submit(evaluate, point)] = point

    top_up()
    while inflight:
        for handle, outcome in runner.wait(inflight):
            commit(inflight.pop(handle), outcome)
        top_up()
