"""Hostile GPU spec files (``--gpu-spec FILE.toml``, ``cluster.gpu_spec``): every bad one is refused.

Each case in :data:`CASES` writes ``spec.toml`` (or a special file) in its folder and runs one command
line. It must end as bad input ends everywhere in tlt: exit 2, exactly one stderr line starting with
``tlt: error:`` that names the spec file (or the scenario holding the spec, or the flag) and the key,
no traceback, nothing written (the ``--out`` folder never made, the case's folder as it was), within
:data:`BOUND_S` seconds of CPU time. The refusals happen while the scenario is resolved, before any
cost model or trace is built.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_output_safety import snapshot

from conftest import invoke_bounded

BOUND_S = 20.0
COMMANDS = ("sim run", "sim sensitivity", "advise")
SPEC = "{spec}"  # in ``expect``: the spec file's path
SCENARIO = "{scenario}"  # in ``expect``: the scenario file's path

GOOD = {"name": '"MyGPU"', "source": '"my data sheet"', "architecture": '"cdna3"', "bf16_tflops": "1000",
        "hbm_tb_per_s": "4", "memory_gb": "128", "intra_node_gb_per_s": "300"}


def spec_text(**change: str | None) -> str:
    """A valid spec file with keys changed (a value of None drops the key)."""
    fields = {**GOOD, **change}
    return "".join(f"{k} = {v}\n" for k, v in fields.items() if v is not None)


@dataclass(frozen=True)
class Case:
    """``text``: written to ``spec.toml`` (``special``: ``fifo``, ``devzero``, ``big``, ``folder`` or
    ``missing`` instead); ``scenario``: a scenario TOML written to ``s.toml`` and passed as
    ``--scenario`` (``{spec}`` in it is the spec's path), else ``--gpu-spec spec.toml`` is passed;
    ``expect``: words the one error line must hold."""

    id: str
    text: str = ""
    expect: tuple[str, ...] = ()
    command: str = "sim run"
    args: tuple[str, ...] = ()
    scenario: str | None = None
    special: str | None = None


def bad(id: str, key: str, *words: str, **change: str | None) -> Case:
    return Case(id, spec_text(**change), (SPEC, f"field '{key}'", *words))


CASES: list[Case] = [
    # a key nobody reads, or a required one missing
    Case("unknown-key", spec_text(bf16_tflop="3"), (SPEC, "field 'bf16_tflop'", "did you mean bf16_tflops")),
    Case("scenario-table-in-spec", spec_text() + "[cluster]\ngpu = \"H100\"\n", (SPEC, "field 'cluster'")),
    bad("missing-name", "name", "required", name=None),
    bad("missing-source", "source", "required", source=None),
    bad("missing-architecture", "architecture", "required", architecture=None),
    bad("missing-bf16", "bf16_tflops", "required", bf16_tflops=None),
    bad("missing-bandwidth", "hbm_tb_per_s", "required", hbm_tb_per_s=None),
    bad("missing-memory", "memory_gb", "required", memory_gb=None),
    bad("missing-link", "intra_node_gb_per_s", "required", intra_node_gb_per_s=None),
    # unit slips and impossible values
    bad("bf16-in-flops", "bf16_tflops", "(0, 100000]", bf16_tflops="1.3e15"),
    bad("bf16-zero", "bf16_tflops", bf16_tflops="0"),
    bad("bf16-negative", "bf16_tflops", bf16_tflops="-989"),
    bad("bf16-nan", "bf16_tflops", "finite", bf16_tflops="nan"),
    bad("bf16-inf", "bf16_tflops", "finite", bf16_tflops="inf"),
    bad("bf16-text", "bf16_tflops", "finite number", bf16_tflops='"fast"'),
    bad("bf16-table", "bf16_tflops", bf16_tflops="{ dense = 1000 }"),
    bad("fp8-sparse-below-bf16", "fp8_tflops", "with-sparsity", fp8_tflops="500"),
    bad("bandwidth-in-bits", "hbm_tb_per_s", "(0, 100]", hbm_tb_per_s="42400"),
    bad("memory-zero", "memory_gb", memory_gb="0"),
    bad("memory-in-bytes", "memory_gb", memory_gb="1.92e11"),
    bad("link-negative", "intra_node_gb_per_s", intra_node_gb_per_s="-1"),
    bad("inter-node-zero", "inter_node_gb_per_s", inter_node_gb_per_s="0"),
    bad("gpus-per-node-zero", "gpus_per_node", gpus_per_node="0"),
    bad("gpus-per-node-float", "gpus_per_node", "integer", gpus_per_node="2.5"),
    bad("efficiency-above-one", "flops_efficiency", "(0, 1]", flops_efficiency="1.5"),
    bad("efficiency-percent", "bandwidth_efficiency", bandwidth_efficiency="85"),
    bad("latency-negative", "allreduce_latency_us", allreduce_latency_us="-8"),
    bad("memory-type-sram", "memory_type", "HBM or GDDR", memory_type='"SRAM"'),
    bad("name-blank", "name", "non-empty", name='"   "'),
    bad("name-nul", "name", name='"a\\u0000b"'),
    bad("architecture-number", "architecture", architecture="3"),
    # files that are no spec
    Case("not-toml", "name = MyGPU = 3\n", (SPEC, "not valid TOML")),
    Case("empty-file", "", (SPEC, "field 'name'", "required")),
    Case("missing-file", special="missing", expect=(SPEC, "field 'cluster.gpu_spec'", "not found")),
    Case("a-folder", special="folder", expect=(SPEC, "is a folder")),
    Case("fifo", special="fifo", expect=(SPEC,)),
    Case("dev-zero", special="devzero", expect=("/dev/zero",)),
    Case("huge-file", special="big", expect=(SPEC, "larger than")),
    # the spec against the rest of the scenario
    Case("weights-do-not-fit", spec_text(memory_gb="8"), ("--tp", "field 'cluster.tp'", "MyGPU's 8 GB"),
         args=("--tp", "2", "--gpus", "8")),
    Case("spec-and-another-gpu", spec_text(), ("--gpu", "field 'cluster.gpu'", "is not the GPU spec's name"),
         args=("--gpu", "H20")),
    Case("inline-bad-value", scenario="[cluster.gpu_spec]\n" + spec_text(hbm_tb_per_s="-4"),
         expect=(SCENARIO, "field 'cluster.gpu_spec.hbm_tb_per_s'")),
    Case("inline-unknown-key", scenario="[cluster.gpu_spec]\n" + spec_text(tflops="1"),
         expect=(SCENARIO, "field 'cluster.gpu_spec.tflops'")),
    Case("scenario-spec-path-bad", spec_text(bf16_tflops="-1"), scenario='[cluster]\ngpu_spec = "spec.toml"\n',
         expect=(SPEC, "field 'bf16_tflops'")),
    Case("scenario-spec-name-clash", spec_text(), scenario='[cluster]\ngpu = "H100"\ngpu_spec = "spec.toml"\n',
         expect=(SCENARIO, "field 'cluster.gpu'", "is not the GPU spec's name")),
    Case("scenario-spec-not-a-string", scenario="[cluster]\ngpu_spec = 3\n",
         expect=(SCENARIO, "field 'cluster.gpu_spec'")),
    # the other commands that take --gpu-spec
    Case("sensitivity-bad-spec", spec_text(bf16_tflops="0"), (SPEC, "field 'bf16_tflops'"), command="sim sensitivity"),
    Case("advise-bad-spec", spec_text(hbm_tb_per_s="0"), (SPEC, "field 'hbm_tb_per_s'"), command="advise"),
    Case("advise-unknown-key", spec_text(hbm="4"), (SPEC, "field 'hbm'"), command="advise"),
]


def test_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


def _prepare(case: Case, root: Path) -> Path:
    spec = root / "spec.toml"
    if case.special == "fifo":
        os.mkfifo(spec)
    elif case.special == "devzero":
        spec = Path("/dev/zero")
    elif case.special == "big":
        spec.write_text(spec_text() + "# " + "x" * (5 * 2**20) + "\n")
    elif case.special == "folder":
        spec.mkdir()
    elif case.special != "missing":
        spec.write_text(case.text)
    return spec


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_gpu_spec_is_refused_in_one_line(case: Case, tmp_path: Path) -> None:
    root = tmp_path / "case"
    root.mkdir()
    spec = _prepare(case, root)
    out = tmp_path / "out"
    argv = [*case.command.split(), *case.args, "--out", str(out), "--seeds", "1"]
    scenario = root / "s.toml"
    if case.scenario is not None:
        scenario.write_text(case.scenario)
        argv += ["--scenario", str(scenario)]
    else:
        argv += ["--gpu-spec", str(spec)]
    before = snapshot(root)
    proc = invoke_bounded(BOUND_S, *argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), proc.stderr
    for word in case.expect:
        word = word.replace(SPEC, str(spec)).replace(SCENARIO, str(scenario))
        assert word in lines[0], (word, lines[0])
    assert not out.exists() and snapshot(root) == before
