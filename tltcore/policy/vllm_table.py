"""vLLM-style "dynamic SD": a fixed table from batch size to draft shape, a peer baseline.

vLLM decides speculation by batch size alone: its ``disable_by_batch_size`` option turns SD off above
a batch-size threshold, and its dynamic-speculation work shortens the draft as the batch grows. A
lookup table captures both. It learns nothing and looks only at the batch size, so its decisions
hold until the batch changes and the simulator may advance in spans between those events.

The default table is ours, not vLLM's (vLLM ships no default): batch <= 4 -> chain of 5 draft
tokens, <= 16 -> chain of 3, <= 32 -> chain of 1, larger -> no SD. It follows the shape of published
speedup-vs-batch curves (SD gain shrinks with batch size and vanishes in the compute-bound regime).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from tltcore.errors import InputError
from tltcore.policy.base import HOLD_UNTIL_EVENT, MAX_POLICY_BATCH, NO_SD, BatchView, Decision, Outcome, SDConfig

#: Most rows a table has (each decision walks them): one per batch size of a 4096-sequence engine.
MAX_ROWS = 4096

DEFAULT_TABLE: tuple[tuple[int, SDConfig], ...] = (
    (4, SDConfig.chain(5)),
    (16, SDConfig.chain(3)),
    (32, SDConfig.chain(1)),
)


class VllmTable:
    """``table`` rows are ``(max_batch_size, config)``: the first row whose ``max_batch_size`` is at
    least the batch size wins; batches larger than every row get ``above``."""

    def __init__(self, table: Sequence[tuple[int, SDConfig]] = DEFAULT_TABLE, above: SDConfig = NO_SD,
                 name: str = "vllm-table") -> None:
        rows = tuple((int(bs), cfg) for bs, cfg in table)
        if any(not 1 <= bs <= MAX_POLICY_BATCH for bs, _ in rows):
            raise InputError(f"vllm-table batch-size thresholds must be in [1, {MAX_POLICY_BATCH:,}], "
                             f"got {[bs for bs, _ in rows]}")
        if len(rows) > MAX_ROWS:
            raise InputError(f"vllm-table takes at most {MAX_ROWS} rows, got {len(rows)}")
        if not above.enabled and not any(cfg.enabled for _, cfg in rows):
            raise InputError("vllm-table never drafts (every row and above are off): give a row a draft, or use "
                             "the policy no-sd")
        if any(b <= a for (a, _), (b, _) in pairwise(rows)):
            raise InputError(
                f"vllm-table batch-size thresholds must be strictly increasing, got {[bs for bs, _ in rows]}"
            )
        self.table = rows
        self.above = above
        self.name = name
        self._rows = tuple((bs, Decision(cfg, HOLD_UNTIL_EVENT)) for bs, cfg in rows)
        self._above = Decision(above, HOLD_UNTIL_EVENT)

    def decide(self, view: BatchView) -> Decision:
        return self.decision_at(view.batch_size)

    def decision_at(self, batch_size: int) -> Decision:
        """The first row at or above ``batch_size``, else ``above``: all it reads of a view
        (:class:`~tltcore.policy.base.DecidesByBatch`)."""
        for max_bs, decision in self._rows:
            if batch_size <= max_bs:
                return decision
        return self._above

    def plain_above(self) -> int | None:
        """Plain above the last row when ``above`` is no SD (the :mod:`~tltcore.policy.base` promise)."""
        if self.above.enabled:
            return None
        return self.table[-1][0] if self.table else 0

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self, step: int) -> None:
        return None
