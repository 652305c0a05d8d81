"""Digest of what the simulator writes for every bundled scenario, preset, policy kind and GPU preset:
one line per case with a SHA-256 of each output table (events, summary, per-step, bound, warnings).

Why: refactors of the simulator's hot paths and cost model promise byte-identical behaviour. Run this
at two revisions and diff the two files; any changed line names the case and the table that moved.

    python benchmarks/outputs_digest.py > after.txt
    git worktree add /tmp/base REV && (cd /tmp/base && PYTHONPATH=/tmp/base \
        python benchmarks/outputs_digest.py > /tmp/before.txt)
    diff /tmp/before.txt after.txt

Each case runs `python -m tltcli sim run ...` in a child process from the current directory (so
PYTHONPATH decides which revision runs). Run both revisions with `../shared` beside them and the same
TLT_TRACE_PATH: without `../shared/gpu-profiles` the measured cost model falls back to the roofline
and every measured case's digest changes. Tables are digested from their rows (parquet via pandas to
CSV), never from file bytes that could carry writer metadata. About 2-3 CPU minutes on 2 cores.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

SCENARIOS = ["aime_qwen7b_64xh100", "aime_qwen7b_h20", "dapo_qwen32b_polytrace", "validation_dapo_cpu",
             "validation_vllm_cpu"]
PRESETS = ["tlt-base", "static-drafter", "tlt", "tlt-no-spot", "tlt-periodic", "tlt-no-elastic", "tlt-no-mab",
           "speco-bubble"]
POLICIES = ["elastic:16:5+beg-mab", "static:4_1_4", "cost-aware", "sglang-ema", "vllm-table:64=4,above=0",
            "beg-mab", "ucb1", "eps-greedy", "greedy-oracle", "elastic+cost-aware",
            "elastic:32:3+sglang-ema"]
GPUS = ["H100-SXM", "H800", "H200", "A100-80GB-SXM", "H20", "L40S", "B200", "RTX4090", "A40"]
SMALL = ["--set", "trace.prompts_per_step=16"]


def cases() -> list[tuple[str, list[str]]]:
    """(name, tlt arguments) for every case; small workloads, since the paths differ in how they
    step, not in scale."""
    out: list[tuple[str, list[str]]] = []
    for s in SCENARIOS:
        for acc in ("expected", "stochastic"):
            out.append((f"scenario/{s}/{acc}", ["--scenario", s, "--steps", "2", "--seeds", "2",
                                                "--acceptance", acc]))
    for p in PRESETS:
        out.append((f"preset/{p}", ["--scenario", "dapo_qwen32b_polytrace", "--preset", p, "--steps", "2",
                                    *SMALL]))
    for pol in POLICIES:
        for acc in ("expected", "stochastic"):
            out.append((f"policy/{pol}/{acc}", ["--scenario", "aime_qwen7b_64xh100", "--policy", pol,
                                                "--acceptance", acc, *SMALL]))
    for g in GPUS:
        for model in ("measured", "roofline"):
            out.append((f"gpu/{g}/{model}", ["--scenario", "dapo_qwen32b_polytrace", "--gpu", g,
                                             "--set", f"cost.model={model}", *SMALL]))
    for sw in ("reprefill", "catch_up", "in_step"):
        out.append((f"switch/{sw}", ["--scenario", "aime_qwen7b_h20", "--switch", sw, *SMALL]))
    return out


def digest(path: Path) -> str:
    """SHA-256 (12 hex) of a table's rows, or '-' where the run did not write it."""
    if not path.exists():
        return "-"
    frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    buf = io.StringIO()
    frame.to_csv(buf, index=False, float_format="%.17g")
    return hashlib.sha256(buf.getvalue().encode()).hexdigest()[:12]


def run(case: tuple[str, list[str]]) -> str:
    name, args = case
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r"
        cmd = [sys.executable, "-m", "tltcli", "sim", "run", *args, "--perfetto", "off", "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return f"{name}: exit {proc.returncode}: {tail}"
        tables = ["events.parquet", "summary.csv", "steps.csv", "bound.csv", "warnings.csv", "robustness.csv",
                  "seeds_summary.csv"]
        return f"{name}: " + " ".join(f"{t.split('.')[0]}={digest(out / t)}" for t in tables)


def main() -> None:
    with ThreadPoolExecutor(max_workers=int(os.environ.get("DIGEST_JOBS", "2"))) as pool:
        for line in pool.map(run, cases()):
            print(line, flush=True)


if __name__ == "__main__":
    main()
