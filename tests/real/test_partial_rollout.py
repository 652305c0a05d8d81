"""Partial rollout on the native engine (:mod:`tltreal.engine.partial`): stop at N complete groups, hand
back, resume next step.

- the rules on a hand-computed case (when it stops, what is trained and carried, per-token versions);
- lossless within a policy version: stopped and resumed under unchanged weights, every response is
  what an uninterrupted run gives, bit for bit in float64: ``exact`` resumes greedy and sampled, SD off
  and on; ``resubmit`` greedy, and sampled without SD (with SD its draws shift: shown, not hidden).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tltcore.policy.base import NoSD, SDConfig, Static  # noqa: E402
from tltcore.policy.registry import make_policy  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.engine.partial import Member, PartialRollout  # noqa: E402
from tltreal.model.sampling import SamplingParams  # noqa: E402
from tltreal.spec_decode.proposers import OracleDrafter, random_drafter  # noqa: E402

from .tiny_models import random_prompts  # noqa: E402

MAX_LEN = 96


def engine(target, policy=None, drafter=None, max_batch: int = 16) -> Engine:
    return Engine(target, policy or NoSD(), drafter, EngineConfig(max_batch=max_batch, max_len=MAX_LEN,
                                                                    switch="catch_up"))


# ------------------------------------------------------------------------------ the rules, by hand
def test_stops_at_n_groups_and_carries_the_rest(tiny_target):
    """Three one-response groups of budgets 5, 10 and 20, batch 1 group. Step 0 stops when the first
    group completes: its prefill emits token 1, four iterations tokens 2-5; the others have 5 tokens
    each. Step 1 (version 1) resumes both: group 1's 5 remaining tokens take 5 iterations (a resumed
    request's next token comes from its next iteration), then it stops; group 2 has 10 tokens."""
    prompts = random_prompts(3, 12, tiny_target.cfg.vocab_size, seed=5)
    pool = PartialRollout()
    for p, n in zip(prompts, (5, 10, 20), strict=True):
        pool.launch([Member(p, n)])
    s0 = pool.step(engine(tiny_target), version=0, batch_groups=1)
    assert [g.key for g in s0.trained] == [0]
    assert s0.trained[0].responses[0].versions == [0] * 5
    assert (s0.carried_groups, s0.carried_samples, s0.requests) == (2, 2, 3)
    assert [len(r.output) for _, r in pool.pending()] == [5, 5]
    assert (s0.result.decode_events["batch_size"] == 3).sum() == 4  # prefill + 4 iterations
    s1 = pool.step(engine(tiny_target), version=1, batch_groups=1)
    assert [g.key for g in s1.trained] == [1]
    assert s1.trained[0].responses[0].versions == [0] * 5 + [1] * 5
    assert s1.lag_tokens() == {0: 5, 1: 5}
    assert s1.prefill_tokens == len(prompts[1]) + 4 + len(prompts[2]) + 4  # every generated token but the last
    assert [len(r.output) for _, r in pool.pending()] == [10]
    assert len(s1.result.decode_events) == 5


def test_resubmit_emits_from_the_reprefill(tiny_target):
    """The same case resumed as a re-submitted prompt: step 1's prefill (prompt + all 5 tokens) emits
    token 6, and 4 iterations finish group 1, as the simulator models a re-prefill."""
    prompts = random_prompts(3, 12, tiny_target.cfg.vocab_size, seed=5)
    pool = PartialRollout()
    for p, n in zip(prompts, (5, 10, 20), strict=True):
        pool.launch([Member(p, n)])
    pool.step(engine(tiny_target), version=0, batch_groups=1, resume="resubmit")
    s1 = pool.step(engine(tiny_target), version=1, batch_groups=1, resume="resubmit")
    assert s1.lag_tokens() == {0: 5, 1: 5}
    assert s1.prefill_tokens == len(prompts[1]) + 5 + len(prompts[2]) + 5
    assert len(s1.result.decode_events) == 4
    assert [len(r.output) for _, r in pool.pending()] == [10]


def test_groups_complete_before_the_step_count_at_once(tiny_target):
    """Two groups complete in the same iteration with batch 1: the other is carried complete and
    trained next step without running the engine."""
    prompts = random_prompts(3, 12, tiny_target.cfg.vocab_size, seed=6)
    pool = PartialRollout()
    for p, n in zip(prompts, (4, 4, 30), strict=True):
        pool.launch([Member(p, n)])
    s0 = pool.step(engine(tiny_target), version=0, batch_groups=1)
    assert [g.key for g in s0.trained] == [0]  # ties: launch order
    s1 = pool.step(engine(tiny_target), version=1, batch_groups=1)
    assert [g.key for g in s1.trained] == [1] and s1.result is None and s1.makespan == 0.0
    assert s1.lag_tokens() == {1: 4}
    assert s1.carried_groups == 1


# -------------------------------------------------------------------- lossless within a version
def workload(vocab: int, sampled: bool) -> list[list[Member]]:
    """8 groups of 2 responses, budgets 12 to 54 tokens (no EOS), prompts of 3 to 19 tokens."""
    prompts = random_prompts(8, 20, vocab, seed=11)
    groups = []
    for g, p in enumerate(prompts):
        groups.append([Member(p, 12 + 6 * ((g * 5 + m * 3) % 8),
                              SamplingParams(temperature=1.0, top_p=0.9, seed=100 + 2 * g + m) if sampled
                              else SamplingParams()) for m in range(2)])
    return groups


