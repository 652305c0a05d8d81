"""A cost model calibrated on measured per-operation GPU latencies (Vidur's profiles).

The roofline (:mod:`tltcore.cost.roofline`) prices every GPU with one pair of efficiencies and no
kernel latency. This model keeps the roofline's structure (per-request paged KV, CUDA-graph padding,
the drafter, the SD iteration) but prices every kernel of a forward pass from constants **fitted to
measured latencies** of the same GPU (:mod:`tltcore.cost.gpu_profiles`):

* **Matmuls** (fused QKV, output projection, fused gate+up, down projection; and by the same law
  the kernels the profiles do not time: the LM head, EAGLE's input projection), one law per GPU::

      t = latency + (t_c^p + t_m^p)^(1/p),  t_c = 2 M K N / (peak_flops * eff_flop),
                                              t_m = 2 (K N + M K + M N) / (peak_bw * eff_bw)

  with ``M`` tokens and the TP-sharded ``K x N`` weight on one GPU. ``eff_flop, eff_bw`` in (0, 1],
  ``latency >= 0`` and the smoothness ``p >= 1`` are fitted by least squares on log time over every
  profiled model and TP size of that GPU (each octave of num_tokens weighing the same,
  :func:`octave_weights`), so the law extends to any shape by its FLOPs and bytes.
* **Element-wise ops** (RMSNorms, RoPE, SwiGLU, residual add, embedding gather), per op and GPU:
  ``t = latency + bytes / (peak_bw * eff)``, fitted the same way (unweighted: the law is linear in bytes,
  and weighting the octaves made the held-out error worse).
* **Attention** is not in the profiles. It is priced from its KV traffic (each request's own paged KV
  plus the new tokens, never the batch mean) at the matmul law's fitted bandwidth efficiency, or its
  FLOPs at the fitted FLOP efficiency, whichever binds, plus one kernel latency per layer. Not
  validated against measured attention kernels.
* **Collectives**: 2 all-reduces per layer under TP, interpolated (log-log in message bytes) from the
  measured all-reduce table of the GPU's node (``h100_dgx``, ``a100_dgx``); the analytic
  latency + ring-bandwidth term where there is none (A40) -- :meth:`MeasuredCostModel.describe` says.
* Not measured here and kept from the roofline's documented defaults: the per-iteration overhead
  (scheduler, sampling) and the SD overheads per draft step and per SD iteration.

A GPU without profiles of its own borrows the calibration of the nearest measured architecture
(:func:`nearest_profile`: the fitted fractions of peak and latencies, applied to its own data-sheet
peaks and link), and ``source`` says "calibrated on H100-SXM profiles, borrowed for MI300X ... not
measured on MI300X". Where no profiles are on the search path the model is the analytic roofline,
and ``source`` says so. :func:`measured_cost_model` is the builder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from tltcore.cost.gpu_profiles import ELEMENTWISE_OPS, MATMUL_OPS, load_compute, load_network, profiles_root
from tltcore.cost.moe import dispatch_combine_s, expert_load, expert_placement
from tltcore.cost.roofline import RooflineCostModel, _ForwardCosts
from tltcore.errors import InputError
from tltcore.hardware import GPUSpec, get_gpu
from tltcore.model_shape import BF16_BYTES, ModelShape

#: Up to this many forwards, :meth:`_MeasuredForward.forward_times` looks each one's fixed part up
#: (memoised) instead of grouping equal ones with ``numpy.unique`` (~22 us of sort and bookkeeping;
#: a lookup is ~0.2 us): the two give the same floats, and the crossover measured ~100.
FORWARDS_ONE_BY_ONE = 64

#: profile folder -> the GPU preset whose data-sheet peaks the fitted efficiencies are fractions of.
#: Vidur's H100 and A100 are DGX nodes (SXM, 80 GB).
PROFILE_GPUS: dict[str, str] = {"h100": "H100-SXM", "a100": "A100-80GB-SXM", "a40": "A40"}
#: profile folder -> the measured collective tables of its node (single node: devices_per_node == workers).
NETWORK_TOPOLOGIES: dict[str, str] = {"h100": "h100_dgx", "a100": "a100_dgx"}
#: Vidur's per-layer composition: each element-wise op once per layer (its ``add`` is one residual add).
LAYER_ELEMENTWISE: tuple[str, ...] = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")


def gpu_spec(name: str) -> GPUSpec:
    """A GPU preset by name (:func:`tltcore.hardware.get_gpu`; A40 is a preset there)."""
    return get_gpu(name)


def gpu_names() -> list[str]:
    """Every GPU name :func:`gpu_spec` accepts, for messages."""
    from tltcore.hardware import GPU_NAMES

    return list(GPU_NAMES)


def profile_key(spec_or_name: GPUSpec | str) -> str | None:
    """The profile folder (``h100``, ``a100``, ``a40``) measured on this GPU, or None. A spec is that
    GPU only when its data sheet is the preset's (efficiencies aside: ``cluster.*_efficiency`` may
    override them): a spec file that merely reuses the name ``H100-SXM`` with other peaks is another
    GPU, and borrows (:func:`nearest_profile`)."""
    spec = spec_or_name if isinstance(spec_or_name, GPUSpec) else gpu_spec(spec_or_name)
    for key, preset_name in PROFILE_GPUS.items():
        preset = gpu_spec(preset_name)
        if replace(spec, flops_efficiency=preset.flops_efficiency,
                   bandwidth_efficiency=preset.bandwidth_efficiency) == preset:
            return key
    return None


@dataclass(frozen=True)
class Borrowing:
    """Which measured calibration prices a GPU (``key``, a :data:`PROFILE_GPUS` folder), whether it is
    the GPU's own (``own``) and why that one (``why``, for the cost model's source line)."""

    key: str
    own: bool
    why: str


def nearest_profile(spec: GPUSpec) -> Borrowing | None:
    """The measured calibration ``spec`` is priced with: its own profiles where it has them, else the
    nearest measured architecture's (None: no analytic peaks to apply fitted fractions to). The rule,
    in order, and why:

    1. **GDDR memory** (Ada, GeForce, A40-class cards) -> ``a40``: the one measured GDDR part. GDDR
       cards are PCIe-class, with smaller caches and lower bandwidth; their kernels reach other
       fractions of peak than HBM parts (A40's fitted matmul bandwidth efficiency is 0.78 vs H100's 0.90).
    2. **Ampere with HBM** (A800, A100-40GB) -> ``a100``: the same architecture and memory system.
    3. **Everything else with HBM** -> ``h100``: Hopper (H200, H800, H20) is H100's own architecture;
       Blackwell (B200, B300, GB200) is the next NVIDIA datacenter generation, and its nearest measured
       one is Hopper; other vendors' HBM datacenter parts (AMD CDNA, Huawei Ascend) have no measured
       counterpart, and H100 is the closest measured part in kind (HBM, a large matrix engine, the
       fastest measured link). For those the borrowed fractions of peak are the weakest assumption
       here, and :mod:`tltsim.robustness` widens the answer's band for every borrowed calibration.

    The fitted *fractions* of peak and the kernel latencies move to the new GPU; the peaks are its own
    data sheet's, and its collectives come from its own link (never another node's NCCL table)."""
    own = profile_key(spec)
    if own is not None:
        return Borrowing(own, True, "its own measured profiles")
    if not spec.analytic:
        return None
    arch = spec.architecture.strip().lower()
    if spec.gddr:
        return Borrowing("a40", False, f"{spec.memory_type} memory: A40 is the measured GDDR (PCIe-class) part")
    if arch == "ampere":
        return Borrowing("a100", False, "Ampere with HBM: A100 is the same architecture")
    if arch in ("hopper", "blackwell"):
        return Borrowing("h100", False, f"{arch.capitalize()}: H100 is the nearest measured NVIDIA datacenter "
                         "generation")
    what = f"{spec.vendor + ' ' if spec.vendor else ''}{spec.architecture or 'an unnamed architecture'}"
    return Borrowing("h100", False, f"{what} has no measured counterpart: H100 is the closest measured HBM "
                     "datacenter part")


# ---- shapes of the kernels --------------------------------------------------------------------------
@dataclass(frozen=True)
class OpShape:
    """What the kernels' sizes depend on (a Vidur profile's shape columns, or a ModelShape)."""

    heads: int
    kv_heads: int
    hidden: int
    intermediate: int
    vocab: int
    gated: bool = True
    head_dim: int = 0
    input_features: int = 0  # a drafter's input projection in_features -> hidden (0: EAGLE's 2 * hidden)

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    @classmethod
    def of(cls, shape: ModelShape) -> OpShape:
        return cls(shape.num_attention_heads, shape.num_key_value_heads, shape.hidden_size, shape.intermediate_size,
                   shape.vocab_size, True, shape.head_dim, shape.input_proj_features)

    def heads_per_gpu(self, tp: int) -> tuple[int, int]:
        """(query heads, KV heads) on one GPU: KV heads are replicated when fewer than ``tp``."""
        return self.heads // tp, -(-self.kv_heads // tp)


def matmul_dims(op: str, s: OpShape, tp: int) -> tuple[int, int]:
    """(K, N) of one GPU's share of a weight matmul at tensor parallelism ``tp``."""
    q, kv = s.heads_per_gpu(tp)
    dims = {"attn_pre_proj": (s.hidden, (q + 2 * kv) * s.head_dim), "attn_post_proj": (q * s.head_dim, s.hidden),
            "mlp_up_proj": (s.hidden, (2 if s.gated else 1) * (s.intermediate // tp)),
            "mlp_down_proj": (s.intermediate // tp, s.hidden), "lm_head": (s.hidden, -(-s.vocab // tp)),
            "eagle_fc": (s.input_features or 2 * s.hidden, s.hidden)}
    if op not in dims:
        raise InputError(f"unknown matmul '{op}'; known: {', '.join(dims)}", field="op")
    return dims[op]


def elementwise_bytes(op: str, s: OpShape, tp: int, tokens: np.ndarray | float) -> np.ndarray:
    """HBM bytes one GPU moves for an element-wise op over ``tokens`` rows (bf16 reads + writes)."""
    m = np.asarray(tokens, dtype=np.float64)
    q, kv = s.heads_per_gpu(tp)
    per_token = {"input_layernorm": 2 * s.hidden, "post_attention_layernorm": 2 * s.hidden,
                 "attn_rope": 2 * (q + kv) * s.head_dim,
                 "mlp_act": (3 if s.gated else 2) * (s.intermediate // tp),
                 "add": 3 * s.hidden, "emb": 2 * s.hidden}
    if op not in per_token:
        raise InputError(f"unknown element-wise op '{op}'; known: {', '.join(per_token)}", field="op")
    return m * per_token[op] * BF16_BYTES


# ---- least squares ----------------------------------------------------------------------------------
def least_squares(residuals: Callable[[np.ndarray], np.ndarray], z0: Iterable[float], *, iterations: int = 100,
                  tol: float = 1e-9) -> np.ndarray:
    """Levenberg-Marquardt on unconstrained parameters ``z`` (bounds are the caller's transforms):
    the ``z`` minimising ``sum(residuals(z)**2)``, forward-difference Jacobian."""
    z = np.asarray(list(z0), dtype=np.float64)
    r = residuals(z)
    cost = float(r @ r)
    lam = 1e-2
    for _ in range(iterations):
        jac = np.empty((r.size, z.size))
        for j in range(z.size):
            dz = np.zeros_like(z)
            dz[j] = 1e-6
            jac[:, j] = (residuals(z + dz) - r) / 1e-6
        a, g = jac.T @ jac, jac.T @ r
        while True:
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            rn = residuals(z + step)
            cn = float(rn @ rn)
            if np.isfinite(cn) and cn < cost:
                break
            lam *= 4.0
            if lam > 1e10:
                return z
        z, r, improvement, cost = z + step, rn, cost - cn, cn
        lam = max(lam / 3.0, 1e-9)
        if improvement <= tol * max(cost, 1e-30) or float(np.abs(step).max()) < 1e-9:
            break
    return z


def _unit(x: np.ndarray | float) -> np.ndarray | float:
    """(0, 1) from the real line (clipped: a runaway step stays finite)."""
    return 1.0 / (1.0 + np.exp(-np.clip(x, -30.0, 30.0)))


def _pos(x: float, lo: float = -40.0, hi: float = 6.0) -> float:
    """A positive number from the real line, exp(x) with x clipped to [lo, hi]."""
    return float(np.exp(np.clip(x, lo, hi)))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


# ---- fitted laws ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MatmulFit:
    """``t = latency + (t_c^p + t_m^p)^(1/p)`` (see module docstring) on one GPU."""

    flops_efficiency: float
    bandwidth_efficiency: float
    latency_s: float
    smoothness: float  # p >= 1: 1 is compute + memory, inf the sharp roofline max

    def time(self, tokens: np.ndarray | float, k: np.ndarray | float, n: np.ndarray | float,
             gpu: GPUSpec) -> np.ndarray:
        m = np.asarray(tokens, dtype=np.float64)
        k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
        tc = 2.0 * m * k * n / (gpu.bf16_flops * self.flops_efficiency)
        tm = BF16_BYTES * (k * n + m * k + m * n) / (gpu.hbm_bytes_per_s * self.bandwidth_efficiency)
        return self._combine(tc, tm)

    def _combine(self, tc: np.ndarray | float, tm: np.ndarray | float) -> np.ndarray:
        p = self.smoothness
        big = np.maximum(tc, tm)
        return self.latency_s + big * (1.0 + (np.minimum(tc, tm) / big) ** p) ** (1.0 / p)

    def grouped_time(self, pairs: float, experts: float, k: int, n: int, weight_bytes: int, gpu: GPUSpec,
                     peak_flops: float | None = None) -> float:
        """One grouped GEMM over ``experts`` weight matrices of ``k x n`` (``weight_bytes`` per element)
        computing ``pairs`` token-expert rows: the same law, its FLOPs over the pairs, its bytes the experts'
        weights plus the pairs' bf16 inputs and outputs (an MoE layer's fused expert kernel). With
        ``experts = 1`` and ``pairs`` the tokens it is one plain matmul in any weight dtype."""
        if pairs <= 0:
            return 0.0
        tc = 2.0 * pairs * k * n / ((peak_flops or gpu.bf16_flops) * self.flops_efficiency)
        tm = (experts * k * n * weight_bytes + BF16_BYTES * pairs * (k + n)) / (gpu.hbm_bytes_per_s
                                                                              * self.bandwidth_efficiency)
        return float(self._combine(tc, tm))

    @classmethod
    def fit(cls, tokens: np.ndarray, k: np.ndarray, n: np.ndarray, seconds: np.ndarray, gpu: GPUSpec,
            weights: np.ndarray | None = None) -> MatmulFit:
        """(Weighted) least squares on log time; efficiencies bounded to (0, 1] of the data sheet's peaks."""
        y = np.log(seconds)
        w = np.sqrt(weights) if weights is not None else 1.0

        def law(z: np.ndarray) -> MatmulFit:
            return cls(float(_unit(z[0])), float(_unit(z[1])), _pos(z[2], hi=0.0), 1.0 + _pos(z[3], -20.0))

        z = least_squares(lambda z: w * (np.log(law(z).time(tokens, k, n, gpu)) - y),
                          [_logit(0.7), _logit(0.85), math.log(5e-6), 0.0])
        return law(z)


@dataclass(frozen=True)
class ElementwiseFit:
    """``t = latency + bytes / (peak_bw * bandwidth_efficiency)`` for one element-wise op on one GPU."""

    bandwidth_efficiency: float
    latency_s: float

    def time(self, nbytes: np.ndarray | float, gpu: GPUSpec) -> np.ndarray:
        return self.latency_s + np.asarray(nbytes, dtype=np.float64) / (gpu.hbm_bytes_per_s * self.bandwidth_efficiency)

    @classmethod
    def fit(cls, nbytes: np.ndarray, seconds: np.ndarray, gpu: GPUSpec,
            weights: np.ndarray | None = None) -> ElementwiseFit:
        y = np.log(seconds)
        w = np.sqrt(weights) if weights is not None else 1.0

        def law(z: np.ndarray) -> ElementwiseFit:
            return cls(float(_unit(z[0])), _pos(z[1], hi=0.0))

        return law(least_squares(lambda z: w * (np.log(law(z).time(nbytes, gpu)) - y), [0.0, math.log(3e-6)]))


@dataclass(frozen=True, eq=False)
class CollectiveTable:
    """Measured all-reduce medians of one node by workers: log-log interpolation in message bytes,
    the smallest message's time below the table and its last bandwidth above it. The medians are
    first made non-decreasing in bytes (each size takes the fastest time of any size at or above it:
    a message can always be padded to a larger one), since the small-message rows are noisy and an
    iteration must not get cheaper as its batch grows."""

    topology: str
    sizes: dict[int, tuple[np.ndarray, np.ndarray]]  # workers -> (bytes, seconds), sorted by bytes

    @classmethod
    def from_frame(cls, network: pd.DataFrame, topology: str, collective: str = "all_reduce") -> CollectiveTable:
        rows = network[(network["topology"] == topology) & (network["collective"] == collective)
                       & (network["devices_per_node"] == network["workers"])]
        sizes = {}
        for w, part in rows.groupby("workers"):
            part = part.sort_values("bytes")
            seconds = part["median_ms"].to_numpy(np.float64) * 1e-3
            seconds = np.minimum.accumulate(seconds[::-1])[::-1]
            sizes[int(w)] = (part["bytes"].to_numpy(np.float64), seconds)
        return cls(topology, sizes)

    def time(self, nbytes: float, workers: int) -> float | None:
        """Seconds of one collective, or None when the table has no row for ``workers``."""
        if workers not in self.sizes:
            return None
        x, y = self.sizes[workers]
        if nbytes <= x[0]:
            return float(y[0])
        if nbytes >= x[-1]:
            slope = (y[-1] - y[-2]) / (x[-1] - x[-2]) if len(x) > 1 else y[-1] / x[-1]
            return float(y[-1] + max(slope, 0.0) * (nbytes - x[-1]))
        return float(np.exp(np.interp(math.log(nbytes), np.log(x), np.log(y))))


@dataclass(frozen=True, eq=False)
class GPUCalibration:
    """Every fitted constant of one GPU, and which models / tables they came from."""

    gpu: str  # profile folder
    spec: GPUSpec
    matmul: MatmulFit
    elementwise: dict[str, ElementwiseFit]
    models: tuple[str, ...]
    collectives: CollectiveTable | None = None
    borrowed: str | None = None  # why another GPU's fit prices ``spec`` (:meth:`borrowed_for`); None: its own
    overridden: tuple[str, ...] = ()  # the efficiencies a user set over the fitted ones (borrowed only)

    # ---- per-op latencies -----------------------------------------------------------------------
    def op_time(self, op: str, shape: OpShape, tp: int, tokens: np.ndarray | float) -> np.ndarray:
        """Seconds of one op (a profile op, ``lm_head`` or ``eagle_fc``) over ``tokens`` rows on one GPU."""
        if op in MATMUL_OPS or op in ("lm_head", "eagle_fc"):
            k, n = matmul_dims(op, shape, tp)
            return self.matmul.time(tokens, k, n, self.spec)
        if op not in self.elementwise:
            raise InputError(f"no fitted law for '{op}' on {self.gpu}", field="op")
        return self.elementwise[op].time(elementwise_bytes(op, shape, tp, tokens), self.spec)

    def all_reduce_time(self, nbytes: float, tp: int) -> tuple[float, str]:
        """(seconds, source) of one all-reduce of ``nbytes`` over ``tp`` GPUs."""
        if tp <= 1 or nbytes <= 0:
            return 0.0, "none"
        if self.collectives is not None:
            t = self.collectives.time(nbytes, tp)
            if t is not None:
                return t, f"measured {self.collectives.topology}"
        link = self.spec.collective_bytes_per_s(tp)
        return self.spec.allreduce_latency_s + 2 * (tp - 1) / tp * nbytes / link, "analytic"

    @property
    def attention_bandwidth_efficiency(self) -> float:
        """Attention streams KV at the bandwidth the fitted weight-streaming law reaches."""
        return self.matmul.bandwidth_efficiency

    @property
    def measured_on(self) -> str:
        """The GPU whose profiles were fitted (``H100-SXM`` for the ``h100`` folder)."""
        return PROFILE_GPUS.get(self.gpu, self.gpu)

    def borrowed_for(self, spec: GPUSpec, why: str, *, flops_efficiency: float | None = None,
                     bandwidth_efficiency: float | None = None) -> GPUCalibration:
        """This calibration moved to ``spec``, a GPU without profiles of its own: the fitted fractions
        of peak and latencies apply to ``spec``'s data-sheet peaks, collectives to its own link (the
        analytic latency + ring term; another node's measured table would be a third GPU's). A given
        ``flops_efficiency`` replaces the matmul law's fitted FLOP efficiency (attention's too); a given
        ``bandwidth_efficiency`` its bandwidth efficiency, and scales every element-wise law's by the
        same ratio (at most 1): the user's measurement, or a robustness variant
        (:mod:`tltsim.robustness`), over the borrowed guess."""
        matmul, elementwise, overridden = self.matmul, dict(self.elementwise), []
        if flops_efficiency is not None:
            matmul = replace(matmul, flops_efficiency=flops_efficiency)
            overridden.append("flops_efficiency")
        if bandwidth_efficiency is not None:
            ratio = bandwidth_efficiency / self.matmul.bandwidth_efficiency
            matmul = replace(matmul, bandwidth_efficiency=bandwidth_efficiency)
            elementwise = {op: replace(f, bandwidth_efficiency=min(1.0, f.bandwidth_efficiency * ratio))
                           for op, f in elementwise.items()}
            overridden.append("bandwidth_efficiency")
        return replace(self, spec=spec, matmul=matmul, elementwise=elementwise, collectives=None, borrowed=why,
                       overridden=tuple(overridden))

    def describe(self) -> str:
        m = self.matmul
        fit = (f"matmul eff_flop {m.flops_efficiency:.2f}, eff_bw {m.bandwidth_efficiency:.2f}, latency "
               f"{m.latency_s * 1e6:.1f} us, p {m.smoothness:.2f}")
        if self.borrowed is not None:
            name = self.spec.name
            set_by = f" ({', '.join(self.overridden)} set, not fitted)" if self.overridden else ""
            return (f"calibrated on {self.measured_on} profiles, borrowed for {name} (nearest measured "
                    f"architecture: {self.borrowed}); not measured on {name}: {fit}{set_by} at {name}'s "
                    f"data-sheet peaks; collectives analytic ({name}'s own link)")
        return (f"{self.gpu} ({self.spec.name}) fitted on {len(self.models)} models: {fit}; collectives "
                f"{'measured ' + self.collectives.topology if self.collectives is not None else 'analytic'}")


def calibrate(compute: pd.DataFrame, gpu: str, *, exclude: Iterable[str] = (),
              network: pd.DataFrame | None = None) -> GPUCalibration:
    """Fit one GPU's laws to the tidy compute profiles (:func:`~tltcore.cost.gpu_profiles.load_compute`)
    of every model of ``gpu`` except ``exclude`` (leave-one-model-out checks)."""
    if gpu not in PROFILE_GPUS:
        raise InputError(f"no data-sheet peaks for profiled GPU '{gpu}'; known: {', '.join(PROFILE_GPUS)}",
                         field="gpu")
    spec = gpu_spec(PROFILE_GPUS[gpu])
    excluded = set(exclude)
    rows = compute[(compute["gpu"] == gpu) & ~compute["model"].isin(excluded) & (compute["median_ms"] > 0)]
    if rows.empty:
        raise InputError(f"no compute profiles for {gpu} to fit", field="gpu")
    models = tuple(sorted(rows["model"].unique()))
    shapes = {m: profile_shape(part.iloc[0]) for m, part in rows.groupby("model")}
    rows = rows.assign(weight=octave_weights(rows))
    mm = rows[rows["op"].isin(MATMUL_OPS)]
    if mm.empty:
        raise InputError(f"no matmul profiles for {gpu}", field="op")
    k, n = _dims_of(mm, shapes)
    matmul = MatmulFit.fit(mm["num_tokens"].to_numpy(np.float64), k, n, mm["median_ms"].to_numpy() * 1e-3, spec,
                           mm["weight"].to_numpy())
    elementwise = {}
    for op in ELEMENTWISE_OPS:
        part = rows[rows["op"] == op]
        if part.empty:
            continue
        groups = [g for _, g in part.groupby(["model", "tp"], sort=False)]
        nbytes = np.concatenate([elementwise_bytes(op, shapes[g["model"].iloc[0]], int(g["tp"].iloc[0]),
                                                   g["num_tokens"].to_numpy()) for g in groups])
        secs = np.concatenate([g["median_ms"].to_numpy() * 1e-3 for g in groups])
        elementwise[op] = ElementwiseFit.fit(nbytes, secs, spec)  # unweighted: t is linear in bytes
    table = None
    if network is not None and gpu in NETWORK_TOPOLOGIES:
        table = CollectiveTable.from_frame(network, NETWORK_TOPOLOGIES[gpu])
        table = table if table.sizes else None
    return GPUCalibration(gpu, spec, matmul, elementwise, models, table)


def octave_weights(rows: pd.DataFrame) -> np.ndarray:
    """Least-squares weights giving every octave of num_tokens (1, 2-3, 4-7, ...) the same total weight
    within each (model, TP, op): Vidur's grid is dense at large token counts (248 of 259 above 64), which
    would otherwise let the compute-bound rows decide the weight-streaming (decode) regime too."""
    octave = np.floor(np.log2(rows["num_tokens"].to_numpy(np.float64))).astype(np.int64)
    keys = rows[["model", "tp", "op"]].assign(octave=octave)
    return 1.0 / keys.groupby(["model", "tp", "op", "octave"], sort=False)["octave"].transform("size").to_numpy()


def profile_shape(row: pd.Series) -> OpShape:
    """The :class:`OpShape` of a tidy profile row's shape columns."""
    return OpShape(int(row["n_head"]), int(row["n_kv_head"]), int(row["n_embd"]), int(row["n_expanded_embd"]),
                   int(row["vocab_size"]), bool(row["use_gated_mlp"]))


def _dims_of(rows: pd.DataFrame, shapes: dict[str, OpShape]) -> tuple[np.ndarray, np.ndarray]:
    """Each matmul row's (k, n), set per (model, TP, op) group (a Python tuple per row of Arrow-backed
    strings was half of a calibration)."""
    k, n = np.empty(len(rows)), np.empty(len(rows))
    for (model, tp, op), idx in rows.groupby(["model", "tp", "op"], sort=False).indices.items():
        k[idx], n[idx] = matmul_dims(op, shapes[model], tp)
    return k, n


def predict_ops(calibration: GPUCalibration, rows: pd.DataFrame) -> np.ndarray:
    """Predicted seconds for tidy profile rows (any models) under ``calibration``."""
    out = np.empty(len(rows))
    for (_model, tp, op), idx in rows.groupby(["model", "tp", "op"], sort=False).indices.items():
        shape = profile_shape(rows.iloc[idx[0]])
        out[idx] = calibration.op_time(op, shape, int(tp), rows["num_tokens"].to_numpy()[idx])
    return out


@cache
def _default_calibration(gpu: str, root: Path) -> GPUCalibration:
    # only the GPU's own files: calibrate reads no other GPU's rows (nor another topology's collectives),
    # and their order is the same
    topology = NETWORK_TOPOLOGIES.get(gpu)
    network = load_network(root, topology) if topology is not None else None
    return calibrate(load_compute(root, gpu), gpu, network=network)


def default_calibration(gpu: str, root: str | Path | None = None) -> GPUCalibration:
    """``gpu``'s laws fitted on all of its profiled models (fitted once per process and folder)."""
    return _default_calibration(gpu, profiles_root(root).resolve())


# ---- the cost model ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _MeasuredForward(_ForwardCosts):
    """One forward's costs with the roofline's matmul/collective terms replaced by calibrated kernels."""

    calibration: GPUCalibration | None = None
    ops: OpShape | None = None
    tp: int = 1
    input_proj: bool = False
    shape: ModelShape | None = None  # for the MoE / MLA / fp8 layer composition (:meth:`_general_time`)
    expert_parallel: bool = False
    routing_skew: float = 0.0
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    def fixed_time(self, rows: int, logit_rows: int) -> float:
        """Everything but attention over ``rows`` tokens, ``logit_rows`` of them through the LM head:
        per layer the profiled ops and 2 all-reduces; once per forward the embedding gather, the
        drafter's input projection, the final norm, the LM head and the logits gather; one attention
        kernel latency per layer (attention's traffic is :meth:`attention_time`)."""
        if rows == 0:
            return 0.0
        key = (rows, logit_rows)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        if _composed(self.shape):
            total = self._general_time(rows, logit_rows)
            self.memo[key] = total
            return total
        cal, s, tp = self.calibration, self.ops, self.tp
        layer = sum(float(cal.op_time(op, s, tp, rows)) for op in (*MATMUL_OPS, *LAYER_ELEMENTWISE))
        layer += cal.matmul.latency_s  # the attention kernel's launch / latency floor
        layer += 2 * cal.all_reduce_time(rows * s.hidden * BF16_BYTES, tp)[0]
        total = self.layers * layer + float(cal.op_time("emb", s, tp, rows))
        if self.input_proj:
            total += float(cal.op_time("eagle_fc", s, tp, rows))
        if logit_rows:
            total += float(cal.op_time("input_layernorm", s, tp, logit_rows))  # final norm
            total += float(cal.op_time("lm_head", s, tp, logit_rows))
            # all-gather of vocab-parallel logits ~ an all-reduce of half the bytes (same ring traffic)
            total += cal.all_reduce_time(logit_rows * s.vocab * BF16_BYTES / 2, tp)[0]
        self.memo[key] = total
        return total

    def _general_time(self, rows: int, logit_rows: int) -> float:
        """:meth:`fixed_time` of a model the profiled dense layer does not describe (MoE MLPs, MLA, fp8
        weights), composed from the same fitted laws: per layer its attention projections (MLA: the five
        low-rank ones), the profiled element-wise ops and one attention-kernel latency; per dense layer the
        SwiGLU MLP; per MoE layer the shared experts, the router and the routed experts as two grouped GEMMs
        over the busiest GPU's :func:`~tltcore.cost.moe.expert_load`, and under expert parallelism the
        dispatch and combine all-to-alls; the all-reduces; then the embedding, input projection and LM head
        as for a dense model."""
        cal, s, tp, m = self.calibration, self.ops, self.tp, self.shape
        gpu, law, wb = cal.spec, cal.matmul, m.weight_element_bytes
        h = m.hidden_size
        peak = gpu.matmul_peak_flops(m.weight_dtype)

        def linear(k: int, n: int) -> float:  # one matmul of `rows` tokens in the checkpoint's dtype
            return law.grouped_time(rows, 1, k, n, wb, gpu, peak)

        if m.mla is not None:
            attention = sum(linear(k, n) for k, n in m.mla.projections(h, m.num_attention_heads // tp))
        else:
            attention = sum(linear(*matmul_dims(op, s, tp)) for op in ("attn_pre_proj", "attn_post_proj"))
        norms = sum(float(cal.op_time(op, s, tp, rows)) for op in LAYER_ELEMENTWISE if op != "mlp_act")
        reduce = cal.all_reduce_time(rows * h * BF16_BYTES, tp)[0]
        per_layer = attention + norms + cal.matmul.latency_s + reduce  # the attention half and its all-reduce
        dense = sum(linear(*matmul_dims(op, s, tp)) for op in ("mlp_up_proj", "mlp_down_proj"))
        dense += float(cal.op_time("mlp_act", s, tp, rows)) + reduce
        total = m.num_hidden_layers * per_layer + m.dense_mlp_layers * dense
        if m.moe is not None and m.moe_layers:
            e = m.moe
            shared = 0.0
            if e.shared_intermediate_size:
                width = e.shared_intermediate_size // tp
                shared = linear(h, 2 * width) + linear(width, h)
                shared += float(cal.elementwise["mlp_act"].time(rows * 3 * width * BF16_BYTES, gpu))
            router = law.grouped_time(rows, 1, h, e.num_experts, BF16_BYTES, gpu)  # routers stay bf16
            ep, share = expert_placement(tp, self.expert_parallel)
            width = e.expert_intermediate_size // share
            load = expert_load(rows, e.num_experts, e.experts_per_token, ep, self.routing_skew)
            experts = (law.grouped_time(load.pairs, load.experts, h, 2 * width, wb, gpu, peak)
                       + law.grouped_time(load.pairs, load.experts, width, h, wb, gpu, peak)
                       + float(cal.elementwise["mlp_act"].time(load.pairs * 3 * width * BF16_BYTES, gpu)))
            combine = (dispatch_combine_s(rows, e.experts_per_token, h, ep, gpu.allreduce_latency_s,
                                          gpu.collective_bytes_per_s(ep)) if ep > 1 else reduce)
            total += m.moe_layers * (shared + router + experts + combine)
        total += float(cal.op_time("emb", s, tp, rows))
        if self.input_proj:
            total += linear(*matmul_dims("eagle_fc", s, tp))
        if logit_rows:
            total += float(cal.op_time("input_layernorm", s, tp, logit_rows))  # final norm
            total += float(cal.op_time("lm_head", s, tp, logit_rows))
            total += cal.all_reduce_time(logit_rows * s.vocab * BF16_BYTES / 2, tp)[0]
        return total

    def forward_times(self, rows: np.ndarray, logit_rows: np.ndarray | None, kv: np.ndarray,
                      pos: np.ndarray) -> np.ndarray:
        """``fixed_time(r, l) + attention_time(k, q)`` of many forwards, element-wise: the calibrated
        kernels have no batched form, so :meth:`fixed_time` (memoised per pair) is called per forward
        when there are few, and once per distinct (rows, logit rows) pair when there are many (a switch's
        ~200 re-prefill passes are nearly all full ones; an admission's few passes are cheaper looked up
        one by one than grouped); attention is the roofline's, as its sharp batched form writes it
        (``max`` as ``numpy.where``: the same IEEE operations, the integer counts exact in float64)."""
        logits = np.zeros(len(rows), dtype=np.int64) if logit_rows is None else np.asarray(logit_rows, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) == 0:
            return np.zeros(0)
        if len(rows) <= FORWARDS_ONE_BY_ONE:
            fixed_time = self.fixed_time
            fixed = np.array([fixed_time(r, n) for r, n in zip(rows.tolist(), logits.tolist(), strict=True)],
                             dtype=np.float64)
        else:
            span = int(logits.max()) + 1
            keys, inv = np.unique(rows * span + logits, return_inverse=True)
            fixed = np.array([self.fixed_time(k // span, k % span) for k in keys.tolist()], dtype=np.float64)[inv]
        a, b = kv * self.kv_read_s_per_token, pos * self.attention_s_per_position
        return fixed + np.where(b > a, b, a)


def _composed(shape: ModelShape | None) -> bool:
    """Whether a forward of ``shape`` needs :meth:`_MeasuredForward._general_time` (the profiled dense bf16
    layer does not describe it)."""
    return shape is not None and (shape.moe is not None or shape.mla is not None or shape.weight_dtype != "bf16")


def _measured_forward(shape: ModelShape, cal: GPUCalibration, tp: int, *, expert_parallel: bool = False,
                      routing_skew: float = 0.0) -> _MeasuredForward:
    base = _ForwardCosts.build(shape, cal.spec, tp, expert_parallel=expert_parallel, routing_skew=routing_skew)
    gpu = cal.spec
    kv_bytes = shape.kv_bytes_per_token_per_gpu(tp)
    values = {f: getattr(base, f) for f in _ForwardCosts.__dataclass_fields__}
    values.update(
        kv_read_s_per_token=kv_bytes / (gpu.hbm_bytes_per_s * cal.attention_bandwidth_efficiency),
        attention_s_per_position=shape.attention_flops_per_position / tp / (gpu.bf16_flops
                                                                             * cal.matmul.flops_efficiency),
        launch_s=0.0, smoothness=math.inf)
    return _MeasuredForward(**values, calibration=cal, ops=OpShape.of(shape), tp=tp,
                            input_proj=shape.input_proj_features > 0, shape=shape, expert_parallel=expert_parallel,
                            routing_skew=routing_skew)


@dataclass(frozen=True)
class MeasuredCostModel(RooflineCostModel):
    """Iteration costs from kernels calibrated on measured latencies of ``gpu`` (see the module
    docstring); with ``calibration=None`` it is the analytic roofline, and ``source`` says which."""

    calibration: GPUCalibration | None = None
    source: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.calibration is None:
            if not self.source:
                object.__setattr__(self, "source", "roofline (analytic; no measured profiles)")
            return
        if self.calibration.spec.name != self.gpu.name:
            raise InputError(f"the calibration was fitted on {self.calibration.spec.name}, not {self.gpu.name}",
                             field="gpu")
        moe = {"expert_parallel": self.expert_parallel, "routing_skew": self.routing_skew}
        object.__setattr__(self, "_target", _measured_forward(self.model, self.calibration, self.tp, **moe))
        object.__setattr__(self, "_draft", _measured_forward(self.drafter, self.calibration, self.tp, **moe))
        if not self.source:
            object.__setattr__(self, "source", f"measured: {self.calibration.describe()}")

    @property
    def measured(self) -> bool:
        return self.calibration is not None

    def describe(self) -> str:
        """Which model served and from what: one line."""
        return f"{self.model.name} on {self.gpu.name} x{self.tp}: {self.source}"


COLLECTIVE_SOURCES = ("measured", "analytic")


def measured_cost_model(shape: ModelShape, gpu: str | GPUSpec, tp: int = 1, *, profiles: str | Path | None = None,
                        collectives: str = "measured", flops_efficiency: float | None = None,
                        bandwidth_efficiency: float | None = None, **kwargs: object) -> MeasuredCostModel:
    """The calibrated cost model of ``shape`` on ``tp`` x ``gpu``: fitted on the GPU's own profiles,
    or, for a GPU without them, on the nearest measured architecture's (:func:`nearest_profile`),
    applied to this GPU's data-sheet peaks and link, ``source`` saying so. The analytic roofline (same
    class, ``measured`` False, ``source`` saying why) where no profiles are found.

    ``collectives``: ``measured`` interpolates the node's measured all-reduce table (Vidur's NCCL
    timings: 20-40 us for small messages on 4-8 H100s), ``analytic`` uses the GPU preset's latency +
    ring-bandwidth term (8 us over NVLink: engines that run a custom all-reduce inside CUDA graphs, as
    vLLM and SGLang do, get closer to it); a borrowed calibration is always analytic.
    ``flops_efficiency`` / ``bandwidth_efficiency`` (the scenario's ``cluster.*_efficiency``) replace a
    *borrowed* calibration's fitted efficiencies (:meth:`GPUCalibration.borrowed_for`); a GPU's own
    fit is a measurement and keeps them. ``kwargs`` are
    :class:`~tltcore.cost.roofline.RooflineCostModel`'s (overheads, block size, drafter)."""
    if collectives not in COLLECTIVE_SOURCES:
        raise InputError(f"must be one of {', '.join(COLLECTIVE_SOURCES)}, got '{collectives}'", field="collectives")
    spec = gpu if isinstance(gpu, GPUSpec) else gpu_spec(gpu)
    near = nearest_profile(spec)
    if near is None:
        return MeasuredCostModel(shape, spec, tp, source=f"roofline (analytic; no measured profiles for {spec.name})",
                                 **kwargs)  # type: ignore[arg-type]
    try:
        cal = default_calibration(near.key, profiles)
    except InputError as exc:
        if profiles is not None:
            raise
        why = exc.message if near.own else f"no measured profiles for {spec.name}, and {exc.message}"
        return MeasuredCostModel(shape, spec, tp, source=f"roofline (analytic; {why})",
                                 **kwargs)  # type: ignore[arg-type]
    if not near.own:
        cal = cal.borrowed_for(spec, near.why, flops_efficiency=flops_efficiency,
                               bandwidth_efficiency=bandwidth_efficiency)
    elif collectives == "analytic" and cal.collectives is not None:
        cal = replace(cal, collectives=None)
    return MeasuredCostModel(shape, spec, tp, calibration=cal, **kwargs)  # type: ignore[arg-type]
