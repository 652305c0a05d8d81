"""Scenario loading, validation, overrides and the resolved TOML dump."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import Field

from conftest import needs_shared_traces
from tltcore.config import Bool, ConfigModel, Float, Int, Str
from tltcore.errors import InputError
from tltsim.scenario import (
    Scenario,
    apply_override,
    field_paths,
    load_scenario,
    policies_with_baseline,
    policy_names,
    scenario_from_dict,
    scenario_hash,
    scenario_toml,
)


class Leaf(ConfigModel):
    rate: Float = Field(1.0, ge=0, le=10)
    on: Bool = False


class Mid(ConfigModel):
    leaf: Leaf = Field(default_factory=Leaf)
    names: tuple[Str, ...] = ()


class Root(ConfigModel):
    mid: Mid = Field(default_factory=Mid)
    n: Int = 0


def write(tmp_path, text: str):
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


def test_empty_file_gives_the_documented_defaults(tmp_path):
    s = load_scenario(write(tmp_path, ""))
    assert s == Scenario()
    assert s.n_workers == 16 and s.cluster.tp == 4 and s.trace.name == "r1distill_qwen1.5b_aime_8samples"


@needs_shared_traces()
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
    assert policy_names(again.policies) == policy_names(policies_with_baseline(s.policies)) == (
        "no-sd", "elastic+beg-mab", "static:8_4_16")
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
    assert s.cluster.tp == 2 and s.n_workers == 32
    s = apply_override(s, "policies", "beg-mab, static:8_4_8")
    assert policy_names(s.policies) == ("beg-mab", "static:8_4_8")
    assert apply_override(s, "trace.step", "none").trace.step is None
    with pytest.raises(InputError, match=r"cluster\.gpus"):
        apply_override(s, "cluster.gpus", "63")
    with pytest.raises(InputError, match="must be an integer"):
        apply_override(s, "cluster.tp", "four")
    with pytest.raises(InputError, match="no such field"):
        apply_override(s, "cluster.nvlink", "1")
    assert "engine.max_batch" in field_paths() and "seed" in field_paths()


def test_nested_paths_bools_lists_and_closest_field_suggestions():
    s = apply_override(Scenario(), "trace.snap_capped", "false")
    assert s.trace.snap_capped is False
    assert apply_override(s, "trace.snap_capped", "yes").trace.snap_capped is True
    s = apply_override(s, "drafter.position_scale", "1, 0.9, 0.8")
    assert s.drafter.position_scale == (1.0, 0.9, 0.8)
    assert apply_override(s, "drafter.position_scale", "[1.0, 0.5]").drafter.position_scale == (1.0, 0.5)
    assert apply_override(s, "cost.sd_overhead_s", "0.001").cost.sd_overhead_s == 0.001
    assert apply_override(s, "cluster.bandwidth_efficiency", "0.7").cluster.bandwidth_efficiency == 0.7
    with pytest.raises(InputError, match=r"did you mean engine\.max_batch"):
        apply_override(s, "engine.max_bach", "8")
    with pytest.raises(InputError, match="is a section"):
        apply_override(s, "engine", "8")
    with pytest.raises(InputError, match="must be true or false"):
        apply_override(s, "trace.snap_capped", "maybe")
    for path in ("cost.table", "engine.switch_prefill_fraction", "acceptance.coverage", "drafter.quality",
                 "trace.deal", "trace.num_steps", "trace.expand_samples"):
        assert path in field_paths()


def test_policy_lists_split_only_between_specs():
    s = apply_override(Scenario(), "policies", "beg-mab:arms=8_4_32,4_2_6,no-sd,vllm-table:4=5,16=3")
    assert policy_names(s.policies) == ("beg-mab:arms=8_4_32,4_2_6", "no-sd", "vllm-table:4=5,16=3")
    s = apply_override(s, "policies", '["elastic:16:5+beg-mab:arms=8_4_16,4_2_6", "static:8_4_8"]')
    assert policy_names(s.policies) == ("elastic:16:5+beg-mab:arms=8_4_16,4_2_6", "static:8_4_8")


def test_generic_machinery_reaches_any_depth():
    """Schemas of any depth get the same paths, parsing and errors (whole-run sections nest deeper)."""
    from tltcore import config, config_files

    assert config.field_paths(Root) == ["mid.leaf.rate", "mid.leaf.on", "mid.names", "n"]
    data = config.to_dict(Root())
    for dotted, text in (("mid.leaf.on", "true"), ("mid.leaf.rate", "2.5"), ("mid.names", "a,b")):
        data = config.set_dotted(data, dotted, config.parse_text(text, config.field_type(Root, dotted), where={}))
    r = config.validate_tree(Root, data)
    assert r.mid.leaf == Leaf(rate=2.5, on=True) and r.mid.names == ("a", "b")
    text = config_files.dump_toml(config.to_dict(r))
    assert "[mid.leaf]" in text and 'names = ["a", "b"]' in text
    assert config.validate_tree(Root, tomllib.loads(text)) == r
    with pytest.raises(InputError, match=r"x\.toml, field 'mid\.leaf\.rat'.*did you mean mid\.leaf\.rate"):
        config.validate_tree(Root, {"mid": {"leaf": {"rat": 1}}}, path="x.toml")
    with pytest.raises(InputError, match=r"field 'mid\.leaf\.rate': must be in \[0, 10\], got 11.0"):
        config.validate_tree(Root, {"mid": {"leaf": {"rate": 11}}})
    with pytest.raises(InputError, match=r"^field 'rate': must be in \[0, 10\], got 11.0$"):
        Leaf(rate=11.0)  # a section built on its own: the same one line (at its SECTION, here none)


def test_seeds_and_counts_are_bounded_before_anything_is_built(tmp_path):
    for text, dotted in (("seed = 18446744073709551616", "seed"),  # > 64 bits: TOML itself refuses
                        ("seed = -1", "seed"),
                        ("[cluster]\ngpus = 4000000000\ntp = 4", "cluster.gpus"),
                        ("[engine]\nmax_batch = 1000000000000", "engine.max_batch"),
                        ("[trace]\nnum_steps = 0", "trace.num_steps")):
        p = write(tmp_path, text)
        with pytest.raises(InputError) as info:
            load_scenario(p)
        assert str(p) in str(info.value) and "\n" not in str(info.value)
        assert info.value.field == dotted, text
    big = apply_override(Scenario(), "seed", str(2**63 - 1))
    assert tomllib.loads(scenario_toml(big))["seed"] == 2**63 - 1  # written back as valid TOML


def test_byte_order_mark_and_scenario_relative_paths(tmp_path):
    trace = tmp_path / "data" / "mine.csv"
    trace.parent.mkdir()
    trace.write_text("response_tokens\n10\n20\n")
    p = tmp_path / "s.toml"
    p.write_bytes("\ufeff[trace]\nname = \"data/mine.csv\"\n".encode())
    s = load_scenario(p)
    assert s.trace.name == str(trace.resolve())
    catalogued = write(tmp_path, "[trace]\nname = \"polytrace_rl_rollouts\"\n")
    assert load_scenario(catalogued).trace.name == "polytrace_rl_rollouts"  # names are not paths


def test_result_hash_covers_trace_content_and_version(tmp_path, monkeypatch):
    trace = tmp_path / "t.csv"
    trace.write_text("response_tokens\n10\n20\n")
    s = apply_override(Scenario(), "trace.name", str(trace))
    first = scenario_hash(s)
    assert scenario_hash(s) == first
    trace.write_text("response_tokens\n10\n21\n")
    import os
    os.utime(trace, ns=(1, 1))  # a new modification time, as an edit gives
    assert scenario_hash(s) != first
    import tltcore
    monkeypatch.setattr(tltcore, "__version__", "9.9.9")
    assert scenario_hash(s) != first


@needs_shared_traces()
def test_scenarios_cross_process_boundaries(tmp_path):
    """A scenario (not a closure) is what a sweep ships to another process; the result is the same."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    import pandas as pd

    from tltsim.scenario import run_policy

    s = load_scenario(write(tmp_path, """
policies = ["elastic+beg-mab"]
[trace]
name = "polytrace_rl_rollouts"
source = "polytrace/verl_dapo_qwen2.5-32b"
step = 1
prompts_per_step = 12
[model]
name = "Qwen2.5-32B"
[cluster]
gpus = 16
"""))
    assert pickle.loads(pickle.dumps(s)) == s
    here = run_policy(s, "elastic+beg-mab")
    with ProcessPoolExecutor(1) as pool:
        there = pool.submit(run_policy, s, "elastic+beg-mab").result()
    pd.testing.assert_frame_equal(here, there)


