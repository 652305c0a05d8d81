"""DataCoverage, the simulator's model of TLT's DataBuffer: which rollout data the drafter can train
on, and when (DESIGN §1). (The real engine's sample store is :class:`tltreal.spot.sample_buffer.SampleBuffer`.)

The Spot Trainer starts before the step's slowest responses finish, so it can only train on
*finished* responses: at time ``t`` the buffer holds the responses of this step that finished by
``t`` and, with TLT's **one-step offset**, the previous step's complete responses. This step's data
alone is biased short (the long responses that make up the tail are exactly the ones not yet
there), which is why TLT mixes the previous step in.

The simulator needs two numbers from the buffer:

* :meth:`DataCoverage.windows_at` — training windows (``window_tokens``-token pieces of responses)
  available at ``t``; training cannot start on an empty buffer.
* :meth:`DataCoverage.value_at` — how much one training sample drawn at ``t`` is worth to the drafter's
  recovery, in [0, 1]. Our modelling assumption (the paper motivates the offset but publishes no
  curve): a sample drawn from this step's finished responses is worth the share of this step's
  response tokens already finished (``coverage_at``), because the drafter only learns the contexts
  it sees; with the offset, half the samples come from the previous step's complete responses,
  worth 1. At the first step there is no previous step, so the offset changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DataCoverage:
    """One step's buffer: this step's responses with their finish times (absolute seconds), plus the
    previous step's complete responses (``previous_tokens`` = 0 at the first step)."""

    finish_times: np.ndarray
    response_tokens: np.ndarray
    previous_tokens: int = 0
    one_step_offset: bool = True
    window_tokens: int = 512

    def __post_init__(self) -> None:
        if len(self.finish_times) != len(self.response_tokens):
            raise ValueError("finish_times and response_tokens must align")
        if self.window_tokens < 1:
            raise ValueError(f"window_tokens must be >= 1, got {self.window_tokens}")
        order = np.argsort(self.finish_times, kind="stable")
        object.__setattr__(self, "finish_times", np.asarray(self.finish_times, dtype=np.float64)[order])
        tokens = np.asarray(self.response_tokens, dtype=np.int64)[order]
        object.__setattr__(self, "response_tokens", tokens)
        object.__setattr__(self, "_cum_tokens", np.concatenate([[0], np.cumsum(tokens)]))
        windows = -(-tokens // self.window_tokens)
        object.__setattr__(self, "_cum_windows", np.concatenate([[0], np.cumsum(windows)]))

    @property
    def uses_previous(self) -> bool:
        return self.one_step_offset and self.previous_tokens > 0

    def _finished(self, t: float) -> int:
        return int(np.searchsorted(self.finish_times, t, side="right"))

    def coverage_at(self, t: float) -> float:
        """Share of this step's response tokens finished by ``t``."""
        total = int(self._cum_tokens[-1])
        return float(self._cum_tokens[self._finished(t)]) / total if total else 0.0

    def windows_at(self, t: float) -> int:
        """Training windows available at ``t``."""
        own = int(self._cum_windows[self._finished(t)])
        prev = -(-self.previous_tokens // self.window_tokens) if self.uses_previous else 0
        return own + prev

    def value_at(self, t: float) -> float:
        """Worth of one sample drawn at ``t`` to the drafter's recovery (module docstring)."""
        c = self.coverage_at(t)
        return 0.5 * (c + 1.0) if self.uses_previous else c
