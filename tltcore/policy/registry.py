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
names. The returned policy's ``name`` is the spec string, so results are labelled by what the user
wrote.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tltcore.errors import InputError
from tltcore.policy.bandits import UCB1, EpsilonGreedy
from tltcore.policy.base import NO_SD, NoSD, SDConfig, SDPolicy, Static
from tltcore.policy.beg_mab import DEFAULT_ARMS, BucketedEpsilonGreedy
from tltcore.policy.cost_aware import CostAware
from tltcore.policy.elastic import DEFAULT_CONSECUTIVE, DEFAULT_THRESHOLD, Elastic
from tltcore.policy.oracle import GreedyOracle, OracleAcceptance, OracleCost
from tltcore.policy.sglang_ema import SglangEma
from tltcore.policy.vllm_table import VllmTable

POLICY_NAMES: tuple[str, ...] = (
    "no-sd", "static", "beg-mab", "eps-greedy", "ucb1", "vllm-table", "sglang-ema", "greedy-oracle", "cost-aware",
)
WRAPPER_NAMES: tuple[str, ...] = ("elastic",)


class _SpecError(Exception):
    """A problem inside one spec component; ``make_policy`` turns it into an InputError."""


def _valid_names() -> str:
    return ", ".join(POLICY_NAMES) + "; wrapper: elastic[:threshold[:consecutive]]+<policy>"


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _SpecError(f"{what} must be an integer, got '{text}'") from None


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _SpecError(f"{what} must be a number, got '{text}'") from None
    if not math.isfinite(value):
        raise _SpecError(f"{what} must be a finite number, got '{text}'")
    return value


def _config(text: str) -> SDConfig:
    try:
        return SDConfig.parse(text)
    except ValueError as exc:
        raise _SpecError(str(exc)) from None


def _configs(text: str) -> tuple[SDConfig, ...]:
    return tuple(_config(t) for t in text.split(","))


def _ints(text: str, what: str) -> tuple[int, ...]:
    return tuple(_int(t, what) for t in text.split(","))


def _options(args: list[str], allowed: dict[str, Callable[[str], Any]], base: str) -> dict[str, Any]:
    """Parse ``k=v`` arguments; ``allowed`` maps each accepted key to its value parser."""
    out: dict[str, Any] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not value:
            raise _SpecError(f"'{base}' options are key=value, got '{arg}'")
        if key not in allowed:
            raise _SpecError(f"'{base}' has no option '{key}' (options: {', '.join(allowed)})")
        if key in out:  # which of two values would win is nobody's guess: refused, as --set refuses it
            raise _SpecError(f"'{base}' option '{key}' is given twice")
        out[key] = allowed[key](value)
    return out


_ARMS = {"arms": _configs}


def _bandit_options(**extra: Callable[[str], Any]) -> dict[str, Callable[[str], Any]]:
    return {"eps": lambda v: _float(v, "eps"), "window": lambda v: _int(v, "window"), **_ARMS, **extra}


def _vllm_table(args: list[str]) -> VllmTable:
    """``vllm-table:4=5,16=3,32=1,above=off``: ``max_batch=chain length or config name``."""
    if not args:
        return VllmTable()
    if len(args) > 1:
        raise _SpecError("vllm-table takes one argument, e.g. vllm-table:4=5,16=3,32=1")
    rows: list[tuple[int, SDConfig]] = []
    above, seen_above = NO_SD, False
    for item in args[0].split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise _SpecError(f"vllm-table rows are max_batch=draft, got '{item}'")
        draft = SDConfig.chain(_int(value, "chain length")) if value.isdigit() else _config(value)
        if key == "above":
            if seen_above:
                raise _SpecError("vllm-table row 'above' is given twice")
            above, seen_above = draft, True
        else:
            rows.append((_int(key, "vllm-table batch size"), draft))
    return VllmTable(rows, above=above)