def test_scenario_and_sweep_spec_files_share_one_reader_with_one_line_errors(tmp_path):
    """A folder, a missing file and an unreadable (non-UTF-8) file each get their own one-line
    error naming the path, for scenarios and sweep specs alike (``config_files.read_file``)."""
    from tltsim.sweep import load_spec

    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe\x00bad")
    for load, what in ((load_scenario, "scenario"), (load_spec, "sweep spec")):
        with pytest.raises(InputError, match=f"is a folder, not a {what} file"):
            load(tmp_path)
        with pytest.raises(InputError, match=f"cannot read {what}"):
            load(tmp_path / "bad.toml")
        with pytest.raises(InputError, match=f"{what} file not found"):
            load(tmp_path / "nope" / "missing.toml")


# ---- one path: every setting applied, then validated once (issue 21) --------------------------------
def test_settings_are_applied_before_validation_so_their_order_never_matters(tmp_path):
    from tltsim.scenario import resolve

    table = str(tmp_path / "costs.csv")
    a = resolve(None, [("cost.model", "table", "--set"), ("cost.table", table, "--set")])
    b = resolve(None, [("cost.table", table, "--set"), ("cost.model", "table", "--set")])
    assert a.scenario == b.scenario and a.scenario.cost.table == table
    # a file that is invalid alone (table model, no table) is completed by a setting
    path = tmp_path / "s.toml"
    path.write_text('[cost]\nmodel = "table"\n')
    assert resolve(path, [("cost.table", table, "--set")]).scenario.cost.model == "table"
    # flags in any order give the same scenario; two values for one field are refused in both orders
    flags = [("cluster.gpus", 8, "--gpus"), ("cluster.tp", 2, "--tp"), ("spot.min_workers", "4", "--set")]
    assert resolve(None, flags).scenario == resolve(None, flags[::-1]).scenario
    for pair in ([("cluster.tp", 2, "--tp"), ("cluster.tp", "4", "--set")],
                 [("cluster.tp", "4", "--set"), ("cluster.tp", 2, "--tp")]):
        with pytest.raises(InputError, match="given twice"):
            resolve(None, pair)
    assert resolve(None, [("cluster.tp", 2, "--tp"), ("cluster.tp", "2", "--set")]).scenario.cluster.tp == 2


