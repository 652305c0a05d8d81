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
    """One accelerator, by its data sheet. ``None`` peaks mean "no analytic model, measured tables only".

    Links are per GPU and per direction (what a ring all-reduce moves at):
    ``interconnect_bytes_per_s`` is the intra-node link (NVLink, xGMI, HCCS or PCIe) that tensor
    parallelism runs over; ``inter_node_bytes_per_s`` the scale-out network (one 400 Gb/s NIC per GPU
    is 50e9), None where no reference node publishes one; ``gpus_per_node`` the GPUs one intra-node
    link domain joins (8 on HGX boards, 72 on GB200 NVL72). ``fp8_flops`` is dense FP8 tensor FLOP/s,
    None on parts without FP8 tensor cores. ``architecture`` (``hopper``, ``cdna3``...) and
    ``memory_type`` (``HBM3``, ``GDDR6``...) decide which measured calibration a GPU without its own
    profiles borrows (:func:`tltcore.cost.measured.nearest_profile`); ``source`` names the data sheet.
    ``board_power_w`` is the data sheet's maximum board power (TDP, configurable parts at their top
    setting), what the energy estimate of :mod:`tltcore.prices` scales; None where none is published."""

    name: str
    bf16_flops: float | None  # dense bf16 tensor FLOP/s
    hbm_bytes_per_s: float | None
    memory_bytes: float
    interconnect_bytes_per_s: float | None  # intra-node link per direction, per GPU
    flops_efficiency: float = DEFAULT_FLOPS_EFFICIENCY
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY
    allreduce_latency_s: float = NVLINK_ALLREDUCE_LATENCY_S
    source: str = ""
    fp8_flops: float | None = None  # dense FP8 tensor FLOP/s; None: no FP8 tensor cores
    inter_node_bytes_per_s: float | None = None  # scale-out network per direction, per GPU
    gpus_per_node: int = 8
    architecture: str = ""
    vendor: str = ""
    memory_type: str = ""
    board_power_w: float | None = None  # max board power (TDP) from the data sheet; None: not published

    def __post_init__(self) -> None:
        for field_name in ("flops_efficiency", "bandwidth_efficiency"):
            value = getattr(self, field_name)
            if not 0.0 < value <= 1.0:
                raise InputError(f"must be in (0, 1], got {value}", path=f"gpu {self.name}", field=field_name)
        if self.memory_bytes <= 0:
            raise InputError("must be positive", path=f"gpu {self.name}", field="memory_bytes")
        if self.gpus_per_node < 1:
            raise InputError(f"must be >= 1, got {self.gpus_per_node}", path=f"gpu {self.name}",
                             field="gpus_per_node")

    @property
    def analytic(self) -> bool:
        """True when the roofline can model this GPU (it has compute and bandwidth peaks)."""
        return self.bf16_flops is not None and self.hbm_bytes_per_s is not None

    @property
    def gddr(self) -> bool:
        """True for graphics memory (GDDR*): PCIe-class parts whose kernels behave unlike HBM ones."""
        return self.memory_type.upper().startswith("GDDR")

    @property
    def effective_flops(self) -> float:
        """Achievable bf16 FLOP/s (peak x efficiency)."""
        return self._require(self.bf16_flops, "bf16_flops") * self.flops_efficiency

    @property
    def effective_bandwidth(self) -> float:
        """Achievable HBM bytes/s (peak x efficiency)."""
        return self._require(self.hbm_bytes_per_s, "hbm_bytes_per_s") * self.bandwidth_efficiency

    def matmul_peak_flops(self, weight_dtype: str) -> float:
        """Peak matmul FLOP/s for weights of ``weight_dtype``: fp8 weights run on the FP8 tensor cores
        (W8A8, as engines serve fp8 checkpoints) where the GPU has them, else at the bf16 rate
        (weight-only fp8: dequantised into bf16 GEMMs)."""
        if weight_dtype == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        return self._require(self.bf16_flops, "bf16_flops")

    def effective_matmul_flops(self, weight_dtype: str) -> float:
        """Achievable matmul FLOP/s for weights of ``weight_dtype`` (:meth:`matmul_peak_flops` x efficiency)."""
        return self.matmul_peak_flops(weight_dtype) * self.flops_efficiency

    def collective_bytes_per_s(self, gpus: int) -> float | None:
        """The link a collective over ``gpus`` GPUs (one TP or EP group) moves at, per GPU and direction:
        the intra-node link within one node, the scale-out network once the group spans nodes (a ring
        runs at its slowest hop). None when that link is not known."""
        return self.interconnect_bytes_per_s if gpus <= self.gpus_per_node else self.inter_node_bytes_per_s

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


