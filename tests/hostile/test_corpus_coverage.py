"""The hostile-input corpus as a whole: big enough, and no command left out.

The corpus is data: each hostile test module keeps its cases in module-level lists that its tests
are parametrized over. This test loads those lists (not the tests) and checks that together they
hold at least :data:`MINIMUM` cases with unique ids per list and that every tlt command that takes
user input meets hostile input somewhere.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parents[1]
MINIMUM = 350

#: module (relative to tests/) -> (the case lists it parametrizes over, commands they cover when the
#: module does not declare COMMANDS itself)
CORPUS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "traces/test_trace_hostile.py": (("CASES",), ("trace stats",)),
    "sim/test_sim_hostile.py": (("SCENARIOS", "FLAGS"), ("sim run",)),
    "real/test_real_hostile.py": (("FLAGS", "CONFIGS", "WEIGHTS", "PROMPT_FILES"), ("real generate",)),
    "test_output_safety.py": (("REFUSED",), ("sim run",)),
    "hostile/test_hostile_outputs.py": (("CASES",), ()),
    "hostile/test_hostile_signals.py": (("CASES", "IMPORTS"), ()),
    "hostile/test_hostile_sweep_report.py": (("CASES",), ()),
    "hostile/test_hostile_settings.py": (("CASES",), ()),
    "hostile/test_hostile_real.py": (("CASES",), ()),
    "hostile/test_hostile_trace_demo.py": (("CASES",), ()),
    "hostile/test_hostile_cost.py": (("CASES",), ()),
    "hostile/test_hostile_gpu_spec.py": (("CASES",), ()),
    "advise/test_advise_hostile.py": (("CASES",), ("advise",)),
}
EVERY_COMMAND = {"trace list", "trace stats", "trace plot", "trace fetch", "sim run", "sweep run", "sweep status",
                 "sweep points", "report", "demo", "validate", "real generate", "real profile", "real rl",
                 "cost build", "sim sensitivity", "advise"}


def _load(rel: str) -> ModuleType:
    path = TESTS / rel
    spec = importlib.util.spec_from_file_location(f"corpus_{path.stem}", path)
    assert spec is not None and spec.loader is not None, rel
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _corpus() -> tuple[int, set[str], dict[str, int]]:
    total, commands, sizes = 0, set(), {}
    for rel, (lists, default_commands) in CORPUS.items():
        module = _load(rel)
        n = 0
        for name in lists:
            cases = getattr(module, name)
            assert isinstance(cases, list) and cases, f"{rel}: {name} is not a non-empty list"
            n += len(cases)
        sizes[rel] = n
        total += n
        commands |= set(getattr(module, "COMMANDS", default_commands))
    return total, commands, sizes


def test_the_corpus_has_at_least_350_cases_and_reaches_every_command() -> None:
    total, commands, sizes = _corpus()
    assert total >= MINIMUM, sizes
    assert commands >= EVERY_COMMAND, sorted(EVERY_COMMAND - commands)
