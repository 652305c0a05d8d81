"""Hostile settings: every value that is wrong, or that would make a run meaningless, is refused.

Issue 21's "every setting is checked where it can be wrong": a scenario field, a ``--set``, a flag
or a sweep axis that is out of range, of the wrong type, unknown, or valid on its own but empty of
meaning (a Spot Trainer that needs more workers than the cluster has, a stale drafter better than
the trained one, RL steps with zero PPO epochs, policies beside presets that would be ignored, a
``tlt validate`` scenario with presets) and the inputs that used to hang or exhaust memory (a FIFO
or ``/dev/zero`` as a scenario, 100,000 steps, a million rollout workers, a 47M-response workload).

Each case in :data:`CASES` is one command line. It must end as bad input ends everywhere in tlt:
exit 2, exactly one stderr line starting with ``tlt: error:`` that names the file or flag and the
dotted field, no traceback, nothing written (no ``--out``, no default results folder, the case's
folder as it was), within :data:`BOUND_S` seconds of CPU time (a wall-clock guard, wider on a loaded
machine, turns a hang into a failure: :func:`conftest.invoke_bounded`).
tests/sim/test_sim_hostile.py holds the earlier corpus of ``tlt sim run``; none of its cases is
repeated here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, invoke_bounded, skip_if_trace_missing

BOUND_S = 20.0
COMMANDS = ("sim run", "validate", "demo", "real profile", "sweep points", "sim sensitivity")
FILE = "{file}"  # in ``expect``: the case's scenario (or sweep spec) path


@dataclass(frozen=True)
class Case:
    """One hostile command line. ``scenario``: TOML written to ``s.toml`` in the case's folder and
    passed as ``--scenario`` (``sweep points``: the spec itself); ``special``: a special file used
    instead (``fifo``, ``devzero``, ``big``, ``fifo-link``; ``fifo-arg``: a FIFO ``{dir}/pipe`` the
    arguments name); ``expect``: the words the error line
    must hold, ``{file}`` standing for that path; ``{dir}`` in ``args`` is the case's folder."""

    id: str
    command: str
    args: tuple[str, ...] = ()
    scenario: str | None = None
    expect: tuple[str, ...] = ()
    special: str | None = None


def sim(id: str, *args: str, expect: tuple[str, ...]) -> Case:
    return Case(id, "sim run", args, expect=expect)


def simfile(id: str, text: str, field: str, *more: str) -> Case:
    return Case(id, "sim run", scenario=text, expect=(FILE, f"field '{field}'", *more))


def sets(id: str, assignment: str, *more: str) -> Case:
    field = assignment.split("=", 1)[0]
    return Case(id, "sim run", ("--set", assignment), expect=("--set", f"field '{field}'", *more))


