"""The native engine's configuration: :class:`EngineConfig` (the limits both engines share plus what
only this one has), the clocks it can run on and the modelled clock's cost contract, and when a
target forward skips its padding.
"""

from __future__ import annotations

from dataclasses import dataclass

from tltcore.engine_limits import EngineLimits

NATIVE_SWITCH_MODES = ("reprefill", "catch_up")  # SWITCH_MODES less vLLM's in_step
CLOCKS = ("wall", "model")
PADDING_SKIP_MIN = (8, 32)  # skip padded tokens in a target forward from 8 padded of >= 32 in all


def skip_padding(real: int, total: int) -> bool:
    """Whether a target forward of ``total`` tokens, ``real`` of them not padding, should compute the
    real ones only (``Transformer.forward(keep=...)``): the gather/scatter it adds costs a few small
    ops per layer, which pays once the padding is a few rows of the projections' matrix products."""
    return total - real >= PADDING_SKIP_MIN[0] and total >= PADDING_SKIP_MIN[1]


@dataclass(frozen=True)
class EngineConfig(EngineLimits):
    """The shared limits (:class:`~tltcore.engine_limits.EngineLimits`: ``max_batch``,
    ``prefill_budget``, ``switch`` …) plus capacity and bookkeeping only the native engine has.
    ``max_len`` bounds prompt + generated tokens per request."""

    max_len: int = 1024
    max_verify: int = 64  # largest verify_tokens a policy may pick
    max_draft_nodes: int = 64  # largest (depth - 1) * topk (drafter scratch per request)
    clock: str = "wall"  # "wall" or "model" (the clock: tltreal.engine.engine)
    eos_token_ids: tuple[int, ...] = ()  # a request finishes when it emits any of these
    record_logprobs: bool = False  # FinishedRequest.logprobs / raw_logprobs (tltreal.engine.records)
    record_hidden: bool = False  # FinishedRequest.hidden (one extra 1-token forward per finishing request)
    step: int = 0
    worker: int = 0
    run_id: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_len < 2:
            raise ValueError("max_len must be >= 2")
        if self.switch not in NATIVE_SWITCH_MODES:
            raise ValueError(f"switch {self.switch!r} is modelled by the simulator only; the native engine "
                             f"supports {NATIVE_SWITCH_MODES}")
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {self.clock!r}")
