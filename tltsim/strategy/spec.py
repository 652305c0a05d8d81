"""``--strategy NAME[:key=value,...]``: the strategy a run uses, parsed into a typed spec.

One line per mistake (an unknown name, an unknown or malformed parameter, a value out of range), as an
:class:`~tltcore.errors.InputError` naming ``--strategy``, so the CLI exits 2 before anything runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tltcore.config import suggest
from tltcore.errors import InputError

#: The largest over-provisioning factor: launching more than 4x the batch is no longer a tail cure
#: but a different batch size (APRIL's experiments launch well under 2x; an input bound, not a figure).
MAX_ETA = 4.0
#: Tail batching's default ratios: RollPacker's released configuration launches 1.25x the prompts
#: (``max_prompts_ratio: 1.25``) and 5 responses for 4 (``max_num_return_sequences: 5``,
#: ``num_return_sequences_in_group: 4``), github.com/Farrrrland/RollPacker
#: ``examples/e2e_performance/rlvr_config_rollpacker_full_7B.yaml``; the paper (arXiv 2509.21009)
#: writes both as one eta.
TAIL_DEFAULT = 1.25


@dataclass(frozen=True)
class Sync:
    """Today's synchronous step: rollout, then training, then weight sync (:mod:`tltsim.strategy.sync`)."""

    @property
    def label(self) -> str:
        return "sync"


@dataclass(frozen=True)
class OneStepOff:
    """verl's one-step-off-policy trainer (:mod:`tltsim.strategy.one_step_off`); ``trainer_gpus``: the
    trainer pool's GPUs (None: as many as the rollout pool, ``cluster.gpus``)."""

    trainer_gpus: int | None = None

    @property
    def label(self) -> str:
        return "one-step-off" + (f":trainer_gpus={self.trainer_gpus}" if self.trainer_gpus is not None else "")


@dataclass(frozen=True)
class Overprovision:
    """Launch ``ceil(N(1+eta))`` prompt groups, train the first N to finish, drop the rest
    (:mod:`tltsim.strategy.overprovision`)."""

    eta: float
    mode: str = "drop"

    @property
    def label(self) -> str:
        return f"overprovision:eta={self.eta:g}" + (",mode=resume" if self.mode == "resume" else "")


@dataclass(frozen=True)
class Async:
    """Fully asynchronous RL with partial rollout and AReaL's staleness bound K
    (:mod:`tltsim.strategy.fully_async`); ``trainer_gpus`` as :class:`OneStepOff`."""

    staleness: int
    trainer_gpus: int | None = None

    @property
    def label(self) -> str:
        return f"async:staleness={self.staleness}" + (f",trainer_gpus={self.trainer_gpus}"
                                                       if self.trainer_gpus is not None else "")


@dataclass(frozen=True)
class TailBatching:
    """RollPacker's tail batching (:mod:`tltsim.strategy.tail_batching`): short rounds launch
    ``ceil(N prompt_ratio)`` prompt groups of ``ceil(n response_ratio)`` responses and keep the first N
    groups' first n; the groups they abort are regenerated together in long rounds."""

    prompt_ratio: float = 1.25
    response_ratio: float = 1.25

    @property
    def label(self) -> str:
        given = [f"{k}={v:g}" for k, v in (("prompt_ratio", self.prompt_ratio), ("response_ratio", self.response_ratio))
                 if v != TAIL_DEFAULT]
        return "tail-batching" + (":" + ",".join(given) if given else "")


StrategySpec = Sync | OneStepOff | Overprovision | Async | TailBatching

#: The largest staleness bound: past it a run is off-policy by design (AReaL's examples use 2 to 8;
#: an input bound, not a figure).
MAX_STALENESS = 64

