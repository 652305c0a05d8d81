"""Partial rollout on the native engine: stop a rollout when N prompt groups are complete, carry the
rest to the next step, resume them there under the new weights.

The simulator's ``overprovision:mode=resume`` (:mod:`tltsim.strategy.overprovision`, APRIL's
recycling) run for real, with the same bookkeeping (:mod:`tltsim.strategy.partial`):

* a step launches its groups (:meth:`PartialRollout.launch`: each a list of :class:`Member`); its
  engine gets every unfinished response of the pool, the carried ones first in the order their groups
  were launched, then the fresh ones (``order`` may permute them, e.g. the simulator's dealing);
* the engine runs until ``batch_groups`` groups are complete (groups completed in an earlier step and
  not yet trained count at once), checked after every iteration; then it **hands back** every
  unfinished request (:meth:`~tltreal.engine.engine.Engine.hand_back`: prompt, generated tokens,
  remaining budget, its random generator);
* the first ``batch_groups`` complete groups (those complete before this step first, then by the
  iteration they completed in, ties by launch order) are trained and leave the pool; the rest are
  carried;
* the next step's engine (after a weight update: a new policy version) **resumes** the carried
  requests first (:meth:`~tltreal.engine.engine.Engine.resume`), then the fresh groups.

**Re-prefill, not kept KV.** A resumed request's prompt and generated tokens are re-prefilled under
the new weights (the engine's KV and hidden states for them are recomputed), as AReaL's interruptible
rollout workers do (Fu et al., arXiv 2505.24298, section 4: the KV computed by the old weights is
discarded) and as slime does by default (it flushes the cache at a weight update). PipelineRL keeps
the stale KV instead (Piché et al., arXiv 2509.19128, Figure 7; slime has an open pull request for
it, THUDM/slime#1694), which saves the re-prefill but continues from keys and values the new weights
would not have computed: not built here. The simulator's default is the same re-prefill.

Two ways to re-prefill (``resume=``, :data:`~tltreal.engine.engine.RESUME_MODES`):

* ``exact`` (default): every generated token but the last is re-prefilled; the last stays pending and
  the next token comes from the request's next decode iteration, as in an uninterrupted run;
* ``resubmit``: prompt + generated are prefilled and the prefill emits the next token, which is what a
  framework re-submitting ``prompt + generated`` to vLLM or SGLang gets, and what the simulator
  models (its resumed request's first token comes from the re-prefill). ``tlt validate --strategy``
  runs this one, so the real and simulated runs do the same work; ``exact`` costs a resumed request
  one more decode iteration and one token less of prefill.

**Lossless within a policy version.** Under unchanged weights, stopping and resuming gives exactly
what an uninterrupted run gives (``tests/real/test_partial_rollout.py``; bit-identical in float64, as
the engine's batch independence is):

* ``exact``: greedy or sampled, SD off or on. The resumed request is in the state the stopped one was
  in (tokens, the pending last token, its generator's state), so it runs the same iterations and draws
  the same uniforms from that point. Sampled tokens stay the same where each request sees the same
  sequence of SD configurations as uninterrupted (a static policy, or any policy deciding the same):
  an SD iteration draws one uniform per tree node plus one, so a different configuration draws a
  different number, exactly as a different batch composition does without a stop;
* ``resubmit``: greedy, SD off or on, and sampled without SD (the re-prefill draws one uniform for the
  next token, as the plain iteration it replaces does). Sampled with SD the tokens differ from then on
  (the same distribution, other draws): the SD iteration the uninterrupted run makes there draws its
  uniforms for a whole tree, the re-prefill one.

**Per-token versions.** Each token keeps the policy version that generated it (:attr:`Response.versions`),
so a trained sample's tokens carry their own lags (the trainer's version minus each token's), as the
simulator records them (:class:`tltsim.strategy.partial.Response`'s pieces).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tltcore.prompt_group import Group
from tltreal.engine.engine import Engine
from tltreal.engine.requests import RunResult, Unfinished
from tltreal.model.sampling import SamplingParams


@dataclass(frozen=True)
class Member:
    """One response a group asks for: its prompt, its whole token budget and its sampling."""

    prompt: list[int]
    max_new_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)


@dataclass
class Response:
    """One response across steps: what it generated so far (``output``) and per token the version
    that generated it (``versions``); ``carried``: the engine state it continues from (None: not
    started); ``done``: it reached its budget or an end token."""

    member: Member
    output: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    carried: Unfinished | None = None
    done: bool = False


@dataclass(frozen=True)
class PartialStep:
    """One step of partial rollout: the engine's result (its ``wall_s`` the rollout's time, stopped
    at the last iteration), the groups trained (in the order the trainer takes them), how many
    requests the engine ran (``requests``) and what it prefilled (``prefill_tokens``: prompts, plus
    the re-prefilled generated tokens of resumed requests), and what is carried: responses of groups
    not trained (``carried_samples``, unfinished or finished) and those groups (``carried_groups``)."""

    version: int
    result: RunResult | None
    trained: list[Group]
    requests: int
    prefill_tokens: int
    carried_samples: int
    carried_groups: int

    @property
    def makespan(self) -> float:
        return self.result.wall_s if self.result is not None else 0.0

    def lag_tokens(self) -> dict[int, int]:
        """Trained tokens per lag (the trainer, at this step's version, minus each token's version)."""
        out: dict[int, int] = {}
        for g in self.trained:
            for r in g.responses:
                for v in r.versions:
                    out[self.version - v] = out.get(self.version - v, 0) + 1
        return dict(sorted(out.items()))


class PartialRollout:
    """The pool of launched, not yet trained groups, and the steps that run it (module docstring)."""

    def __init__(self) -> None:
        self.groups: list[Group] = []
        self.next_key = 0

    def launch(self, members: Sequence[Member]) -> int:
        """A new group at the end of the pool; returns its key (run-wide, in launch order)."""
        if not members:
            raise ValueError("a group needs at least one response")
        self.groups.append(Group(self.next_key, [Response(m) for m in members]))
        self.next_key += 1
        return self.next_key - 1

    def pending(self) -> list[tuple[int, Response]]:
        """Every unfinished response as ``(group key, response)``: the pool's groups in launch order
        (carried groups first, since they were launched earlier), each group's responses in order."""
        return [(g.key, r) for g in self.groups for r in g.responses if not r.done]

    def step(self, engine: Engine, *, version: int, batch_groups: int, order: Sequence[int] | None = None,
             resume: str = "exact") -> PartialStep:
        """Run one step on ``engine`` (empty, its weights at ``version``): queue the pending responses
        (``order``: indices into :meth:`pending`, default as listed; carried ones resumed as ``resume``
        says), stop once ``batch_groups`` groups are complete, hand back the rest, take the trained
        groups out of the pool."""
        pending = self.pending()
        order = list(range(len(pending))) if order is None else list(order)
        if sorted(order) != list(range(len(pending))):
            raise ValueError("order must be a permutation of the pending responses")
        need = batch_groups - sum(g.complete for g in self.groups)
        done_at: dict[int, int] = {g.key: -1 for g in self.groups if g.complete}  # complete before: first
        result = None
        pending_last = 0 if resume == "resubmit" else 1  # an exact resume's last token is not re-prefilled
        prefill = sum(len(r.member.prompt) + max(len(r.output) - pending_last, 0) for _, r in pending)  # before
        if need > 0 and pending:
            result = self._run(engine, [pending[i] for i in order], need, version, done_at, resume)
        by_key = {g.key: g for g in self.groups}
        ranked = sorted((when, key) for key, when in done_at.items() if by_key[key].complete)[:batch_groups]
        take = {key for _, key in ranked}
        trained = [by_key[key] for _, key in ranked]
        self.groups = [g for g in self.groups if g.key not in take]
        return PartialStep(version, result, trained, len(pending) if result else 0, prefill if result else 0,
                           sum(len(g.responses) for g in self.groups), len(self.groups))

    def _run(self, engine: Engine, queue: list[tuple[int, Response]], need: int, version: int,
             done_at: dict[int, int], resume: str) -> RunResult:
        """The engine's part of :meth:`step`: queue, iterate until ``need`` groups completed, hand back."""
        rids: dict[int, tuple[int, Response]] = {}
        for key, r in queue:
            if r.carried is not None:
                rid = engine.resume(r.carried, resume)
            else:
                rid = engine.add_request(list(r.member.prompt), r.member.max_new_tokens, r.member.sampling, group=key)
            rids[rid] = (key, r)
        left: dict[int, int] = {}  # group key -> its responses not yet done
        for key, _ in queue:
            left[key] = left.get(key, 0) + 1
        completed, seen, iteration = 0, 0, 0
        engine.start()
        while engine.iterate():
            iteration += 1
            if len(engine.done) == seen:
                continue
            for rid in list(engine.done)[seen:]:
                key, _ = rids[rid]
                left[key] -= 1
                if left[key] == 0:
                    done_at[key] = iteration
                    completed += 1
            seen = len(engine.done)
            if completed >= need:
                break
        unfinished = engine.hand_back()
        result = engine.finish()
        for rid, out in result.outputs.items():
            _, r = rids[rid]
            self._extend(r, out, version)
            r.done, r.carried = True, None
        for u in unfinished:
            _, r = rids[u.rid]
            self._extend(r, u.output, version)
            r.carried = u
        return result

    @staticmethod
    def _extend(r: Response, output: list[int], version: int) -> None:
        """Record the tokens ``output`` has beyond what ``r`` had, as generated by ``version``."""
        new = output[len(r.output):]
        if output[: len(r.output)] != r.output:
            raise RuntimeError("a resumed request's output does not continue what it had generated")
        r.output = list(output)
        r.versions += [version] * len(new)
