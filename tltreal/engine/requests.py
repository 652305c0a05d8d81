"""A request inside the native engine, a finished one with its records, and one run's result."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import pandas as pd
import torch

from tltreal.model.sampling import SamplingParams


@dataclass
class Request:
    rid: int
    prompt: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    group: Hashable = None  # requests with the same key are siblings (a token proposer reads them)
    output: list[int] = field(default_factory=list)
    slot: int = -1
    tokens: list[int] = field(default_factory=list)  # prompt + output; the last one is not cached yet
    cache_len: int = 0  # target KV entries committed
    draft_len: int = 0  # drafter pairs committed
    member: int = -1  # index in its group's list of token sequences
    generator: torch.Generator | None = None
    finished: bool = False
    resumed: int = 0  # output tokens it arrived with (Engine.resume): generated in an earlier step
    resubmit: bool = False  # resumed as a new prompt: the prefill emits its next token (Engine.resume)
    logprobs: list[float] = field(default_factory=list)  # record_logprobs: see FinishedRequest
    raw_logprobs: list[float] = field(default_factory=list)
    hidden: torch.Tensor | None = None  # record_hidden: copied out of the slab when it finishes


@dataclass(frozen=True)
class Unfinished:
    """A request an engine handed back before it finished (:meth:`~tltreal.engine.engine.Engine.hand_back`):
    everything another engine needs to continue it (:meth:`~tltreal.engine.engine.Engine.resume`),
    exactly where it stopped.

    ``rid``: its id in the engine that handed it back; ``output``: the tokens generated so far (the
    last one not yet through the target); ``max_new_tokens``: its whole budget, ``output`` included;
    ``group``: the engine's sibling key; ``generator``: its own random stream, in the state the next
    draw continues from (None: greedy), so the draws after a resume are the ones an uninterrupted run
    makes; ``logprobs`` / ``raw_logprobs``: the records of ``output`` so far (``record_logprobs``)."""

    rid: int
    prompt: list[int]
    output: list[int]
    max_new_tokens: int
    sampling: SamplingParams
    group: Hashable
    generator: torch.Generator | None
    logprobs: list[float] = field(default_factory=list)
    raw_logprobs: list[float] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        """Tokens still to generate."""
        return self.max_new_tokens - len(self.output)


@dataclass(frozen=True)
class FinishedRequest:
    """One finished request, with what ``EngineConfig`` asked the engine to record (else None).

    ``logprobs`` ``[len(output)]`` (float64): the log-probability of each output token under the
    distribution it was actually sampled from -- the target's, after temperature and top-p (with SD
    too: lossless verification emits every token with exactly that distribution). Greedy requests
    sample from a one-hot distribution, so theirs are all 0.
    ``raw_logprobs`` ``[len(output)]`` (float64): ``log_softmax`` of the target's raw logits
    (temperature 1, no top-p) at each output token: the policy log-probability an RL loss (GRPO's
    importance ratio, a KL term) is computed from.
    ``hidden`` ``[len(prompt) + len(output), H]`` (the target's dtype): the target's last hidden state
    (after the final norm) at every prompt and output position; row ``i`` is ``h_i``, computed with
    token ``i`` as input, so a drafter's pair ``i + 1`` is ``(token_{i+1}, h_i)``."""

    rid: int
    prompt: list[int]
    output: list[int]
    logprobs: torch.Tensor | None = None
    raw_logprobs: torch.Tensor | None = None
    hidden: torch.Tensor | None = None

    @property
    def tokens(self) -> list[int]:
        """Prompt + output."""
        return self.prompt + self.output


@dataclass
class RunResult:
    """Outputs per request id, the event log (times relative to the run's start) and its duration
    (wall-clock, or modelled with ``clock="model"``). ``finished`` holds each request's
    :class:`FinishedRequest` (with the records ``EngineConfig`` asked for)."""

    outputs: dict[int, list[int]]
    events: pd.DataFrame
    wall_s: float
    prompts: dict[int, list[int]] = field(default_factory=dict)
    finished: dict[int, FinishedRequest] = field(default_factory=dict)

    @property
    def decode_events(self) -> pd.DataFrame:
        return self.events[self.events["kind"] == "decode"]

    @property
    def generated_tokens(self) -> int:
        return sum(len(v) for v in self.outputs.values())

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mean_accept_length(self) -> float:
        """Tokens emitted per request per SD iteration (bonus included); 1.0 without SD."""
        d = self.decode_events
        sd = d[d["depth"] > 0]
        d = sd if len(sd) else d
        return float(d["tokens"].sum() / d["batch_size"].sum()) if len(d) else 0.0

    @property
    def mean_iteration_s(self) -> float:
        d = self.decode_events
        return float((d["t_end"] - d["t_start"]).mean()) if len(d) else 0.0
