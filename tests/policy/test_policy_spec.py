"""Typed policy specs: the shorthand round-trips, readers read fields, and a field is a scenario field."""

from __future__ import annotations

import pytest

from tltcore.errors import InputError
from tltcore.policy.registry import elastic_split, make_policy, needs_cost_model, spec_shapes
from tltcore.policy.shapes import policy_shapes
from tltcore.policy.spec import (
    BegMabSpec,
    CostAwareSpec,
    ElasticSpec,
    Models,
    StaticSpec,
    as_spec,
    build,
    parse_policy,
    with_base,
)
from tltsim.advise import default_policies
from tltsim.rl.presets import PRESETS
from tltsim.scenario import bundled_scenarios, load_scenario, policy_names, resolve, scenario_toml

#: Specs written in the canonical form: each must print back byte for byte (results are labelled so).
CANONICAL = (
    "no-sd", "static", "static:8_4_32", "static:4_1_4", "beg-mab", "elastic+beg-mab", "elastic:16:5+beg-mab",
    "elastic:16:5+beg-mab:eps=0.05:window=100:thresholds=1,8", "eps-greedy:eps=0.2:arms=8_4_16,4_2_6",
    "ucb1:c=0.5:arms=8_4_32,8_4_8", "vllm-table", "vllm-table:64=4,above=0", "vllm-table:2=8_4_16,8=3,above=1",
    "sglang-ema", "sglang-ema:depths=1,2:ranges=1,32:prior=0.5", "greedy-oracle", "greedy-oracle:arms=4_1_4",
    "cost-aware", "elastic+cost-aware", "cost-aware:switch=catch_up:lengths=known",
    "cost-aware:arms=4_1_4,8_4_16:switch=catch_up:lengths=known:recheck=4:phases=3:memory=1",
    "elastic:32:3+sglang-ema", "elastic+vllm-table", "elastic:8:1+static:5_1_5",
)


def _shipped() -> set[str]:
    """Every policy name a bundled scenario, a preset or ``tlt advise``'s defaults writes into results."""
    names = {p.sd_policy for p in PRESETS.values()} | set(default_policies())
    for path in bundled_scenarios().values():
        names |= set(policy_names(load_scenario(path).policies))
    return names


@pytest.mark.parametrize("text", sorted(set(CANONICAL) | _shipped()))
def test_canonical_text_prints_back_byte_for_byte(text):
    spec = parse_policy(text)
    assert spec.name == text and make_policy(text, **MODELS).name == text
    assert as_spec(spec.model_dump(exclude_none=True)) == spec  # the table form is the same spec


class _Models:
    def expected_accept_length(self, config, drafter=None):
        return 1.0 + config.depth / 4

    def decode_time(self, context_lens):
        return 1.0

    def sd_time(self, context_lens, config):
        return 1.0 + config.verify_tokens / 100

    def sd_times(self, context_lens, configs):
        return [self.sd_time(context_lens, c) for c in configs]

    def prefill_time(self, new_tokens, cached_tokens):
        return 1.0

    def drafter_prefill_time(self, new_tokens, cached_tokens):
        return 1.0


MODELS = {"accept_model": _Models(), "cost_model": _Models()}


@pytest.mark.parametrize("text", CANONICAL)
def test_shapes_are_the_built_policys_shapes(text):
    """What readers read from the spec is what the policy a run builds declares."""
    spec = parse_policy(text)
    assert spec.shapes == policy_shapes(build(spec, Models(**MODELS)))
    assert spec_shapes(text) == spec.shapes


def test_readers_read_fields():
    assert elastic_split("elastic:8+beg-mab:eps=0.05") == (8, "beg-mab:eps=0.05")
    assert elastic_split("elastic+beg-mab") == (32, "beg-mab")  # the default threshold, as the policy has it
    assert elastic_split("static:4_1_4") == (None, "static:4_1_4")
    assert needs_cost_model("elastic:8+cost-aware") and needs_cost_model("greedy-oracle")
    assert not needs_cost_model("elastic+sglang-ema")
    spec = parse_policy("elastic:16:5+beg-mab:eps=0.05")
    assert isinstance(spec, ElasticSpec) and (spec.threshold, spec.consecutive) == (16, 5)
    assert isinstance(spec.inner, BegMabSpec) and spec.inner.eps == 0.05 and spec.inner.window is None


@pytest.mark.parametrize(("text", "expect"), [
    ("elastic+elastic+beg-mab", "elastic may appear once"), ("elastic:8:2:1+beg-mab", "at most threshold"),
    ("beg-mab+static", "'beg-mab' cannot wrap"), ("elastic", "wraps another policy"), ("static:4_1_4:x", "one config"),
])
def test_the_grammar_refuses_in_one_line_quoting_the_text(text, expect):
    with pytest.raises(InputError) as info:
        parse_policy(text)
    assert f"bad SD policy spec '{text}': " in str(info.value) and expect in str(info.value)


