"""What RL steps cost in the user's units: wall-clock hours, GPU-hours, dollars and energy.

A speedup alone does not answer "how many GPU-hours, days and dollars for N steps" (the second
most-asked question in RL frameworks' issues). This module is the one home of that arithmetic:

- GPU-hours = GPUs x step seconds x N / 3600 (every GPU of the cluster is held for the whole step,
  busy or not: that is what a cloud bills);
- dollars = GPU-hours x the price per GPU-hour;
- energy (kWh) = GPU-hours x board power x utilisation / 1000, where utilisation = busy share + idle
  share x :data:`IDLE_POWER_FRACTION`: busy GPUs are taken to draw their board power (TDP, an upper
  bound on the average) and idle ones a fraction of it (our assumption, printed with the number).

The price table (``tltcore/data/gpu_prices.toml``) holds on-demand list prices per GPU-hour with the
provider, the page and the date read; a GPU it lacks has no price, and the output asks for
``--price GPU=USD_PER_GPU_HOUR`` rather than guess one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from tltcore.errors import InputError

PRICES_FILE = "data/gpu_prices.toml"
#: Share of its board power an idle GPU is taken to draw: OUR ASSUMPTION, not a measurement (idle draw
#: depends on clocks, memory and the driver); printed with every energy figure.
IDLE_POWER_FRACTION = 0.1
#: Bounds that catch a unit slip in --price (cents for dollars, a node's price for a GPU's).
MAX_USD_PER_GPU_HOUR = 1000.0
MAX_USD_PER_KWH = 10.0
#: Most RL steps an answer is priced for (a unit slip, not a run, beyond it).
MAX_STEPS_PRICED = 10**7


@dataclass(frozen=True)
class GpuPrice:
    """One GPU's price per GPU-hour and where it comes from: ``provider`` and ``page`` (an address,
    or ``--price`` / the scenario field for a user's own), ``read`` the date the page was read."""

    gpu: str
    usd_per_gpu_hour: float
    provider: str
    page: str
    read: str = ""
    note: str = ""

    def describe(self) -> str:
        """``H100-SXM $3.20/GPU-h, Hyperstack on-demand ... list price read 2026-08-26 (page)``."""
        where = f"{self.provider} list price read {self.read} ({self.page})" if self.read else self.provider
        return f"{self.gpu} ${self.usd_per_gpu_hour:,.2f}/GPU-h, {where}" + (f"; {self.note}" if self.note else "")


@lru_cache(maxsize=1)
def price_table() -> dict[str, GpuPrice]:
    """The bundled price table by lower-case preset name."""
    import tomllib

    text = resources.files("tltcore").joinpath(PRICES_FILE).read_text(encoding="utf-8")
    out: dict[str, GpuPrice] = {}
    for row in tomllib.loads(text)["price"]:
        p = GpuPrice(row["gpu"], float(row["usd_per_gpu_hour"]), row["provider"], row["page"], row["read"],
                     row.get("note", ""))
        out[p.gpu.lower()] = p
    return out


def _canonical(name: str) -> str:
    """A preset's own name for ``name`` (aliases such as ``h100``); a name no preset has (a GPU spec
    file's) as given."""
    from tltcore.hardware import get_gpu

    try:
        return get_gpu(name).name
    except InputError:
        return name.strip()


