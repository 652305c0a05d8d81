"""Both edges of GRPO's trust region, token by token, by hand.

PPO/GRPO's clip keeps a minibatch step from moving a token's probability ratio beyond
``[1 - eps, 1 + eps]`` *in the direction its advantage pushes*: a token with a negative advantage
whose ratio already fell below ``1 - eps`` gets no further push down (flat loss, zero gradient),
while one with a positive advantage there is pulled back up at full strength. The existing tests
cover the upper edge only; a changed lower bound (``1 - 2 eps``, ``0``, ``1 - eps/2``) would silently
let an update crush (or barely move) disfavoured tokens. Values here are worked out by hand from
``loss = -min(r A, clip(r, 1 - eps, 1 + eps) A)``, ``d loss / d log p = -A r`` when the ``r A``
term is the smaller one, else 0.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from tltreal.rl.grpo import clipped_loss  # noqa: E402

EPS = 0.2

# (ratio, advantage, loss, d loss / d log p, clipped?)
CASES = [
    # below the trust region, negative advantage: flat at -(1 - eps) A, no gradient
    (0.5, -1.0, 0.8, 0.0, True),
    (0.7, -1.0, 0.8, 0.0, True),
    (0.79, -2.0, 1.6, 0.0, True),
    # below it, positive advantage: the unclipped term is smaller, full gradient back up
    (0.5, 1.0, -0.5, -0.5, True),
    (0.7, 2.0, -1.4, -1.4, True),
    # inside it: plain policy gradient, both signs
    (0.81, -1.0, 0.81, 0.81, False),
    (0.85, -1.0, 0.85, 0.85, False),
    (0.95, 1.0, -0.95, -0.95, False),
    (1.1, 1.0, -1.1, -1.1, False),
    # above it: flat for a positive advantage, full gradient for a negative one
    (1.5, 1.0, -1.2, 0.0, True),
    (1.5, -1.0, 1.5, 1.5, True),
]


def one_token(ratio: float, advantage: float, eps: float = EPS) -> tuple[float, float, float]:
    """Loss, gradient w.r.t. the token's log-prob, and clip fraction for a single token."""
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    loss, clip = clipped_loss(logp, torch.zeros(1, 1, dtype=torch.float64),
                              torch.tensor([[advantage]], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
                              eps)
    loss.backward()
    assert logp.grad is not None
    return float(loss.detach()), float(logp.grad[0, 0]), clip


@pytest.mark.parametrize(("ratio", "advantage", "loss", "grad", "clipped"), CASES)
def test_clipped_loss_by_hand_on_both_edges(ratio: float, advantage: float, loss: float, grad: float,
                                           clipped: bool) -> None:
    got_loss, got_grad, clip = one_token(ratio, advantage)
    assert got_loss == pytest.approx(loss, abs=1e-12)
    assert got_grad == pytest.approx(grad, abs=1e-12)
    assert clip == (1.0 if clipped else 0.0)


@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_the_lower_edge_follows_clip_eps(eps: float) -> None:
    """Just outside ``1 - eps`` a disfavoured token is held; just inside it still moves."""
    outside, inside = 1 - eps - 0.02, 1 - eps + 0.02
    loss, grad, clip = one_token(outside, -1.0, eps)
    assert (loss, grad, clip) == (pytest.approx(1 - eps, abs=1e-12), 0.0, 1.0)
    loss, grad, clip = one_token(inside, -1.0, eps)
    assert (loss, grad, clip) == (pytest.approx(inside, abs=1e-12), pytest.approx(inside, abs=1e-12), 0.0)


def test_masked_mean_over_tokens_on_both_sides_of_the_lower_edge() -> None:
    """Four tokens (one masked out): the loss is the mean of the three per-token hand values and the
    clip fraction counts the masked-in tokens outside the region."""
    ratios = torch.tensor([[0.5, 0.9, 0.5, 0.6]], dtype=torch.float64)
    adv = torch.tensor([[-1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    logp = ratios.log().requires_grad_(True)
    loss, clip = clipped_loss(logp, torch.zeros_like(ratios), adv, mask, EPS)
    loss.backward()
    assert logp.grad is not None
    assert float(loss.detach()) == pytest.approx((0.8 + 0.9 - 0.5) / 3, abs=1e-12)
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.9 / 3, -0.5 / 3, 0.0], abs=1e-12)
    assert clip == pytest.approx(2 / 3)


# ---- the dual clip (c = 3): a negative advantage's term never falls below c A ------------------------
# (ratio, advantage, c, loss, d loss / d log p), by hand from s = min(r A, clip(r) A), s = max(s, c A)
# when A < 0, loss = -s; the gradient is -A r while the r A term is the one chosen, else 0.
DUAL = [
    (5.0, -1.0, 3.0, 3.0, 0.0),    # min(-5, -1.2) = -5, floored at -3: flat, no gradient
    (4.0, -0.5, 3.0, 1.5, 0.0),    # min(-2, -0.6) = -2, floored at -1.5
    (2.5, -1.0, 3.0, 2.5, 2.5),    # -2.5 is above -3: the plain PPO term, full gradient
    (2.5, -1.0, 2.0, 2.0, 0.0),    # the floor follows c: -2.5 floored at -2
    (5.0, 1.0, 3.0, -1.2, 0.0),    # a positive advantage is untouched: the PPO clip at 1 + eps
    (0.5, -1.0, 3.0, 0.8, 0.0),    # below the trust region: the PPO clip, as without the dual clip
    (1.1, -1.0, 3.0, 1.1, 1.1),    # inside it: plain policy gradient
]


@pytest.mark.parametrize(("ratio", "advantage", "c", "loss", "grad"), DUAL)
def test_dual_clip_by_hand(ratio: float, advantage: float, c: float, loss: float, grad: float) -> None:
    logp = torch.tensor([[math.log(ratio)]], dtype=torch.float64, requires_grad=True)
    got, _ = clipped_loss(logp, torch.zeros(1, 1, dtype=torch.float64),
                          torch.tensor([[advantage]], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64),
                          EPS, c)
    got.backward()
    assert logp.grad is not None
    assert float(got.detach()) == pytest.approx(loss, abs=1e-12)
    assert float(logp.grad[0, 0]) == pytest.approx(grad, abs=1e-12)


def test_dual_clip_bounds_a_batch_where_one_token_would_dominate() -> None:
    """Three ordinary tokens and one disfavoured token at ratio 20: without the dual clip its term
    (20) swamps the mean; with c = 3 it counts 3 and pulls no gradient."""
    ratios = torch.tensor([[1.0, 1.0, 1.0, 20.0]], dtype=torch.float64)
    adv = torch.tensor([[0.5, -0.5, 0.5, -1.0]], dtype=torch.float64)
    ones = torch.ones_like(ratios)
    plain, _ = clipped_loss(ratios.log(), torch.zeros_like(ratios), adv, ones, EPS)
    logp = ratios.log().requires_grad_(True)
    dual, clip = clipped_loss(logp, torch.zeros_like(ratios), adv, ones, EPS, 3.0)
    dual.backward()
    assert logp.grad is not None
    assert float(plain) == pytest.approx((-0.5 + 0.5 - 0.5 + 20.0) / 4, abs=1e-12)
    assert float(dual.detach()) == pytest.approx((-0.5 + 0.5 - 0.5 + 3.0) / 4, abs=1e-12)
    assert logp.grad[0].tolist() == pytest.approx([-0.5 / 4, 0.5 / 4, -0.5 / 4, 0.0], abs=1e-12)
    assert clip == pytest.approx(1 / 4)


def test_kl_k3_by_hand() -> None:
    """k3 = exp(ref - logp) - (ref - logp) - 1: 0 where the policy equals the reference; at
    p = 0.5, ref = 0.25: 0.5 + ln 2 - 1, gradient 1 - exp(ref - logp) = 0.5; masked mean."""
    from tltreal.rl.grpo import kl_k3

    logp = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.9)]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[math.log(0.25), math.log(0.3), math.log(0.1)]], dtype=torch.float64)
    kl = kl_k3(logp, ref, torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64))
    kl.backward()
    assert logp.grad is not None
    assert float(kl.detach()) == pytest.approx((0.5 + math.log(2) - 1) / 2, abs=1e-12)
    assert logp.grad[0].tolist() == pytest.approx([0.5 / 2, 0.0, 0.0], abs=1e-12)


def test_config_refuses_a_dual_clip_at_or_below_one_and_a_negative_kl() -> None:
    from tltcore.errors import InputError
    from tltreal.rl.grpo import GRPOConfig

    with pytest.raises(InputError, match="dual_clip"):
        GRPOConfig(dual_clip=1.0)
    with pytest.raises(InputError, match="kl_coef"):
        GRPOConfig(kl_coef=-0.1)
    assert GRPOConfig(dual_clip=None).dual_clip is None
