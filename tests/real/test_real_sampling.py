"""Sampled speculative decoding is lossless in distribution: chi-squared tests against the target.

Two levels, each with a deliberately broken variant (the rejection residual replaced by the plain
target distribution) that the *same* test must reject, so the test demonstrably has power:
- the acceptance rule alone, with drafts drawn i.i.d. from a non-trivial q (general multi-draft form);
- the whole engine: 10^4 requests on one fixed prompt, decoded with tree SD; the 2nd and 3rd
  emitted tokens (produced by speculation: accepted drafts, residual resamples or bonus tokens)
  must follow the target's own marginals, computed exactly by enumeration.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tltcore.model_config import ModelConfig  # noqa: E402
from tltcore.policy.base import SDConfig, Static  # noqa: E402
from tltreal.engine.engine import Engine  # noqa: E402
from tltreal.engine.engine_config import EngineConfig  # noqa: E402
from tltreal.model.sampling import SamplingParams  # noqa: E402
from tltreal.model.weights import random_model  # noqa: E402
from tltreal.spec_decode import verify  # noqa: E402
from tltreal.spec_decode.proposers import OracleDrafter, random_drafter  # noqa: E402
from tltreal.spec_decode.tree import make_tree  # noqa: E402

from .tiny_models import two_token_marginals  # noqa: E402

ALPHA_OK = 1e-3  # a correct sampler fails with this probability (fixed seeds: deterministic)
ALPHA_BROKEN = 1e-6  # the broken sampler must be rejected far beyond doubt


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-squared p-value of observed ``counts`` against ``probs``; cells with an
    expected count below 5 are pooled into one."""
    counts, probs = counts.double(), probs.double() / probs.sum()
    expected = probs * counts.sum()
    small = expected < 5
    obs = torch.cat([counts[~small], counts[small].sum(0, keepdim=True)])
    exp = torch.cat([expected[~small], expected[small].sum(0, keepdim=True)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    dof = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), stat / 2.0))


def broken_residual(r: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The bug the tests must catch: after a rejection, resample from the target, not the residual."""
    return r / r.sum(-1, keepdim=True)


# ----------------------------------------------------------------------- acceptance rule, i.i.d. q
V = 8


def rule_draws(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` independent verifications of the tree root -> {a, b}, a -> c (drafts i.i.d. from q).

    Returns the first and second emitted tokens and the exact target probabilities p(x1), p(x2|x1).
    """
    g = torch.Generator().manual_seed(seed)
    p0 = (torch.randn(V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
    p1 = (torch.randn(V, V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)  # p(x2 | x1)
    q0 = (torch.randn(V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
    q1 = (torch.randn(V, V, generator=g, dtype=torch.float64) * 1.5).softmax(-1)
    a = torch.multinomial(q0.expand(n, V), 1, generator=g)[:, 0]
    b = torch.multinomial(q0.expand(n, V), 1, generator=g)[:, 0]
    c = torch.multinomial(q1[a], 1, generator=g)[:, 0]
    root = torch.zeros(n, dtype=torch.long)
    tree = make_tree(torch.stack([root, a, b, c], 1), torch.tensor([-1, 0, 0, 1]).expand(n, 4).contiguous())
    p = torch.stack([p0.expand(n, V), p1[a], p1[b], p1[a].new_full((n, V), 1.0 / V)], 1)
    q = torch.stack([q0.expand(n, V), q0.expand(n, V), q0.expand(n, V), q1[a]], 1)
    u = torch.rand(n, 4, generator=g, dtype=torch.float64)
    ub = torch.rand(n, generator=g, dtype=torch.float64)
    path, length, nxt = verify.tree_accept_reference(p, q, tree.tokens, tree.parents, u, ub, tree.max_depth)
    rows = torch.arange(n)
    first = torch.where(length >= 1, tree.tokens[rows, path[:, 1].clamp_min(0)], nxt)
    second = torch.where(length >= 2, tree.tokens[rows, path[:, 2].clamp_min(0)], nxt)
    has_second = length >= 1
    return first, second[has_second], first[has_second], (p0, p1)


def rule_pvalues(seed: int = 0, n: int = 40_000) -> tuple[float, float]:
    first, second, first_of_second, (p0, p1) = rule_draws(n, seed)
    p_first = chi2_pvalue(torch.bincount(first, minlength=V), p0)
    joint = torch.bincount(first_of_second * V + second, minlength=V * V)
    # Conditioned on a first-level acceptance the second token must still follow p(x2 | x1).
    accepted_first = torch.bincount(first_of_second, minlength=V).double()
    p_joint = chi2_pvalue(joint, (accepted_first[:, None] * p1).reshape(-1))
    return p_first, p_joint


def test_rejection_rule_matches_target_distribution():
    p_first, p_joint = rule_pvalues()
    assert p_first > ALPHA_OK and p_joint > ALPHA_OK


def test_rejection_rule_test_rejects_broken_residual(monkeypatch):
    monkeypatch.setattr(verify, "residual", broken_residual)
    p_first, _ = rule_pvalues()
    assert p_first < ALPHA_BROKEN


# ------------------------------------------------------------------------------ whole engine
CFG = ModelConfig(vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1)
PROMPT = [3, 17, 5, 40, 22, 9]
DRAWS = 10_000
SAMPLING = {"temperature": 0.8, "top_p": 0.95}


@pytest.fixture(scope="module")
def target():
    return random_model(CFG, seed=2, dtype=torch.float64, std=0.3)


@pytest.fixture(scope="module")
def exact_marginals(target):
    """p(x2) and p(x3) under the target alone, by enumerating all x1 and (x1, x2)."""
    return two_token_marginals(target, PROMPT, **SAMPLING)


def engine_draws(target, drafter, config: SDConfig) -> tuple[torch.Tensor, torch.Tensor, float]:
    engine = Engine(target, Static(config), drafter,
                    EngineConfig(max_batch=2_500, max_len=12, max_verify=8, max_draft_nodes=8))
    for seed in range(DRAWS):
        engine.add_request(PROMPT, 3, SamplingParams(seed=seed, **SAMPLING))
    result = engine.run()
    toks = torch.tensor(list(result.outputs.values()))
    sd = result.decode_events[result.decode_events["depth"] > 0]
    accepted_per_request = float(sd["accepted"].sum() / sd["batch_size"].sum())  # drafts verification kept
    return toks[:, 1], toks[:, 2], accepted_per_request


@pytest.mark.parametrize(("kind", "config"), [("oracle", SDConfig(2, 2, 4)), ("random", SDConfig(2, 3, 5))])
def test_engine_sampling_matches_target(target, exact_marginals, kind, config):
    drafter = OracleDrafter(target) if kind == "oracle" else random_drafter(target, seed=4, std=0.3)
    x2, x3, accept = engine_draws(target, drafter, config)
    assert chi2_pvalue(torch.bincount(x2, minlength=CFG.vocab_size), exact_marginals[0]) > ALPHA_OK
    assert chi2_pvalue(torch.bincount(x3, minlength=CFG.vocab_size), exact_marginals[1]) > ALPHA_OK
    assert accept > (0.5 if kind == "oracle" else 0.0)  # speculation actually produced these tokens


def test_engine_test_rejects_broken_residual(target, exact_marginals, monkeypatch):
    monkeypatch.setattr(verify, "residual", broken_residual)
    x2, _, _ = engine_draws(target, OracleDrafter(target), SDConfig(2, 2, 4))
    assert chi2_pvalue(torch.bincount(x2, minlength=CFG.vocab_size), exact_marginals[0]) < ALPHA_BROKEN