def _base(base: str, args: list[str], seed: int, accept_model: OracleAcceptance | None,
          cost_model: OracleCost | None, switch: str | None, response_cap: int | None) -> SDPolicy:
    if base == "no-sd":
        if args:
            raise _SpecError("no-sd takes no arguments")
        return NoSD()
    if base == "static":
        if len(args) > 1:
            raise _SpecError("static takes one config, e.g. static:8_4_32")
        return Static(_config(args[0])) if args else Static()  # 'static:off' is refused by _build
    if base == "beg-mab":
        opts = _options(args, _bandit_options(thresholds=lambda v: _ints(v, "threshold")), base)
        return BucketedEpsilonGreedy(seed=seed, **opts)
    if base == "eps-greedy":
        return EpsilonGreedy(seed=seed, **_options(args, _bandit_options(), base))
    if base == "ucb1":
        opts = _options(args, {"c": lambda v: _float(v, "c"), "window": lambda v: _int(v, "window"), **_ARMS},
                        base)
        return UCB1(seed=seed, **opts)
    if base == "vllm-table":
        return _vllm_table(args)
    if base == "sglang-ema":
        opts = _options(args, {
            "depths": lambda v: _ints(v, "depth"), "ranges": lambda v: _ints(v, "range"),
            "smoothing": lambda v: _float(v, "smoothing"), "prior": lambda v: _float(v, "prior"),
            "hysteresis": lambda v: _float(v, "hysteresis"),
        }, base)
        if "prior" in opts:
            opts["prior_accept_rate"] = opts.pop("prior")
        return SglangEma(cost_model=cost_model, **opts)  # priced as the engine is timed, not by a proxy
    if base == "greedy-oracle":
        if accept_model is None or cost_model is None:
            raise _SpecError("greedy-oracle needs accept_model and cost_model (it knows the true models)")
        opts = _options(args, dict(_ARMS), base)
        return GreedyOracle(accept_model, cost_model, candidates=opts.get("arms", DEFAULT_ARMS))
    if base == "cost-aware":
        if cost_model is None:
            raise _SpecError("cost-aware needs cost_model (it prices iterations and the switch with it)")
        opts = _options(args, {
            **_ARMS, "switch": str, "lengths": str, "recheck": lambda v: _int(v, "recheck"),
            "phases": lambda v: _int(v, "phases"), "prior": lambda v: _float(v, "prior"),
            "prior_weight": lambda v: _float(v, "prior_weight"), "memory": lambda v: _float(v, "memory"),
        }, base)
        if "arms" in opts:
            opts["candidates"] = opts.pop("arms")
        if switch is not None:
            opts.setdefault("switch", switch)  # the engine's own mode unless the spec names one
        return CostAware(cost_model, accept_model, response_cap=response_cap, **opts)  # type: ignore[arg-type]
    raise _SpecError(f"unknown policy '{base}'")


def _never_drafts(policy: SDPolicy) -> bool:
    """True when ``policy`` can choose no speculating shape (``static:off``, ``greedy-oracle:arms=off``):
    it would run as no SD while its results carry an SD policy's name."""
    from tltcore.policy.shapes import policy_shapes  # shapes imports every policy module, as this one does

    return policy_shapes(policy) == ()


def _elastic_args(args: list[str]) -> tuple[int, int]:
    if len(args) > 2:
        raise _SpecError("elastic takes at most threshold and consecutive, e.g. elastic:32:10")
    threshold = _int(args[0], "elastic threshold") if args else DEFAULT_THRESHOLD
    consecutive = _int(args[1], "elastic consecutive") if len(args) > 1 else DEFAULT_CONSECUTIVE
    return threshold, consecutive


def _build(spec: str, seed: int, accept_model: OracleAcceptance | None, cost_model: OracleCost | None,
           switch: str | None, response_cap: int | None) -> SDPolicy:
    parts = [p.strip() for p in spec.split("+")]
    if any(not p for p in parts):
        raise _SpecError("empty component")
    *wrappers, last = parts
    base, *args = last.split(":")
    if base in WRAPPER_NAMES:
        raise _SpecError(f"'{base}' wraps another policy, e.g. {base}+beg-mab")
    policy = _base(base, args, seed, accept_model, cost_model, switch, response_cap)
    if base != "no-sd" and _never_drafts(policy):
        raise _SpecError(f"'{last}' never drafts: no SD under an SD policy's name; say no-sd")
    for wrapper in reversed(wrappers):
        name, *wargs = wrapper.split(":")
        if name not in WRAPPER_NAMES:
            raise _SpecError(f"'{name}' cannot wrap another policy (only {', '.join(WRAPPER_NAMES)} can)")
        if isinstance(policy, Elastic):
            raise _SpecError("elastic may appear once")
        policy = Elastic(policy, *_elastic_args(wargs))
    return policy


