"""The limits every rollout engine shares — the simulated worker (``tltsim.rollout``) and the native
engine (``tltreal.engine``) — with one name and one default each, and what switching SD on does.

Each engine's own config extends :class:`EngineLimits` with what only it has (the simulator's
acceptance mode and KV capacity, the native engine's slab length and clock), so a knob both engines
have cannot drift apart in name, default or meaning. A scenario's ``engine`` section
(``tltsim.scenario.EngineSection``) is one too: its limits, with veRL's defaults and the fields'
ranges declared, are handed to the simulated engine as they are (``EngineConfig.of``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: What the engine does when a policy switches SD on (``Decision.switch_on``):
#: ``reprefill`` — every live request is re-prefilled through target and drafter, in passes of
#: ``prefill_budget * switch_prefill_fraction`` tokens (TLT's mechanism: its engine keeps no target
#: hidden states while SD is off; TLT uses 1/4);
#: ``catch_up`` — only the drafter runs over the tokens it has not seen (an engine that keeps the
#: target's hidden states, as the native engine does, needs no target re-prefill);
#: ``in_step`` — the drafter runs in every iteration, drafting or not, so it never lags and the switch
#: costs nothing extra (vLLM: an engine built with a draft model runs it even at steps its
#: batch-size schedule gives 0 draft tokens). Modelled by the simulator only; the native engine
#: refuses it.
SWITCH_MODES = ("reprefill", "catch_up", "in_step")


@dataclass(frozen=True)
class EngineLimits:
    """Per-worker limits both engines obey.

    ``max_batch``: requests decoding at once (vLLM's ``max_num_seqs``). ``prefill_budget``: tokens per
    prefill pass (vLLM's ``max_num_batched_tokens``, SGLang's ``max_prefill_tokens`` in TLT's engine).
    ``switch``/``switch_prefill_fraction``: see :data:`SWITCH_MODES`. ``catch_up_limit``: a request
    whose drafter has missed more than this many tokens is caught up in a separate drafter pass before
    an SD iteration (fewer are folded into the iteration's first draft step).
    """

    max_batch: int = 256
    prefill_budget: int = 8192
    switch: str = "reprefill"
    switch_prefill_fraction: float = 0.25
    catch_up_limit: int = 16

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.prefill_budget < 1 or self.catch_up_limit < 1:
            raise ValueError(f"max_batch, prefill_budget and catch_up_limit must be >= 1 in {self!r}")
        if not 0 < self.switch_prefill_fraction <= 1:
            raise ValueError("switch_prefill_fraction must be in (0, 1]")
        if self.switch not in SWITCH_MODES:
            raise ValueError(f"switch must be one of {SWITCH_MODES}, got {self.switch!r}")

    @property
    def switch_budget(self) -> int:
        """Tokens per re-prefill pass when SD switches on."""
        return max(1, int(self.prefill_budget * self.switch_prefill_fraction))