def test_sweep_axes_over_dependent_fields_work_in_either_order(tmp_path):
    from tltsim.sweep.spec import expand, load_spec

    table = tmp_path / "costs.csv"
    for i, keys in enumerate((('"cost.model"', '"cost.table"'), ('"cost.table"', '"cost.model"'))):
        values = {'"cost.model"': '["table"]', '"cost.table"': f'["{table}"]'}
        spec = tmp_path / f"spec{i}.toml"
        spec.write_text(f'name = "x{i}"\nbase = "aime_qwen7b_64xh100"\n[[axes]]\nkind = "zip"\n'
                        + "".join(f"{k} = {values[k]}\n" for k in keys))
        points = expand(load_spec(spec))
        assert len(points) == 1 and points[0].invalid is None and points[0].scenario.cost.model == "table"


@needs_shared_traces()
def test_an_error_names_the_file_or_flag_that_set_the_field(tmp_path):
    from tltsim.scenario import prepare, resolve

    path = tmp_path / "s.toml"
    path.write_text('[trace]\nname = "polytrace_rl_rollouts"\nstep = 999\n')
    resolved = resolve(path)
    with pytest.raises(InputError) as exc:
        prepare(resolved.scenario)
    assert str(resolved.locate(exc.value)).startswith(f"{path}, field 'trace.step'")
    resolved = resolve(path, [("trace.step", 998, "--step")])
    with pytest.raises(InputError) as exc:
        prepare(resolved.scenario)
    assert str(resolved.locate(exc.value)).startswith("--step, field 'trace.step'")
    with pytest.raises(InputError, match=r"^--tp, field 'cluster.gpus'"):  # a default field: blamed on the flags
        resolve(None, [("cluster.tp", 3, "--tp")])


