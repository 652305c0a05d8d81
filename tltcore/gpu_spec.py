"""A GPU described by its data sheet: the spec file a user writes for a GPU tlt has no preset for.

``tlt sim run --gpu-spec my.toml`` (and ``tlt sim sensitivity``, ``tlt advise``) or a scenario's
``cluster.gpu_spec`` (a path, relative to the scenario file, or an inline table) give it. The file is
flat TOML in the units data sheets print, so a user copies numbers without converting them::

    name = "MI300X"
    source = "AMD Instinct MI300X data sheet"
    architecture = "cdna3"        # decides which measured calibration it borrows
    memory_type = "HBM3"          # HBM* or GDDR* (default HBM)
    bf16_tflops = 1307.4          # dense (without sparsity)
    fp8_tflops = 2614.9           # dense; leave out where the GPU has no FP8 tensor cores
    hbm_tb_per_s = 5.3
    memory_gb = 192
    intra_node_gb_per_s = 448     # per GPU per direction (NVLink / xGMI / PCIe)
    inter_node_gb_per_s = 50      # per GPU per direction (one 400 Gb/s NIC); optional
    gpus_per_node = 8
    board_power_w = 750           # max board power (TDP); optional: tlt's energy estimate uses it

``flops_efficiency`` / ``bandwidth_efficiency`` (optional) are what you measured: left out, the
calibration the GPU borrows supplies them (or, under ``cost.model = "roofline"``, the typical 0.70 /
0.85). Unknown keys and impossible values are refused naming the file and the key. The scenario
keeps the file's *content* (``scenario.resolved.toml`` reruns anywhere, and the scenario hash changes
when the file does).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from tltcore.config import ConfigModel, Float, Int, Str, validate_tree
from tltcore.config_files import load_toml_text, read_file
from tltcore.errors import InputError
from tltcore.hardware import (
    DEFAULT_BANDWIDTH_EFFICIENCY,
    DEFAULT_FLOPS_EFFICIENCY,
    GIGA,
    NVLINK_ALLREDUCE_LATENCY_S,
    TERA,
    GPUSpec,
)

#: What a spec file's ``memory_type`` may start with (the borrowing rule tells HBM from GDDR parts).
MEMORY_KINDS = ("HBM", "GDDR")


class GPUSheet(ConfigModel):
    """A GPU spec file (or ``cluster.gpu_spec`` table) in data-sheet units; :meth:`to_spec` is the
    :class:`~tltcore.hardware.GPUSpec` every cost model takes. The bounds catch unit slips (FLOP/s
    written where TFLOPS belong, bits for bytes) rather than judge a part."""

    SECTION = "cluster.gpu_spec"

    name: Str
    source: Str
    architecture: Str
    vendor: Str | None = None
    memory_type: Str = "HBM"
    bf16_tflops: Float = Field(gt=0, le=100_000)
    fp8_tflops: Float | None = Field(None, gt=0, le=200_000)
    hbm_tb_per_s: Float = Field(gt=0, le=100)
    memory_gb: Float = Field(gt=0, le=100_000)
    intra_node_gb_per_s: Float = Field(gt=0, le=100_000)
    inter_node_gb_per_s: Float | None = Field(None, gt=0, le=10_000)
    gpus_per_node: Int = Field(8, ge=1, le=100_000)
    flops_efficiency: Float | None = Field(None, gt=0, le=1)
    bandwidth_efficiency: Float | None = Field(None, gt=0, le=1)
    allreduce_latency_us: Float | None = Field(None, ge=0, le=10_000)
    board_power_w: Float | None = Field(None, gt=0, le=10_000)

    @model_validator(mode="after")
    def _consistent(self) -> GPUSheet:
        if not self.memory_type.upper().startswith(MEMORY_KINDS):
            raise InputError(f"must start with HBM or GDDR (e.g. HBM3e, GDDR6), got '{self.memory_type}'",
                             field="memory_type")
        if self.fp8_tflops is not None and self.fp8_tflops < self.bf16_tflops:
            raise InputError(f"{self.fp8_tflops:g} is below bf16_tflops = {self.bf16_tflops:g}; dense FP8 is at least "
                             "dense BF16 on every part: is one of them a with-sparsity figure?", field="fp8_tflops")
        return self

    def to_spec(self) -> GPUSpec:
        """The :class:`GPUSpec` (SI units). Efficiencies left out take the typical defaults here;
        :func:`tltcore.cost.measured.measured_cost_model` reads :attr:`flops_efficiency` itself to
        know whether the user set one."""
        latency = NVLINK_ALLREDUCE_LATENCY_S if self.allreduce_latency_us is None else self.allreduce_latency_us / 1e6
        return GPUSpec(
            self.name, self.bf16_tflops * TERA, self.hbm_tb_per_s * TERA, self.memory_gb * GIGA,
            self.intra_node_gb_per_s * GIGA,
            flops_efficiency=self.flops_efficiency if self.flops_efficiency is not None else DEFAULT_FLOPS_EFFICIENCY,
            bandwidth_efficiency=(self.bandwidth_efficiency if self.bandwidth_efficiency is not None
                                  else DEFAULT_BANDWIDTH_EFFICIENCY),
            allreduce_latency_s=latency, source=self.source,
            fp8_flops=self.fp8_tflops * TERA if self.fp8_tflops is not None else None,
            inter_node_bytes_per_s=self.inter_node_gb_per_s * GIGA if self.inter_node_gb_per_s is not None else None,
            gpus_per_node=self.gpus_per_node, architecture=self.architecture, vendor=self.vendor or "",
            memory_type=self.memory_type, board_power_w=self.board_power_w)

    @classmethod
    def of(cls, spec: GPUSpec) -> GPUSheet:
        """A preset as a spec file's fields (a starting point to edit: ``tlt``'s presets in file form)."""
        if not spec.analytic or spec.interconnect_bytes_per_s is None:
            raise InputError("has no analytic peaks to write as a spec file", path=f"gpu {spec.name}")
        return cls(name=spec.name, source=spec.source, architecture=spec.architecture or "unknown",
                   vendor=spec.vendor or None, memory_type=spec.memory_type or "HBM",
                   bf16_tflops=spec.bf16_flops / TERA,
                   fp8_tflops=spec.fp8_flops / TERA if spec.fp8_flops is not None else None,
                   hbm_tb_per_s=spec.hbm_bytes_per_s / TERA, memory_gb=spec.memory_bytes / GIGA,
                   intra_node_gb_per_s=spec.interconnect_bytes_per_s / GIGA,
                   inter_node_gb_per_s=(spec.inter_node_bytes_per_s / GIGA
                                        if spec.inter_node_bytes_per_s is not None else None),
                   gpus_per_node=spec.gpus_per_node, allreduce_latency_us=spec.allreduce_latency_s * 1e6,
                   board_power_w=spec.board_power_w)


def load_gpu_sheet(path: str | Path) -> GPUSheet:
    """A GPU spec file, validated: a missing file, bad TOML, an unknown key or an impossible value is
    one :class:`~tltcore.errors.InputError` naming the file (and the key)."""
    p, text = read_file(path, {}, "GPU spec")
    data = load_toml_text(text, path=str(p))
    try:
        return validate_tree(GPUSheet, data, path=str(p))
    except InputError as exc:
        # the file's keys are top-level: name them as the user wrote them, not as cluster.gpu_spec.*
        field = exc.field.removeprefix(GPUSheet.SECTION + ".") if exc.field else None
        raise InputError(exc.message, path=exc.path, row=exc.row, field=field) from None


__all__ = ["MEMORY_KINDS", "GPUSheet", "load_gpu_sheet"]