def parse_prices(items: Sequence[str], option: str = "--price") -> dict[str, float]:
    """``["H100-SXM=2.49", ...]`` as {GPU name: USD per GPU-hour}, names as the presets spell them. A
    malformed item or an impossible price is one :class:`InputError` naming ``option``."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"'{item}' is not GPU=USD_PER_GPU_HOUR (e.g. H100-SXM=2.49)", path=option)
        try:
            price = float(value)
        except ValueError:
            raise InputError(f"'{value.strip()}' in '{item}' is not a number of dollars per GPU-hour",
                             path=option) from None
        if not math.isfinite(price) or not 0 < price <= MAX_USD_PER_GPU_HOUR:
            raise InputError(f"{value.strip()} in '{item}' must be in (0, {MAX_USD_PER_GPU_HOUR:g}] dollars per "
                             "GPU-hour (one GPU's price, not a node's)", path=option)
        out[_canonical(name).lower()] = price
    return out


def check_steps(value: int | None, option: str) -> int | None:
    """``value`` when it is a number of RL steps to price (1 to :data:`MAX_STEPS_PRICED`), else one
    :class:`InputError` naming ``option``."""
    if value is not None and not 1 <= value <= MAX_STEPS_PRICED:
        raise InputError(f"must be in [1, {MAX_STEPS_PRICED:,}], got {value}", path=option)
    return value


def check_usd_per_kwh(value: float | None, option: str = "--usd-per-kwh") -> float | None:
    """``value`` when it is a plausible electricity price, else one :class:`InputError`."""
    if value is not None and (not math.isfinite(value) or not 0 < value <= MAX_USD_PER_KWH):
        raise InputError(f"must be in (0, {MAX_USD_PER_KWH:g}] dollars per kWh, got {value}", path=option)
    return value


def resolve_price(gpu: str, given: Mapping[str, float] | None = None,
                  scenario_price: float | None = None) -> GpuPrice | None:
    """The price of ``gpu``: ``given`` (``--price``, by lower-case name) first, then the scenario's
    ``cluster.usd_per_gpu_hour``, then the bundled table; None when none has it."""
    name = _canonical(gpu)
    key = name.lower()
    if given and key in given:
        return GpuPrice(name, given[key], "your price (--price)", "")
    if scenario_price is not None:
        return GpuPrice(name, float(scenario_price), "your price (cluster.usd_per_gpu_hour)", "")
    return price_table().get(key)


def missing_price(gpu: str) -> str:
    """What to pass when ``gpu`` has no price."""
    name = _canonical(gpu)
    return f"no price for GPU {name}: pass --price {name}=USD_PER_GPU_HOUR"


@dataclass(frozen=True)
class StepsCost:
    """``steps`` RL steps of ``step_s`` seconds each on ``gpus`` GPUs: wall-clock hours, GPU-hours,
    dollars (None without a price), energy (None without the GPU's board power) and its cost (None
    without an electricity price)."""

    gpus: int
    steps: int
    step_s: float
    usd_per_gpu_hour: float | None = None
    board_power_w: float | None = None
    busy_fraction: float = 1.0
    usd_per_kwh: float | None = None

    @property
    def hours(self) -> float:
        return self.step_s * self.steps / 3600.0

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.hours

    @property
    def usd(self) -> float | None:
        return None if self.usd_per_gpu_hour is None else self.gpu_hours * self.usd_per_gpu_hour

    @property
    def kwh(self) -> float | None:
        if self.board_power_w is None:
            return None
        return self.gpu_hours * self.board_power_w * utilisation(self.busy_fraction) / 1000.0

    @property
    def energy_usd(self) -> float | None:
        kwh = self.kwh
        return None if kwh is None or self.usd_per_kwh is None else kwh * self.usd_per_kwh


def busy_share(idle_gpu_s: Any, gpus: int, total_s: Any) -> Any:
    """The share of ``gpus`` x ``total_s`` GPU-seconds not idle: the busy fraction energy is priced at.
    1 (every GPU busy, the upper bound) where no time passed or the idle time is unknown (NaN).
    Scalars or arrays (element-wise)."""
    capacity = np.multiply(gpus, total_s, dtype=float)
    idle = np.asarray(idle_gpu_s, dtype=float)
    known = (capacity > 0) & ~np.isnan(idle)
    share = 1.0 - np.divide(idle, capacity, out=np.zeros(np.broadcast(idle, capacity).shape), where=known)
    return float(share) if np.ndim(share) == 0 else share


def utilisation(busy_fraction: float) -> float:
    """The share of board power drawn on average: busy GPUs at their board power, idle ones at
    :data:`IDLE_POWER_FRACTION` of it."""
    busy = min(1.0, max(0.0, busy_fraction))
    return busy + (1.0 - busy) * IDLE_POWER_FRACTION


def energy_assumption(board_power_w: float | None, gpu: str) -> str:
    """The energy figure's assumption in words (printed with it)."""
    if board_power_w is None:
        return f"no energy: {gpu} has no board power (board_power_w) in its preset or spec file"
    return (f"energy: busy GPUs at {gpu}'s {board_power_w:g} W board power (TDP, an upper bound), idle ones at "
            f"{IDLE_POWER_FRACTION:g} of it (our assumption); busy share from the simulation, the phases after "
            "rollout counted busy")


__all__ = ["IDLE_POWER_FRACTION", "MAX_STEPS_PRICED", "GpuPrice", "StepsCost", "busy_share", "check_steps",
           "check_usd_per_kwh", "energy_assumption", "missing_price", "parse_prices", "price_table", "resolve_price",
           "utilisation"]
