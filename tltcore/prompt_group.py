"""A prompt group across rollouts: the one meaning of "group" in partial rollout, simulated and real.

GRPO samples several responses per prompt and trains a prompt's group only once every response is in,
so a partial-rollout strategy counts and orders *groups*: the simulator's (:mod:`tltsim.strategy.partial`)
and the native engine's (:mod:`tltreal.engine.partial`) keep their own response records (trace lengths
there, engine requests here) under the same group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Finishing(Protocol):
    """A response as a group sees it: done or not."""

    @property
    def done(self) -> bool: ...


R = TypeVar("R", bound=Finishing)


@dataclass
class Group(Generic[R]):
    """A prompt group: its run-wide key (launch order) and its responses; complete when all are done."""

    key: int
    responses: list[R]

    @property
    def complete(self) -> bool:
        return all(r.done for r in self.responses)


__all__ = ["Finishing", "Group"]
