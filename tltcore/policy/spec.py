"""Typed SD policy specs: one pydantic model per policy kind, and the short text grammar as their shorthand.

A policy a scenario, a sweep or the CLI names is a :data:`PolicySpec`: a discriminated union on
``kind`` (:class:`StaticSpec`, :class:`BegMabSpec`, ..., :class:`ElasticSpec` wrapping any of the
others as ``inner``). Every option is a typed field, so ``--set policies.1.threshold=8``, a sweep axis
over ``policies.1.inner.eps`` and ``tlt sim schema`` reach it like any other scenario field. A field
left ``None`` is the policy's own default (the constant beside the policy, e.g.
:data:`~tltcore.policy.elastic.DEFAULT_THRESHOLD`) and is not written back.

The text grammar (``elastic:16:5+beg-mab:eps=0.05``, see :mod:`tltcore.policy.registry`) stays the
shorthand for a command line or a TOML string: :func:`parse_policy` reads it once, at the edge, into
a spec; :attr:`PolicyBase.name` prints a spec back in that grammar (options in field order, only the
fields given), which is the name results are labelled with. A spec written in that canonical form
prints back to the same string, byte for byte.

Bounds live with each policy's constructor (the ``MAX_*`` constants beside each policy): a spec is
checked by constructing its policy once when the spec is validated, on stand-in models for the two
kinds that need the real ones, so the checks and their messages have one home. What a reader needs
(the threshold, the inner spec, whether it is priced by a cost model, its shapes) is a field or a
property of the validated spec; only :func:`build` makes the live policy a run uses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from tltcore.config import ConfigModel, Float, Int, input_error
from tltcore.errors import InputError
from tltcore.policy.bandits import UCB1, EpsilonGreedy
from tltcore.policy.base import MAX_POLICY_BATCH, MAX_POLICY_ITERATIONS, NO_SD, NoSD, SDConfig, SDPolicy, Static
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
PRICED_POLICIES: tuple[str, ...] = ("greedy-oracle", "cost-aware")  # decide by the engine's cost model


class SpecError(InputError):
    """A problem with one spec; ``bare`` is the problem without the spec it is in, so the error can
    quote the spec as the user wrote it."""

    def __init__(self, bare: str, spec: str) -> None:
        super().__init__(f"bad SD policy spec '{spec}': {bare}; valid: {valid_names()}")
        self.bare = bare


def valid_names() -> str:
    return ", ".join(POLICY_NAMES) + "; wrapper: elastic[:threshold[:consecutive]]+<policy>"


def _shape(text: str) -> str:
    SDConfig.parse(text)  # raises InputError naming the shape
    return text.strip()


def _draft(text: str) -> str:
    """A ``vllm-table`` row's draft: a chain length (``5``) or a shape name (``8_4_16``, ``off``)."""
    return text.strip() if text.strip().isdigit() else _shape(text)


def _draft_config(text: str) -> SDConfig:
    return SDConfig.chain(int(text)) if text.isdigit() else SDConfig.parse(text)


#: A draft shape as written (``8_4_32``, ``off``), checked by :meth:`SDConfig.parse`.
Shape = Annotated[str, AfterValidator(_shape)]
#: A ``vllm-table`` draft: a chain length or a shape name.
Draft = Annotated[str, AfterValidator(_draft)]
Shapes = tuple[Shape, ...]
Ints = tuple[Int, ...]


