"""Hardware catalog: the per-GPU peaks the analytic (roofline) cost model needs.

Numbers are vendor data-sheet peaks (dense, i.e. without 2:4 sparsity), cited per preset. A roofline
never reaches them, so every spec carries *efficiency factors*: the fraction of peak FLOP/s that
large bf16 GEMMs reach and the fraction of peak HBM bandwidth that decode kernels (GEMV, paged
attention) stream at. The defaults are typical published achieved fractions, not fits; a calibrated
table measured by the profiler replaces them (see ``tltcore.cost.table.TableCostModel``).

``cpu-calibrated`` has no analytic peaks at all: it names a machine whose costs come only from
measured tables, and the roofline refuses it with an :class:`~tltcore.errors.InputError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tltcore.errors import InputError

TERA = 1e12
GIGA = 1e9

# Typical achieved fractions of peak (see module docstring).
DEFAULT_FLOPS_EFFICIENCY = 0.70  # large bf16 GEMMs reach ~65-75 % of dense tensor-core peak
DEFAULT_BANDWIDTH_EFFICIENCY = 0.85  # decode GEMV / paged attention stream at ~80-90 % of HBM peak
NVLINK_ALLREDUCE_LATENCY_S = 8e-6  # small-message all-reduce over NVLink (custom all-reduce, graphs)
PCIE_ALLREDUCE_LATENCY_S = 30e-6  # small-message all-reduce through PCIe / host (no P2P on GeForce)


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. Interconnect bandwidth is per GPU and per direction (what a ring all-reduce
    moves at); ``None`` peaks mean "no analytic model, measured tables only"."""

    name: str
    bf16_flops: float | None  # dense bf16 tensor FLOP/s
    hbm_bytes_per_s: float | None
    memory_bytes: float
    interconnect_bytes_per_s: float | None  # NVLink (or PCIe) per direction, per GPU
    flops_efficiency: float = DEFAULT_FLOPS_EFFICIENCY
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY
    allreduce_latency_s: float = NVLINK_ALLREDUCE_LATENCY_S
    source: str = ""

    def __post_init__(self) -> None:
        for field_name in ("flops_efficiency", "bandwidth_efficiency"):
            value = getattr(self, field_name)
            if not 0.0 < value <= 1.0:
                raise InputError(f"must be in (0, 1], got {value}", path=f"gpu {self.name}", field=field_name)
        if self.memory_bytes <= 0:
            raise InputError("must be positive", path=f"gpu {self.name}", field="memory_bytes")

    @property
    def analytic(self) -> bool:
        """True when the roofline can model this GPU (it has compute and bandwidth peaks)."""
        return self.bf16_flops is not None and self.hbm_bytes_per_s is not None

    @property
    def effective_flops(self) -> float:
        """Achievable bf16 FLOP/s (peak x efficiency)."""
        return self._require(self.bf16_flops, "bf16_flops") * self.flops_efficiency

    @property
    def effective_bandwidth(self) -> float:
        """Achievable HBM bytes/s (peak x efficiency)."""
        return self._require(self.hbm_bytes_per_s, "hbm_bytes_per_s") * self.bandwidth_efficiency

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a kernel is compute-bound on this GPU."""
        return self.effective_flops / self.effective_bandwidth

    def _require(self, value: float | None, field_name: str) -> float:
        if value is None:
            raise InputError(
                "has no analytic peak; use a measured cost table (TableCostModel) for this machine",
                path=f"gpu {self.name}",
                field=field_name,
            )
        return value


_PRESETS: tuple[GPUSpec, ...] = (
    # NVIDIA H100 Tensor Core GPU data sheet, SXM5: BF16 1,979 TFLOPS with sparsity -> 989.4 dense;
    # HBM3 80 GB at 3.35 TB/s; NVLink 900 GB/s (bidirectional) -> 450 GB/s per direction.
    GPUSpec("H100-SXM", 989.4 * TERA, 3.35 * TERA, 80 * GIGA, 450 * GIGA,
            source="NVIDIA H100 data sheet (SXM5)"),
    # NVIDIA H800 SXM5 product brief (the export variant of H100): the same BF16 compute (989.4 dense)
    # and HBM3 80 GB at 3.35 TB/s as H100 SXM5, NVLink cut to 400 GB/s bidirectional -> 200 GB/s per
    # direction. TLT's users report no end-to-end gain on 8 x H800 when the reward takes long.
    GPUSpec("H800", 989.4 * TERA, 3.35 * TERA, 80 * GIGA, 200 * GIGA,
            source="NVIDIA H800 product brief (SXM5)"),
    # NVIDIA H200 data sheet, SXM: same compute as H100 (1,979 sparse -> 989 dense TFLOPS);
    # HBM3e 141 GB at 4.8 TB/s; NVLink 900 GB/s.
    GPUSpec("H200", 989.4 * TERA, 4.8 * TERA, 141 * GIGA, 450 * GIGA,
            source="NVIDIA H200 data sheet (SXM)"),
    # NVIDIA A100 data sheet, 80GB SXM: BF16 312 TFLOPS dense; HBM2e 2,039 GB/s; NVLink 600 GB/s.
    GPUSpec("A100-80GB-SXM", 312 * TERA, 2.039 * TERA, 80 * GIGA, 300 * GIGA,
            source="NVIDIA A100 data sheet (80GB SXM)"),
    # NVIDIA H20 (China-market Hopper) product brief: BF16 148 TFLOPS dense; HBM3 96 GB at 4.0 TB/s;
    # NVLink 900 GB/s. Very low FLOP/byte: SD verification turns compute-bound early (the paper's
    # "SD slows rollout on H20" failure mode).
    GPUSpec("H20", 148 * TERA, 4.0 * TERA, 96 * GIGA, 450 * GIGA,
            source="NVIDIA H20 product brief"),
    # NVIDIA L40S data sheet: BF16 733 TFLOPS with sparsity -> 366 dense (362.05 listed);
    # 48 GB GDDR6 at 864 GB/s; no NVLink, PCIe Gen4 x16 64 GB/s bidirectional -> 32 GB/s.
    GPUSpec("L40S", 362.05 * TERA, 0.864 * TERA, 48 * GIGA, 32 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S, source="NVIDIA L40S data sheet"),
    # NVIDIA HGX B200 data sheet (8 GPUs): FP16/BF16 36 PFLOPS sparse -> 2.25 PFLOPS dense per GPU;
    # 1.44 TB HBM3e -> 180 GB per GPU at 8 TB/s; NVLink 5 1.8 TB/s bidirectional -> 900 GB/s.
    GPUSpec("B200", 2250 * TERA, 8.0 * TERA, 180 * GIGA, 900 * GIGA,
            source="NVIDIA HGX B200 data sheet"),
    # NVIDIA Ada architecture whitepaper, GeForce RTX 4090: peak BF16 tensor TFLOPS with FP32
    # accumulate 165.2 dense (330.4 sparse); 24 GB GDDR6X at 1,008 GB/s; PCIe Gen4, no NVLink / P2P.
    GPUSpec("RTX4090", 165.2 * TERA, 1.008 * TERA, 24 * GIGA, 32 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S, source="NVIDIA Ada GPU architecture whitepaper"),
    # NVIDIA Blackwell (GeForce) whitepaper, RTX 5090: BF16 tensor with FP32 accumulate 209.5 dense
    # (419 sparse); 32 GB GDDR7 at 1,792 GB/s; PCIe Gen5 x16 128 GB/s bidirectional -> 64 GB/s.
    GPUSpec("RTX5090", 209.5 * TERA, 1.792 * TERA, 32 * GIGA, 64 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S,
            source="NVIDIA RTX Blackwell GPU architecture whitepaper"),
    # NVIDIA Ampere GA102 whitepaper, GeForce RTX 3090: BF16 tensor with FP32 accumulate 71 dense
    # (142 sparse); 24 GB GDDR6X at 936 GB/s; NVLink bridge 112.5 GB/s total -> ~56 GB/s per direction.
    GPUSpec("RTX3090", 71 * TERA, 0.936 * TERA, 24 * GIGA, 56 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S,
            source="NVIDIA Ampere GA102 GPU architecture whitepaper"),
    # NVIDIA A40 data sheet: BF16 tensor 149.7 TFLOPS dense (299.4 with sparsity); 48 GB GDDR6 at 696 GB/s;
    # NVLink bridge (2 GPUs) 112.5 GB/s bidirectional -> 56.25 GB/s per direction. Vidur's profiles measure it.
    GPUSpec("A40", 149.7 * TERA, 0.696 * TERA, 48 * GIGA, 56.25 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S, source="NVIDIA A40 data sheet"),
    # A machine known only through measured tables (e.g. the CPU test box): no analytic peaks.
    GPUSpec("cpu-calibrated", None, None, 64 * GIGA, None,
            source="measured tables only; no analytic peaks"),
)

GPU_NAMES: tuple[str, ...] = tuple(spec.name for spec in _PRESETS)
_BY_NAME: dict[str, GPUSpec] = {spec.name.lower(): spec for spec in _PRESETS}
_ALIASES: dict[str, str] = {
    "h100": "h100-sxm", "h100-sxm5": "h100-sxm", "h100sxm": "h100-sxm",
    "h200-sxm": "h200", "h800-sxm": "h800", "h800-sxm5": "h800",
    "a100": "a100-80gb-sxm", "a100-80gb": "a100-80gb-sxm", "a100-sxm": "a100-80gb-sxm",
    "rtx-4090": "rtx4090", "4090": "rtx4090",
    "rtx-5090": "rtx5090", "5090": "rtx5090",
    "rtx-3090": "rtx3090", "3090": "rtx3090",
    "nvidia-a40": "a40",
    "cpu": "cpu-calibrated",
}


def get_gpu(name: str) -> GPUSpec:
    """The preset called ``name`` (case-insensitive; aliases such as ``h100`` or ``a100``)."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in _BY_NAME:
        raise InputError(f"unknown GPU '{name}'; known: {', '.join(GPU_NAMES)}", field="gpu")
    return _BY_NAME[key]
