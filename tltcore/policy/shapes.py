"""The draft shapes a policy may ever choose, known before it runs.

An engine sizes its tree buffers (verify tokens, drafter scratch) and a memory estimate from these,
so an oversized tree is refused up front with one line instead of failing, or running out of
memory, mid-run. Dispatch is on the policy's type (each policy's shape set is part of its own
definition); a policy type this module does not know returns None and the engine checks each
decision as it comes.
"""

from __future__ import annotations

from functools import singledispatch

from tltcore.policy.arm_bandit import ArmBandit
from tltcore.policy.base import NoSD, SDConfig, SDPolicy, Static
from tltcore.policy.cost_aware import CostAware
from tltcore.policy.elastic import Elastic
from tltcore.policy.oracle import GreedyOracle
from tltcore.policy.sglang_ema import SglangEma
from tltcore.policy.vllm_table import VllmTable


@singledispatch
def policy_shapes(policy: SDPolicy) -> tuple[SDConfig, ...] | None:
    """Every speculating draft shape ``policy`` may choose (empty: it never speculates); None when
    the policy's type is not known here."""
    return None


def _enabled(configs: object) -> tuple[SDConfig, ...]:
    return tuple(sorted({c for c in configs if isinstance(c, SDConfig) and c.enabled}, key=lambda c: c.name))


@policy_shapes.register
def _(policy: NoSD) -> tuple[SDConfig, ...]:
    return ()


@policy_shapes.register
def _(policy: Static) -> tuple[SDConfig, ...]:
    return _enabled([policy.config])


@policy_shapes.register
def _(policy: ArmBandit) -> tuple[SDConfig, ...]:
    return _enabled(policy.arms)


@policy_shapes.register
def _(policy: GreedyOracle) -> tuple[SDConfig, ...]:
    return _enabled(policy.candidates)


@policy_shapes.register
def _(policy: CostAware) -> tuple[SDConfig, ...]:
    return _enabled(policy.candidates)


@policy_shapes.register
def _(policy: VllmTable) -> tuple[SDConfig, ...]:
    return _enabled([cfg for _, cfg in policy.table] + [policy.above])


@policy_shapes.register
def _(policy: SglangEma) -> tuple[SDConfig, ...]:
    return _enabled(SDConfig.chain(d) for d in policy.depths if d > 0)


@policy_shapes.register
def _(policy: Elastic) -> tuple[SDConfig, ...] | None:
    return policy_shapes(policy.inner)


def tree_limits(shapes: tuple[SDConfig, ...]) -> tuple[int, int]:
    """(largest verify budget, largest drafter scratch (depth - 1) x top-k) over ``shapes``."""
    if not shapes:
        return 0, 0
    return max(s.verify_tokens for s in shapes), max((s.depth - 1) * s.topk for s in shapes)
