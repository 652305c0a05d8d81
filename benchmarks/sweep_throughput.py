"""Sweep throughput on this machine: points per minute, local worker processes vs Ray.

A fixed spec of small points (the parametric ``intern_s1_math`` profile, 4 prompt groups x 8
samples, Qwen2.5-7B on 8 GPUs at TP 4, ``no-sd`` vs ``elastic+beg-mab``; GPU x switch mode x seed),
run three ways into fresh folders:

* serial: :func:`tltsim.sweep.runner.evaluate_point` in a loop in this process (the ceiling one core
  gives, no scheduling, no result files);
* local: ``run_sweep(backend="local")`` with ``--workers`` processes;
* ray: ``run_sweep(backend="ray")`` on a local Ray with ``--workers`` CPUs, started by the sweep.

Two rates per backend: end to end (wall time of the whole ``run_sweep`` call, start-up of the pool
or of Ray included: what a user waits for) and steady (from the first committed point to the last:
what a long sweep converges to). Points are small on purpose, so the numbers expose the overhead
per point; real points take seconds to minutes and both backends then approach the serial rate
times the number of workers.

    OMP_NUM_THREADS=1 python benchmarks/sweep_throughput.py [--workers 2] [--seeds 4] [--no-ray]
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from options import run

from tltsim.sweep.runner import evaluate_point, run_sweep
from tltsim.sweep.spec import expand, parse_spec

SPEC = """
name = "throughput"

[scenario]
policies = ["elastic+beg-mab"]
trace.name = "intern_s1_math"
trace.prompts_per_step = 4
cluster.gpus = 8

[[axes]]
"cluster.gpu" = ["H100", "H20"]
"engine.switch" = ["reprefill", "catch_up"]
seed = {seeds}
"""


def _spec(seeds: int, folder: Path):
    return parse_spec(SPEC.replace("{seeds}", str(list(range(seeds)))), path=folder / "throughput.toml")


def _timed_sweep(spec, out: Path, backend: str, workers: int) -> tuple[float, float, int]:
    """(end-to-end points/min, steady points/min, points) of one fresh run."""
    stamps: list[float] = []
    t0 = time.perf_counter()
    report = run_sweep(spec, out, backend=backend, workers=workers,
                       progress=lambda p, o: stamps.append(time.perf_counter()))
    wall = time.perf_counter() - t0
    if report.failed:
        raise SystemExit(f"{report.failed} points failed on {backend}")
    n = len(stamps)
    steady = 60.0 * (n - 1) / (stamps[-1] - stamps[0]) if n > 1 and stamps[-1] > stamps[0] else float("nan")
    return 60.0 * n / wall, steady, n


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(help=__doc__)
def main(
    workers: Annotated[int, typer.Option(help="Worker processes / Ray CPUs.")] = 2,
    seeds: Annotated[int, typer.Option(help="Seeds per (GPU, switch) pair: points = 4 x seeds.")] = 4,
    ray_too: Annotated[bool, typer.Option("--ray/--no-ray", help="Also time the Ray executor.")] = True,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec = _spec(seeds, root)
        points = expand(spec)
        print(f"{len(points)} points; {os.cpu_count()} cores; Python {platform.python_version()}; "
              f"workers={workers}")
        evaluate_point(points[0].scenario)  # warm imports and caches, as a worker's first point would
        t0 = time.perf_counter()
        for p in points:
            evaluate_point(p.scenario)
        serial = 60.0 * len(points) / (time.perf_counter() - t0)
        rows = [("serial (1 process, no store)", serial, serial)]
        e2e, steady, _ = _timed_sweep(spec, root / "local", "local", workers)
        rows.append((f"local, {workers} processes", e2e, steady))
        if ray_too:
            try:
                import ray
            except ImportError:
                print("ray not installed: skipping the Ray backend (pip install 'tlt[ray]')")
            else:
                e2e, steady, _ = _timed_sweep(spec, root / "ray", "ray", workers)
                rows.append((f"ray (local, {workers} CPUs) {ray.__version__}", e2e, steady))
    print(f"{'backend':<40} {'end-to-end pts/min':>19} {'steady pts/min':>15}")
    for name, e2e, steady in rows:
        print(f"{name:<40} {e2e:>19.1f} {steady:>15.1f}")


if __name__ == "__main__":
    run(app)