def test_with_base_sets_the_deciding_policys_field_and_prints_canonically():
    spec = with_base(parse_policy("elastic:8+cost-aware:lengths=known"), switch="catch_up")
    assert isinstance(spec.base, CostAwareSpec) and spec.name == "elastic:8+cost-aware:switch=catch_up:lengths=known"
    with pytest.raises(InputError, match="elastic threshold"):
        ElasticSpec(threshold=0, inner=StaticSpec())


def test_a_table_and_the_shorthand_are_one_spec(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[[policies]]\nkind = "elastic"\nthreshold = 8\ninner = {kind = "beg-mab", eps = 0.05}\n\n'
                    '[[policies]]\nkind = "static"\nconfig = "4_1_4"\n')
    s = load_scenario(path)
    assert policy_names(s.policies) == ("elastic:8+beg-mab:eps=0.05", "static:4_1_4")
    assert 'policies = ["no-sd", "elastic:8+beg-mab:eps=0.05", "static:4_1_4"]' in scenario_toml(s)
    path.write_text('[[policies]]\nkind = "elastic"\nthreshold = 0\ninner = "beg-mab"\n')
    with pytest.raises(InputError, match=r"field 'policies'.*elastic threshold must be"):
        load_scenario(path)
    path.write_text('[[policies]]\nkind = "elastic"\nthreshold = "8"\ninner = "beg-mab"\n')
    with pytest.raises(InputError, match=r"field 'policies.threshold': must be an integer"):
        load_scenario(path)


def test_set_reaches_a_policys_field_by_index():
    r = resolve("aime_qwen7b_64xh100", [("policies.1.threshold", "8", "--set"),
                                        ("policies.3.inner.config", "4_1_4", "--set")])
    assert policy_names(r.scenario.policies)[1:4] == ("elastic:8+beg-mab", "static:8_4_32", "elastic+static:4_1_4")
    # a whole-list setting is applied first, whatever the order given
    r = resolve(None, [("policies.1.inner.eps", "0.05", "--set"), ("policies", "no-sd,elastic:4+beg-mab", "--policy")])
    assert policy_names(r.scenario.policies) == ("no-sd", "elastic:4+beg-mab:eps=0.05")
    assert policy_names(resolve(None, [("policies.1", "static:4_1_4", "--set")]).scenario.policies)[1] == "static:4_1_4"


@pytest.mark.parametrize(("dotted", "value", "expect"), [
    ("policies.1.threshold", "x", "field 'policies.1.threshold': must be an integer"),
    ("policies.1.thresh", "8", "'elastic' has no field 'thresh' (did you mean threshold?)"),
    ("policies.2.threshold", "8", "there are 2 policies (policies.0 to policies.1); no index 2"),
    ("policies.0.threshold", "8", "'no-sd' has no field 'threshold'"),
    ("policies.one", "8", "addressed by its index"),
    ("policies.1.threshold", "0", "elastic threshold must be a batch size in [1, 1,000,000], got 0"),
    ("policies.1.inner.eps", "2", "epsilon must be in [0, 1]"),
    ("presets_policy.threshold", "8", "presets_policy is not set"),
])
def test_a_bad_policy_setting_is_one_line_naming_the_flag(dotted, value, expect):
    with pytest.raises(InputError) as info:
        resolve(None, [(dotted, value, "--set")])
    assert expect in str(info.value) and str(info.value).startswith("--set") and "\n" not in str(info.value)


def test_a_sweep_axis_over_a_policys_threshold(tmp_path):
    from tltsim.sweep import expand, parse_spec

    path = tmp_path / "sweep.toml"
    text = ('[scenario]\npolicies = ["elastic+beg-mab"]\n\n[[axes]]\nkind = "grid"\n'
            '"policies.0.threshold" = [4, 8, 16]\n')
    points = expand(parse_spec(text, path=path))
    assert [policy_names(p.scenario.policies) for p in points] == [
        ("elastic:4+beg-mab",), ("elastic:8+beg-mab",), ("elastic:16+beg-mab",)]
    assert [p.values for p in points] == [{"policies.0.threshold": t} for t in (4, 8, 16)]
    with pytest.raises(InputError, match=r"axes\[0\]\.policies\.0\.thresh.*did you mean threshold"):
        parse_spec(text.replace('"policies.0.threshold"', '"policies.0.thresh"'), path=path)
    with pytest.raises(InputError, match=r"axes\[0\]\.policies\.0\.threshold.*must be an integer"):
        parse_spec(text.replace("[4, 8, 16]", '["a"]'), path=path)


def test_schema_lists_the_threshold():
    from tltcli.sim import scenario_schema_text

    text = scenario_schema_text()
    assert '"threshold"' in text and "largest batch that speculates" in text and '"ElasticSpec"' in text
