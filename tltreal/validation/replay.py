"""Replaying a trace step on the native engine: the real half of ``tlt validate``.

A step's requests become engine requests with the traced prompt lengths (seeded random token ids)
and each response forced to its traced length (greedy, no EOS), admitted in the order the
simulator deals them to one rollout worker, so the simulator and the engine serve the same requests
in the same order. A plain (no-SD) run gives every request's reference continuation; speculative
runs then use the :class:`~tltreal.spec_decode.proposers.pinned.PinnedDrafter`, whose acceptance follows an
acceptance model's positional table, and must reproduce the reference exactly (lossless).

Everything here is deterministic given the seed except the wall-clock times, which are the point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import pandas as pd
import torch

from tltcore.dealing import deal
from tltcore.errors import InputError
from tltcore.policy.base import BatchView, Decision, NoSD, Outcome, SDConfig, SDPolicy
from tltreal.engine.engine import Engine
from tltreal.engine.engine_config import EngineConfig
from tltreal.engine.requests import RunResult
from tltreal.model.transformer import Transformer
from tltreal.spec_decode.proposers import EagleDrafter, PinnedDrafter, random_drafter
from tltreal.validation.clock import engine_class
from tltreal.validation.profiler import device_of
from tltreal.validation.rounds import williams_order

T = TypeVar("T")


@dataclass(frozen=True)
class ReplayRequests:
    """One step's requests in engine order: prompt token ids and forced response lengths."""

    step: int
    prompts: tuple[tuple[int, ...], ...]
    lengths: tuple[int, ...]

    @property
    def max_len(self) -> int:
        return max(len(p) + n for p, n in zip(self.prompts, self.lengths, strict=True))


@dataclass
class RealRun:
    """One policy's real run of one step (any backend): what the sim-vs-real comparison reads."""

    step: int
    policy: str
    events: pd.DataFrame
    makespan: float
    iterations: pd.DataFrame  # one row per decode iteration: batch_size, contexts, config, seconds, accept_length
    accepted: dict[SDConfig, np.ndarray]  # per-request accepted draft tokens of every SD iteration
    repeat: int = 0  # the validation round this run belongs to (each round runs every policy once)
    wall_s: float = float("nan")  # the run's wall-clock duration (= makespan unless timed on the thread clock)


def replay_requests(workload, *, vocab_size: int, seed: int, deal_mode: str = "shuffle") -> ReplayRequests:
    """The workload's requests for one worker, in the simulator's dealing order, with seeded random
    prompts of the traced lengths."""
    (order,) = deal(workload.group_ids, 1, deal_mode, seed, int(workload.step))
    g = torch.Generator().manual_seed(seed * 1_000_003 + int(workload.step))
    prompts, lengths = [], []
    for i in order.tolist():
        n_prompt = max(1, int(workload.prompt_tokens[i]))
        prompts.append(tuple(torch.randint(0, vocab_size, (n_prompt,), generator=g).tolist()))
        lengths.append(max(1, int(workload.response_tokens[i])))
    return ReplayRequests(int(workload.step), tuple(prompts), tuple(lengths))


def with_extra_tokens(requests: ReplayRequests, extra: int) -> ReplayRequests:
    """The same requests, each response ``extra`` tokens longer: a reference run on these tells the
    pinned drafter what the target would say past each response's end, so acceptance in a request's
    last iterations is the model's and not cut short by a drafter that cannot see past the end."""
    return replace(requests, lengths=tuple(n + extra for n in requests.lengths))


def rotated(specs: Sequence[str], repeat: int) -> list[str]:
    """``specs`` rotated left by ``repeat``: each validation round runs the policies in another order,
    so a slow spell of the machine does not always fall on the same policy."""
    k = repeat % len(specs) if specs else 0
    return [*specs[k:], *specs[:k]]


def balanced_order(items: Sequence[T], repeat: int) -> list[T]:
    """The order of ``items`` at repeat ``repeat`` of a Williams design: over every ``n`` repeats (``2n``
    for an odd number ``n`` of items) each item runs in each position equally often and right after each
    other item equally often. A rotation keeps every item behind the same one (all but one repeat in
    ``n``), so what ran just before is confounded with the item: on this CPU two runs of the same plain
    engine back to back read the second 0.5% faster (the A/A control of a rotated 200-repeat A/B), as
    large as the effects such an A/B is after."""
    return williams_order(items, repeat)