def _number(value: float) -> str:
    """A float option as the grammar writes it: ``1`` for 1.0, else Python's shortest repr (``0.05``)."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _text(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(_text(v) for v in value)
    if isinstance(value, float):
        return _number(value)
    return str(value)


class PolicyBase(ConfigModel):
    """What every spec kind shares: frozen, unknown keys refused (a config section: constructing one
    directly raises one InputError), printed back in the text grammar.

    ``OPTIONS`` are the fields the grammar writes as ``field=value`` (in this order); ``None``
    means the policy's own default and is never written."""

    OPTIONS: ClassVar[tuple[str, ...]] = ()
    _shapes: tuple[SDConfig, ...] | None = PrivateAttr(default=None)

    kind: str

    @property
    def name(self) -> str:
        """The spec in the text grammar: what results are labelled with."""
        values = dict(self)
        opts = [f"{field}={_text(values[field])}" for field in self.OPTIONS if values[field] is not None]
        return ":".join([self.kind, *opts])

    @property
    def base(self) -> BaseSpec:
        """The policy that decides (the spec itself, or an elastic wrapper's inner spec)."""
        return self  # type: ignore[return-value]

    @property
    def priced(self) -> bool:
        """True when the policy prices iterations with the cost model of the engine it runs on
        (``cost-aware``, ``greedy-oracle``, also inside ``elastic``): a real engine must be profiled
        (or given a table) before it can run one."""
        return self.base.kind in PRICED_POLICIES

    @property
    def shapes(self) -> tuple[SDConfig, ...] | None:
        """Every speculating shape the policy may choose (:func:`~tltcore.policy.shapes.policy_shapes`),
        found when the spec was checked: an engine sizes its buffers, a profiler its grid, from it."""
        return self._shapes

    def __str__(self) -> str:
        return self.name

    def build(self, models: Models) -> SDPolicy:  # pragma: no cover - each kind overrides
        raise NotImplementedError

    @model_validator(mode="after")
    def _check(self) -> PolicyBase:
        """Construct the policy once on stand-in models: its constructor holds the bounds."""
        from tltcore.policy.shapes import policy_shapes  # shapes imports every policy module

        try:
            policy = self.build(_STAND_IN)
        except InputError as exc:
            raise SpecError(exc.message, self.name) from None
        self._shapes = policy_shapes(policy)
        if self.kind != "no-sd" and not isinstance(self, ElasticSpec) and self._shapes == ():
            raise SpecError(f"'{self.name}' never drafts: no SD under an SD policy's name; say no-sd", self.name)
        return self


@dataclass(frozen=True)
class Models:
    """What :func:`build` needs beside a spec: the seed, the true models (``greedy-oracle`` needs
    both, ``cost-aware`` the cost model and takes the acceptance model as its prior, ``sglang-ema``
    prices depths with the cost model when given), the engine's switch mode (``cost-aware`` prices
    that switch unless its spec names another) and response cap (its longest step)."""

    seed: int = 0
    accept_model: OracleAcceptance | None = None
    cost_model: OracleCost | None = None
    switch: str | None = None
    response_cap: int | None = None


class NoSDSpec(PolicyBase):
    """``no-sd``: never speculate (the veRL baseline)."""

    kind: Literal["no-sd"] = "no-sd"

    def build(self, models: Models) -> SDPolicy:
        return NoSD()


class StaticSpec(PolicyBase):
    """``static[:SHAPE]``: always the same draft shape (default 8_4_32)."""

    kind: Literal["static"] = "static"
    config: Shape | None = None

    @property
    def name(self) -> str:
        return f"static:{self.config}" if self.config is not None else "static"

    def build(self, models: Models) -> SDPolicy:
        return Static(SDConfig.parse(self.config)) if self.config is not None else Static()


def _arms(arms: Shapes | None) -> dict[str, Any]:
    return {} if arms is None else {"arms": tuple(SDConfig.parse(a) for a in arms)}


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class BegMabSpec(PolicyBase):
    """``beg-mab``: TLT's bucketed epsilon-greedy bandit over draft shapes."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("eps", "window", "arms", "thresholds")
    kind: Literal["beg-mab"] = "beg-mab"
    eps: Float | None = None
    window: Int | None = None
    arms: Shapes | None = None
    thresholds: Ints | None = None

    def build(self, models: Models) -> SDPolicy:
        return BucketedEpsilonGreedy(seed=models.seed, **_arms(self.arms),
                                     **_given(eps=self.eps, window=self.window, thresholds=self.thresholds))


class EpsGreedySpec(PolicyBase):
    """``eps-greedy``: one epsilon-greedy bandit over draft shapes."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("eps", "window", "arms")
    kind: Literal["eps-greedy"] = "eps-greedy"
    eps: Float | None = None
    window: Int | None = None
    arms: Shapes | None = None

    def build(self, models: Models) -> SDPolicy:
        return EpsilonGreedy(seed=models.seed, **_arms(self.arms), **_given(eps=self.eps, window=self.window))


