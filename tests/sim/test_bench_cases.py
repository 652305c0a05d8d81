"""`tlt sim bench`: its cases, the CPU-time line and the scale workload (a benchmark, not a timed test:
nothing here asserts a speed)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import invoke_cli, needs_shared_traces


@needs_shared_traces()
def test_bench_prints_cpu_and_wall_seconds_on_its_last_line():
    proc = invoke_cli("sim", "bench", "--case", "nosd", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1].split()
    assert [f.split("=")[0] for f in last] == ["cpu_s", "wall_s"]
    assert all(float(f.split("=")[1]) > 0 for f in last)
    assert "case=nosd requests=4768" in proc.stdout


def test_bench_refuses_an_unknown_case():
    proc = invoke_cli("sim", "bench", "--case", "nope")
    assert proc.returncode == 2 and "--case" in proc.stderr and "rl100" in proc.stderr


@needs_shared_traces()
def test_scale_workload_resamples_whole_aime_groups_with_a_fixed_seed():
    from tltsim.bench import bench_scenario, scale_workload
    from tltsim.scenario import prepare

    a, b = scale_workload(groups=300), scale_workload(groups=300)
    assert a.n_requests == 2400 and a.n_groups == 300
    assert np.array_equal(a.response_tokens, b.response_tokens) and np.array_equal(a.group_ids, b.group_ids)
    base = prepare(bench_scenario()).workload
    # every drawn group is one of the trace's groups, its 8 lengths as recorded
    groups = {tuple(sorted(base.response_tokens[base.group_ids == g].tolist())) for g in np.unique(base.group_ids)}
    for g in np.unique(a.group_ids)[:20]:
        assert tuple(sorted(a.response_tokens[a.group_ids == g].tolist())) in groups


@pytest.mark.parametrize("case", ["p1", "nosd", "rl100-sim", "scale"])
def test_every_case_is_known(case):
    from tltsim.bench import CASES, _case

    assert case in CASES
    prep, run = _case(case)
    assert callable(prep) and callable(run)


@pytest.mark.parametrize("case", ["advise-aime", "advise-dapo", "advise-quick", "rl100", "sweep16"])
def test_every_command_case_parses(case):
    """The named whole-command cases are commands tlt accepts (parsed, not run: they take minutes)."""
    from tltcli.bench_cmd import check_command, command_words

    words = command_words(case)
    assert "{out}" in words  # each run writes into a fresh folder
    check_command([w.replace("{out}", "OUT") for w in words])


def test_a_command_case_runs_whole_in_process_and_prints_cpu_and_rss(tmp_path):
    proc = invoke_cli("sim", "bench", "--case", "cmd:tlt sim schema --out {out}", "--repeats", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("case=cmd:tlt sim schema") and "peak_rss_mb=" in lines[0]
    assert len(lines[1].split()[0].split("=")[1].split(",")) == 2  # one CPU figure per run
    assert [f.split("=")[0] for f in lines[-1].split()] == ["cpu_s", "wall_s"]


@pytest.mark.parametrize("case", ["cmd:sim run --nope", "cmd:sim nope", "cmd:", "cmd:sim bench"])
def test_a_bad_command_case_is_refused_before_anything_runs(case):
    proc = invoke_cli("sim", "bench", "--case", case)
    assert proc.returncode == 2 and "--case" in proc.stderr


@needs_shared_traces()
def test_a_policy_case_times_the_p1_reference_alongside_and_prints_the_ratio():
    proc = invoke_cli("sim", "bench", "--case", "policy:no-sd", "--repeats", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("case=policy:no-sd requests=4768")
    ref = dict(f.split("=") for f in lines[-2].split())
    assert ref["reference"] == "p1" and len(ref["reference_cpus_s"].split(",")) == 2
    cpu = float(lines[-1].split()[0].split("=")[1])
    assert float(ref["ratio"]) == pytest.approx(cpu / float(ref["reference_cpu_s"]), rel=0.01, abs=0.01)


def test_a_policy_case_with_an_unknown_policy_is_one_line():
    proc = invoke_cli("sim", "bench", "--case", "policy:nope", "--repeats", "1")
    assert proc.returncode == 2 and "nope" in proc.stderr and "Traceback" not in proc.stderr
