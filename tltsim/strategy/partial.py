"""Partial rollout: responses that outlive a rollout and continue in a later one under newer weights.

The bookkeeping shared by ``overprovision:mode=resume`` and ``async``. A rollout is stopped
(:meth:`tltsim.rollout.RolloutRun.step` with ``stop=``) and reports each unfinished response's generated
tokens; such a response continues in the next rollout, where:

* its generated tokens are **re-prefilled** as prompt: the request is ``prompt + generated`` prompt
  tokens and ``target - generated`` response tokens (its KV reservation is unchanged). AReaL's
  interruptible rollout workers discard the KV computed by the old weights and recompute it (Fu et
  al., arXiv 2505.24298, section 4); slime flushes the cache at a weight update by default. PipelineRL
  keeps the stale KV instead (Piché et al., arXiv 2509.19128, Figure 7; slime has an open pull request
  for it, THUDM/slime#1694): not modelled, it would save the re-prefill;
* its length is the trace's: the new weights are assumed to end it where the old ones would have (the
  simulator has no model of how a response's length changes with the weights);
* each token remembers the version that generated it (:class:`Response.pieces`), so a trained sample's
  tokens carry their own lags (per-token lag, as AReaL records a version per token).

Requests of a rollout: the carried responses first, in the order their groups were launched (the
frameworks take their buffer of partial samples first), then the fresh groups. Group ids are run-wide
keys in launch order; the dealing depends only on the order in which groups first appear
(:func:`tltcore.dealing.deal`), so a rollout without carried responses deals as the synchronous step does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tltcore.prompt_group import Group
from tltsim.strategy.timeline import BatchRollout


@dataclass
class Response:
    """One response across rollouts: its original prompt, its full length (the trace's) and what has
    been generated, as ``(version, tokens)`` pieces."""

    prompt: int
    target: int
    pieces: list[tuple[int, int]] = field(default_factory=list)
    done: bool = False

    @property
    def generated(self) -> int:
        return sum(t for _, t in self.pieces)


@dataclass(frozen=True)
class Requests:
    """A rollout's workload (a :class:`~tltsim.rollout.StepRequests`) and, per request, its response."""

    step: int
    group_ids: np.ndarray
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    responses: tuple[Response, ...]


class Pool:
    """The groups launched and not yet trained, in launch order."""

    def __init__(self) -> None:
        self.groups: list[Group] = []
        self.next_key = 0

    def launch(self, group_ids: np.ndarray, prompts: np.ndarray, responses: np.ndarray) -> None:
        """New groups (a step's requests: ``group_ids`` per request), in order of first appearance."""
        gids = np.asarray(group_ids)
        for g in dict.fromkeys(gids.tolist()):
            rows = np.flatnonzero(gids == g)
            self.groups.append(Group(self.next_key, [Response(int(prompts[i]), max(int(responses[i]), 1))
                                                     for i in rows]))
            self.next_key += 1

    @property
    def pending(self) -> list[Group]:
        return [g for g in self.groups if not g.complete]

    def requests(self, step: int) -> Requests:
        """Every unfinished response as a request (re-prefilled: module docstring)."""
        gids, prompts, resp, who = [], [], [], []
        for g in self.groups:
            for r in g.responses:
                if not r.done:
                    gids.append(g.key)
                    prompts.append(r.prompt + r.generated)
                    resp.append(r.target - r.generated)
                    who.append(r)
        return Requests(step, np.asarray(gids, dtype=np.int64), np.asarray(prompts, dtype=np.int64),
                        np.asarray(resp, dtype=np.int64), tuple(who))

    def record(self, reqs: Requests, b: BatchRollout, version: int) -> dict[int, float]:
        """A rollout under ``version`` ran ``reqs``: finished responses get the rest of their tokens,
        unfinished ones what they generated. Returns when each group completed in it (its last response's
        finish, seconds since the rollout's start)."""
        finish = b.finish if b.finish is not None else np.full(len(reqs.responses), b.makespan)
        generated = b.generated if b.generated is not None else np.asarray(reqs.response_tokens)
        done_at: dict[int, float] = {}
        for i, (key, r) in enumerate(zip(reqs.group_ids.tolist(), reqs.responses, strict=True)):
            if np.isfinite(finish[i]):
                r.pieces.append((version, r.target - r.generated))
                r.done = True
                done_at[key] = max(done_at.get(key, 0.0), float(finish[i]))
            elif generated[i] > 0:
                r.pieces.append((version, int(generated[i])))
        complete = {g.key for g in self.groups if g.complete}
        return {k: t for k, t in done_at.items() if k in complete}

    def take(self, order: list[int]) -> list[Group]:
        """Remove and return the groups with keys ``order`` (the trained batch), in that order."""
        by_key = {g.key: g for g in self.groups}
        taken = [by_key[k] for k in order]
        drop = set(order)
        self.groups = [g for g in self.groups if g.key not in drop]
        return taken

    def carried(self) -> int:
        """Responses launched and not yet trained (unfinished, or finished in a group not trained yet)."""
        return sum(len(g.responses) for g in self.groups)


def completion_order(pool: Pool, done_at: dict[int, float]) -> list[tuple[float, int]]:
    """The pool's complete groups as ``(when, key)`` in the order the trainer takes them: those complete
    before this rollout first (time 0), then by completion in it; ties by launch order."""
    out = [(done_at.get(g.key, 0.0), g.key) for g in pool.groups if g.complete]
    return sorted(out)


@dataclass(frozen=True)
class Batch:
    """A trained batch: per sample its prompt, its length, its lag (its oldest token's) and per
    ``(version, tokens)`` piece the lag of those tokens."""

    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    lag: np.ndarray
    piece_lag: np.ndarray
    piece_tokens: np.ndarray


def batch_of(groups: list[Group], trainer_version: int) -> Batch:
    """The batch the actor at ``trainer_version`` trains on (lags: module docstring)."""
    rs = [r for g in groups for r in g.responses]
    pieces = [(trainer_version - v, t) for r in rs for v, t in r.pieces if t > 0]
    return Batch(np.asarray([r.prompt for r in rs], dtype=np.int64), np.asarray([r.target for r in rs], dtype=np.int64),
                 np.asarray([trainer_version - min(v for v, _ in r.pieces) for r in rs], dtype=np.int64),
                 np.asarray([p[0] for p in pieces], dtype=np.int64), np.asarray([p[1] for p in pieces], dtype=np.int64))
