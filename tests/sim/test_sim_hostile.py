"""Hostile input to `tlt sim run`: malformed and absurd scenario files, `--set` overrides and flags.

Every case must end the way bad input ends everywhere in tlt: exit code 2, exactly one stderr line
starting with ``tlt: error:`` (naming the file or flag and the field where there is one), no
traceback, and nothing written: neither the ``--out`` folder nor a default results folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, invoke_cli, skip_if_trace_missing

# (scenario text, what the error line must name)
SCENARIOS: list[tuple[str, str]] = [
    ("[cluster\n", "not valid TOML"),
    ("[cluster]\n[cluster]\n", "not valid TOML"),
    ("seed = 18446744073709551616", "seed"),
    ("seed = -1", "seed"),
    ("seed = 1.5", "seed"),
    ('seed = "3"', "seed"),
    ("seed = true", "seed"),
    ("seed = nan", "seed"),
    ("colour = 1", "colour"),
    ("trace = 5", "trace"),
    ('policies = "no-sd"', "policies"),
    ("policies = []", "policies"),
    ("policies = [1]", "policies"),
    ('policies = ["warp-drive"]', "policies"),
    ('policies = ["static:1000_1000_1000"]', "policies"),
    ('policies = ["static:8_4_9999"]', "policies"),
    ('policies = ["elastic+elastic+beg-mab"]', "policies"),
    ('policies = ["beg-mab:eps=2"]', "policies"),
    ('policies = ["sglang-ema:depths=1000"]', "policies"),
    ('policies = ["vllm-table:4=999"]', "policies"),
    ('policies = ["elastic:0+beg-mab"]', "policies"),
    ("[trace]\nstep = -1", "trace.step"),
    ('[trace]\nstep = "x"', "trace.step"),
    ("[trace]\nnum_steps = 0", "trace.num_steps"),
    ("[trace]\nnum_steps = 1000000000", "trace.num_steps"),
    ("[trace]\ncap = 0", "trace.cap"),
    ("[trace]\ncap = 1000000000000", "trace.cap"),
    ("[trace]\nsamples = 0", "trace.samples"),
    ("[trace]\nexpand_samples = 100000", "trace.expand_samples"),
    ("[trace]\ndispersion_sigma = nan", "trace.dispersion_sigma"),
    ("[trace]\ndispersion_sigma = -1.0", "trace.dispersion_sigma"),
    ('[trace]\ndeal = "random"', "trace.deal"),
    ('[trace]\nname = ""', "trace.name"),
    ('[trace]\nname = "no_such_trace"', "trace.name"),
    ('[trace]\nname = "polytrace_rl_rollouts"\nsource = "nope"', "trace.source"),
    ('[trace]\nname = "polytrace_rl_rollouts"\nstep = 999', "trace.step"),
    ('[trace]\nname = "polytrace_rl_rollouts"\nnum_steps = 99', "trace.num_steps"),
    ("[trace]\nprompts_per_step = 0", "trace.prompts_per_step"),
    ("[trace]\ndefault_prompt_tokens = -5", "trace.default_prompt_tokens"),
    ("[trace]\nsnap_capped = 1", "trace.snap_capped"),
    ("[trace]\nexpand_samples = 8", "trace.expand_samples"),  # the AIME trace already has 8 samples
    ("[trace]\nbogus = 1", "trace.bogus"),
    ('[model]\nname = "nope-13b"', "model.name"),
    ("[model]\nname = 5", "model.name"),
    ('[model]\nname = "/nonexistent/config.json"', "model.name"),
    ('[cluster]\ngpu = "V99"', "cluster.gpu"),
    ("[cluster]\ngpus = 0", "cluster.gpus"),
    ("[cluster]\ngpus = 4000000000\ntp = 4", "cluster.gpus"),
    ("[cluster]\ntp = 0", "cluster.tp"),
    ("[cluster]\ngpus = 12\ntp = 3", "cluster.tp"),
    ("[cluster]\ngpus = 6\ntp = 4", "cluster.gpus"),
    ("[cluster]\nflops_efficiency = 0.0", "cluster.flops_efficiency"),
    ("[cluster]\nbandwidth_efficiency = 2.0", "cluster.bandwidth_efficiency"),
    ('[model]\nname = "Llama-3.3-70B"\n[cluster]\ngpus = 8\ntp = 1', "cluster.tp"),
    # 0.9 GB of KV left next to 32B weights on one H100: a 16K response cannot fit, said up front
    ('[model]\nname = "Qwen2.5-32B"\n[cluster]\ngpus = 8\ntp = 1\n[engine]\nkv_mem_fraction = 0.83', "cluster.tp"),
    ("[engine]\nmax_batch = 0", "engine.max_batch"),
    ("[engine]\nmax_batch = 1000000000000", "engine.max_batch"),
    ("[engine]\nkv_mem_fraction = 0.0", "engine.kv_mem_fraction"),
    ("[engine]\nkv_mem_fraction = 1.5", "engine.kv_mem_fraction"),
    ("[engine]\nprefill_budget = 0", "engine.prefill_budget"),
    ('[engine]\nswitch = "maybe"', "engine.switch"),
    ("[engine]\nswitch_prefill_fraction = 0.0", "engine.switch_prefill_fraction"),
    ("[engine]\ncatch_up_limit = 0", "engine.catch_up_limit"),
    ('[cost]\nmodel = "magic"', "cost.model"),
    ('[cost]\nmodel = "table"', "cost.table"),
    ('[cost]\nmodel = "table"\ntable = "/nonexistent/costs.csv"', "costs.csv, field 'cost.table': cost table not"),
    ("[cost]\nsd_overhead_s = -1.0", "cost.sd_overhead_s"),
    ("[cost]\nkv_block_size = 0", "cost.kv_block_size"),
    ('[acceptance]\npreset = "unknown"', "acceptance.preset"),
    ('[acceptance]\nmode = "psychic"', "acceptance.mode"),
    ("[acceptance]\ncoverage = 1.5", "acceptance.coverage"),
    ("[acceptance]\ndepth_power = -1.0", "acceptance.depth_power"),
    ('[acceptance]\npreset = "chain-0.8"\ncoverage = 0.5', "acceptance.preset"),
    ("[drafter]\nquality = -1.0", "drafter.quality"),
    ("[drafter]\nquality = 50.0", "drafter.quality"),
    ("[drafter]\nquality = 1.5", "drafter.quality"),  # acceptance mass of a depth would exceed 1
    ("[drafter]\nposition_scale = [-1.0]", "drafter.position_scale"),
    ('[drafter]\nposition_scale = "x"', "drafter.position_scale"),
]

# (extra command-line arguments, what the error line must name)
FLAGS: list[tuple[list[str], str]] = [
    (["--set", "noequals"], "--set"),
    (["--set", "=5"], "--set"),
    (["--set", "cluster.nvlink=1"], "cluster.nvlink"),
    (["--set", "engine=8"], "engine"),
    (["--set", "engine.max_bach=8"], "engine.max_batch"),  # the suggestion
    (["--set", "cluster.tp=four"], "cluster.tp"),
    (["--set", "trace.snap_capped=maybe"], "trace.snap_capped"),
    (["--set", "policies="], "policies"),
    (["--set", "policies=[unclosed"], "policies"),
    (["--set", "drafter.position_scale=a,b"], "drafter.position_scale"),
    (["--set", "seed=99999999999999999999999"], "seed"),
    (["--set", "cluster.gpus=1e3"], "cluster.gpus"),
    (["--set", "trace.cap=inf"], "trace.cap"),
    (["--set", "engine.kv_mem_fraction=nan"], "engine.kv_mem_fraction"),
    (["--set", "cost.sd_overhead_s=-0.1"], "cost.sd_overhead_s"),
    (["--set", "acceptance.mode=psychic"], "acceptance.mode"),
    (["--set", "trace.name=\x00"], "trace.name"),
    (["--gpus", "-4"], "cluster.gpus"),
    (["--tp", "0"], "cluster.tp"),
    (["--tp", "8"], "cluster.tp"),
    (["--seed", "-1"], "seed"),
    (["--step", "99999"], "trace.step"),
    (["--policy", "elastic+elastic+beg-mab"], "policies"),
    (["--policy", "static:1000_1000_1000"], "policies"),
    (["--model", "/nonexistent/config.json"], "model.name"),
    (["--trace", ""], "trace.name"),
    (["--trace", "no_such_trace"], "trace.name"),
    (["--scenario", "/nonexistent/scenario.toml"], "scenario.toml"),
    (["--scenario", "dapo_qwen32b_polytrac"], "did you mean dapo_qwen32b_polytrace"),
]


def check_refused(args: list[str], needle: str, out: Path) -> None:
    before = set((REPO / "results").rglob("*")) if (REPO / "results").exists() else set()
    proc = invoke_cli("sim", "run", *args, "--out", str(out))
    lines = proc.stderr.strip().splitlines()
    skip_if_trace_missing(proc.stderr)
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), proc.stderr
    assert "Traceback" not in proc.stderr and needle in lines[0], (needle, lines[0])
    assert not out.exists()
    after = set((REPO / "results").rglob("*")) if (REPO / "results").exists() else set()
    assert after == before


@pytest.mark.parametrize(("text", "needle"), SCENARIOS, ids=[f"scenario{i}" for i in range(len(SCENARIOS))])
def test_hostile_scenario_files(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    check_refused(["--scenario", str(path)], needle, tmp_path / "out")


def test_hostile_binary_and_folder_scenarios(tmp_path: Path) -> None:
    garbage = tmp_path / "g.toml"
    garbage.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    check_refused(["--scenario", str(garbage)], str(garbage), tmp_path / "out")
    check_refused(["--scenario", str(tmp_path)], "folder", tmp_path / "out")


@pytest.mark.parametrize(("args", "needle"), FLAGS, ids=[f"flag{i}" for i in range(len(FLAGS))])
def test_hostile_flags_and_overrides(tmp_path: Path, args: list[str], needle: str) -> None:
    check_refused(args, needle, tmp_path / "out")
