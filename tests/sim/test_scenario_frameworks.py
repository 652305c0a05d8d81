"""`tlt scenario from-verl` / `from-nemo-rl`: a framework's own config (fixtures in its layout,
tests/data/frameworks/README.md) becomes a scenario that runs, says where each field came from and what
it could not map; bad input is one line naming the file and the key, exit 2."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import REPO, invoke_cli
from tltcore.errors import InputError
from tltsim.scenario.frameworks import common, nemo_rl, verl
from tltsim.scenario.resolve import resolve

DATA = REPO / "tests" / "data" / "frameworks"
VERL = DATA / "verl_ppo_trainer_generated.yaml"
#: The overrides of verl's examples/grpo_trainer/run_qwen2-7b.sh (README.md says what was changed).
GRPO = tuple((DATA / "verl_grpo_qwen2_7b.args").read_text().split())
NEMO_1B, NEMO_8B = DATA / "nemo_rl" / "grpo_math_1B.yaml", DATA / "nemo_rl" / "grpo_math_8B.yaml"
SMALL = ("--set", "trace.prompts_per_step=4")


def _verl(*extra: str, sets: tuple[str, ...] = ()) -> common.Conversion:
    args = (*GRPO, *extra)
    return verl.convert(verl.load(VERL, args), args, sets)


def _fields(conv: common.Conversion) -> dict:
    return {m.field: m.value for m in conv.fields()}


def test_the_verl_grpo_script_maps_to_its_scenario():
    f = _fields(_verl())
    assert (f["cluster.tp"], f["cluster.gpus"], f["trace.prompts_per_step"], f["trace.cap"]) == (2, 8, 1024, 512)
    assert f["trace.samples"] == 5 and f["engine.kv_mem_fraction"] == 0.6 and f["engine.max_batch"] == 1024
    assert f["model.name"] == "Qwen2.5-7B" and f["cluster.gpu"] == "H100"  # both stated as assumed, not silent


def test_what_could_not_be_mapped_is_named():
    notes = {n.key: n.why for n in _verl().notes}
    assert "Qwen/Qwen2-7B-Instruct" in notes["actor_rollout_ref.model.path"]
    assert "15 epochs" in notes["trainer.total_epochs"]
    assert "596 prompt groups" in notes["trace.prompts_per_step"]  # a batch larger than the trace's pool
    assert "actor_rollout_ref.rollout.name" in notes and "data.max_prompt_length" in notes


def test_a_catalog_model_and_interpolated_cap_map_with_their_source(tmp_path):
    conv = _verl("actor_rollout_ref.model.path=Qwen/Qwen3-8B", "data.max_response_length=8192")
    by = {m.field: m for m in conv.fields()}
    assert by["model.name"].value == "Qwen/Qwen3-8B"
    assert by["trace.cap"].value == 8192
    assert "${oc.select:data.max_response_length,512}" in by["trace.cap"].source
    assert "override data.max_response_length=8192" in by["trace.cap"].source


def test_an_environment_interpolation_is_a_note_not_a_guess():
    conv = _verl("actor_rollout_ref.rollout.tensor_model_parallel_size=${oc.env:TP}")
    assert "cluster.tp" not in _fields(conv)
    assert "environment variable TP" in {n.key: n.why for n in conv.notes}[
        "actor_rollout_ref.rollout.tensor_model_parallel_size"]


def test_the_rollout_engines_speculative_setting_is_compared():
    conv = _verl("+actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config="
                 "{method:eagle3,num_speculative_tokens:3,model:/m/eagle3}")
    f = _fields(conv)
    assert f["drafter.kind"] == "eagle3" and "static:3_1_3" in f["policies"] and "no-sd" in f["policies"]
    sg = _verl("actor_rollout_ref.rollout.name=sglang",
               "+actor_rollout_ref.rollout.engine_kwargs.sglang.speculative_algorithm=EAGLE",
               "+actor_rollout_ref.rollout.engine_kwargs.sglang.speculative_num_steps=3",
               "+actor_rollout_ref.rollout.engine_kwargs.sglang.speculative_eagle_topk=1",
               "+actor_rollout_ref.rollout.engine_kwargs.sglang.speculative_num_draft_tokens=4")
    f = _fields(sg)
    assert f["drafter.kind"] == "eagle" and "static:3_1_3" in f["policies"]


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_from_verl_writes_a_scenario_that_runs(suffix, tmp_path):
    out = tmp_path / f"grpo{suffix}"
    res = invoke_cli("scenario", "from-verl", str(VERL), *GRPO, *SMALL, "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "not mapped:" in res.stdout and "actor_rollout_ref.model.path" in res.stdout
    text = out.read_text()
    assert text.startswith(common.MARKER + "verl") and f"# source config: {VERL}" in text
    assert "samples" in text and "# actor_rollout_ref.rollout.n = 5" in text
    parsed = yaml.safe_load(text) if suffix == ".yaml" else tomllib.loads(text)
    assert parsed["cluster"]["tp"] == 2
    s = resolve(out).scenario
    assert (s.cluster.gpus, s.cluster.tp, s.trace.samples, s.trace.cap, s.trace.prompts_per_step) == (8, 2, 5, 512, 4)
    if suffix == ".toml":
        run = invoke_cli("sim", "run", "--scenario", str(out), "--perfetto", "off", "--out", str(tmp_path / "r"))
        assert run.returncode == 0, run.stderr
        adv = invoke_cli("advise", "--scenario", str(out), "--quick", "--out", str(tmp_path / "a"))
        assert adv.returncode == 0, adv.stderr
    # its own file is replaced; one it did not write is not
    again = invoke_cli("scenario", "from-verl", str(VERL), *GRPO, *SMALL, "--out", str(out))
    assert again.returncode == 0, again.stderr
    mine = tmp_path / f"mine{suffix}"
    mine.write_text("keep")
    res = invoke_cli("scenario", "from-verl", str(VERL), "--out", str(mine))
    assert res.returncode == 2 and mine.read_text() == "keep" and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("config", [NEMO_1B, NEMO_8B], ids=["1B", "8B-inherits-1B"])
def test_from_nemo_rl_writes_a_scenario_that_runs(config, tmp_path):
    out = tmp_path / "nemo.toml"
    res = invoke_cli("scenario", "from-nemo-rl", str(config), *SMALL, "--out", str(out))
    assert res.returncode == 0, res.stderr
    s = resolve(out).scenario
    if config == NEMO_8B:  # the 8B file's own values over the 1B file it inherits
        assert (s.cluster.gpus, s.trace.cap, s.model.name) == (8, 4096, "Qwen2.5-7B")
        assert "meta-llama/Llama-3.1-8B-Instruct" in res.stdout and "32 samples per prompt" in res.stdout
    else:
        assert (s.cluster.gpus, s.cluster.tp, s.trace.cap, s.model.name) == (1, 1, 512, "Qwen/Qwen2.5-1.5B")
        run = invoke_cli("sim", "run", "--scenario", str(out), "--perfetto", "off", "--out", str(tmp_path / "r"))
        assert run.returncode == 0, run.stderr
        adv = invoke_cli("advise", "--scenario", str(out), "--quick", "--out", str(tmp_path / "a"))
        assert adv.returncode == 0, adv.stderr


def test_nemo_rl_overrides_and_override_marker(tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text(f"defaults: {NEMO_1B}\npolicy:\n  generation:\n    _override_: true\n    max_new_tokens: 1024\n"
                     "    vllm_cfg: {tensor_parallel_size: 1, gpu_memory_utilization: 0.5}\n")
    conv = nemo_rl.convert(nemo_rl.load(child, ("grpo.num_generations_per_prompt=4",)))
    f = _fields(conv)
    assert f["trace.cap"] == 1024 and f["trace.samples"] == 4 and f["engine.kv_mem_fraction"] == 0.5
    assert "policy.generation.backend" not in {n.key for n in conv.notes}  # the mapping was replaced whole


def _one_line_error(*args: str) -> str:
    res = invoke_cli(*args)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), res.stderr
    return lines[0]


def test_bad_input_is_one_line_naming_the_file_and_key(tmp_path):
    out = str(tmp_path / "s.toml")
    line = _one_line_error("scenario", "from-verl", str(VERL), "~actor_rollout_ref.rollout.n", "--out", out)
    assert f"{VERL}, field 'actor_rollout_ref.rollout.n': missing" in line
    line = _one_line_error("scenario", "from-verl", str(VERL),
                           "data.max_response_length=${actor_rollout_ref.rollout.response_length}", "--out", out)
    assert str(VERL) in line and "interpolation loop" in line and "actor_rollout_ref.rollout.response_length" in line
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    assert f"{listing}: is a YAML list" in _one_line_error("scenario", "from-verl", str(listing), "--out", out)
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer:\n  nnodes: 1\n n_gpus_per_node: 8\n")
    assert f"{broken}: not valid YAML: line 3" in _one_line_error("scenario", "from-nemo-rl", str(broken), "--out", out)
    # the launch script's own overrides, one of which today's verl config no longer has: Hydra refuses it too
    line = _one_line_error("scenario", "from-verl", str(VERL), "actor_rollout_ref.actor.fsdp_config.grad_offload=False",
                           "--out", out)
    assert "grad_offload is not in the verl config" in line
    line = _one_line_error("scenario", "from-verl", str(VERL), "actor_rollout_ref.rollout.tensor_model_parallel_size=3",
                           "--out", out)
    assert "not divisible by tp=3" in line and str(VERL) in line
    assert not Path(out).exists()


def test_hydra_defaults_and_a_defaults_loop_are_refused(tmp_path):
    hydra = tmp_path / "ppo_trainer.yaml"
    hydra.write_text("defaults:\n  - actor@actor_rollout_ref.actor: dp_actor\n  - _self_\n")
    with pytest.raises(InputError, match="--cfg job"):
        verl.load(hydra)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("defaults: b.yaml\n")
    b.write_text("defaults: a.yaml\n")
    with pytest.raises(InputError, match="defaults loop"):
        nemo_rl.load(a)


def test_interpolations_resolve_as_omegaconf_would(tmp_path):
    tree = common.ConfigTree({"a": {"b": 2, "c": "${.b}", "d": {"e": "${..b}"}}, "f": "x/${a.b}/${a.c}",
                              "g": "${mul:${a.b},${oc.select:nope,3}}", "h": "???", "i": "${h}",
                              "j": r"\${a.b}"}, tmp_path / "c.yaml")
    assert [tree.value(k) for k in ("a.c", "a.d.e", "f", "g", "j")] == [2, 2, "x/2/2", 6, "${a.b}"]
    assert "???" in tree.get("i").why and tree.get("nope").absent


def test_verls_rollout_dumps_become_the_trace_counted_with_the_models_tokenizer(tmp_path):
    """trainer.rollout_data_dir names this run's own dumps; they hold text, so the model folder's
    tokenizer.json counts the tokens, and the scenario runs on them with no hand conversion."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes((REPO / "tests/data/model_configs/Qwen3-8B/config.json").read_bytes())
    (model / "tokenizer.json").write_bytes((REPO / "tests/data/traces/wordlevel_tokenizer.json").read_bytes())
    dumps = REPO / "tests" / "data" / "traces" / "verl_rollout_dump"
    conv = _verl(f"actor_rollout_ref.model.path={model}", f"trainer.rollout_data_dir={dumps}")
    fields = _fields(conv)
    assert fields["trace.name"] == str(dumps) and fields["trace.tokenizer"] == str(model / "tokenizer.json")
    # read through the tokenizer: the dump's 4 samples per prompt are counted (the script asks for 5)
    assert "has 4 per prompt" in " ".join(n.why for n in conv.notes) and "trace.samples" not in fields
    out = tmp_path / "s.toml"
    res = invoke_cli("scenario", "from-verl", str(VERL), *GRPO, f"actor_rollout_ref.model.path={model}",
                     f"trainer.rollout_data_dir={dumps}", "--out", str(out))
    assert res.returncode == 0, res.stderr
    run = invoke_cli("sim", "run", "--scenario", str(out), "--seeds", "1", "--perfetto", "off",
                     "--out", str(tmp_path / "r"))
    assert run.returncode == 0, run.stderr
    # without a tokenizer next to the model, the scenario says what to pass instead of guessing
    bare = _verl(f"trainer.rollout_data_dir={dumps}")
    assert any(n.key == "trace.tokenizer" for n in bare.notes)
