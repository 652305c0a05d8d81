"""The clock a validation times its engines with: ``wall`` or ``thread``.

``wall`` (``time.perf_counter``) is what a rollout takes. On a machine other processes share, it also
counts every moment the scheduler gives this process's core to someone else: with one other busy
process per core, a run (or a block of profile points) can take twice as long for reasons the
simulator does not and should not model, and the error measured is then the machine's noise.

``thread`` (``time.thread_time``: this thread's CPU time, user + system) counts only the time the
engine's thread ran. The native engine and the in-process vLLM engine (one OpenMP thread, uni
executor) do all their work on the calling thread, so on a quiet machine the two clocks agree (each
run records both: :attr:`tltreal.validation.replay.RealRun.wall_s`), and on a busy one the thread clock
is what the work cost. It is meaningless for an accelerator (kernels run off the thread), so it is
CPU-only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tltreal.engine.engine import Engine

CLOCKS = ("wall", "thread")


def clock_function(clock: str) -> Callable[[], float]:
    """The function that reads ``clock`` (seconds; only differences mean anything)."""
    if clock == "wall":
        return time.perf_counter
    if clock == "thread":
        return time.thread_time
    raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")


class ThreadClockEngine(Engine):
    """The native engine timed on its thread's CPU time instead of the wall clock (module docstring);
    every event row, outcome and the makespan are then thread-CPU seconds."""

    def start(self) -> None:
        super().start()
        self._wall_t0 = time.perf_counter()
        self._t0 = time.thread_time()

    def finish(self):
        """The result, its ``wall_s`` the run's wall-clock duration (its events are on the thread clock)."""
        result = super().finish()
        result.wall_s = time.perf_counter() - self._wall_t0
        return result

    def _now(self) -> float:
        if self.cfg.clock == "model":
            return super()._now()
        return time.thread_time() - self._t0


def engine_class(clock: str) -> type[Engine]:
    """The engine class that times on ``clock``."""
    clock_function(clock)  # refuses an unknown clock
    return ThreadClockEngine if clock == "thread" else Engine