def make_policy(spec: str, *, seed: int = 0, accept_model: OracleAcceptance | None = None,
                cost_model: OracleCost | None = None, switch: str | None = None,
                response_cap: int | None = None) -> SDPolicy:
    """The policy described by ``spec`` (see the module docstring), seeded with ``seed``.

    ``accept_model`` and ``cost_model`` are needed by ``greedy-oracle``, ``cost_model`` by
    ``cost-aware`` (``accept_model`` is its prior when given); ``sglang-ema`` prices its depths with
    ``cost_model`` when given (else with a proxy). ``switch`` is the engine's switch mode
    (:data:`~tltcore.engine_limits.SWITCH_MODES`): ``cost-aware`` prices that switch unless its spec
    names another (a policy pricing a re-prefill the engine never does would switch too rarely).
    ``response_cap`` is the engine's response cap (its max_new_tokens; None: unknown), which
    ``cost-aware`` uses to price the longest step the engine allows. The result's ``name`` is ``spec``
    (stripped).
    """
    text = spec.strip() if isinstance(spec, str) else ""
    if not text:
        raise InputError(f"empty SD policy spec {spec!r}; valid: {_valid_names()}", field="policy")
    try:
        policy = _build(text, seed, accept_model, cost_model, switch, response_cap)
    except (_SpecError, InputError) as exc:
        raise InputError(f"bad SD policy spec '{text}': {exc}; valid: {_valid_names()}",
                         field="policy") from None
    policy.name = text
    return policy


class _NullModels:
    """Stands in for both models when only a spec's syntax is checked (greedy-oracle and cost-aware
    specs need them)."""

    def expected_accept_length(self, config: SDConfig, drafter: object = None) -> float:
        return 1.0

    def decode_time(self, context_lens: object) -> float:
        return 1.0

    def sd_time(self, context_lens: object, config: SDConfig) -> float:
        return 1.0

    def sd_times(self, context_lens: object, configs: Sequence[SDConfig]) -> list[float]:
        return [1.0 for _ in configs]

    def prefill_time(self, new_tokens: object, cached_tokens: object) -> float:
        return 1.0

    def drafter_prefill_time(self, new_tokens: object, cached_tokens: object) -> float:
        return 1.0


def elastic_split(spec: str) -> tuple[int | None, str]:
    """``(threshold, inner spec)`` of an elastic spec (``elastic:8+beg-mab`` -> ``(8, "beg-mab")``),
    ``(None, spec)`` for any other. Lets a sweep over policy specs be plotted against the threshold
    as a number rather than as spec strings."""
    policy = spec_policy(spec)
    if not isinstance(policy, Elastic):
        return None, spec.strip()
    return policy.threshold, spec.strip().split("+", 1)[1].strip()


PRICED_POLICIES: tuple[str, ...] = ("greedy-oracle", "cost-aware")  # decide by the engine's cost model


def needs_cost_model(spec: str) -> bool:
    """True when the policy ``spec`` builds prices iterations with a cost model of the engine it runs on
    (``cost-aware``, ``greedy-oracle``, also inside ``elastic+``): a real engine must be profiled (or
    given a table) before such a policy can run on it."""
    base = spec.strip().split("+")[-1].split(":")[0].strip()
    return base in PRICED_POLICIES


def spec_shapes(spec: str) -> tuple[SDConfig, ...] | None:
    """Every speculating shape the policy ``spec`` may choose (:func:`~tltcore.policy.shapes.policy_shapes`),
    known from the spec alone: an engine sizes its buffers, a profiler its grid, before any model is
    at hand."""
    from tltcore.policy.shapes import policy_shapes

    return policy_shapes(spec_policy(spec))


def spec_policy(spec: str) -> SDPolicy:
    """The policy ``spec`` builds, on placeholder models: what the spec declares (its type, shapes,
    elastic switch) for code that reads it without the models a run needs. Never run it."""
    return make_policy(spec, accept_model=_NullModels(), cost_model=_NullModels())


def check_spec(spec: str) -> None:
    """Raise :class:`InputError` unless ``spec`` is a valid policy spec (no models needed)."""
    spec_policy(spec)
