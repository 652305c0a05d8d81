"""Progress of a policy comparison, within each policy: finished responses out of all.

On a terminal a rich progress bar (with ETA); elsewhere (CI logs, ``nohup``, schedulers) one plain
line per policy and one per tenth of its responses, so a long run never looks stuck.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


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

            def on_finish(n: int) -> None:
                bar.advance(task, n)

            yield on_policy, on_finish
        return
    state = {"spec": "", "done": 0, "shown": 0}
    tenth = max(1, responses_per_policy // 10)

    def plain_policy(spec: str) -> None:
        state.update(spec=spec, done=0, shown=0)
        console.print(f"simulating {spec} ({specs.index(spec) + 1}/{len(specs)})", highlight=False)

    def plain_finish(n: int) -> None:
        state["done"] += n
        if state["done"] - state["shown"] >= tenth and state["done"] < responses_per_policy:
            state["shown"] = state["done"]
            console.print(f"  {state['spec']}: {state['done'] / responses_per_policy:.0%} "
                          f"({state['done']:,}/{responses_per_policy:,} responses)", highlight=False)

    yield plain_policy, plain_finish
