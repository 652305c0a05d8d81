"""Progress displays, so a long command never looks stuck.

:func:`policy_progress`: a policy comparison (``tlt sim run``), finished responses out of all. On a
terminal a rich progress bar (with ETA); elsewhere (CI logs, ``nohup``, schedulers) one plain line
per policy and one per tenth of its responses.

:class:`PhaseProgress`: a command of several long phases (``tlt validate``, ``tlt real profile``),
on stderr: a bar with ETA per phase on a terminal, one line per phase with the elapsed time
elsewhere.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from tltsim.rollout.entities import FinishCounts


@contextlib.contextmanager
def policy_progress(console: Console, specs: Sequence[str], responses_per_policy: int
                    ) -> Iterator[tuple[Callable[[str], None], Callable[[int], None]]]:
    """``(on_policy(spec), on_finish(n))`` callbacks for :func:`tltsim.scenario.compare_policies`."""
    if console.is_terminal:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("responses"),
                   TimeRemainingColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("simulating", total=len(specs) * responses_per_policy)

            def on_policy(spec: str) -> None:
                bar.update(task, description=f"simulating {spec}")

            class BarFinish(FinishCounts):
                def __call__(self, n: int) -> None:
                    bar.advance(task, n)

                def many(self, counts: list[int]) -> None:
                    bar.advance(task, sum(counts))

            yield on_policy, BarFinish()
        return
    lines = _TenthLines(console, responses_per_policy)

    def plain_policy(spec: str) -> None:
        lines.spec, lines.done, lines.shown = spec, 0, 0
        console.print(f"simulating {spec} ({specs.index(spec) + 1}/{len(specs)})", highlight=False)

    yield plain_policy, lines


class _TenthLines(FinishCounts):
    """The plain progress of :func:`policy_progress`: a line each time another tenth of the policy's
    responses finished (the count at the first report past it), none at the end."""

    def __init__(self, console: Console, total: int) -> None:
        self.console, self.total = console, total
        self.tenth = max(1, total // 10)
        self.spec, self.done, self.shown = "", 0, 0

    def __call__(self, n: int) -> None:
        self.done += n
        if self.done - self.shown >= self.tenth and self.done < self.total:
            self._line(self.done)

    def many(self, counts: list[int]) -> None:
        """``self(n)`` for each count in order, without a call per count: the running totals, and a
        line at each first total a tenth past the last line's (totals never decrease)."""
        if not counts:
            return
        totals = list(itertools.accumulate(counts, initial=self.done))
        i = 1
        while True:
            i = bisect.bisect_left(totals, self.shown + self.tenth, lo=i)
            if i == len(totals) or totals[i] >= self.total:
                break
            self._line(totals[i])
            i += 1
        self.done = totals[-1]

    def _line(self, done: int) -> None:
        self.shown = done
        self.console.print(f"  {self.spec}: {done / self.total:.0%} ({done:,}/{self.total:,} responses)",
                           highlight=False)


class PhaseProgress:
    """Progress of a long command made of phases (``tlt validate``, ``tlt real profile``): each
    phase has a name and, where known, a number of units (runs, grid points), on stderr.

    On a terminal: one rich bar per phase with its units done, elapsed time and ETA (from the units
    done so far), the finished phases kept above it. Elsewhere (CI logs, ``nohup``): one plain line
    per phase with the time elapsed since the command started, and one when it is done, so a run of
    many minutes is never silent and a log shows where the time went.

    Use as a context manager; the engine code calls :meth:`phase` and :meth:`advance` (any object
    with those two methods will do; see ``tltreal.validation``).
    """

    def __init__(self, console: Console, *, planned: int | None = None, clock: Callable[[], float] | None = None
                 ) -> None:
        import time

        self.console, self.planned = console, planned
        self._clock = clock or time.monotonic
        self._start = self._clock()
        self._bar: Progress | None = None
        self._task = None
        self.phases = 0

    def __enter__(self) -> PhaseProgress:
        if self.console.is_terminal:
            from rich.progress import TimeElapsedColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=self.console)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._finish_task()
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
        elif exc[0] is None:
            self.console.print(f"[{self._elapsed()}] done", highlight=False)

    def _elapsed(self) -> str:
        seconds = int(self._clock() - self._start)
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"

    def _finish_task(self) -> None:
        if self._bar is not None and self._task is not None:
            task = self._bar.tasks[-1]
            self._bar.update(self._task, total=task.total or 1, completed=task.total or 1)

    def phase(self, name: str, total: int | None = None, unit: str = "units") -> None:
        """Start phase ``name`` of ``total`` ``unit`` (None: one unit, done when the next phase starts)."""
        self._finish_task()
        self.phases += 1
        label = f"{self.phases}/{self.planned}" if self.planned and self.phases <= self.planned else f"{self.phases}"
        units = f" ({total:,} {unit})" if total else ""
        if self._bar is not None:
            self._task = self._bar.add_task(f"[{label}] {name}", total=total or 1)
        else:
            self.console.print(f"[{self._elapsed()}] phase {label}: {name}{units}", highlight=False)

    def advance(self, n: int = 1) -> None:
        """``n`` more units of the current phase are done."""
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task, n)