#: Each strategy's name and the parameters it takes (``key: help``).
STRATEGIES: dict[str, dict[str, str]] = {
    "sync": {},
    "one-step-off": {"trainer_gpus": "GPUs of the trainer pool (default: cluster.gpus)"},
    "overprovision": {"eta": "extra share of prompt groups launched (0 to 4), required",
                      "mode": "drop (default: the unfinished groups are dropped) or resume (they continue next step)"},
    "async": {"staleness": f"AReaL's max_head_offpolicyness K (0 to {MAX_STALENESS}), required",
              "trainer_gpus": "GPUs of the trainer pool (default: cluster.gpus)"},
    "tail-batching": {"prompt_ratio": f"prompt groups a short round launches per group trained (1 to {1 + MAX_ETA:g}; "
                                      f"default {TAIL_DEFAULT:g}, RollPacker's)",
                      "response_ratio": f"responses a short round launches per response kept (1 to {1 + MAX_ETA:g}; "
                                        f"default {TAIL_DEFAULT:g}, RollPacker's)"},
}


def strategy_names() -> str:
    return ", ".join(STRATEGIES)


def parse_strategy(text: str, *, where: str = "--strategy") -> StrategySpec:
    """``NAME`` or ``NAME:key=value[,key=value]`` (module docstring)."""
    name, colon, rest = text.strip().partition(":")
    name = name.strip()
    if name not in STRATEGIES:
        raise InputError(f"unknown strategy '{name}'{suggest(name, list(STRATEGIES))}; one of {strategy_names()}",
                         path=where)
    params: dict[str, str] = {}
    if colon and not rest.strip():
        raise InputError(f"expected key=value after '{name}:'", path=where)
    for item in rest.split(",") if colon else ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise InputError(f"expected key=value in '{text}', got '{item.strip()}'", path=where)
        if key not in STRATEGIES[name]:
            known = ", ".join(STRATEGIES[name]) or "none"
            raise InputError(f"strategy '{name}' has no parameter '{key}' (parameters: {known})", path=where)
        if key in params:
            raise InputError(f"parameter '{key}' given twice in '{text}'", path=where)
        params[key] = value.strip()
    if name == "sync":
        return Sync()
    if name == "one-step-off":
        gpus = params.get("trainer_gpus")
        return OneStepOff(None if gpus is None else _positive_int(gpus, "trainer_gpus", where))
    if name == "async":
        if "staleness" not in params:
            raise InputError("async needs staleness, e.g. async:staleness=2", path=where)
        gpus = params.get("trainer_gpus")
        return Async(_staleness(params["staleness"], where),
                     None if gpus is None else _positive_int(gpus, "trainer_gpus", where))
    if name == "tail-batching":
        return TailBatching(*(_number(params.get(k, str(TAIL_DEFAULT)), k, 1.0, 1 + MAX_ETA, where,
                                      " (launched per kept)") for k in ("prompt_ratio", "response_ratio")))
    mode = params.get("mode", "drop")
    if mode not in ("drop", "resume"):
        raise InputError(f"overprovision mode must be drop or resume, got '{mode}'", path=where)
    if "eta" not in params:
        raise InputError("overprovision needs eta, e.g. overprovision:eta=0.25", path=where)
    return Overprovision(_number(params["eta"], "eta", 0.0, MAX_ETA, where), mode)


def _staleness(value: str, where: str) -> int:
    try:
        k = int(value)
    except ValueError:
        raise InputError(f"staleness must be a whole number of policy versions, got '{value}'", path=where) from None
    if k < 0 or k > MAX_STALENESS:
        raise InputError(f"staleness must be 0 to {MAX_STALENESS}, got {k}", path=where)
    return k


def _positive_int(value: str, key: str, where: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise InputError(f"{key} must be a whole number of GPUs, got '{value}'", path=where) from None
    if n < 1 or n > 10**6:
        raise InputError(f"{key} must be 1 to 1,000,000, got {n}", path=where)
    return n


def _number(value: str, key: str, lo: float, hi: float, where: str, meaning: str = "") -> float:
    """``value`` as a finite number from ``lo`` to ``hi`` (``eta``, the tail-batching ratios), or one
    :class:`InputError` line naming ``key``."""
    try:
        x = float(value)
    except ValueError:
        raise InputError(f"{key} must be a number, got '{value}'", path=where) from None
    if not math.isfinite(x) or x < lo or x > hi:
        raise InputError(f"{key} must be {lo:g} to {hi:g}{meaning}, got {value}", path=where)
    return x