def uninterrupted(target, groups, policy, drafter) -> list[list[int]]:
    e = engine(target, policy, drafter, max_batch=6)
    for key, members in enumerate(groups):
        for m in members:
            e.add_request(list(m.prompt), m.max_new_tokens, m.sampling, group=key)
    out = e.run().outputs
    return [out[i] for i in range(len(out))]


def stopped_and_resumed(target, groups, make_policy_, drafter, resume: str = "exact") -> tuple[list[list[int]], int]:
    """Step 0 stops at 2 complete groups; steps 1 and 2 (same weights) at 3 more each: every response
    ends. Returns the outputs in launch order and how many responses were carried part-way."""
    pool = PartialRollout()
    responses = [r for members in groups for r in pool.groups[pool.launch(members)].responses]
    part_way = 0
    for n in (2, 3, 3):
        part_way += sum(bool(r.output) for _, r in pool.pending())
        pool.step(engine(target, make_policy_(), drafter, max_batch=6), version=0, batch_groups=n, resume=resume)
    assert all(r.done for r in responses)
    return [r.output for r in responses], part_way


CASES = [
    ("no-sd", lambda: NoSD(), lambda t: None),
    ("chain-oracle", lambda: Static(SDConfig(4, 1, 4)), lambda t: OracleDrafter(t, noise=0.3)),
    ("tree-random", lambda: Static(SDConfig(4, 2, 6)), lambda t: random_drafter(t, seed=3)),
]


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize(("case", "policy", "drafter"), CASES, ids=[c[0] for c in CASES])
def test_stop_and_resume_is_lossless(tiny_target, case, policy, drafter, sampled):
    groups = workload(tiny_target.cfg.vocab_size, sampled)
    d = drafter(tiny_target)
    reference = uninterrupted(tiny_target, groups, policy(), d)
    outputs, part_way = stopped_and_resumed(tiny_target, groups, policy, d)
    assert part_way >= 4  # the test stops responses mid-way, or it proves nothing
    assert outputs == reference


@pytest.mark.parametrize(("case", "policy", "drafter", "sampled"),
                         [(*c, False) for c in CASES] + [(*CASES[0], True)],
                         ids=[f"{c[0]}-greedy" for c in CASES] + ["no-sd-sampled"])
def test_resubmit_is_lossless_where_its_draws_line_up(tiny_target, case, policy, drafter, sampled):
    groups = workload(tiny_target.cfg.vocab_size, sampled)
    d = drafter(tiny_target)
    reference = uninterrupted(tiny_target, groups, policy(), d)
    outputs, _ = stopped_and_resumed(tiny_target, groups, policy, d, resume="resubmit")
    assert outputs == reference


def test_resubmit_with_sd_and_sampling_draws_other_tokens(tiny_target):
    """Why ``exact`` is the default: a re-submitted request's next token is drawn by the prefill where
    the uninterrupted run's SD iteration draws a whole tree's uniforms, so sampled SD outputs differ
    from the stop on (the same distribution, other draws)."""
    groups = workload(tiny_target.cfg.vocab_size, sampled=True)
    d = random_drafter(tiny_target, seed=3)
    reference = uninterrupted(tiny_target, groups, Static(SDConfig(4, 2, 6)), d)
    outputs, _ = stopped_and_resumed(tiny_target, groups, lambda: Static(SDConfig(4, 2, 6)), d, resume="resubmit")
    assert outputs != reference


def test_lossless_under_a_policy_that_decides_by_batch(tiny_target):
    """Greedy with elastic + BEG-MAB (SD on and off as the batch changes): the tokens do not depend
    on the decisions, so they match however the stop changes the batches."""
    groups = workload(tiny_target.cfg.vocab_size, sampled=False)
    d = random_drafter(tiny_target, seed=3)
    reference = uninterrupted(tiny_target, groups, make_policy("elastic:4:2+beg-mab", seed=0), d)
    outputs, _ = stopped_and_resumed(tiny_target, groups, lambda: make_policy("elastic:4:2+beg-mab", seed=0), d)
    assert outputs == reference


def test_records_continue_across_the_stop(tiny_target):
    """Log-probs recorded before the stop are carried: a resumed response's record covers every token."""
    groups = workload(tiny_target.cfg.vocab_size, sampled=True)
    e = Engine(tiny_target, NoSD(), None, EngineConfig(max_batch=6, max_len=MAX_LEN, record_logprobs=True))
    for key, members in enumerate(groups):
        for m in members:
            e.add_request(list(m.prompt), m.max_new_tokens, m.sampling, group=key)
    e.start()
    for _ in range(8):
        e.iterate()
    carried = e.hand_back()
    first = e.finish()
    assert carried and all(len(u.logprobs) == len(u.output) for u in carried)
    e2 = Engine(tiny_target, NoSD(), None, EngineConfig(max_batch=6, max_len=MAX_LEN, record_logprobs=True))
    for u in carried:
        e2.resume(u)
    second = e2.run()
    assert all(len(f.logprobs) == len(f.output) for f in [*first.finished.values(), *second.finished.values()])
    tokens = second.events[second.events["kind"] == "stage"]["tokens"].iloc[0]
    assert tokens == sum(u.remaining for u in carried)  # the stage row counts this step's tokens only