class UCB1Spec(PolicyBase):
    """``ucb1``: a UCB1 bandit over draft shapes."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("c", "window", "arms")
    kind: Literal["ucb1"] = "ucb1"
    c: Float | None = None
    window: Int | None = None
    arms: Shapes | None = None

    def build(self, models: Models) -> SDPolicy:
        return UCB1(seed=models.seed, **_arms(self.arms), **_given(c=self.c, window=self.window))


class VllmTableSpec(PolicyBase):
    """``vllm-table[:4=5,16=3,above=off]``: a draft per batch-size row (a chain length or a shape),
    ``above`` for larger batches."""

    kind: Literal["vllm-table"] = "vllm-table"
    rows: tuple[tuple[Int, Draft], ...] | None = None
    above: Draft | None = None

    @property
    def name(self) -> str:
        items = [f"{bs}={draft}" for bs, draft in self.rows or ()]
        if self.above is not None:
            items.append(f"above={self.above}")
        return f"vllm-table:{','.join(items)}" if self.rows is not None or self.above is not None else "vllm-table"

    def build(self, models: Models) -> SDPolicy:
        if self.rows is None and self.above is None:
            return VllmTable()
        rows = [(bs, _draft_config(draft)) for bs, draft in self.rows or ()]
        return VllmTable(rows, above=_draft_config(self.above) if self.above is not None else NO_SD)


class SglangEmaSpec(PolicyBase):
    """``sglang-ema``: SGLang's EMA of acceptance choosing a chain depth per batch-size range."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("depths", "ranges", "smoothing", "prior", "hysteresis")
    kind: Literal["sglang-ema"] = "sglang-ema"
    depths: Ints | None = None
    ranges: Ints | None = None
    smoothing: Float | None = None
    prior: Float | None = None
    hysteresis: Float | None = None

    def build(self, models: Models) -> SDPolicy:
        return SglangEma(cost_model=models.cost_model,  # priced as the engine is timed, not by a proxy
                         **_given(depths=self.depths, ranges=self.ranges, smoothing=self.smoothing,
                                  prior_accept_rate=self.prior, hysteresis=self.hysteresis))


class GreedyOracleSpec(PolicyBase):
    """``greedy-oracle``: per-iteration greedy on the true models (not an upper bound)."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("arms",)
    kind: Literal["greedy-oracle"] = "greedy-oracle"
    arms: Shapes | None = None

    def build(self, models: Models) -> SDPolicy:
        if models.accept_model is None or models.cost_model is None:
            raise InputError("greedy-oracle needs accept_model and cost_model (it knows the true models)")
        arms = tuple(SDConfig.parse(a) for a in self.arms) if self.arms is not None else DEFAULT_ARMS
        return GreedyOracle(models.accept_model, models.cost_model, candidates=arms)


class CostAwareSpec(PolicyBase):
    """``cost-aware``: ours; prices iterations and the switch with the engine's cost model."""

    OPTIONS: ClassVar[tuple[str, ...]] = ("arms", "switch", "lengths", "recheck", "phases", "prior", "prior_weight",
                                          "memory")
    kind: Literal["cost-aware"] = "cost-aware"
    arms: Shapes | None = None
    switch: str | None = None
    lengths: str | None = None
    recheck: Int | None = None
    phases: Int | None = None
    prior: Float | None = None
    prior_weight: Float | None = None
    memory: Float | None = None

    def build(self, models: Models) -> SDPolicy:
        if models.cost_model is None:
            raise InputError("cost-aware needs cost_model (it prices iterations and the switch with it)")
        opts = _given(switch=self.switch if self.switch is not None else models.switch, lengths=self.lengths,
                      recheck=self.recheck, phases=self.phases, prior=self.prior, prior_weight=self.prior_weight,
                      memory=self.memory)
        if self.arms is not None:
            opts["candidates"] = tuple(SDConfig.parse(a) for a in self.arms)
        return CostAware(models.cost_model, models.accept_model, response_cap=models.response_cap, **opts)


BaseSpec = Annotated[
    NoSDSpec | StaticSpec | BegMabSpec | EpsGreedySpec | UCB1Spec | VllmTableSpec | SglangEmaSpec
    | GreedyOracleSpec | CostAwareSpec,
    Field(discriminator="kind"),
]


