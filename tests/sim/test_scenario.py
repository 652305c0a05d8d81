"""Scenario loading, validation, overrides and the resolved TOML dump."""

from __future__ import annotations

import tomllib

import pytest

from tltsim.errors import InputError
from tltsim.scenario import (
    Scenario,
    apply_override,
    field_paths,
    load_scenario,
    policies_with_baseline,
    scenario_from_dict,
    scenario_hash,
    scenario_toml,
)


def write(tmp_path, text: str):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


def test_empty_file_gives_the_documented_defaults(tmp_path):
    s = load_scenario(write(tmp_path, ""))
    assert s == Scenario()
    assert s.n_instances == 16 and s.cluster.tp == 4 and s.trace.name == "r1distill_qwen1.5b_aime_8samples"


def test_full_file_round_trips_through_the_resolved_toml(tmp_path):
    s = load_scenario(write(tmp_path, """
seed = 3
policies = ["elastic+beg-mab", "static:8_4_16"]
[trace]
name = "polytrace_rl_rollouts"
step = 2
cap = 4096
[cluster]
gpu = "A100"
gpus = 16
tp = 2
[engine]
kv_mem_fraction = 0.8
[acceptance]
mode = "stochastic"
"""))
    text = scenario_toml(s)
    again = scenario_from_dict(tomllib.loads(text))
    assert again.cluster == s.cluster and again.trace == s.trace and again.seed == 3
    assert again.policies == policies_with_baseline(s.policies) == ("no-sd", "elastic+beg-mab", "static:8_4_16")
    assert scenario_hash(again) == scenario_hash(s)


@pytest.mark.parametrize(("text", "field"), [
    ("[cluster]\ngpus = 12\ntp = 3", "cluster.tp"),  # 3 does not divide Qwen2.5-7B's 28 heads
    ("[cluster]\ngpus = 6\ntp = 4", "cluster.gpus"),
    ("[cluster]\ngpu = \"V99\"", "cluster.gpu"),
    ("[model]\nname = \"nope-13b\"", "model.name"),
    ("[cluster]\nbogus = 1", "cluster.bogus"),
    ("colour = 1", "colour"),
    ("policies = [\"warp-drive\"]", "policies"),
    ("[acceptance]\nmode = \"psychic\"", "acceptance.mode"),
    ("[acceptance]\npreset = \"unknown\"", "acceptance.preset"),
    ("[engine]\nmax_batch = \"many\"", "engine.max_batch"),
    ("[engine]\nkv_mem_fraction = 1.5", "engine.kv_mem_fraction"),
    ("[trace]\nstep = -1", "trace.step"),
    ("[model]\nname = \"Llama-3.3-70B\"\n[cluster]\ngpu = \"L40S\"\ngpus = 2\ntp = 2", "cluster.tp"),
])
def test_bad_fields_are_one_line_input_errors_naming_file_and_dotted_field(tmp_path, text, field):
    p = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_scenario(p)
    msg = str(info.value)
    assert "\n" not in msg and str(p) in msg and f"field '{field}'" in msg
    assert info.value.field == field


def test_malformed_toml_names_the_file(tmp_path):
    p = write(tmp_path, "[cluster\n")
    with pytest.raises(InputError, match="not valid TOML") as info:
        load_scenario(p)
    assert str(p) in str(info.value)


def test_overrides_parse_text_by_field_type_and_revalidate():
    s = apply_override(Scenario(), "cluster.tp", "2")
    assert s.cluster.tp == 2 and s.n_instances == 32
    s = apply_override(s, "policies", "beg-mab, static:8_4_8")
    assert s.policies == ("beg-mab", "static:8_4_8")
    assert apply_override(s, "trace.step", "none").trace.step is None
    with pytest.raises(InputError, match=r"cluster\.gpus"):
        apply_override(s, "cluster.gpus", "63")
    with pytest.raises(InputError, match="must be an integer"):
        apply_override(s, "cluster.tp", "four")
    with pytest.raises(InputError, match="no scenario field"):
        apply_override(s, "cluster.nvlink", "1")
    assert "engine.max_batch" in field_paths() and "seed" in field_paths()