CASES: list[Case] = [
    # 1. a Spot Trainer that waits for more released workers than the cluster has trains 0 samples
    sets("min-workers-100000", "spot.min_workers=100000", "16 rollout workers", "0 samples"),
    sets("min-workers-17-of-16", "spot.min_workers=17", "16 rollout workers"),
    sim("min-workers-over-small-cluster", "--gpus", "8", "--set", "spot.min_workers=3",
        expect=("--set", "field 'spot.min_workers'", "2 rollout workers")),
    simfile("min-workers-file-presets", 'presets = ["tlt"]\n[spot]\nmin_workers = 100000', "spot.min_workers"),
    sets("min-workers-zero", "spot.min_workers=0"),
    # 2. a stale drafter better than the trained one was clamped without a word
    sets("stale-quality-5", "drafter.stale_quality=5", "[0, drafter.quality = 1]"),
    sets("stale-quality-negative", "drafter.stale_quality=-0.1", "[0, drafter.quality"),
    sets("stale-quality-nan", "drafter.stale_quality=nan", "finite"),
    simfile("stale-above-quality", "[drafter]\nquality = 0.9\nstale_quality = 0.95", "drafter.stale_quality",
            "drafter.quality = 0.9"),
    sim("stale-above-quality-presets", "--preset", "tlt", "--set", "drafter.quality=0.9", "--set",
        "drafter.stale_quality=0.95", expect=("--set", "field 'drafter.stale_quality'", "drafter.quality = 0.9")),
    # 3. RL steps that never update the actor
    sets("ppo-epochs-0", "rl.ppo_epochs=0", "never update the actor"),
    sets("ppo-epochs-negative", "rl.ppo_epochs=-1"),
    sets("ppo-epochs-huge", "rl.ppo_epochs=1000"),
    simfile("ppo-epochs-0-file-presets", 'presets = ["tlt"]\n[rl]\nppo_epochs = 0', "rl.ppo_epochs"),
    simfile("ppo-epochs-float", "[rl]\nppo_epochs = 1.5", "rl.ppo_epochs", "integer"),
    # 4. policies beside presets would be ignored: refused, whichever layer gives them
    sim("preset-and-policy", "--preset", "tlt", "--policy", "static:4_1_4",
        expect=("--policy", "field 'policies'", "--preset")),
    sim("preset-and-set-policies", "--preset", "tlt", "--set", "policies=beg-mab",
        expect=("--set", "field 'policies'")),
    sim("set-presets-and-policy", "--set", "presets=tlt", "--policy", "beg-mab",
        expect=("--policy", "field 'policies'")),
    simfile("file-presets-and-policies", 'presets = ["tlt"]\npolicies = ["beg-mab"]', "policies"),
    Case("file-presets-flag-policy", "sim run", ("--policy", "beg-mab"), scenario='presets = ["tlt"]',
         expect=("--policy", "field 'policies'", FILE)),
    # 6. one value per field: which of two would win depended on the order
    sim("tp-twice", "--tp", "2", "--set", "cluster.tp=4", expect=("field 'cluster.tp'", "--tp", "given twice")),
    sim("seed-twice", "--set", "seed=1", "--set", "seed=2", expect=("--set", "field 'seed'", "given twice")),
    sim("steps-twice", "--steps", "2", "--set", "trace.num_steps=3", expect=("field 'trace.num_steps'", "--steps")),
    sim("policy-twice", "--policy", "beg-mab", "--set", "policies=static:4_1_4",
        expect=("field 'policies'", "given twice")),
    # 8. the same check from a flag, --set and a file
    sim("workers-cap-flags", "--gpus", "1000000", "--tp", "1", expect=("field 'cluster.gpus'", "65,536")),
    sets("workers-cap-set", "cluster.gpus=999936", "65,536"),
    simfile("workers-cap-file", "[cluster]\ngpus = 262144\ntp = 2", "cluster.gpus", "131,072"),
    # bounded work: 100,000 steps (hours) and 47M responses are refused before a step is built
    sim("steps-100000", "--steps", "100000", expect=("--steps", "field 'trace.num_steps'", "10000")),
    sim("responses-47M", "--steps", "10000", "--set", "trace.prompts_per_step=596",
        expect=("--steps", "field 'trace.num_steps'", "47,680,000 responses")),
    simfile("responses-expand", '[trace]\nname = "intern_s1_math"\nprompts_per_step = 512\nnum_steps = 3000\n'
            "samples = 8", "trace.num_steps", "responses"),
    # files that hang or never end
    Case("scenario-fifo", "sim run", special="fifo", expect=(FILE, "not a regular file")),
    Case("scenario-devzero", "sim run", special="devzero", expect=("/dev/zero", "not a regular file")),
    Case("scenario-huge", "sim run", special="big", expect=(FILE, "larger than 4 MiB")),
    Case("scenario-link-to-fifo", "sim run", special="fifo-link", expect=(FILE, "not a regular file")),
    Case("trace-devzero", "sim run", ("--trace", "/dev/zero"), expect=("--trace", "field 'trace.name'")),
    Case("model-devzero", "sim run", ("--model", "/dev/zero"), expect=("--model", "field 'model.name'",
                                                                        "not a regular file")),
    Case("model-fifo", "sim run", ("--model", "{dir}/pipe"), special="fifo-arg",
         expect=("--model", "field 'model.name'", "not a regular file")),
    Case("trace-fifo", "sim run", ("--set", "trace.name={dir}/pipe"), special="fifo-arg",
         expect=("--set", "field 'trace.name'")),
    sim("cost-table-devzero", "--set", "cost.model=table", "--set", "cost.table=/dev/zero",
        expect=("--set", "field 'cost.table'", "not a regular file")),
    # rl.*
    sets("rl-reward-negative", "rl.reward_s_per_sample=-1"),
    sets("rl-reward-huge", "rl.reward_s_per_sample=1e9", "3600"),
    sets("rl-reward-inf", "rl.reward_s_per_sample=inf", "finite"),
    sets("rl-parallelism-zero", "rl.reward_parallelism=0"),
    sets("rl-parallelism-huge", "rl.reward_parallelism=100000000000"),
    sets("rl-train-mfu-zero", "rl.train_mfu=0"),
    sets("rl-train-mfu-above-1", "rl.train_mfu=1.5"),
    sets("rl-forward-mfu-negative", "rl.forward_mfu=-0.1"),
    sets("rl-sync-negative", "rl.weight_sync_overhead_s=-1"),
    sets("rl-sync-huge", "rl.weight_sync_overhead_s=1e7"),
    sets("rl-micro-batch-zero", "rl.micro_batch_tokens=0"),
    sets("rl-micro-batch-huge", "rl.micro_batch_tokens=1000000000000"),
    sets("rl-reference-maybe", "rl.reference=maybe", "true or false"),
    simfile("rl-old-log-prob-string", '[rl]\nold_log_prob = "yes"', "rl.old_log_prob", "true or false"),
    simfile("rl-unknown-field", "[rl]\nepochs = 2", "rl.epochs", "ppo_epochs"),
    # spot.*
    sets("spot-rate-zero", "spot.samples_per_s=0"),
    sets("spot-rate-negative", "spot.samples_per_s=-29.6"),
    sets("spot-rate-huge", "spot.samples_per_s=1e12"),
    sets("spot-max-samples-zero", "spot.max_samples=0"),
    sets("spot-max-samples-negative", "spot.max_samples=-5"),
    sets("spot-checkpoint-every-zero", "spot.checkpoint_every=0"),
    sets("spot-window-zero", "spot.window_tokens=0"),
    sets("spot-window-huge", "spot.window_tokens=100000000"),
    sets("spot-bubble-zero", "spot.bubble_budget=0"),
    sets("spot-selective-negative", "spot.selective_checkpoint_s=-1"),
    sets("spot-full-huge", "spot.full_checkpoint_s=1e6"),
    simfile("spot-packing-string", '[spot]\npacking = "true"', "spot.packing", "true or false"),
    simfile("spot-offset-int", "[spot]\none_step_offset = 2", "spot.one_step_offset"),
    simfile("spot-rate-inf", "[spot]\nsamples_per_s = inf", "spot.samples_per_s", "finite"),
    # drafter.*
    sets("drafter-drift-above-1", "drafter.drift=1.5"),
    sets("drafter-drift-negative", "drafter.drift=-0.1"),
    sets("drafter-recovery-zero", "drafter.recovery_samples=0"),
    sets("drafter-recovery-negative", "drafter.recovery_samples=-5"),
    sets("drafter-ngram-alpha", "drafter.ngram_alpha=1.5"),
    sets("drafter-ngram-lookup", "drafter.ngram_lookup_s=2"),
    sets("drafter-kind", "drafter.kind=gpt", "eagle"),
    sets("drafter-draft-model", "drafter.draft_model=nope-1b"),
    sets("drafter-quality-nan", "drafter.quality=nan", "finite"),
    simfile("drafter-position-scale-nan", "[drafter]\nposition_scale = [1.0, nan]", "drafter.position_scale"),
    # cluster.*
    sets("cluster-gpus-negative", "cluster.gpus=-64"),
    sets("cluster-tp-huge", "cluster.tp=100000"),
    sets("cluster-tp-float", "cluster.tp=2.5", "integer"),
    sets("cluster-flops-above-1", "cluster.flops_efficiency=1.5"),
    sets("cluster-bandwidth-negative", "cluster.bandwidth_efficiency=-1"),
    simfile("cluster-gpu-number", "[cluster]\ngpu = 5", "cluster.gpu", "string"),
    simfile("cluster-gpus-table", "[cluster.gpus]\nn = 8", "cluster.gpus", "integer"),
    # engine.*
    sets("engine-max-batch-negative", "engine.max_batch=-1"),
    sets("engine-prefill-huge", "engine.prefill_budget=1000000000000"),
    sets("engine-catch-up-negative", "engine.catch_up_limit=-1"),
    sets("engine-kv-negative", "engine.kv_mem_fraction=-0.5"),
    sets("engine-switch-fraction", "engine.switch_prefill_fraction=2"),
    sets("engine-cuda-graphs", "engine.cuda_graphs=maybe", "bucketed"),
    simfile("engine-mixed-prefill-string", '[engine]\nmixed_prefill = "no"', "engine.mixed_prefill"),
    simfile("engine-switch-number", "[engine]\nswitch = 1", "engine.switch", "string"),
    # cost.*
    sets("cost-iteration-negative", "cost.iteration_overhead_s=-1"),
    sets("cost-draft-step-huge", "cost.draft_step_overhead_s=11"),
    sets("cost-sd-nan", "cost.sd_overhead_s=nan", "finite"),
    sets("cost-block-huge", "cost.kv_block_size=100000"),
    simfile("cost-table-number", "[cost]\ntable = 5", "cost.table", "string"),
    # acceptance.*
    sets("acceptance-rank-negative", "acceptance.rank_ratio=-0.1"),
    sets("acceptance-decay-huge", "acceptance.depth_decay=101"),
    sets("acceptance-coverage-nan", "acceptance.coverage=nan", "finite"),
    simfile("acceptance-mode-number", "[acceptance]\nmode = 1", "acceptance.mode"),
    # trace.*
    sets("trace-seed-negative", "trace.seed=-5"),
    sets("trace-samples-huge", "trace.samples=2000"),
    sets("trace-step-huge", "trace.step=2000000000"),
    # unknown sections and shapes
    simfile("unknown-section", "[spots]\nmin_workers = 2", "spots", "spot"),
    simfile("unknown-top-level", 'preset = ["tlt"]', "preset", "presets"),
    simfile("section-not-table", "rl = 5", "rl", "table"),
    simfile("nested-unknown", "[rl.extra]\nx = 1", "rl.extra"),
    simfile("presets-unknown", 'presets = ["tlt-turbo"]', "presets", "tlt"),
    simfile("presets-not-list", 'presets = "tlt"', "presets", "list"),
    # policy specs that do nothing or have no upper bound (issue 39): refused naming the spec and option
    sim("policy-static-depth-0", "--policy", "static:0_1_1",
        expect=("--policy", "field 'policies'", "'static:0_1_1'", "depth 0", "'off'")),
    sim("policy-static-off", "--policy", "static:off", expect=("--policy", "'static:off'", "never drafts", "no-sd")),
    simfile("policy-static-depth-0-file", 'policies = ["elastic+static:0_1_1"]', "policies", "'0_1_1'", "depth 0"),
    sim("policy-sglang-depths-0", "--policy", "sglang-ema:depths=0",
        expect=("--policy", "'sglang-ema:depths=0'", "depths [0] never draft", "no-sd")),
    sim("policy-oracle-arms-off", "--policy", "greedy-oracle:arms=off",
        expect=("--policy", "'greedy-oracle:arms=off'", "never drafts")),
    sim("policy-bandit-arms-off", "--policy", "beg-mab:arms=off", expect=("--policy", "arms ['off'] never draft")),
    sim("policy-vllm-table-off", "--policy", "vllm-table:4=off", expect=("--policy", "'vllm-table:4=off'", "never")),
    sim("policy-prior-weight-inf", "--policy", "cost-aware:prior_weight=inf",
        expect=("--policy", "'cost-aware:prior_weight=inf'", "prior_weight must be a finite number")),
    sim("policy-prior-weight-huge", "--policy", "cost-aware:prior_weight=1e12",
        expect=("--policy", "prior_weight must be in (0, 1,048,576]")),
    sim("policy-option-twice", "--policy", "cost-aware:prior=0.7:prior=0.2",
        expect=("--policy", "'cost-aware:prior=0.7:prior=0.2'", "option 'prior' is given twice")),
    sim("policy-vllm-above-twice", "--policy", "vllm-table:4=2,above=3,above=off",
        expect=("--policy", "'above' is given twice")),
    sim("policy-phases-100000", "--policy", "cost-aware:phases=100000",
        expect=("--policy", "'cost-aware:phases=100000'", "phases must be in [1, 64]")),
    sim("policy-recheck-huge", "--policy", "cost-aware:recheck=100000000",
        expect=("--policy", "recheck must be in [1, 1,048,576]")),
    sim("policy-window-huge", "--policy", "beg-mab:window=100000000",
        expect=("--policy", "window must be in [1, 100,000]")),
    sim("policy-ucb1-c-inf", "--policy", "ucb1:c=inf", expect=("--policy", "'ucb1:c=inf'", "c must be a finite")),
    sim("policy-ucb1-c-huge", "--policy", "ucb1:c=1e9", expect=("--policy", "c must be in [0, 10]")),
    sim("policy-hysteresis-huge", "--policy", "sglang-ema:hysteresis=100",
        expect=("--policy", "hysteresis must be in [0, 1]")),
    sim("policy-ranges-huge", "--policy", "sglang-ema:ranges=1,99999999",
        expect=("--policy", "ranges must be at most 64")),
    sim("policy-thresholds-huge", "--policy", "beg-mab:thresholds=1,99999999",
        expect=("--policy", "thresholds must be at most 64")),
    sim("policy-vllm-row-huge", "--policy", "vllm-table:99999999=3", expect=("--policy", "[1, 1,000,000]")),
    sim("policy-elastic-threshold-huge", "--policy", "elastic:99999999+beg-mab",
        expect=("--policy", "elastic threshold must be a batch size in [1, 1,000,000]")),
    sim("policy-elastic-consecutive-huge", "--policy", "elastic:32:99999999+beg-mab",
        expect=("--policy", "consecutive checks must be in [1, 1,048,576]")),
    sets("policy-set-phases", "policies=no-sd,cost-aware:phases=1000", "phases must be in [1, 64]"),
    # tlt validate: checked before any work (torch is never imported for these)
    Case("validate-presets", "validate", scenario='presets = ["tlt"]', expect=(FILE, "field 'presets'")),
    Case("validate-ppo-epochs", "validate", scenario="[rl]\nppo_epochs = 0", expect=(FILE, "field 'rl.ppo_epochs'")),
    Case("validate-min-workers", "validate", scenario="[spot]\nmin_workers = 100000",
         expect=(FILE, "field 'spot.min_workers'")),
    Case("validate-fifo", "validate", special="fifo", expect=(FILE, "not a regular file")),
    Case("validate-policies-and-presets", "validate", scenario='presets = ["tlt"]\npolicies = ["beg-mab"]',
         expect=(FILE, "field 'policies'")),
    Case("validate-vllm-table", "validate", ("--backend", "vllm", "--table", "t.parquet"), expect=("--table",)),
    # tlt demo reads its scenario through the same checks
    Case("demo-fifo", "demo", special="fifo", expect=(FILE, "not a regular file")),
    Case("demo-stale-quality", "demo", scenario="[drafter]\nstale_quality = 5",
         expect=(FILE, "field 'drafter.stale_quality'")),
    Case("demo-ppo-epochs", "demo", scenario="[rl]\nppo_epochs = 0", expect=(FILE, "field 'rl.ppo_epochs'")),
    # tlt real profile: flags checked before torch
    Case("profile-batch-zero", "real profile", ("--batch", "0"), expect=("--batch",)),
    Case("profile-context-huge", "real profile", ("--context", "100000"), expect=("--context",)),
    Case("profile-repeats", "real profile", ("--repeats", "21"), expect=("--repeats",)),
    Case("profile-drafter", "real profile", ("--drafter", "eagle"), expect=("--drafter",)),
    # sweep axes: the same validate() as files and flags
    Case("sweep-ppo-epochs", "sweep points", scenario='name = "x"\nbase = "aime_qwen7b_64xh100"\n[[axes]]\n'
         'kind = "grid"\n"rl.ppo_epochs" = [0]', expect=(FILE, "rl.ppo_epochs")),
    Case("sweep-min-workers", "sweep points", scenario='name = "x"\nbase = "aime_qwen7b_64xh100"\n[[axes]]\n'
         'kind = "grid"\n"spot.min_workers" = [100000]', expect=(FILE, "spot.min_workers")),
    Case("sweep-stale-quality", "sweep points", scenario='name = "x"\nbase = "aime_qwen7b_64xh100"\n[[axes]]\n'
         'kind = "grid"\n"drafter.stale_quality" = [5.0]', expect=(FILE, "drafter.stale_quality")),
    Case("sweep-fifo", "sweep points", special="fifo", expect=(FILE, "sweep spec")),
    # tlt sim sensitivity reads the same scenario and flags as tlt sim run, plus --seeds
    Case("sens-seeds-zero", "sim sensitivity", ("--seeds", "0"), expect=("--seeds",)),
    Case("sens-seeds-huge", "sim sensitivity", ("--seeds", "100000"), expect=("--seeds",)),
    Case("sens-set-max-batch", "sim sensitivity", ("--set", "engine.max_batch=0"),
         expect=("--set", "field 'engine.max_batch'")),
    Case("sens-set-unknown", "sim sensitivity", ("--set", "engine.max_batchh=8"), expect=("--set", "did you mean")),
    Case("sens-file-field", "sim sensitivity", scenario="[engine]\nmax_batch = -1",
         expect=(FILE, "field 'engine.max_batch'")),
    Case("sens-fifo", "sim sensitivity", special="fifo", expect=(FILE,)),
    Case("sens-devzero", "sim sensitivity", special="devzero", expect=("/dev/zero",)),
    Case("sens-bad-policy", "sim sensitivity", ("--policy", "elastic+nope"), expect=("--policy",)),
]


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_fifo() else None)
            for p in sorted(root.rglob("*"))}


