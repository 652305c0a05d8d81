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
