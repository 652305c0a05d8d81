"""Any GPU by its data sheet (issue 41, item 3): the bundled presets are sane data sheets, a spec file
round-trips, the scenario keeps the spec's content, every place that prices or sizes on the scenario's
GPU resolves it one way, and every output names the GPU and its source."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from conftest import REPO, invoke_cli
from tltcore.config_files import dump_toml
from tltcore.errors import InputError
from tltcore.gpu_spec import GPUSheet, load_gpu_sheet
from tltcore.hardware import _PRESETS, GIGA, GPU_NAMES, TERA, get_gpu
from tltsim.scenario import cluster_gpu, prepare, resolve, scenario_gpu, scenario_hash, scenario_toml
from tltsim.scenario.build import cost_model, describe_gpu

EXAMPLE = REPO / "examples" / "gpu-spec-mi300x.toml"
ANALYTIC = [g for g in _PRESETS if g.analytic]
#: A small run (one step of 4 prompt groups capped at 4,000 tokens, 4 workers, one seed).
SMALL = ["--trace", "intern_s1_math", "--set", "trace.prompts_per_step=4", "--set", "trace.cap=4000", "--gpus", "8",
         "--tp", "2", "--seeds", "1", "--steps", "1", "--perfetto", "off"]


# ---- the presets --------------------------------------------------------------------------------------
#: The presets tlt had before issue 41: their data-sheet figures must not move.
BEFORE = {"H100-SXM": (989.4, 3.35, 80, 450), "H800": (989.4, 3.35, 80, 200), "H200": (989.4, 4.8, 141, 450),
          "A100-80GB-SXM": (312, 2.039, 80, 300), "H20": (148, 4.0, 96, 450), "L40S": (362.05, 0.864, 48, 32),
          "B200": (2250, 8.0, 180, 900), "RTX4090": (165.2, 1.008, 24, 32), "RTX5090": (209.5, 1.792, 32, 64),
          "RTX3090": (71, 0.936, 24, 56), "A40": (149.7, 0.696, 48, 56.25)}


def test_the_presets_of_before_keep_their_figures():
    for name, (tflops, tbs, gb, link) in BEFORE.items():
        g = get_gpu(name)
        assert (g.bf16_flops, g.hbm_bytes_per_s, g.memory_bytes, g.interconnect_bytes_per_s) == \
            (tflops * TERA, tbs * TERA, gb * GIGA, link * GIGA), name
        assert (g.flops_efficiency, g.bandwidth_efficiency) == (0.70, 0.85)


@pytest.mark.parametrize("gpu", ANALYTIC, ids=[g.name for g in ANALYTIC])
def test_every_preset_is_a_sane_data_sheet(gpu):
    assert gpu.source and gpu.architecture and gpu.vendor and gpu.memory_type
    if gpu.fp8_flops is not None:  # dense FP8 is twice dense BF16 on every part here: a sparse figure would be 4x
        assert gpu.bf16_flops < gpu.fp8_flops == pytest.approx(2 * gpu.bf16_flops, rel=0.02)
    else:  # Ampere has no FP8 tensor cores; Huawei publishes no 910B FP8 figure
        assert gpu.architecture in ("ampere", "ascend-910b")
    assert 50 * TERA <= gpu.bf16_flops <= 3000 * TERA
    assert 0.5 * TERA <= gpu.hbm_bytes_per_s <= 10 * TERA
    assert 16 * GIGA <= gpu.memory_bytes <= 300 * GIGA
    assert 30 <= gpu.ridge_flops_per_byte / (0.70 / 0.85) <= 500  # peak FLOP per byte: H20 37 ... B200 281
    assert 16 * GIGA <= gpu.interconnect_bytes_per_s <= 1000 * GIGA
    assert gpu.inter_node_bytes_per_s is None or 10 * GIGA <= gpu.inter_node_bytes_per_s <= 200 * GIGA
    assert gpu.gddr == gpu.memory_type.startswith("GDDR")


def test_the_new_presets_and_their_aliases():
    for alias, name in (("mi300x", "MI300X"), ("MI300", "MI300X"), ("mi325x", "MI325X"), ("mi355x", "MI355X"),
                        ("b300", "B300"), ("gb200", "GB200"), ("GB200-NVL72", "GB200"), ("h200", "H200"),
                        ("h800", "H800"), ("h20", "H20"), ("l40", "L40"), ("l40s", "L40S"), ("l20", "L20"),
                        ("a800", "A800"), ("A100-40GB", "A100-40GB-SXM"), ("910b", "Ascend910B"),
                        ("ascend 910b", "Ascend910B")):
        assert get_gpu(alias).name == name
    assert get_gpu("GB200").gpus_per_node == 72 and get_gpu("H100").gpus_per_node == 8
    assert get_gpu("Ascend910B").fp8_flops is None  # Huawei publishes none: left out, not guessed
    with pytest.raises(InputError, match=r"unknown GPU 'MI30X' \(did you mean MI300X.*--gpu-spec"):
        get_gpu("MI30X")


# ---- the spec file -------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", ANALYTIC, ids=[g.name for g in ANALYTIC])
def test_every_preset_round_trips_through_a_spec_file(gpu, tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(dump_toml(GPUSheet.of(gpu).model_dump()))
    assert load_gpu_sheet(path).to_spec() == gpu


def test_the_example_spec_file_is_the_mi300x_preset_under_its_own_name():
    spec = load_gpu_sheet(EXAMPLE).to_spec()
    preset = get_gpu("MI300X")
    assert spec.name == "MI300X-spec" and spec.source.startswith("AMD Instinct MI300X data sheet")
    assert dataclasses.replace(spec, name=preset.name, source=preset.source) == preset


def _spec(tmp_path, text: str, name: str = "my.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


GOOD = ('name = "MyGPU"\nsource = "my data sheet"\narchitecture = "cdna3"\nbf16_tflops = 1000\n'
        'hbm_tb_per_s = 4\nmemory_gb = 128\nintra_node_gb_per_s = 300\n')


@pytest.mark.parametrize(("text", "field", "words"), [
    (GOOD + "bf16_tflop = 3\n", "bf16_tflop", "did you mean bf16_tflops"),
    (GOOD.replace("bf16_tflops = 1000", "bf16_tflops = 1e15"), "bf16_tflops", "must be in (0, 100000]"),
    (GOOD + "fp8_tflops = 500\n", "fp8_tflops", "with-sparsity"),
    (GOOD.replace('source = "my data sheet"\n', ""), "source", "required"),
    (GOOD + 'memory_type = "SRAM"\n', "memory_type", "HBM or GDDR"),
    (GOOD + "flops_efficiency = 1.5\n", "flops_efficiency", "(0, 1]"),
    (GOOD + "gpus_per_node = 2.5\n", "gpus_per_node", "integer"),
    (GOOD.replace("hbm_tb_per_s = 4", 'hbm_tb_per_s = "fast"'), "hbm_tb_per_s", "finite number"),
])
def test_a_bad_spec_file_is_refused_naming_the_file_and_the_key(tmp_path, text, field, words):
    path = _spec(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_gpu_sheet(path)
    assert err.value.path == str(path) and err.value.field == field and words in err.value.message
    # the same file given to a scenario: the error still names the file and its key, not the scenario
    with pytest.raises(InputError) as err:
        resolve(None, [("cluster.gpu_spec", str(path), "--gpu-spec")])
    assert err.value.path == str(path) and err.value.field == field


# ---- the scenario --------------------------------------------------------------------------------------
def test_a_spec_path_is_read_relative_to_the_scenario_and_kept_as_content(tmp_path):
    _spec(tmp_path, GOOD, "gpu.toml")
    scenario = tmp_path / "s.toml"
    scenario.write_text('[cluster]\ngpu_spec = "gpu.toml"\ngpus = 8\ntp = 2\n')
    s = resolve(scenario).scenario
    assert s.cluster.gpu == "MyGPU" and scenario_gpu(s).bf16_flops == 1000 * TERA
    text = scenario_toml(s)
    assert "[cluster.gpu_spec]" in text and "bf16_tflops = 1000" in text and "gpu.toml" not in text
    # the resolved file reruns anywhere, to the same scenario and hash
    moved = tmp_path / "elsewhere" / "scenario.resolved.toml"
    moved.parent.mkdir()
    moved.write_text(text)
    again = resolve(moved).scenario
    assert again == s and scenario_hash(again) == scenario_hash(s)
    # editing the file gives another scenario, hence another results folder
    _spec(tmp_path, GOOD.replace("hbm_tb_per_s = 4", "hbm_tb_per_s = 5"), "gpu.toml")
    assert scenario_hash(resolve(scenario).scenario) != scenario_hash(s)


def test_an_inline_spec_error_names_the_scenario_and_the_dotted_field(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text("[cluster.gpu_spec]\n" + GOOD.replace("hbm_tb_per_s = 4", "hbm_tb_per_s = -4"))
    with pytest.raises(InputError) as err:
        resolve(scenario)
    assert err.value.path == str(scenario) and err.value.field == "cluster.gpu_spec.hbm_tb_per_s"


def test_a_flag_replaces_the_scenario_files_gpu_given_the_other_way(tmp_path):
    spec = _spec(tmp_path, GOOD)
    r = resolve("aime_qwen7b_h20", [("cluster.gpu_spec", str(spec), "--gpu-spec")])
    assert r.scenario.cluster.gpu == "MyGPU"
    assert any("cluster.gpu = 'H20' is replaced by the GPU spec --gpu-spec gives" in w for w in r.warnings)
    file = tmp_path / "s.toml"
    file.write_text(f'[cluster]\ngpu_spec = "{spec}"\n')
    r = resolve(file, [("cluster.gpu", "L40", "--gpu")])
    assert r.scenario.cluster.gpu == "L40" and r.scenario.cluster.gpu_spec is None
    assert any("cluster.gpu_spec is replaced by the preset --gpu names" in w for w in r.warnings)
    with pytest.raises(InputError, match="'H20' is not the GPU spec's name 'MyGPU'") as err:
        resolve(None, [("cluster.gpu", "H20", "--gpu"), ("cluster.gpu_spec", str(spec), "--gpu-spec")])
    assert err.value.field == "cluster.gpu"


def test_the_scenarios_gpu_sizes_the_kv_cache_and_is_checked_against_the_model(tmp_path):
    small = _spec(tmp_path, GOOD.replace("memory_gb = 128", "memory_gb = 8"))
    with pytest.raises(InputError, match=r"needs 7\.6 GB of weights per GPU at tp=2, more than 90% of MyGPU's 8 GB"):
        resolve(None, [("cluster.gpu_spec", str(small), "--gpu-spec"), ("cluster.tp", 2, "--tp"),
                       ("cluster.gpus", 8, "--gpus")])
    big = resolve(None, [("cluster.gpu_spec", str(_spec(tmp_path, GOOD, "big.toml")), "--gpu-spec")]).scenario
    mi = resolve(None, [("cluster.gpu", "MI300X", "--gpu")]).scenario
    assert cluster_gpu(mi.cluster) == get_gpu("MI300X")
    assert prepare(big).engine.kv_capacity_tokens < prepare(mi).engine.kv_capacity_tokens  # 128 GB vs 192 GB


def test_the_gpu_line_names_the_gpu_its_source_and_what_prices_it(tmp_path):
    def line(*sets):
        s = resolve(None, [(k, v, "test") for k, v in sets]).scenario
        return describe_gpu(s, cost_model(s))

    assert line(("cluster.gpu", "MI300X")) == ("gpu: MI300X (AMD Instinct MI300X data sheet / ROCm MI300 "
                                               "microarchitecture; calibration borrowed from H100-SXM, not measured "
                                               "on MI300X)")
    assert line(("cluster.gpu", "H100")) == ("gpu: H100-SXM (NVIDIA H100 data sheet (SXM5); calibrated on its own "
                                             "measured profiles)")
    assert line(("cluster.gpu", "L40"), ("cost.model", "roofline")) == (
        "gpu: L40 (NVIDIA L40 data sheet; roofline at its data-sheet peaks, typical efficiencies)")
    assert line(("cluster.gpu", "H100"), ("cluster.flops_efficiency", 0.5)).endswith(
        "calibrated on its own measured profiles (their fitted efficiencies, not the flops_efficiency set))")
    assert line(("cluster.gpu_spec", str(EXAMPLE))) == ("gpu: MI300X-spec (spec file: AMD Instinct MI300X data sheet "
                                                        "/ ROCm MI300 microarchitecture (peak-performance table); "
                                                        "calibration borrowed from H100-SXM, not measured on "
                                                        "MI300X-spec)")


def test_a_spec_files_efficiency_is_what_was_measured_and_replaces_the_borrowed_fit(tmp_path):
    spec = _spec(tmp_path, GOOD + "flops_efficiency = 0.45\n")
    s = resolve(None, [("cluster.gpu_spec", str(spec), "--gpu-spec")]).scenario
    assert cost_model(s).calibration.matmul.flops_efficiency == 0.45
    over = resolve(None, [("cluster.gpu_spec", str(spec), "--gpu-spec"), ("cluster.flops_efficiency", 0.3, "x")])
    assert cost_model(over.scenario).calibration.matmul.flops_efficiency == 0.3  # the scenario's field wins


def test_every_preset_prices_a_scenario_and_names_its_source():
    for name in GPU_NAMES:
        if name == "cpu-calibrated":
            continue
        s = resolve(None, [("cluster.gpu", name, "--gpu"), ("cluster.tp", 4, "--tp")]).scenario
        assert describe_gpu(s, cost_model(s)).startswith(f"gpu: {name} ({get_gpu(name).source}; "), name


# ---- the command line ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "want"), [
    (["--gpu", "MI300X"], "gpu: MI300X (AMD Instinct MI300X data sheet / ROCm MI300 microarchitecture; calibration "
                          "borrowed from H100-SXM, not measured on MI300X)"),
    (["--gpu", "L40"], "gpu: L40 (NVIDIA L40 data sheet; calibration borrowed from A40, not measured on L40)"),
    (["--gpu-spec", str(EXAMPLE)], "gpu: MI300X-spec (spec file: AMD Instinct MI300X data sheet"),
])
def test_tlt_sim_run_takes_any_gpu_and_names_its_source(tmp_path, flag, want):
    out = tmp_path / "out"
    res = invoke_cli("sim", "run", *flag, *SMALL, "--out", str(out))
    assert res.returncode == 0, res.stderr
    flat = " ".join(res.stdout.split())
    assert want in flat and "cost model: measured: calibrated on" in flat
    resolved = tomllib.loads((out / "scenario.resolved.toml").read_text())
    assert ("gpu_spec" in resolved["cluster"]) == (flag[0] == "--gpu-spec")


def test_the_band_of_an_unmeasured_gpu_says_it_was_not_measured(tmp_path):
    res = invoke_cli("sim", "run", "--gpu", "MI300X", *SMALL[:-6], "--seeds", "2", "--perfetto", "off",
                     "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    flat = " ".join(res.stdout.split())
    assert "MI300X was not measured: its kernels are priced with H100-SXM's calibration, and the band includes" in flat


def test_advise_names_the_gpu_and_its_source_on_screen_and_in_its_readme(tmp_path):
    out = tmp_path / "advice"
    res = invoke_cli("advise", "--quick", "--gpu-spec", str(EXAMPLE), *SMALL[:-6], "--out", str(out))
    assert res.returncode == 0, res.stderr
    want = "gpu: MI300X-spec (spec file: AMD Instinct MI300X data sheet"
    assert want in " ".join(res.stdout.split())
    assert want.replace("gpu: ", "GPU: ") in (out / "README.md").read_text()