def _listing(root: Path) -> set[tuple[str, int]]:
    """Paths and sizes under ``root`` (the default results folder may be large: not read)."""
    return {(str(p), p.stat().st_size) for p in root.rglob("*")} if root.exists() else set()


def _scenario_path(case: Case, root: Path) -> Path | None:
    if case.special == "fifo":
        os.mkfifo(root / "s.toml")
    elif case.special == "fifo-link":
        os.mkfifo(root / "pipe")
        (root / "s.toml").symlink_to(root / "pipe")
    elif case.special == "big":
        (root / "s.toml").write_text("# padding\n" * 500_000)
    elif case.special == "fifo-arg":  # a FIFO named in the arguments as {dir}/pipe
        os.mkfifo(root / "pipe")
        return None
    elif case.special == "devzero":
        return Path("/dev/zero")
    elif case.scenario is not None:
        (root / "s.toml").write_text(case.scenario)
    else:
        return None
    return root / "s.toml"


def _argv(case: Case, root: Path, scenario: Path | None) -> list[str]:
    out = root / ("out.parquet" if case.command == "real profile" else "out")
    if case.command == "sweep points":
        assert scenario is not None
        return ["sweep", "points", str(scenario)]
    given = ["--scenario", str(scenario)] if scenario is not None else []
    args = [a.replace("{dir}", str(root)) for a in case.args]
    return [*case.command.split(), *given, *args, "--out", str(out)]


def test_case_ids_are_unique_and_every_case_names_where() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(CASES) >= 80
    assert {c.command for c in CASES} == set(COMMANDS)
    assert all(c.expect for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_setting_is_refused_in_one_line(case: Case, tmp_path: Path) -> None:
    root = tmp_path / "case"
    root.mkdir()
    scenario = _scenario_path(case, root)
    before = _snapshot(root)
    results_before = _listing(REPO / "results")
    start = time.process_time()  # CPU time: the work a case does, which a loaded machine does not stretch
    proc = invoke_bounded(BOUND_S, *_argv(case, root, scenario))
    elapsed = time.process_time() - start
    lines = proc.stderr.strip().splitlines()
    skip_if_trace_missing(proc.stderr)
    assert proc.returncode == 2, (case.id, proc.stdout[-2000:], proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), proc.stderr
    for word in case.expect:
        word = word.replace(FILE, str(scenario))
        assert word in lines[0], (word, lines[0])
    assert elapsed < BOUND_S
    assert _snapshot(root) == before  # no --out, nothing beside the scenario
    assert _listing(REPO / "results") == results_before  # no default results folder either
