"""Build SD policies from short text specs, the names scenarios, sweeps and the CLI use.

Grammar: ``[elastic[:THRESHOLD[:CONSECUTIVE]]+]BASE[:ARG...]``.

=========================== ===========================================================
spec                        policy
=========================== ===========================================================
``no-sd``                   :class:`~tltcore.policy.base.NoSD` (the veRL baseline)
``static[:8_4_32]``         :class:`~tltcore.policy.base.Static` (default 8_4_32)
``beg-mab[:k=v...]``        :class:`~tltcore.policy.beg_mab.BucketedEpsilonGreedy`
``eps-greedy[:k=v...]``     :class:`~tltcore.policy.bandits.EpsilonGreedy`
``ucb1[:k=v...]``           :class:`~tltcore.policy.bandits.UCB1`
``vllm-table[:4=5,16=3]``   :class:`~tltcore.policy.vllm_table.VllmTable` (value: chain length or
                            a config name; ``above=`` sets the config for larger batches)
``sglang-ema[:k=v...]``     :class:`~tltcore.policy.sglang_ema.SglangEma`
``greedy-oracle``           :class:`~tltcore.policy.oracle.GreedyOracle` (needs both models;
                            per-iteration greedy, *not* an upper bound: see
                            :mod:`tltsim.upper_bound`)
``cost-aware[:k=v...]``     :class:`~tltcore.policy.cost_aware.CostAware` (ours; needs the cost
                            model, takes the acceptance model as its prior)
``elastic[:32[:10]]+BASE``  :class:`~tltcore.policy.elastic.Elastic` around ``BASE``
=========================== ===========================================================

Options (``k=v``, separated by ``:``): ``beg-mab`` takes ``eps``, ``window``, ``arms`` (config names
joined by ``,``) and ``thresholds`` (ints joined by ``,``); ``eps-greedy`` takes ``eps``, ``window``,
``arms``; ``ucb1`` takes ``c``, ``window``, ``arms``; ``sglang-ema`` takes ``depths``, ``ranges``,
``smoothing``, ``prior``, ``hysteresis`` (it prices depths with ``cost_model`` when one is given, as
the greedy oracle does); ``greedy-oracle`` takes ``arms``. ``cost-aware`` takes ``arms`` (default
chains 1..8 and TLT's four 8_4_* trees), ``switch`` (the engine's switch mode it prices:
``reprefill``, ``catch_up`` or ``in_step``; default the engine's mode passed to :func:`make_policy`,
else ``reprefill``, the engines' default), ``lengths``
(``predicted`` (default: as many more tokens as a request's context holds, at least the earlier
steps' mean length; switches then earned by ski rental, see :mod:`~tltcore.policy.cost_aware`) or
``known``: the simulator's true remaining lengths, clairvoyant), ``recheck`` (iterations between
re-evaluations at an unchanged batch, default 32), ``phases`` (of the predicted drain, default 8),
``prior`` (per-position acceptance without an acceptance model, default 0.7), ``prior_weight``
(request-iterations the prior weighs, default 256) and ``memory`` (share of the learnt acceptance
a new RL step keeps, default 0.5). E.g. ``elastic:16:5+beg-mab:eps=0.05:window=100``,
``cost-aware:lengths=known:switch=catch_up``.

Bounds, so that a typo fails at once instead of running for hours or doing nothing (each refused
naming the spec and the option; numbers must be finite; an option is given once): a shape
``depth_topk_verify`` has depth 1-64, topk 1-64, verify 1-1,024 (``off`` is no SD, allowed only
where a policy also drafts: a bandit's arm, a ``vllm-table`` row; a spec that can never draft, such
as ``static:off`` or ``sglang-ema:depths=0``, is refused: say ``no-sd``); ``arms`` at most 64 shapes;
``eps`` 0-1; ``window`` 1-100,000 rewards; ``c`` 0-10; ``thresholds`` at most 64 batch sizes 0-1,000,000;
``vllm-table`` at most 4,096 rows of batch sizes 1-1,000,000; ``sglang-ema``'s ``depths`` distinct in
0-64 with one >= 1, ``ranges`` at most 64 batch sizes 1-1,000,000, ``smoothing`` (0, 1], ``prior``
0-0.999, ``hysteresis`` 0-1; ``cost-aware``'s ``recheck`` 1-1,048,576 iterations, ``phases`` 1-64
(each prices the drain once more per decision), ``prior`` [0, 1), ``prior_weight`` (0, 1,048,576]
request-iterations, ``memory`` 0-1; ``elastic``'s threshold 1-1,000,000 and consecutive
1-1,048,576. The constants live beside each policy (``MAX_*``).

Every problem with a spec raises :class:`~tltcore.errors.InputError` naming the spec and the valid
names. The text is the shorthand of a typed spec (:mod:`tltcore.policy.spec`), parsed once at the
edge; the returned policy's ``name`` is the spec printed back in this grammar (options in a fixed
order, only those given), which is the text itself for a spec written that way.
"""