#: Scale-out network per GPU per direction of NVIDIA's reference DGX nodes (one NIC per GPU):
#: DGX H100 / H200 / B200 (docs.nvidia.com, DGX BasePOD reference architecture, "core components"):
#: eight single-port ConnectX-7 at 400 Gb/s -> 50 GB/s; DGX A100: eight ConnectX-6 at 200 Gb/s HDR ->
#: 25 GB/s; HGX B300: eight ConnectX-8 SuperNICs at 800 Gb/s -> 100 GB/s; DGX GB200 (DGX GB200 user
#: guide, networking: one OSFP ConnectX-7 400 Gb/s InfiniBand port per GPU) -> 50 GB/s. None where no
#: reference node publishes one (export parts, PCIe cards, AMD and Huawei accelerators).
NIC_400G = 50 * GIGA
NIC_200G = 25 * GIGA
NIC_800G = 100 * GIGA

#: ``board_power_w``: each data sheet's maximum board power (TDP / total board power): H100 SXM5 and H200
#: SXM "up to 700 W (configurable)", H800 SXM5 700 W, A100 and A800 SXM 400 W, L40S 350 W, L40 300 W, A40
#: 300 W, GeForce RTX 4090 450 W / RTX 5090 575 W / RTX 3090 350 W (total graphics power), B200 1,000 W in
#: the HGX B200 configuration (as Vultr's HGX B200 hardware overview lists it), AMD Instinct MI300X 750 W,
#: MI325X 1,000 W and MI355X 1,400 W peak board power. None where no data sheet gives one per GPU (H20,
#: L20, B300, GB200, Ascend 910B): a GPU spec file's board_power_w fills it.
_PRESETS: tuple[GPUSpec, ...] = (
    # NVIDIA H100 Tensor Core GPU data sheet, SXM5: BF16 1,979 TFLOPS with sparsity -> 989.4 dense;
    # FP8 3,958 with sparsity -> 1,979 dense; HBM3 80 GB at 3.35 TB/s; NVLink 900 GB/s (bidirectional)
    # -> 450 GB/s per direction.
    GPUSpec("H100-SXM", 989.4 * TERA, 3.35 * TERA, 80 * GIGA, 450 * GIGA,
            source="NVIDIA H100 data sheet (SXM5)", fp8_flops=1979 * TERA, inter_node_bytes_per_s=NIC_400G,
            board_power_w=700,
            architecture="hopper", vendor="NVIDIA", memory_type="HBM3"),
    # NVIDIA H800 SXM5 product brief (the export variant of H100): the same BF16 compute (989.4 dense)
    # and FP8 (3,958 sparse -> 1,979 dense), HBM3 80 GB at 3.35 TB/s as H100 SXM5, NVLink cut to
    # 400 GB/s bidirectional -> 200 GB/s per direction. TLT's users report no end-to-end gain on
    # 8 x H800 when the reward takes long.
    GPUSpec("H800", 989.4 * TERA, 3.35 * TERA, 80 * GIGA, 200 * GIGA,
            board_power_w=700, source="NVIDIA H800 product brief (SXM5)", fp8_flops=1979 * TERA,
            architecture="hopper", vendor="NVIDIA", memory_type="HBM3"),
    # NVIDIA H200 data sheet, SXM: same compute as H100 (BF16 1,979 sparse -> 989 dense; FP8 3,958
    # sparse -> 1,979 dense); HBM3e 141 GB at 4.8 TB/s; NVLink 900 GB/s.
    GPUSpec("H200", 989.4 * TERA, 4.8 * TERA, 141 * GIGA, 450 * GIGA,
            source="NVIDIA H200 data sheet (SXM)", fp8_flops=1979 * TERA, inter_node_bytes_per_s=NIC_400G,
            board_power_w=700,
            architecture="hopper", vendor="NVIDIA", memory_type="HBM3e"),
    # NVIDIA A100 data sheet, 80GB SXM: BF16 312 TFLOPS dense; no FP8; HBM2e 2,039 GB/s; NVLink 600 GB/s.
    GPUSpec("A100-80GB-SXM", 312 * TERA, 2.039 * TERA, 80 * GIGA, 300 * GIGA,
            board_power_w=400, source="NVIDIA A100 data sheet (80GB SXM)", inter_node_bytes_per_s=NIC_200G,
            architecture="ampere", vendor="NVIDIA", memory_type="HBM2e"),
    # NVIDIA H20 (China-market Hopper) product brief: BF16 148 TFLOPS and FP8 296 TFLOPS dense; HBM3
    # 96 GB at 4.0 TB/s; NVLink 900 GB/s. Very low FLOP/byte: SD verification turns compute-bound early
    # (the paper's "SD slows rollout on H20" failure mode).
    GPUSpec("H20", 148 * TERA, 4.0 * TERA, 96 * GIGA, 450 * GIGA,
            source="NVIDIA H20 product brief", fp8_flops=296 * TERA,
            architecture="hopper", vendor="NVIDIA", memory_type="HBM3"),
    # NVIDIA L40S data sheet: BF16 733 TFLOPS with sparsity -> 366 dense (362.05 listed); FP8 733 dense
    # (1,466 sparse); 48 GB GDDR6 at 864 GB/s; no NVLink, PCIe Gen4 x16 64 GB/s bidirectional -> 32 GB/s.
    GPUSpec("L40S", 362.05 * TERA, 0.864 * TERA, 48 * GIGA, 32 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S,
            board_power_w=350, source="NVIDIA L40S data sheet", fp8_flops=733 * TERA,
            architecture="ada", vendor="NVIDIA", memory_type="GDDR6"),
    # NVIDIA HGX B200 data sheet (8 GPUs): FP16/BF16 36 PFLOPS sparse -> 2.25 PFLOPS dense per GPU;
    # FP8 72 PFLOPS sparse -> 4.5 PFLOPS dense per GPU; 1.44 TB HBM3e -> 180 GB per GPU at 8 TB/s;
    # NVLink 5 1.8 TB/s bidirectional -> 900 GB/s.
    GPUSpec("B200", 2250 * TERA, 8.0 * TERA, 180 * GIGA, 900 * GIGA,
            source="NVIDIA HGX B200 data sheet", fp8_flops=4500 * TERA, inter_node_bytes_per_s=NIC_400G,
            board_power_w=1000,
            architecture="blackwell", vendor="NVIDIA", memory_type="HBM3e"),
    # NVIDIA Ada architecture whitepaper, GeForce RTX 4090: peak BF16 tensor TFLOPS with FP32
    # accumulate 165.2 dense (330.4 sparse); FP8 with FP32 accumulate 330.3 dense; 24 GB GDDR6X at
    # 1,008 GB/s; PCIe Gen4, no NVLink / P2P.
    GPUSpec("RTX4090", 165.2 * TERA, 1.008 * TERA, 24 * GIGA, 32 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S,
            board_power_w=450, source="NVIDIA Ada GPU architecture whitepaper",
            fp8_flops=330.3 * TERA, architecture="ada", vendor="NVIDIA", memory_type="GDDR6X"),
    # NVIDIA Blackwell (GeForce) whitepaper, RTX 5090: BF16 tensor with FP32 accumulate 209.5 dense
    # (419 sparse); FP8 with FP32 accumulate 419 dense; 32 GB GDDR7 at 1,792 GB/s; PCIe Gen5 x16
    # 128 GB/s bidirectional -> 64 GB/s.
    GPUSpec("RTX5090", 209.5 * TERA, 1.792 * TERA, 32 * GIGA, 64 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S,
            board_power_w=575, source="NVIDIA RTX Blackwell GPU architecture whitepaper", fp8_flops=419 * TERA,
            architecture="blackwell", vendor="NVIDIA", memory_type="GDDR7"),
    # NVIDIA Ampere GA102 whitepaper, GeForce RTX 3090: BF16 tensor with FP32 accumulate 71 dense
    # (142 sparse); no FP8; 24 GB GDDR6X at 936 GB/s; NVLink bridge 112.5 GB/s total -> ~56 GB/s per
    # direction.
    GPUSpec("RTX3090", 71 * TERA, 0.936 * TERA, 24 * GIGA, 56 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S,
            board_power_w=350, source="NVIDIA Ampere GA102 GPU architecture whitepaper",
            architecture="ampere", vendor="NVIDIA", memory_type="GDDR6X"),
    # NVIDIA A40 data sheet: BF16 tensor 149.7 TFLOPS dense (299.4 with sparsity); no FP8; 48 GB GDDR6
    # at 696 GB/s; NVLink bridge (2 GPUs) 112.5 GB/s bidirectional -> 56.25 GB/s per direction. Vidur's
    # profiles measure it.
    GPUSpec("A40", 149.7 * TERA, 0.696 * TERA, 48 * GIGA, 56.25 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S, board_power_w=300, source="NVIDIA A40 data sheet",
            architecture="ampere", vendor="NVIDIA", memory_type="GDDR6"),
    # ---- data-sheet presets without measured profiles of their own (issue 41) --------------------
    # AMD Instinct MI300X (ROCm docs, "AMD Instinct MI300 series microarchitecture", peak-performance
    # table; AMD lists sparsity separately): matrix BF16 1,307.4 TFLOPS, FP8 2,614.9 TFLOPS; HBM3 192 GB
    # at 5.3 TB/s; seven Infinity Fabric (xGMI) links of 128 GB/s bidirectional each form a fully
    # connected 8-GPU node -> 7 x 64 = 448 GB/s per direction. That is the 8-GPU figure: a TP group of g
    # GPUs has only g - 1 of the links (TP 2: 64 GB/s), so the analytic all-reduce is optimistic below TP 8.
    GPUSpec("MI300X", 1307.4 * TERA, 5.3 * TERA, 192 * GIGA, 448 * GIGA,
            source="AMD Instinct MI300X data sheet / ROCm MI300 microarchitecture", fp8_flops=2614.9 * TERA,
            board_power_w=750,
            architecture="cdna3", vendor="AMD", memory_type="HBM3"),
    # AMD Instinct MI325X data sheet: the MI300X's CDNA 3 compute unchanged (BF16 1,307.4, FP8 2,614.9
    # TFLOPS dense; 5,229.8 FP8 with sparsity), HBM3E 256 GB at 6 TB/s; the same seven 128 GB/s
    # Infinity Fabric links (448 GB/s per direction; the TP < 8 caveat of MI300X applies).
    GPUSpec("MI325X", 1307.4 * TERA, 6.0 * TERA, 256 * GIGA, 448 * GIGA,
            board_power_w=1000, source="AMD Instinct MI325X data sheet", fp8_flops=2614.9 * TERA,
            architecture="cdna3", vendor="AMD", memory_type="HBM3e"),
    # AMD Instinct MI355X data sheet (CDNA 4): BF16 2.5 PFLOPS dense (2,516.6 at 2.4 GHz x 1,024 matrix
    # cores), FP8 5.0 PFLOPS dense (5,033.2); HBM3E 288 GB at 8 TB/s; seven Infinity Fabric links of
    # 153.6 GB/s bidirectional -> 7 x 76.8 = 537.6 GB/s per direction (TP < 8 caveat as MI300X).
    GPUSpec("MI355X", 2516.6 * TERA, 8.0 * TERA, 288 * GIGA, 537.6 * GIGA,
            board_power_w=1400, source="AMD Instinct MI355X data sheet", fp8_flops=5033.2 * TERA,
            architecture="cdna4", vendor="AMD", memory_type="HBM3e"),
    # NVIDIA HGX B300 data sheet (8 Blackwell Ultra GPUs): FP16/BF16 36 PFLOPS and FP8 72 PFLOPS with
    # sparsity -> 2.25 and 4.5 PFLOPS dense per GPU; up to 2.3 TB HBM3e -> 288 GB per GPU at 8 TB/s;
    # NVLink 5 1.8 TB/s -> 900 GB/s per direction; eight ConnectX-8 SuperNICs at 800 Gb/s.
    GPUSpec("B300", 2250 * TERA, 8.0 * TERA, 288 * GIGA, 900 * GIGA,
            source="NVIDIA HGX B300 data sheet", fp8_flops=4500 * TERA, inter_node_bytes_per_s=NIC_800G,
            architecture="blackwell", vendor="NVIDIA", memory_type="HBM3e"),
    # NVIDIA GB200 NVL72 specifications, per GPU (rack / 72): FP16/BF16 360 PFLOPS and FP8 720 PFLOPS
    # with sparsity -> 2.5 and 5 PFLOPS dense; up to 13.4 TB HBM3e -> 186 GB at 576 / 72 = 8 TB/s;
    # NVLink 130 TB/s / 72 = 1.8 TB/s -> 900 GB/s per direction across one 72-GPU NVLink domain.
    GPUSpec("GB200", 2500 * TERA, 8.0 * TERA, 186 * GIGA, 900 * GIGA,
            source="NVIDIA GB200 NVL72 specifications (per GPU)", fp8_flops=5000 * TERA,
            inter_node_bytes_per_s=NIC_400G, gpus_per_node=72,
            architecture="blackwell", vendor="NVIDIA", memory_type="HBM3e"),
    # NVIDIA L40 data sheet: BF16 tensor 181.05 TFLOPS dense (362.1 sparse), FP8 362 dense (724 sparse);
    # 48 GB GDDR6 at 864 GB/s; PCIe Gen4 x16 64 GB/s bidirectional -> 32 GB/s, no NVLink.
    GPUSpec("L40", 181.05 * TERA, 0.864 * TERA, 48 * GIGA, 32 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S,
            board_power_w=300, source="NVIDIA L40 data sheet", fp8_flops=362 * TERA,
            architecture="ada", vendor="NVIDIA", memory_type="GDDR6"),
    # NVIDIA L20 (China-market Ada, PCIe): NVIDIA publishes no L20 data sheet on nvidia.com; these are the
    # product brief's figures as reported (e.g. "GPU Performance (Data Sheets) Quick Reference",
    # arthurchiao.art, 2023): BF16 tensor 119.5 TFLOPS dense, INT8 239 TOPS; FP8 taken equal to INT8 as on
    # every Ada data sheet (L40: 362 / 362, L40S: 733 / 733); 48 GB GDDR6 at 864 GB/s; PCIe Gen4 x16.
    GPUSpec("L20", 119.5 * TERA, 0.864 * TERA, 48 * GIGA, 32 * GIGA,
            allreduce_latency_s=PCIE_ALLREDUCE_LATENCY_S,
            source="NVIDIA L20 product brief figures as reported (no public NVIDIA data sheet)",
            fp8_flops=239 * TERA, architecture="ada", vendor="NVIDIA", memory_type="GDDR6"),
    # NVIDIA A800 80GB SXM (the export variant of A100, product brief): A100's BF16 312 TFLOPS dense and
    # HBM2e 80 GB at 2,039 GB/s; no FP8; NVLink cut from 600 to 400 GB/s bidirectional -> 200 GB/s.
    GPUSpec("A800", 312 * TERA, 2.039 * TERA, 80 * GIGA, 200 * GIGA,
            board_power_w=400, source="NVIDIA A800 product brief (80GB SXM)",
            architecture="ampere", vendor="NVIDIA", memory_type="HBM2e"),
    # NVIDIA A100 data sheet, 40GB SXM: BF16 312 TFLOPS dense; no FP8; HBM2 40 GB at 1,555 GB/s; NVLink
    # 600 GB/s -> 300 GB/s per direction; DGX A100 (40GB): ConnectX-6 200 Gb/s per GPU.
    GPUSpec("A100-40GB-SXM", 312 * TERA, 1.555 * TERA, 40 * GIGA, 300 * GIGA,
            board_power_w=400, source="NVIDIA A100 data sheet (40GB SXM)", inter_node_bytes_per_s=NIC_200G,
            architecture="ampere", vendor="NVIDIA", memory_type="HBM2"),
    # Huawei Ascend 910B: Huawei publishes no per-chip data sheet for it, and its bins (910B1-B4) differ.
    # As reported ("GPU Performance (Data Sheets) Quick Reference", arthurchiao.art, 2023): FP16 320
    # TFLOPS, 64 GB HBM2e, HCCS 56 GB/s bidirectional to each of 7 peers (392 GB/s total) -> 7 x 28 =
    # 196 GB/s per direction (point to point, no switch: the TP < 8 caveat of MI300X applies). BF16 is
    # taken equal to FP16: a 910B2 measured 315 TFLOPS BF16 against 314 FP16 in the same GEMM test
    # (github.com/zzc0721/torch-performance-test-data, issue 109). ASSUMPTION: no HBM bandwidth is
    # published; 1.6 TB/s is four HBM2e stacks at 3.2 Gb/s per pin. No FP8 figure is published (None).
    # The all-reduce latency is the NVLink-class default, not measured on HCCL. Write a spec file
    # (--gpu-spec) with your bin's figures.
    GPUSpec("Ascend910B", 320 * TERA, 1.6 * TERA, 64 * GIGA, 196 * GIGA,
            source="Huawei Ascend 910B figures as reported (no public Huawei data sheet; HBM bandwidth assumed)",
            architecture="ascend-910b", vendor="Huawei", memory_type="HBM2e"),
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
    "mi300": "mi300x", "amd-mi300x": "mi300x", "instinct-mi300x": "mi300x",
    "amd-mi325x": "mi325x", "instinct-mi325x": "mi325x",
    "amd-mi355x": "mi355x", "instinct-mi355x": "mi355x",
    "b300-sxm": "b300", "blackwell-ultra": "b300", "hgx-b300": "b300",
    "b200-sxm": "b200", "hgx-b200": "b200",
    "gb200-nvl72": "gb200", "nvl72": "gb200",
    "l40-48gb": "l40", "nvidia-l40": "l40", "l40s-48gb": "l40s", "nvidia-l40s": "l40s", "l20-48gb": "l20",
    "a800-sxm": "a800", "a800-80gb": "a800", "a800-80gb-sxm": "a800",
    "a100-40gb": "a100-40gb-sxm", "a100-40g": "a100-40gb-sxm",
    "910b": "ascend910b", "ascend-910b": "ascend910b", "huawei-910b": "ascend910b",
    "h200-141gb": "h200", "h20-96gb": "h20",
}


def get_gpu(name: str) -> GPUSpec:
    """The preset called ``name`` (case-insensitive; aliases such as ``h100`` or ``a100``)."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in _BY_NAME:
        from tltcore.config import suggest

        raise InputError(f"unknown GPU '{name}'{suggest(name.strip(), list(GPU_NAMES))}; known: "
                         f"{', '.join(GPU_NAMES)}; describe any other by its data sheet in a GPU spec file "
                         "(--gpu-spec FILE.toml, or cluster.gpu_spec)", field="gpu")
    return _BY_NAME[key]