class RecordingPolicy:
    """Wraps a policy and keeps every view it was shown and every outcome it was told: each decode
    iteration's conditions (batch, per-request contexts, draft shape) and time, and the per-request
    accepted counts that give the measured acceptance."""

    def __init__(self, inner: SDPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self.views: list[BatchView] = []
        self.outcomes: list[Outcome] = []

    def decide(self, view: BatchView) -> Decision:
        self.views.append(view)
        return self.inner.decide(view)

    def observe(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        self.inner.observe(outcome)

    def reset(self, step: int) -> None:
        self.inner.reset(step)


def _engine(target: Transformer, policy: SDPolicy, drafter, requests: ReplayRequests, max_batch: int,
            config_kwargs: dict, clock: str = "wall") -> Engine:
    # The replay's switch is the drafter catch-up its simulated twin (tltsim's native_engine) models.
    config_kwargs = {"switch": "catch_up", **config_kwargs}
    cfg = EngineConfig(max_batch=max_batch, max_len=requests.max_len + 1, step=requests.step, **config_kwargs)
    engine = engine_class(clock)(target, policy, drafter, cfg)
    for prompt, n in zip(requests.prompts, requests.lengths, strict=True):
        engine.add_request(list(prompt), n)
    return engine


def reference_run(target: Transformer, requests: ReplayRequests, *, max_batch: int, policy: SDPolicy | None = None,
                  clock: str = "wall", **config_kwargs) -> RunResult:
    """The plain run (``policy`` must never speculate; default no-SD): the reference continuations
    and the baseline timings (on ``clock``: :mod:`tltreal.validation.clock`)."""
    return _engine(target, policy or NoSD(), None, requests, max_batch, config_kwargs, clock).run()


def replay_drafter(target: Transformer, seed: int = 0) -> EagleDrafter:
    """The drafter network the pinned drafter runs (seeded random weights; its acceptance is pinned,
    not its own). Build it once per process and pass it to every :func:`speculative_run`, as a
    deployment loads its drafter once. One built just before each timed run made that run slower even
    where it never drafts: in ``benchmarks/cost_aware_cpu.py`` (40 interleaved repeats) no SD on the
    speculative harness was +0.4% and +0.6% against the plain engine (95% intervals +0.1 to +0.7%, +0.2
    to +1.1%), with one drafter for all runs +0.1% and +0.0% (-0.2 to +0.4%), what the same plain run
    repeated shows. That cost had been charged to every speculative policy."""
    return random_drafter(target, seed=seed + 1).to(device_of(target))


def speculative_run(target: Transformer, requests: ReplayRequests, reference: RunResult, policy: SDPolicy, *,
                    position_probs: np.ndarray, max_batch: int, seed: int = 0, clock: str = "wall",
                    drafter: EagleDrafter | None = None, **config_kwargs) -> RunResult:
    """The same requests under ``policy`` with a pinned drafter; refuses a run whose output differs
    from the reference (that would be a losslessness bug, not a timing). ``reference`` may run longer
    than ``requests`` (:func:`with_extra_tokens`); its outputs are then compared up to each length.
    ``drafter``: the :func:`replay_drafter` to pin (default: one built for this run)."""
    sequences = [list(p) + reference.outputs[i] for i, p in enumerate(requests.prompts)]
    engine: Engine | None = None

    def truth(slot: int) -> tuple[Sequence[int], int]:
        assert engine is not None
        req = engine.request_in_slot(slot)
        return sequences[req.rid], req.cache_len

    inner = replay_drafter(target, seed) if drafter is None else drafter
    pinned = PinnedDrafter(inner, position_probs, truth, seed=seed)
    engine = _engine(target, policy, pinned, requests, max_batch, config_kwargs, clock)
    result = engine.run()
    expected = {rid: out[: requests.lengths[rid]] for rid, out in reference.outputs.items()}
    if result.outputs != expected:
        raise InputError(f"policy {policy.name}: speculative output differs from the plain reference run "
                         "(losslessness broken)")
    return result