REPRO = Path(__file__).resolve().parents[2] / "reports" / "paper-repro" / "scenarios"


def test_refusals_that_make_a_run_meaningless():
    from tltsim.scenario import resolve

    for setting, dotted in ((("spot.min_workers", "17"), "spot.min_workers"),
                            (("drafter.stale_quality", "5"), "drafter.stale_quality"),
                            (("rl.ppo_epochs", "0"), "rl.ppo_epochs"),
                            (("spot.max_samples", "0"), "spot.max_samples"),
                            (("spot.bubble_budget", "0"), "spot.bubble_budget"),
                            (("cluster.gpus", "1000000"), "cluster.gpus")):
        with pytest.raises(InputError, match=rf"^--set, field '{dotted}'"):
            resolve(None, [(*setting, "--set"), ("cluster.tp", "1" if dotted == "cluster.gpus" else "4", "--tp")])
    # the default stale floor is a fraction of the quality, so a lowered quality still goes stale (an
    # absolute 0.89 floor above quality 0.8 left that drafter forever fresh)
    assert resolve(None, [("drafter.quality", "0.8", "--set")]).notes == ()
    weak = resolve(None, [("drafter.quality", "0.8", "--set"), ("presets", "tlt", "--preset")])
    assert weak.notes == () and weak.scenario.drafter.floor == pytest.approx(0.89 * 0.8)
    assert resolve(None, []).scenario.drafter.floor == pytest.approx(0.89)
    s = apply_override(load_scenario(REPRO / "qwen7b_1node.toml"), "drafter.quality", "0.7")
    assert apply_override(s, "drafter.stale_quality", "0.6").drafter.stale_quality == 0.6
    with pytest.raises(InputError, match=r"^--policy, field 'policies'"):
        resolve(None, [("presets", "tlt", "--preset"), ("policies", "beg-mab", "--policy")])


@needs_shared_traces()
def test_valid_settings_that_change_nothing_get_one_warning_each(tmp_path):
    from tltsim.scenario import resolve

    path = tmp_path / "s.toml"
    path.write_text("policies = ['beg-mab']\n[rl]\nppo_epochs = 2\n[spot]\nmin_workers = 2\n[trace]\nseed = 3\n")
    notes = dict(resolve(path).notes)
    assert set(notes) == {"rl-only", "trace-seed"}
    assert notes["rl-only"].startswith(f"{path}: rl.ppo_epochs, spot.min_workers are used only by whole RL runs")
    assert "top-level seed deals" in notes["trace-seed"]
    with_presets = dict(resolve(path, [("presets", "tlt", "--preset")]).notes)
    assert set(with_presets) == {"policies", "trace-seed"} and "--preset" in with_presets["policies"]
    # trace.seed does change a sampled workload: no warning there, and it really changes the steps
    sampled = resolve(None, [("trace.seed", "3", "--set"), ("trace.prompts_per_step", "8", "--set")])
    assert sampled.notes == ()
    assert resolve(None).notes == () and resolve("aime_qwen7b_64xh100").notes == ()