def _inner(value: Any) -> Any:
    """An elastic wrapper's inner policy given as shorthand text (``inner = "beg-mab:eps=0.05"``)."""
    return parse_policy(value) if isinstance(value, str) else value


class ElasticSpec(PolicyBase):
    """``elastic[:THRESHOLD[:CONSECUTIVE]]+INNER``: speculate with ``inner`` only while the batch is
    at most ``threshold`` for ``consecutive`` checks (defaults 32 and 10)."""

    kind: Literal["elastic"] = "elastic"
    threshold: Int | None = Field(None, description=f"largest batch that speculates, 1-{MAX_POLICY_BATCH:,} "
                                  f"(None: {DEFAULT_THRESHOLD})")
    consecutive: Int | None = Field(None, description=f"checks at or below the threshold before SD switches on, "
                                    f"1-{MAX_POLICY_ITERATIONS:,} (None: {DEFAULT_CONSECUTIVE})")
    inner: Annotated[BaseSpec, BeforeValidator(_inner)]

    @property
    def name(self) -> str:
        head = ["elastic"]
        if self.threshold is not None or self.consecutive is not None:
            head.append(str(self.threshold if self.threshold is not None else DEFAULT_THRESHOLD))
        if self.consecutive is not None:
            head.append(str(self.consecutive))
        return f"{':'.join(head)}+{self.inner.name}"

    @property
    def base(self) -> BaseSpec:
        return self.inner

    @property
    def effective_threshold(self) -> int:
        return self.threshold if self.threshold is not None else DEFAULT_THRESHOLD

    @property
    def effective_consecutive(self) -> int:
        return self.consecutive if self.consecutive is not None else DEFAULT_CONSECUTIVE

    def build(self, models: Models) -> SDPolicy:
        return Elastic(self.inner.build(models), self.effective_threshold, self.effective_consecutive)


SPEC_KINDS: tuple[type[PolicyBase], ...] = (NoSDSpec, StaticSpec, BegMabSpec, EpsGreedySpec, UCB1Spec, VllmTableSpec,
                                            SglangEmaSpec, GreedyOracleSpec, CostAwareSpec, ElasticSpec)
KIND_CLASSES: dict[str, type[PolicyBase]] = {cls.model_fields["kind"].default: cls for cls in SPEC_KINDS}


def _from_shorthand(value: Any) -> Any:
    return parse_policy(value) if isinstance(value, str) else value


AnySpec = NoSDSpec | StaticSpec | BegMabSpec | EpsGreedySpec | UCB1Spec | VllmTableSpec | SglangEmaSpec \
    | GreedyOracleSpec | CostAwareSpec | ElasticSpec
#: A policy spec: a table with ``kind`` (TOML, JSON) or the shorthand text (parsed once, here); the
#: JSON schema says both, so an editor checking a scenario file accepts ``"elastic:16+beg-mab"``.
PolicySpec = Annotated[
    AnySpec,
    Field(discriminator="kind"),
    BeforeValidator(_from_shorthand, json_schema_input_type=str | Annotated[AnySpec, Field(discriminator="kind")]),
]


# ---- the shorthand grammar ---------------------------------------------------------------------------
class _GrammarError(Exception):
    """A problem inside one spec component; :func:`parse_policy` words it as an InputError."""


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _GrammarError(f"{what} must be an integer, got '{text}'") from None


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _GrammarError(f"{what} must be a number, got '{text}'") from None
    if not math.isfinite(value):
        raise _GrammarError(f"{what} must be a finite number, got '{text}'")
    return value


def _config_text(text: str) -> str:
    try:
        return _shape(text)
    except InputError as exc:
        raise _GrammarError(exc.message) from None


def _configs(text: str) -> tuple[str, ...]:
    return tuple(_config_text(t) for t in text.split(","))


def _ints(what: str) -> Callable[[str], tuple[int, ...]]:
    return lambda text: tuple(_int(t, what) for t in text.split(","))


def _of(parse: Callable[[str, str], Any], what: str) -> Callable[[str], Any]:
    return lambda text: parse(text, what)