from __future__ import annotations

from tltcore.errors import InputError
from tltcore.policy.base import SDConfig, SDPolicy
from tltcore.policy.oracle import OracleAcceptance, OracleCost
from tltcore.policy.spec import (
    POLICY_NAMES,
    PRICED_POLICIES,
    WRAPPER_NAMES,
    AnySpec,
    ElasticSpec,
    Models,
    PolicyBase,
    as_spec,
    build,
    parse_policy,
)

__all__ = ["POLICY_NAMES", "PRICED_POLICIES", "WRAPPER_NAMES", "check_spec", "elastic_split", "make_policy",
           "needs_cost_model", "parse_policy", "policy_spec", "spec_shapes"]


def make_policy(spec: str | PolicyBase, *, seed: int = 0, accept_model: OracleAcceptance | None = None,
                cost_model: OracleCost | None = None, switch: str | None = None,
                response_cap: int | None = None) -> SDPolicy:
    """The policy described by ``spec`` (text in the grammar above, or a typed spec), seeded with ``seed``.

    ``accept_model`` and ``cost_model`` are needed by ``greedy-oracle``, ``cost_model`` by
    ``cost-aware`` (``accept_model`` is its prior when given); ``sglang-ema`` prices its depths with
    ``cost_model`` when given (else with a proxy). ``switch`` is the engine's switch mode
    (:data:`~tltcore.engine_limits.SWITCH_MODES`): ``cost-aware`` prices that switch unless its spec
    names another (a policy pricing a re-prefill the engine never does would switch too rarely).
    ``response_cap`` is the engine's response cap (its max_new_tokens; None: unknown), which
    ``cost-aware`` uses to price the longest step the engine allows. The result's ``name`` is the
    spec's canonical text.
    """
    try:
        return build(as_spec(spec), Models(seed=seed, accept_model=accept_model, cost_model=cost_model,
                                           switch=switch, response_cap=response_cap))
    except InputError as exc:
        raise InputError(exc.message, field="policy") from None


def policy_spec(spec: str) -> AnySpec:
    """The typed spec of the text ``spec``; its errors name the field ``policy`` (a flag's or a
    file's, which the caller locates)."""
    try:
        return parse_policy(spec)
    except InputError as exc:
        raise InputError(exc.message, field="policy") from None


def check_spec(spec: str) -> None:
    """Raise :class:`InputError` unless ``spec`` is a valid policy spec (no models needed)."""
    policy_spec(spec)


def elastic_split(spec: str | PolicyBase) -> tuple[int | None, str]:
    """``(threshold, inner spec)`` of an elastic spec (``elastic:8+beg-mab`` -> ``(8, "beg-mab")``),
    ``(None, spec)`` for any other. Lets a sweep over policy specs be plotted against the threshold
    as a number rather than as spec strings."""
    typed = as_spec(spec)
    if not isinstance(typed, ElasticSpec):
        return None, typed.name
    return typed.effective_threshold, typed.inner.name


def needs_cost_model(spec: str | PolicyBase) -> bool:
    """True when the policy ``spec`` builds prices iterations with a cost model of the engine it runs on
    (``cost-aware``, ``greedy-oracle``, also inside ``elastic+``): a real engine must be profiled (or
    given a table) before such a policy can run on it."""
    return as_spec(spec).priced


def spec_shapes(spec: str | PolicyBase) -> tuple[SDConfig, ...] | None:
    """Every speculating shape the policy ``spec`` may choose (:func:`~tltcore.policy.shapes.policy_shapes`),
    known from the spec alone: an engine sizes its buffers, a profiler its grid, before any model is
    at hand."""
    return as_spec(spec).shapes
