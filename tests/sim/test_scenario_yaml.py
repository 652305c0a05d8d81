"""YAML scenarios: a ``.yaml`` / ``.yml`` file is the same scenario as its TOML twin (same schema, same
hash, same one-line errors), and what TOML could not say is refused at its line."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from conftest import invoke_cli
from tltcore.errors import InputError
from tltsim.scenario import bundled_scenarios, load_scenario, scenario_hash
from tltsim.scenario.resolve import resolve


@pytest.mark.parametrize("name", ["aime_qwen7b_64xh100", "dapo_qwen32b_polytrace", "aime_qwen3moe_h100"])
def test_a_yaml_twin_of_a_bundled_scenario_is_the_same_scenario(name, tmp_path):
    toml_path = bundled_scenarios()[name]
    data = tomllib.loads(toml_path.read_text())
    twin = tmp_path / f"{name}.yaml"
    twin.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_scenario(twin) == load_scenario(toml_path)
    assert scenario_hash(load_scenario(twin)) == scenario_hash(load_scenario(toml_path))


def test_relative_paths_in_a_yaml_scenario_are_relative_to_the_file(tmp_path):
    (tmp_path / "sub").mkdir()
    trace = tmp_path / "sub" / "t.csv"
    trace.write_text("step,group_id,sample_idx,response_tokens,hit_cap\n0,0,0,100,false\n0,0,1,200,false\n")
    scenario = tmp_path / "sub" / "s.yml"
    scenario.write_text("trace:\n  name: t.csv\n")
    assert load_scenario(scenario).trace.name == str(trace.resolve())


BAD = {
    "syntax": ("trace:\n  name: x\n cap: 3\n", "line 3"),
    "twice": ("trace:\n  cap: 3\n  cap: 4\n", "line 3, column 3: key 'cap' is given twice"),
    "null": ("trace:\n  cap:\n", "line 2, column 7: null has no TOML equivalent"),
    "date": ("trace:\n  name: 2024-01-01\n", "line 2, column 9: a date or time"),
    "list": ("- a\n- b\n", "is a YAML list, not a mapping"),
    "int key": ("trace:\n  1: 3\n", "line 2, column 3: key 1 is not a string"),
    "set": ("presets: !!set {a, b}\n", "line 1, column 10: a set has no TOML equivalent"),
    "64 bits": ("seed: 99999999999999999999999\n", "does not fit a 64-bit integer"),
    "object tag": ("trace: !!python/object:os.system {}\n", "could not determine a constructor"),
    "recursive": ("policies: &x [*x]\n", "recursive"),
    "field": ("trace:\n  capp: 3\n", "field 'trace.capp': unknown field (did you mean trace.cap"),
    "type": ("cluster:\n  gpus: '8'\n", "field 'cluster.gpus': must be an integer"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_yaml_scenario_is_one_line_naming_the_file_and_where(case, tmp_path):
    text, where = BAD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        resolve(path)
    assert str(err.value).startswith(str(path)) and where in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_yaml_numbers_and_merge_keys_read_as_toml_would(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("cost:\n  sd_overhead_s: 1e-3\ncluster:\n  <<: {gpus: 8, tp: 2}\n  tp: 4\n")
    s = load_scenario(path)
    assert s.cost.sd_overhead_s == 1e-3 and (s.cluster.gpus, s.cluster.tp) == (8, 4)
    assert load_scenario(tmp_path / "s.yaml") == load_scenario(_toml(tmp_path, "[cost]\nsd_overhead_s = 1e-3\n"
                                                                     "[cluster]\ngpus = 8\ntp = 4\n"))


def _toml(folder: Path, text: str) -> Path:
    p = folder / "twin.toml"
    p.write_text(text)
    return p


def test_a_yaml_scenario_runs_and_its_resolved_copy_is_toml(tmp_path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text("trace:\n  name: intern_s1_math\n  prompts_per_step: 4\n  cap: 4000\n"
                        "cluster:\n  gpus: 8\n  tp: 2\npolicies: [no-sd, elastic+beg-mab]\n")
    out = tmp_path / "run"
    res = invoke_cli("sim", "run", "--scenario", str(scenario), "--perfetto", "off", "--out", str(out))
    assert res.returncode == 0, res.stderr
    resolved = out / "scenario.resolved.toml"
    assert tomllib.loads(resolved.read_text())["trace"]["prompts_per_step"] == 4
    assert load_scenario(resolved) == load_scenario(scenario)
    bad = tmp_path / "bad.yml"
    bad.write_text("trace:\n  cap: 3\n  cap: 4\n")
    res = invoke_cli("advise", "--scenario", str(bad), "--quick", "--out", str(tmp_path / "adv"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "line 3" in res.stderr