#: Each kind's ``key=value`` options: the value parser, and the spec field it sets.
_OPTION_PARSERS: dict[str, dict[str, tuple[Callable[[str], Any], str]]] = {
    "beg-mab": {"eps": (_of(_float, "eps"), "eps"), "window": (_of(_int, "window"), "window"),
                "arms": (_configs, "arms"), "thresholds": (_ints("threshold"), "thresholds")},
    "eps-greedy": {"eps": (_of(_float, "eps"), "eps"), "window": (_of(_int, "window"), "window"),
                   "arms": (_configs, "arms")},
    "ucb1": {"c": (_of(_float, "c"), "c"), "window": (_of(_int, "window"), "window"), "arms": (_configs, "arms")},
    "sglang-ema": {"depths": (_ints("depth"), "depths"), "ranges": (_ints("range"), "ranges"),
                   "smoothing": (_of(_float, "smoothing"), "smoothing"), "prior": (_of(_float, "prior"), "prior"),
                   "hysteresis": (_of(_float, "hysteresis"), "hysteresis")},
    "greedy-oracle": {"arms": (_configs, "arms")},
    "cost-aware": {"arms": (_configs, "arms"), "switch": (str, "switch"), "lengths": (str, "lengths"),
                   "recheck": (_of(_int, "recheck"), "recheck"), "phases": (_of(_int, "phases"), "phases"),
                   "prior": (_of(_float, "prior"), "prior"),
                   "prior_weight": (_of(_float, "prior_weight"), "prior_weight"),
                   "memory": (_of(_float, "memory"), "memory")},
}


def _options(base: str, args: list[str]) -> dict[str, Any]:
    """``k=v`` arguments as spec fields; each key given once."""
    allowed = _OPTION_PARSERS[base]
    out: dict[str, Any] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not value:
            raise _GrammarError(f"'{base}' options are key=value, got '{arg}'")
        if key not in allowed:
            raise _GrammarError(f"'{base}' has no option '{key}' (options: {', '.join(allowed)})")
        parse, field = allowed[key]
        if field in out:  # which of two values would win is nobody's guess: refused, as --set refuses it
            raise _GrammarError(f"'{base}' option '{key}' is given twice")
        out[field] = parse(value)
    return out


def _vllm_table(args: list[str]) -> dict[str, Any]:
    """``vllm-table:4=5,16=3,32=1,above=off``: ``max_batch=chain length or config name``."""
    if not args:
        return {}
    if len(args) > 1:
        raise _GrammarError("vllm-table takes one argument, e.g. vllm-table:4=5,16=3,32=1")
    rows: list[tuple[int, str]] = []
    out: dict[str, Any] = {}
    for item in args[0].split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise _GrammarError(f"vllm-table rows are max_batch=draft, got '{item}'")
        draft = value.strip() if value.isdigit() else _config_text(value)
        if key == "above":
            if "above" in out:
                raise _GrammarError("vllm-table row 'above' is given twice")
            out["above"] = draft
        else:
            rows.append((_int(key, "vllm-table batch size"), draft))
    out["rows"] = tuple(rows)
    return out


def _base_fields(base: str, args: list[str]) -> dict[str, Any]:
    if base == "no-sd":
        if args:
            raise _GrammarError("no-sd takes no arguments")
        return {"kind": base}
    if base == "static":
        if len(args) > 1:
            raise _GrammarError("static takes one config, e.g. static:8_4_32")
        return {"kind": base, **({"config": _config_text(args[0])} if args else {})}
    if base == "vllm-table":
        return {"kind": base, **_vllm_table(args)}
    if base in _OPTION_PARSERS:
        return {"kind": base, **_options(base, args)}
    raise _GrammarError(f"unknown policy '{base}'")


def _grammar(text: str) -> dict[str, Any]:
    """The spec's fields from the text grammar, unchecked beyond the grammar itself."""
    parts = [p.strip() for p in text.split("+")]
    if any(not p for p in parts):
        raise _GrammarError("empty component")
    *wrappers, last = parts
    base, *args = last.split(":")
    if base in WRAPPER_NAMES:
        raise _GrammarError(f"'{base}' wraps another policy, e.g. {base}+beg-mab")
    fields = _base_fields(base, args)
    for wrapper in reversed(wrappers):
        name, *wargs = wrapper.split(":")
        if name not in WRAPPER_NAMES:
            raise _GrammarError(f"'{name}' cannot wrap another policy (only {', '.join(WRAPPER_NAMES)} can)")
        if fields["kind"] == "elastic":
            raise _GrammarError("elastic may appear once")
        if len(wargs) > 2:
            raise _GrammarError("elastic takes at most threshold and consecutive, e.g. elastic:32:10")
        elastic: dict[str, Any] = {"kind": "elastic", "inner": fields}
        if wargs:
            elastic["threshold"] = _int(wargs[0], "elastic threshold")
        if len(wargs) > 1:
            elastic["consecutive"] = _int(wargs[1], "elastic consecutive")
        fields = elastic
    return fields


