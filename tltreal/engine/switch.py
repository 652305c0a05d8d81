"""The elastic switch in the native engine: when a policy's decision has ``switch_on`` (SD turns on
mid-generation), every live request's drafter is brought up to date before the SD iteration, by the
engine's switch mode (``EngineLimits.switch``, one default for both engines):

- ``reprefill`` (default, TLT's mechanism): a ``switch_reprefill`` of every live context through the
  target (KV and hidden states rebuilt: the same values, recomputed) and then the drafter, in passes
  of at most ``prefill_budget * switch_prefill_fraction`` tokens;
- ``catch_up``: this engine keeps every request's target hidden states, so a drafter-only catch-up
  over what the drafter missed suffices (the validation replays use it).

A token proposer has no drafter state: the switch is only logged. A mixin of
:class:`~tltreal.engine.engine.Engine`; the drafter catch-up is the SD step's
(:meth:`~tltreal.engine.sd_step.SpeculativeStep._catch_up_laggards`).
"""

from __future__ import annotations

import numpy as np
import torch

from tltcore.policy.base import SDConfig
from tltreal.engine.engine_config import skip_padding
from tltreal.engine.requests import Request
from tltreal.model.transformer import padded_causal_mask


class ElasticSwitch:
    """The switch of :class:`~tltreal.engine.engine.Engine` (module docstring)."""

    def _switch(self, reqs: list[Request], config: SDConfig) -> None:
        """SD switches on (the elastic switch): bring every live request's drafter up to date (a
        token proposer has no drafter state: the switch is only logged)."""
        self.log.span(self.cfg.worker, "switch", self._now(), self._now(), batch=len(reqs), config=config)
        if self.drafter is None:
            return
        if self.cfg.switch == "reprefill":
            self._reprefill(reqs)
        else:
            self._catch_up_laggards(reqs, 1)

    def _reprefill(self, reqs: list[Request]) -> None:
        """TLT's switch: every live context re-prefilled through the target (KV and hidden states
        rebuilt: the same values, recomputed) and then the drafter, in passes of at most
        ``prefill_budget * switch_prefill_fraction`` tokens."""
        t_start = self._now()
        budget = self.cfg.switch_budget
        groups: list[list[Request]] = [[]]
        tokens_in_pass = 0  # of groups[-1]
        for r in reqs:  # pack whole requests into passes (a request longer than the budget runs alone)
            if groups[-1] and tokens_in_pass + r.cache_len > budget:
                groups.append([])
                tokens_in_pass = 0
            groups[-1].append(r)
            tokens_in_pass += r.cache_len
        for group in groups:
            lens = self._tensor([r.cache_len for r in group])
            t = int(lens.max())
            tokens = self._tensor([r.tokens[: r.cache_len] + [0] * (t - r.cache_len) for r in group])
            positions = torch.arange(t, device=lens.device).expand(len(group), t)
            slots = self._tensor([r.slot for r in group])
            real = positions < lens[:, None]
            _, hidden = self.target(tokens, positions, self.cache, slots, torch.zeros_like(lens),
                                    padded_causal_mask(lens, t), logits_at=lens - 1,
                                    keep=real if skip_padding(int(lens.sum()), real.numel()) else None)
            for b, r in enumerate(group):
                self.hidden[r.slot, : r.cache_len] = hidden[b, : r.cache_len]
                r.draft_len = 0
        n = np.array([r.cache_len for r in reqs], dtype=np.int64)
        self._charge(lambda c: c.prefill_time(n, np.zeros_like(n)))
        self._catch_up_laggards(reqs, 1, kind=None)
        self.log.span(self.cfg.worker, "switch_reprefill", t_start, self._now(), iterations=len(groups),
                      batch=len(reqs), prefill_tokens=int(n.sum()))
