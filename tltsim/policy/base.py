"""The contract between speculative-decoding policies and the engines that run them.

The simulator (``tltsim.rollout``) and the real engine (``tltreal``) both drive the *same* policy
objects through this interface, so this module (and the whole ``tltsim.policy`` package) imports no
SimPy, torch or vLLM.

Each decode iteration the engine builds a :class:`BatchView`, asks ``policy.decide(view)`` for an
:class:`SDConfig`, runs the iteration, and reports an :class:`Outcome` through ``policy.observe``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

_NAME = re.compile(r"^(\d+)_(\d+)_(\d+)$")


def max_tree_nodes(depth: int, topk: int) -> int:
    """Draft nodes an EAGLE-2 tree offers for verification: ``topk`` after the first step, then
    each of the ``topk`` frontier nodes expands into ``topk`` children per later step
    (``8_4_48`` verifies 48 of 116 nodes)."""
    return topk + (depth - 1) * topk * topk if depth > 0 else 0


@dataclass(frozen=True, order=True)
class SDConfig:
    """Draft-tree shape. ``depth`` drafting steps, ``topk`` children per step, ``verify_tokens``
    tree nodes checked by one target forward. ``depth == 0`` means no speculative decoding.

    A chain draft of k tokens is ``SDConfig(k, 1, k)``. Named ``depth_topk_verify`` as in TLT
    (e.g. ``8_4_32``); ``"off"`` is no SD.
    """

    depth: int = 0
    topk: int = 1
    verify_tokens: int = 0

    def __post_init__(self) -> None:
        if self.depth < 0 or self.topk < 1 or self.verify_tokens < 0:
            raise ValueError(f"invalid SDConfig {self!r}")
        if self.depth > 0 and not (1 <= self.verify_tokens <= max_tree_nodes(self.depth, self.topk)):
            raise ValueError(f"SDConfig {self.name}: verify_tokens must be in "
                             f"[1, {max_tree_nodes(self.depth, self.topk)}] for an EAGLE-2 tree")

    @property
    def enabled(self) -> bool:
        """True when this config drafts at all."""
        return self.depth > 0

    @property
    def name(self) -> str:
        return f"{self.depth}_{self.topk}_{self.verify_tokens}" if self.enabled else "off"

    @classmethod
    def parse(cls, text: str) -> SDConfig:
        """Parse ``"8_4_32"`` or ``"off"``."""
        text = text.strip()
        if text in ("off", "none", "0", ""):
            return NO_SD
        m = _NAME.match(text)
        if not m:
            raise ValueError(f"SD config '{text}' is not of the form depth_topk_verify (e.g. 8_4_32) or 'off'")
        return cls(int(m[1]), int(m[2]), int(m[3]))

    @classmethod
    def chain(cls, k: int) -> SDConfig:
        """A chain draft of ``k`` tokens (topk 1)."""
        return cls(k, 1, k) if k > 0 else NO_SD

    def __str__(self) -> str:
        return self.name


NO_SD = SDConfig()


@dataclass(frozen=True)
class BatchView:
    """What a policy may look at before one decode iteration.

    ``context_lens`` holds every running request's current context (prompt + generated) length:
    per-request, never a mean, because long tails make the mean misleading. ``recent_accept`` is the
    engine's recent mean accept length (tokens emitted per request per SD iteration, bonus included),
    or None before any SD iteration. ``instance`` identifies the rollout instance (policies that
    keep per-instance state may use it).
    """

    batch_size: int
    context_lens: tuple[int, ...] = ()
    time: float = 0.0
    iteration: int = 0
    recent_accept: float | None = None
    instance: int = 0


@dataclass(frozen=True)
class Outcome:
    """What happened in one decode iteration run with ``config``.

    ``emitted_tokens`` is the number of tokens the whole batch produced this iteration, bonus tokens
    included (a no-SD iteration emits ``batch_size``). ``drafted_tokens`` counts draft tokens sent to
    verification, ``accepted_tokens`` the draft tokens accepted. ``elapsed_s`` is the wall (or
    simulated) time of the iteration, drafting and verification included.
    """

    config: SDConfig
    batch_size: int
    emitted_tokens: int
    elapsed_s: float
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    time: float = 0.0
    instance: int = 0

    @property
    def accept_length(self) -> float:
        """Mean tokens emitted per request in this iteration (TLT's "accept length")."""
        return self.emitted_tokens / self.batch_size if self.batch_size else 0.0

    @property
    def throughput(self) -> float:
        """Tokens per second of this iteration (BEG-MAB's reward, = accept length x batch / time)."""
        return self.emitted_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


@runtime_checkable
class SDPolicy(Protocol):
    """A speculative-decoding policy. Deterministic given its seed and the sequence of calls.

    ``per_iteration`` tells the simulator whether ``decide`` may change its answer between events
    (e.g. bandits, elastic counters). Policies whose answer depends only on the batch size can set it
    False, which lets the simulator advance in closed form between batch-size changes.
    """

    name: str
    per_iteration: bool

    def decide(self, view: BatchView) -> SDConfig: ...

    def observe(self, outcome: Outcome) -> None: ...

    def reset(self) -> None: ...


@dataclass
class NoSD:
    """Never speculate: the veRL baseline."""

    name: str = "no-sd"
    per_iteration: bool = False

    def decide(self, view: BatchView) -> SDConfig:
        return NO_SD

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self) -> None:
        return None


@dataclass
class Static:
    """Always the same draft shape, whatever the batch size."""

    config: SDConfig = field(default_factory=lambda: SDConfig(8, 4, 32))
    name: str = "static"
    per_iteration: bool = False

    def decide(self, view: BatchView) -> SDConfig:
        return self.config

    def observe(self, outcome: Outcome) -> None:
        return None

    def reset(self) -> None:
        return None
