"""The per-batch-size schedule of draft shapes a policy amounts to, for engines that can only be told
"at batch sizes lo..hi draft this shape".

Why here. vLLM (``num_speculative_tokens_per_batch_size``) and SGLang's adaptive config choose the draft
by the batch size alone, with no per-iteration hook. Two places need the same reading of a policy as such
a table: the real vLLM backend (:func:`tltreal.backends.vllm_backend.vllm_schedule`, which runs it) and
``tlt advise``'s exports (:mod:`tltsim.advise_export`, which writes it for a user's engine). One function
in the shared layer keeps them from drifting apart.

Which policies have one: ``no-sd`` and ``static`` (one row), ``vllm-table`` (its rows, clipped to
``max_batch``, then ``above``), and ``elastic:T:C+static:S`` (``S`` up to batch ``T``, no SD above).
The last is exact only for ``C == 1``: an engine's table switches by batch size at every step and has
neither the elastic switch's hysteresis nor its stay-on, so for ``C > 1`` the table is marked inexact
and says what it drops. Policies that decide from more than the batch size (bandits, cost-aware, the
EMA, the oracle) have none: None.
"""

from __future__ import annotations

from dataclasses import dataclass

from tltcore.policy.base import NO_SD, NoSD, SDConfig, SDPolicy, Static
from tltcore.policy.elastic import Elastic
from tltcore.policy.vllm_table import VllmTable

Row = tuple[int, int, SDConfig]  # (first batch size, last batch size, draft shape), inclusive


@dataclass(frozen=True)
class BatchSchedule:
    """Draft shapes by batch size, covering batch 1 to ``max_batch``; ``exact`` False when the table
    drops something of the policy (``note`` says what)."""

    rows: tuple[Row, ...]
    exact: bool = True
    note: str = ""

    @property
    def shapes(self) -> tuple[SDConfig, ...]:
        return tuple(dict.fromkeys(c for _, _, c in self.rows))

    @property
    def chains_only(self) -> bool:
        """Every row drafts a chain (``K_1_K``) or nothing: all a chain-only engine (vLLM) can run."""
        return all(not c.enabled or (c.topk == 1 and c.verify_tokens == c.depth) for _, _, c in self.rows)


def batch_schedule(policy: SDPolicy, max_batch: int) -> BatchSchedule | None:
    """The schedule ``policy`` amounts to (module docstring), or None when it decides from more than the
    batch size."""
    if isinstance(policy, NoSD):
        return BatchSchedule(((1, max_batch, NO_SD),))
    if isinstance(policy, Static):
        return BatchSchedule(((1, max_batch, policy.config),))
    if isinstance(policy, VllmTable):
        rows: list[Row] = []
        lo = 1
        for hi, cfg in policy.table:
            if lo <= max_batch:
                rows.append((lo, min(hi, max_batch), cfg))
            lo = hi + 1
        if lo <= max_batch:
            rows.append((lo, max_batch, policy.above))
        return BatchSchedule(tuple(rows))
    if isinstance(policy, Elastic) and isinstance(policy.inner, Static):
        cfg, t = policy.inner.config, policy.threshold
        rows = [(1, min(t, max_batch), cfg)] + ([(t + 1, max_batch, NO_SD)] if t < max_batch else [])
        exact = policy.consecutive == 1
        note = "" if exact else (f"the elastic switch's hysteresis ({policy.consecutive} iterations at batch <= {t}) "
                                 "and its stay-on are dropped: the engine switches by batch size at every step")
        return BatchSchedule(tuple(rows), exact, note)
    return None