@needs_shared_traces()
def test_trace_seed_picks_responses_and_seed_deals():
    """Each seed has one meaning: trace.seed changes which responses a sampled step holds (never the
    dealing); the top-level seed changes the dealing (never the responses)."""
    from tltsim.rollout import deal
    from tltsim.scenario import load_steps, resolve

    def step(*settings):
        s = resolve(None, [("trace.prompts_per_step", "16", "--set"), *settings]).scenario
        return s, load_steps(s.trace)[0]

    s0, w0 = step()
    _, w1 = step(("trace.seed", "1", "--set"))
    s2, w2 = step(("seed", "1", "--set"))
    assert sorted(w0.group_ids) != sorted(w1.group_ids)  # trace.seed: other prompts
    assert list(w0.group_ids) == list(w2.group_ids)  # seed: the same prompts ...
    parts = [deal(w0.group_ids, 4, "shuffle", s.seed) for s in (s0, s2)]
    assert any(list(a) != list(b) for a, b in zip(*parts, strict=True))  # ... dealt otherwise


def test_scenario_files_that_are_not_regular_files_are_refused_without_reading(tmp_path):
    import os

    from tltcore.config_files import MAX_CONFIG_BYTES

    os.mkfifo(tmp_path / "pipe.toml")
    with pytest.raises(InputError, match="not a regular file"):
        load_scenario(tmp_path / "pipe.toml")
    big = tmp_path / "big.toml"
    big.write_text("#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(InputError, match="larger than"):
        load_scenario(big)
    crlf = tmp_path / "crlf.toml"
    crlf.write_bytes(b"seed = 3\r\n[cluster]\r\ngpus = 8\r\n")
    assert load_scenario(crlf).cluster.gpus == 8


@needs_shared_traces()
def test_workload_size_is_bounded_before_steps_are_built():
    from tltsim.scenario import MAX_RESPONSES, load_steps, resolve

    s = resolve(None, [("trace.prompts_per_step", "596", "--set"), ("trace.num_steps", "10000", "--set")]).scenario
    with pytest.raises(InputError, match="responses to simulate") as exc:
        load_steps(s.trace)
    assert exc.value.field == "trace.num_steps" and f"{MAX_RESPONSES:,}" in str(exc.value)
    ok = resolve(None, [("trace.prompts_per_step", "4", "--set"), ("trace.num_steps", "3", "--set")]).scenario
    assert len(load_steps(ok.trace)) == 3


#: ``scenario_toml(Scenario())`` as the hand-written TOML writer rendered it before the config tree
#: became pydantic models written by tomli_w: scenario hashes (results folders, sweep keys) hash it.
DEFAULT_TOML = (
    "policies = [\"no-sd\", \"elastic+beg-mab\"]\n"
    "presets = []\n"
    "seed = 0\n"
    "\n"
    "[trace]\n"
    "name = \"r1distill_qwen1.5b_aime_8samples\"\n"
    "num_steps = 1\n"
    "dispersion_sigma = 0.33\n"
    "snap_capped = true\n"
    "default_prompt_tokens = 128\n"
    "deal = \"shuffle\"\n"
    "seed = 0\n"
    "\n"
    "[model]\n"
    "name = \"Qwen2.5-7B\"\n"
    "\n"
    "[cluster]\n"
    "gpu = \"H100\"\n"
    "gpus = 64\n"
    "tp = 4\n"
    "\n"
    "[engine]\n"
    "max_batch = 1024\n"
    "kv_mem_fraction = 0.9\n"
    "prefill_budget = 8192\n"
    "switch = \"reprefill\"\n"
    "switch_prefill_fraction = 0.25\n"
    "catch_up_limit = 16\n"
    "mixed_prefill = false\n"
    "cuda_graphs = \"none\"\n"
    "\n"
    "[cost]\n"
    "model = \"measured\"\n"
    "\n"
    "[acceptance]\n"
    "preset = \"paper-qwen32b\"\n"
    "mode = \"expected\"\n"
    "\n"
    "[drafter]\n"
    "quality = 1.0\n"
    "position_scale = []\n"
    "kind = \"eagle\"\n"
    "draft_model = \"Qwen2.5-0.5B\"\n"
    "drift = 0.3\n"
    "recovery_samples = 400.0\n"
    "ngram_alpha = 0.5\n"
    "ngram_lookup_s = 5e-05\n"
    "\n"
    "[spot]\n"
    "min_workers = 1\n"
    "packing = true\n"
    "max_samples = 800\n"
    "checkpoint_every = 64\n"
    "selective_checkpoint = true\n"
    "selective_checkpoint_s = 0.097\n"
    "full_checkpoint_s = 0.893\n"
    "one_step_offset = true\n"
    "window_tokens = 512\n"
    "bubble_budget = 256\n"
    "retrain_every = 10\n"
    "\n"
    "[rl]\n"
    "reward_s_per_sample = 0.01\n"
    "reward_parallelism = 64\n"
    "reference = true\n"
    "old_log_prob = true\n"
    "ppo_epochs = 1\n"
    "activation_recompute = true\n"
    "train_mfu = 0.35\n"
    "forward_mfu = 0.45\n"
    "weight_sync_overhead_s = 3.0\n"
    "micro_batch_tokens = 32768\n"
)


def test_the_resolved_toml_is_byte_for_byte_what_it_always_was():
    """Same content, same bytes, same hash: arrays on one line, sections and fields in their order
    (the engine's shared limits and its own fields interleaved as before), None fields left out."""
    assert scenario_toml(Scenario()) == DEFAULT_TOML
    assert load_scenario_text(DEFAULT_TOML) == Scenario()


def load_scenario_text(text: str) -> Scenario:
    return scenario_from_dict(tomllib.loads(text))


def test_the_sections_are_the_runtime_configs():
    """No scenario twin: the RL phase model, the analytic Spot Trainer, the drafter dynamics and the
    engine take the scenario's sections themselves, and a section built on its own refuses a bad
    value with the scenario's own error line."""
    from tltcore.drafter.dynamics import DrafterConfig
    from tltcore.engine_limits import EngineLimits
    from tltsim.rl.phases import RLPhaseConfig
    from tltsim.rollout import EngineConfig
    from tltsim.spot.analytic_trainer import SpotTrainerConfig

    s = apply_override(Scenario(), "engine.max_batch", "64")
    assert type(s.rl) is RLPhaseConfig and type(s.spot) is SpotTrainerConfig and type(s.drafter) is DrafterConfig
    assert isinstance(s.engine, EngineLimits) and s.engine.switch_budget == 2048
    engine = EngineConfig.of(s.engine, kv_capacity_tokens=10**6)
    assert (engine.max_batch, engine.prefill_budget, engine.switch) == (64, 8192, "reprefill")
    with pytest.raises(InputError, match=r"^field 'rl\.ppo_epochs': must be in \[1, 100\] \(0 epochs never update "
                                         r"the actor\), got 0$"):
        RLPhaseConfig(ppo_epochs=0)
    with pytest.raises(InputError, match=r"^field 'spot\.samples_per_s': must be in \[1e-06, 1e\+06\], got 0.0$"):
        SpotTrainerConfig(samples_per_s=0.0)
    with pytest.raises(InputError, match=r"^override, field 'rl\.micro_batch_token': no such field \(did you mean "
                                         r"rl\.micro_batch_tokens\?\)$"):
        apply_override(Scenario(), "rl.micro_batch_token", "4")
    with pytest.raises(InputError, match=r"field 'engine\.switch': must be one of reprefill, catch_up, in_step, "
                                         r"got 'reprefil' \(did you mean reprefill\?\)"):
        apply_override(Scenario(), "engine.switch", "reprefil")


def test_settings_apply_to_the_raw_tree_before_one_validation():
    """A setting that is only valid together with another passes in either order (each alone would
    be refused), and the error of a bad one names the flag that set it."""
    from tltsim.scenario import resolve

    for order in ((0, 1), (1, 0)):
        settings = [("cluster.gpus", "6", "--gpus"), ("cluster.tp", "2", "--tp")]
        r = resolve(None, [settings[i] for i in order])
        assert (r.scenario.cluster.gpus, r.scenario.cluster.tp) == (6, 2)
    with pytest.raises(InputError, match=r"^--gpus, field 'cluster\.gpus': gpus=6 is not divisible by tp=4$"):
        resolve(None, [("cluster.gpus", "6", "--gpus")])
