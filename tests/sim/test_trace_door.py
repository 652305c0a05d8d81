"""A scenario's trace is read through one door, :func:`tltsim.scenario.trace_rows`, which applies the
scenario's ``trace.map``, tokenizer and source: a caller reading the file itself missed the mapping
(advise's hours answer refused a mapped CSV with "missing required column(s)" until this test)."""

from __future__ import annotations

import re

from conftest import REPO

#: Files allowed to call load_trace: the door itself, the trace commands (a trace named on their own
#: command line, with their own --map) and readers of fixed catalog traces (no scenario).
ALLOWED = {"tltsim/scenario/workload.py", "tltcli/trace.py", "tltcli/demo.py", "analysis/paper_fidelity.py"}
CALL = re.compile(r"\bload_trace\(")


def test_only_the_door_reads_a_scenarios_trace() -> None:
    callers = set()
    for pkg in ("tltcore", "tltsim", "tltcli", "tltreal", "analysis"):
        for path in (REPO / pkg).rglob("*.py"):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("tltsim/traces/"):
                continue  # the trace layer defines and composes load_trace
            text = path.read_text(encoding="utf-8")
            if any(CALL.search(line) and not line.lstrip().startswith("def ") for line in text.splitlines()):
                callers.add(rel)
    assert callers <= ALLOWED, f"read the scenario's trace with tltsim.scenario.trace_rows: {callers - ALLOWED}"
    demo = (REPO / "tltcli/demo.py").read_text(encoding="utf-8")
    assert "load_trace(s.trace" not in demo  # demo's scenario traces go through the door too
