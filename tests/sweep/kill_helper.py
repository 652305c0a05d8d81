"""A sweep run for the SIGKILL test, in its own process: a slow, logging evaluation.

``python -c "import kill_helper; kill_helper.main()" SPEC OUT`` runs SPEC into OUT on 2 local
workers. Each evaluation first appends its point's key to ``$SWEEP_CALL_LOG`` (one O_APPEND write,
so lines from two workers never interleave), then sleeps, so a kill lands mid-run. The evaluator
lives in this importable module (not ``__main__``) so that the forkserver workers find it.
"""

from __future__ import annotations

import os
import sys
import time

import pandas as pd

from tltsim.scenario import Scenario
from tltsim.sweep.spec import point_key

SLEEP_S = 0.4


def logged_evaluate(scenario: Scenario) -> pd.DataFrame:
    """Record the call, wait, and return rows that depend only on the scenario (deterministic)."""
    fd = os.open(os.environ["SWEEP_CALL_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{point_key(scenario)}\n".encode())
    finally:
        os.close(fd)
    time.sleep(SLEEP_S)
    return pd.DataFrame({"policy": ["no-sd", "x"], "step": [0, 0], "value": [scenario.seed, 2.0 * scenario.seed]})


def main() -> None:
    from tltsim.sweep.runner import run_sweep
    from tltsim.sweep.spec import load_spec

    spec, out = sys.argv[1:3]
    report = run_sweep(load_spec(spec), out, workers=2, evaluate=logged_evaluate)
    print(f"ok={report.ok} failed={report.failed} skipped={report.skipped}")


if __name__ == "__main__":
    main()
