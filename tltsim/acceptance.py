"""Acceptance model: how many tokens one speculative iteration emits per request.

This module defines the interface; implementations (per-position acceptance for chains and
trees, the preset fitted to the paper's depth x verify table) live beside it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from tltsim.policy.base import SDConfig


@runtime_checkable
class AcceptanceModel(Protocol):
    """Tokens emitted per request per SD iteration, bonus token included (>= 1)."""

    def expected_accept_length(self, config: SDConfig) -> float:
        """Expected accept length for this draft shape (1.0 for no SD)."""
        ...

    def sample_accept_lengths(self, config: SDConfig, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` independent accept lengths (ints in [1, depth+1]) drawn with ``rng``."""
        ...