@cache
def _adapter() -> TypeAdapter[AnySpec]:
    """The union's validator, built once per process on first use."""
    return TypeAdapter(Annotated[AnySpec, Field(discriminator="kind")])


def parse_policy(spec: str) -> AnySpec:
    """The typed spec the text ``spec`` describes (see :mod:`tltcore.policy.registry` for the
    grammar); one :class:`~tltcore.errors.InputError` quoting ``spec`` for any problem."""
    text = spec.strip() if isinstance(spec, str) else ""
    if not text:
        raise InputError(f"empty SD policy spec {spec!r}; valid: {valid_names()}", field="policy")
    try:
        fields = _grammar(text)
        return _adapter().validate_python(fields)
    except _GrammarError as exc:
        raise SpecError(str(exc), text) from None
    except ValidationError as exc:
        error = (exc.errors(include_url=False)[0].get("ctx") or {}).get("error")
        bare = error.bare if isinstance(error, SpecError) else (
            error.message if isinstance(error, InputError) else str(exc.errors(include_url=False)[0]["msg"]))
        raise SpecError(bare, text) from None


def as_spec(spec: str | PolicyBase | Mapping[str, Any]) -> AnySpec:
    """``spec`` as a typed spec: text is parsed (the edge), a table validated, a spec returned as it is."""
    if isinstance(spec, PolicyBase):
        return spec  # type: ignore[return-value]
    if isinstance(spec, Mapping):
        return _validated(dict(spec))
    return parse_policy(spec)


def _validated(table: dict[str, Any]) -> AnySpec:
    """A spec from its table; a problem is one InputError naming the field."""
    try:
        return _adapter().validate_python(table)
    except ValidationError as exc:
        cls = KIND_CLASSES.get(str(table.get("kind")), PolicyBase)
        raise input_error(exc, cls, path=None) from None


def with_base(spec: AnySpec, **fields: Any) -> AnySpec:
    """``spec`` with fields of the policy that decides (under ``elastic``, its inner spec) set,
    validated again: ``with_base(parse_policy("elastic+cost-aware"), switch="catch_up")``."""
    new_base = _validated({**spec.base.model_dump(exclude_none=True), **fields})
    if isinstance(spec, ElasticSpec):
        return _validated({**spec.model_dump(exclude_none=True), "inner": new_base})
    return new_base


def build(spec: PolicyBase, models: Models | None = None) -> SDPolicy:
    """The live policy ``spec`` describes, on ``models`` (seed, true models, engine switch and
    response cap); its ``name`` is the spec's :attr:`~PolicyBase.name`."""
    try:
        policy = spec.build(models or Models())
    except InputError as exc:
        raise SpecError(exc.message, spec.name) from None
    policy.name = spec.name
    return policy


class _StandIn:
    """Both models where a spec is only checked (``greedy-oracle`` and ``cost-aware`` need them to be
    constructed): every time is 1 and every accept length 1. Never run a policy built on it."""

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


_STAND_IN = Models(accept_model=_StandIn(), cost_model=_StandIn())

__all__ = ["KIND_CLASSES", "POLICY_NAMES", "PRICED_POLICIES", "SPEC_KINDS", "WRAPPER_NAMES", "AnySpec", "BaseSpec",
           "BegMabSpec", "CostAwareSpec", "ElasticSpec", "EpsGreedySpec", "GreedyOracleSpec", "Models", "NoSDSpec",
           "OracleAcceptance", "OracleCost", "PolicyBase", "PolicySpec", "SglangEmaSpec", "SpecError", "StaticSpec",
           "UCB1Spec", "VllmTableSpec", "as_spec", "build", "parse_policy", "valid_names", "with_base"]
