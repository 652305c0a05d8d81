"""Hostile input to the real commands: ``tlt real generate``, ``profile``, ``rl`` and ``grpo``.

What ``tests/real/test_real_hostile.py`` already covers (generate's numbers, broken configs, weights
and prompt files) is not repeated; this corpus adds the paths: every file ``generate`` writes beside
``--out`` (a user's ``<stem>.tokens.jsonl`` once was silently replaced), outputs that are inputs,
FIFOs and devices where a file is read (a FIFO blocked forever, ``/dev/zero`` filled the memory), and
``rl``'s and ``profile``'s flags and paths, which ``rl`` used to meet only after minutes of
pre-training, and ``grpo --tiny``'s explicit flags, which it used to replace with its own sizes.

Every case ends as bad input ends everywhere in tlt: exit 2, exactly one ``tlt: error:`` line holding
the expected fragment, no traceback, every file's bytes unchanged, refused before any model is built,
within :data:`BOUND_S` seconds. A case whose input could block a read runs in a child process under a
timeout, so a hang fails the case instead of the suite. ``known`` marks a bug outside ``tltreal``
(reported to its owner), kept as data but not run: remove the mark with the fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("torch")  # imported here, once, so that no case's time includes it
from test_output_safety import snapshot

from conftest import REPO, invoke_cli, run_child_bounded
from tltcore.input_files import sha256_of

BOUND_S = 5.0  # in this process; the cases refuse in milliseconds, this is the margin of a busy machine
CHILD_BOUND_S = 20.0  # a child process: interpreter start-up and imports on top
COMMANDS = ("real generate", "real profile", "real rl", "real grpo")
CONFIG = (REPO / "examples" / "tiny-llama" / "config.json").read_text()


@dataclass(frozen=True)
class Case:
    """One hostile invocation: ``argv(root)`` prepares files under the working folder ``root`` and
    returns the arguments after the command words; ``expect`` is a fragment of the error line."""

    id: str
    command: str
    argv: Callable[[Path], list[str]]
    expect: str
    isolated: bool = False  # run in a child process under a timeout (a read could block)
    known: str | None = None  # a bug outside tltreal, reported: not run


# ---- helpers that build the files a case needs --------------------------------------------------------
def _write(root: Path, name: str, data: str | bytes) -> str:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return name


def _fifo(root: Path, name: str) -> str:
    os.mkfifo(root / name)
    return name


def _gen(*extra: str, config: str = "config.json") -> Callable[[Path], list[str]]:
    """A valid small ``generate`` run (config.json written in the root) plus ``extra``."""
    def argv(root: Path) -> list[str]:
        if config == "config.json":
            _write(root, "config.json", CONFIG)
        return ["--config", config, "--prompts", "2", "--max-tokens", "4", "--prompt-len", "4", *extra]
    return argv


def _gen_with(setup: Callable[[Path], object], *extra: str, config: str = "config.json") -> Callable[[Path], list[str]]:
    def argv(root: Path) -> list[str]:
        setup(root)
        return _gen(*extra, config=config)(root)
    return argv


def _tlt_companions(root: Path, tokens: bytes = b'{"request": 0}\n') -> None:
    """What a previous ``generate --out r.parquet`` left: tokens and a settings file recording its digest."""
    _write(root, "r.tokens.jsonl", tokens)
    _write(root, "r.config.json", json.dumps({"tool": "tlt", "command": "tlt real generate",
                                              "files": {"r.tokens.jsonl": sha256_of(root / "r.tokens.jsonl")}}))


def _edited_companion(root: Path) -> None:
    _tlt_companions(root)
    _write(root, "r.tokens.jsonl", b'{"request": 0}\nmy annotations\n')


def _link(target: str, name: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        (root / name).symlink_to(target)
    return make


def _mkdir(name: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        (root / name).mkdir(parents=True)
    return make


def _rl(*extra: str) -> Callable[[Path], list[str]]:
    return lambda root: ["--tiny", "--out", "run", *extra]


def _pretrained(root: Path, files: tuple[str, ...] = ("config.json", "model.safetensors", "tokenizer.json"),
                name: str = "pre") -> str:
    (root / name).mkdir(parents=True, exist_ok=True)
    for f in files:
        _write(root / name, f, CONFIG if f == "config.json" else b"x")
    return name


def _rl_with(setup: Callable[[Path], object], *extra: str, out: str = "run") -> Callable[[Path], list[str]]:
    def argv(root: Path) -> list[str]:
        setup(root)
        return ["--tiny", "--out", out, *extra]
    return argv


def _grpo(*extra: str) -> Callable[[Path], list[str]]:
    return lambda root: ["--tiny", "--out", "run", *extra]


def _prof(*extra: str) -> Callable[[Path], list[str]]:
    return lambda root: ["--shape", "2_1_2", "--batch", "1", "--context", "8", "--repeats", "1", "--out", "p.parquet",
                         *extra]


def _prof_with(setup: Callable[[Path], object], *extra: str) -> Callable[[Path], list[str]]:
    def argv(root: Path) -> list[str]:
        setup(root)
        return _prof(*extra)(root)
    return argv


NOT_TLTS = "tlt did not write"

CASES: list[Case] = [
    # -- generate: the files written beside --out ----------------------------------------------------
    Case("gen-companion-users-tokens", "real generate",
         _gen_with(lambda r: _write(r, "r.tokens.jsonl", "my notes\n"), "--out", "r.parquet"), "r.tokens.jsonl"),
    Case("gen-companion-users-settings", "real generate",
         _gen_with(lambda r: _write(r, "r.config.json", '{"lr": 3}\n'), "--out", "r.parquet"), "r.config.json"),
    Case("gen-companion-users-tokens-csv-out", "real generate",
         _gen_with(lambda r: _write(r, "r.tokens.jsonl", "x\n"), "--out", "r.csv"), NOT_TLTS),
    Case("gen-companion-tlts-tokens-edited", "real generate", _gen_with(_edited_companion, "--out", "r.parquet"),
         "r.tokens.jsonl"),
    Case("gen-companion-settings-of-another-tool", "real generate",
         _gen_with(lambda r: _write(r, "r.config.json", '{"tool": "other", "command": "tlt real generate"}'),
                   "--out", "r.parquet"), "r.config.json"),
    Case("gen-companion-settings-of-another-command", "real generate",
         _gen_with(lambda r: _write(r, "r.config.json", '{"tool": "tlt", "command": "tlt sim run", "files": {}}'),
                   "--out", "r.parquet"), "r.config.json"),
    Case("gen-companion-settings-damaged", "real generate",
         _gen_with(lambda r: _write(r, "r.config.json", '{"tool": "tlt", "comm'), "--out", "r.parquet"),
         "r.config.json"),
    Case("gen-companion-tokens-without-settings", "real generate",
         _gen_with(lambda r: _write(r, "r.tokens.jsonl", '{"request": 0}\n'), "--out", "r.parquet"), NOT_TLTS),
    Case("gen-companion-tokens-not-recorded", "real generate",
         _gen_with(lambda r: (_tlt_companions(r), _write(r, "r.config.json", json.dumps(
             {"tool": "tlt", "command": "tlt real generate", "files": {}}))), "--out", "r.parquet"), "r.tokens.jsonl"),
    Case("gen-companion-tokens-is-a-folder", "real generate",
         _gen_with(_mkdir("r.tokens.jsonl"), "--out", "r.parquet"), "folder"),
    Case("gen-companion-settings-is-a-folder", "real generate",
         _gen_with(_mkdir("r.config.json"), "--out", "r.parquet"), "folder"),
    Case("gen-companion-tokens-is-a-folder-even-forced", "real generate",
         _gen_with(_mkdir("r.tokens.jsonl"), "--out", "r.parquet", "--force"), "folder"),
    Case("gen-companion-tokens-is-a-fifo", "real generate",
         _gen_with(lambda r: _fifo(r, "r.tokens.jsonl"), "--out", "r.parquet"), NOT_TLTS, isolated=True),
    Case("gen-companion-settings-is-a-fifo", "real generate",
         _gen_with(lambda r: _fifo(r, "r.config.json"), "--out", "r.parquet"), NOT_TLTS, isolated=True),
    Case("gen-companion-tokens-links-to-users-file", "real generate",
         _gen_with(lambda r: (_write(r, "notes.txt", "keep"), _link("notes.txt", "r.tokens.jsonl")(r)),
                   "--out", "r.parquet"), NOT_TLTS),
    Case("gen-companion-tokens-broken-link", "real generate",
         _gen_with(_link("nowhere", "r.tokens.jsonl"), "--out", "r.parquet"), NOT_TLTS),
    Case("gen-companion-in-a-subfolder", "real generate",
         _gen_with(lambda r: _write(r, "out/r.tokens.jsonl", "mine"), "--out", "out/r.parquet"), NOT_TLTS),
    # -- generate: --out itself ----------------------------------------------------------------------
    Case("gen-out-is-a-folder", "real generate", _gen_with(_mkdir("r.parquet"), "--out", "r.parquet"), "folder"),
    Case("gen-out-under-a-file", "real generate",
         _gen_with(lambda r: _write(r, "notes.txt", "keep"), "--out", "notes.txt/r.parquet"), "file"),
    Case("gen-out-without-suffix", "real generate", _gen("--out", "results"), "--out"),
    Case("gen-out-upper-case-suffix", "real generate", _gen("--out", "r.PARQUET"), "--out"),
    Case("gen-out-jsonl", "real generate", _gen("--out", "r.jsonl"), "--out"),
    Case("gen-out-empty", "real generate", _gen("--out", ""), "--out"),
    Case("gen-out-component-too-long", "real generate", _gen("--out", "x" * 300 + ".parquet"), "255"),
    Case("gen-out-is-the-config", "real generate",
         _gen_with(lambda r: _write(r, "c.csv", CONFIG), "--out", "c.csv", "--force", config="c.csv"), "input"),
    Case("gen-out-settings-would-replace-the-config", "real generate",
         _gen_with(lambda r: _write(r, "run.config.json", CONFIG), "--out", "run.csv", "--force",
                   config="run.config.json"), "input"),
    Case("gen-out-tokens-would-replace-the-prompts", "real generate",
         _gen_with(lambda r: _write(r, "r.tokens.jsonl", "[1, 2, 3]\n"), "--prompts-file", "r.tokens.jsonl",
                   "--out", "r.parquet", "--force"), "input"),
    Case("gen-out-would-replace-the-weights", "real generate",
         _gen_with(lambda r: _write(r, "w.csv", b"weights"), "--weights", "w.csv", "--out", "w.csv", "--force"),
         "input"),
    # -- generate: inputs that are not regular files ----------------------------------------------------
    Case("gen-config-fifo", "real generate", _gen_with(lambda r: _fifo(r, "c.json"), config="c.json"),
         "regular file", isolated=True),
    Case("gen-config-dev-zero", "real generate", _gen(config="/dev/zero"), "regular file"),
    Case("gen-config-dev-null", "real generate", _gen(config="/dev/null"), "regular file"),
    Case("gen-config-broken-link", "real generate", _gen_with(_link("gone.json", "c.json"), config="c.json"),
         "not found"),
    Case("gen-config-link-loop", "real generate", _gen_with(_link("c.json", "c.json"), config="c.json"),
         "cannot read"),
    Case("gen-config-json-is-a-folder", "real generate", _gen_with(_mkdir("model/config.json"), config="model"),
         "config.json"),
    Case("gen-prompts-fifo", "real generate", _gen_with(lambda r: _fifo(r, "p.jsonl"), "--prompts-file", "p.jsonl"),
         "regular file", isolated=True),
    Case("gen-prompts-dev-zero", "real generate", _gen("--prompts-file", "/dev/zero"), "regular file"),
    Case("gen-prompts-is-a-folder", "real generate", _gen_with(_mkdir("p"), "--prompts-file", "p"), "folder"),
    Case("gen-weights-fifo", "real generate", _gen_with(lambda r: _fifo(r, "w.safetensors"), "--weights",
                                                        "w.safetensors"), "regular file", isolated=True),
    Case("gen-weights-dev-zero", "real generate", _gen("--weights", "/dev/zero"), "regular file"),
    Case("gen-tokenizer-is-a-file", "real generate",
         _gen_with(lambda r: _write(r, "tok.json", "{}"), "--tokenizer", "tok.json"), "give a folder"),
    Case("gen-tokenizer-missing", "real generate", _gen("--tokenizer", "no-such-tokenizer"), "not found"),
    Case("gen-tokenizer-fifo", "real generate", _gen_with(lambda r: _fifo(r, "tok"), "--tokenizer", "tok"),
         "regular file", isolated=True),
    # -- rl: every flag before minutes of pre-training -----------------------------------------------
    Case("rl-steps-zero", "real rl", _rl("--steps", "0"), "--steps"),
    Case("rl-steps-negative", "real rl", _rl("--steps", "-4"), "--steps"),
    Case("rl-steps-absurd", "real rl", _rl("--steps", "1000000000"), "--steps"),
    Case("rl-prompts-zero", "real rl", _rl("--prompts", "0"), "--prompts"),
    Case("rl-prompts-absurd", "real rl", _rl("--prompts", "10000000"), "--prompts"),
    Case("rl-max-new-tokens-zero", "real rl", _rl("--max-new-tokens", "0"), "--max-new-tokens"),
    Case("rl-max-new-tokens-beyond-the-row", "real rl", _rl("--max-new-tokens", "5000"), "--max-new-tokens"),
    Case("rl-pretrain-steps-zero", "real rl", _rl("--pretrain-steps", "0"), "--pretrain-steps"),
    Case("rl-pretrain-steps-negative", "real rl", _rl("--pretrain-steps", "-600"), "--pretrain-steps"),
    Case("rl-lr-zero", "real rl", _rl("--lr", "0"), "--lr"),
    Case("rl-lr-nan", "real rl", _rl("--lr", "nan"), "--lr"),
    Case("rl-lr-inf", "real rl", _rl("--lr", "inf"), "--lr"),
    Case("rl-lr-negative", "real rl", _rl("--lr", "-1e-4"), "--lr"),
    Case("rl-lr-above-one", "real rl", _rl("--lr", "3"), "--lr"),
    Case("rl-drafter-lr-zero", "real rl", _rl("--drafter-lr", "0"), "--drafter-lr"),
    Case("rl-drafter-lr-nan", "real rl", _rl("--drafter-lr", "nan"), "--drafter-lr"),
    Case("rl-bubble-unknown", "real rl", _rl("--bubble", "always"), "--bubble"),
    Case("rl-bubble-empty", "real rl", _rl("--bubble", ""), "--bubble"),
    Case("rl-workers-zero", "real rl", _rl("--workers", "0"), "--workers"),
    Case("rl-workers-absurd", "real rl", _rl("--workers", "100000"), "--workers"),
    Case("rl-speedup-every-negative", "real rl", _rl("--speedup-every", "-1"), "--speedup-every"),
    Case("rl-eval-prompts-zero", "real rl", _rl("--eval-prompts", "0"), "--eval-prompts"),
    Case("rl-seed-negative", "real rl", _rl("--seed", "-1"), "--seed"),
    Case("rl-seed-too-large", "real rl", _rl("--seed", str(2**40)), "--seed"),
    # -- rl: --pretrained and its overlap with --out --------------------------------------------------
    Case("rl-pretrained-missing", "real rl", _rl("--pretrained", "no-such-model"), "not found"),
    Case("rl-pretrained-is-a-file", "real rl",
         _rl_with(lambda r: _write(r, "model.safetensors", b"x"), "--pretrained", "model.safetensors"),
         "give a folder"),
    Case("rl-pretrained-empty-folder", "real rl", _rl_with(_mkdir("pre"), "--pretrained", "pre"), "config.json"),
    Case("rl-pretrained-without-weights", "real rl",
         _rl_with(lambda r: _pretrained(r, ("config.json", "tokenizer.json")), "--pretrained", "pre"),
         "model.safetensors"),
    Case("rl-pretrained-without-tokenizer", "real rl",
         _rl_with(lambda r: _pretrained(r, ("config.json", "model.safetensors")), "--pretrained", "pre"),
         "tokenizer.json"),
    Case("rl-pretrained-weights-are-a-folder", "real rl",
         _rl_with(lambda r: (_pretrained(r, ("config.json", "tokenizer.json")), _mkdir("pre/model.safetensors")(r)),
                  "--pretrained", "pre"), "model.safetensors"),
    Case("rl-pretrained-fifo", "real rl", _rl_with(lambda r: _fifo(r, "pre"), "--pretrained", "pre"),
         "regular file", isolated=True),
    Case("rl-pretrained-dev-zero", "real rl", _rl("--pretrained", "/dev/zero"), "--pretrained"),
    Case("rl-pretrained-link-loop", "real rl", _rl_with(_link("pre", "pre"), "--pretrained", "pre"), "cannot read"),
    Case("rl-out-is-the-pretrained-model", "real rl",
         _rl_with(_pretrained, "--pretrained", "pre", "--force", out="pre"), "input"),
    Case("rl-out-inside-the-pretrained-model", "real rl",
         _rl_with(_pretrained, "--pretrained", "pre", "--force", out="pre/run"), "input"),
    Case("rl-out-contains-the-pretrained-model", "real rl",
         _rl_with(lambda r: _pretrained(r, name="runs/pre"), "--pretrained", "runs/pre", "--force", out="runs"),
         "input"),
    # -- grpo --tiny: a flag given beside it is checked, not replaced by --tiny's size ----------------
    Case("grpo-tiny-steps-zero", "real grpo", _grpo("--steps", "0"), "--steps"),
    Case("grpo-tiny-prompts-zero", "real grpo", _grpo("--prompts", "0"), "--prompts"),
    Case("grpo-tiny-seed-negative", "real grpo", _grpo("--seed", "-1"), "--seed"),
    Case("grpo-tiny-eval-draws-zero", "real grpo", _grpo("--eval-draws", "0"), "--eval-draws"),
    Case("grpo-tiny-eval-every-zero", "real grpo", _grpo("--eval-every", "0"), "--eval-every"),
    Case("grpo-tiny-max-difficulty-zero", "real grpo", _grpo("--max-difficulty", "0"), "--max-difficulty"),
    Case("grpo-tiny-pretrain-steps-zero", "real grpo", _grpo("--pretrain-steps", "0"), "--pretrain-steps"),
    Case("grpo-tiny-band-inverted", "real grpo", _grpo("--band-low", "0.9", "--band-high", "0.1"), "--band-low"),
    Case("grpo-tiny-band-low-above-its-high", "real grpo", _grpo("--band-low", "1.0"), "--band-low"),
    # -- profile: flags and paths before any model is built -------------------------------------------
    Case("prof-shape-two-parts", "real profile", _prof("--shape", "9_9"), "depth_topk_verify"),
    Case("prof-shape-words", "real profile", _prof("--shape", "deep_wide_many"), "depth_topk_verify"),
    Case("prof-shape-empty", "real profile", _prof("--shape", ""), "--shape"),
    Case("prof-shape-off", "real profile", _prof("--shape", "off"), "--shape"),
    Case("prof-vllm-tree-shape", "real profile", _prof("--backend", "vllm", "--shape", "4_2_6"), "chains"),
    Case("prof-drafter-unknown", "real profile", _prof("--drafter", "magic"), "--drafter"),
    Case("prof-batch-zero", "real profile", _prof("--batch", "0"), "--batch"),
    Case("prof-batch-absurd", "real profile", _prof("--batch", "5000"), "--batch"),
    Case("prof-context-zero", "real profile", _prof("--context", "0"), "--context"),
    Case("prof-context-absurd", "real profile", _prof("--context", "1000000"), "--context"),
    Case("prof-repeats-zero", "real profile", _prof("--repeats", "0"), "--repeats"),
    Case("prof-repeats-absurd", "real profile", _prof("--repeats", "1000"), "--repeats"),
    Case("prof-out-csv", "real profile", lambda r: [*_prof()(r)[:-2], "--out", "p.csv"], "Parquet"),
    Case("prof-out-is-a-folder", "real profile", _prof_with(_mkdir("p.parquet")), "folder"),
    Case("prof-out-under-a-file", "real profile",
         lambda r: (_write(r, "notes.txt", "keep"), [*_prof()(r)[:-2], "--out", "notes.txt/p.parquet"])[1], "file"),
    Case("prof-acceptance-unknown", "real profile", _prof("--acceptance", "nope"), "acceptance"),
    Case("prof-config-missing", "real profile", _prof("--config", "no-such.json"), "not found"),
    Case("prof-config-empty", "real profile", _prof_with(lambda r: _write(r, "c.json", ""), "--config", "c.json"),
         "JSON"),
    Case("prof-config-a-list", "real profile",
         _prof_with(lambda r: _write(r, "c.json", "[1, 2]"), "--config", "c.json"), "JSON object"),
    Case("prof-config-binary", "real profile",
         _prof_with(lambda r: _write(r, "c.json", b"\xff\xfe\x00"), "--config", "c.json"), "UTF-8"),
    Case("prof-config-vocab-zero", "real profile",
         _prof_with(lambda r: _write(r, "c.json", CONFIG.replace('"vocab_size": 256', '"vocab_size": 0')),
                    "--config", "c.json"), "vocab_size"),
    Case("prof-config-fifo", "real profile", _prof_with(lambda r: _fifo(r, "c.json"), "--config", "c.json"),
         "regular file", isolated=True),
    Case("prof-config-dev-zero", "real profile", _prof("--config", "/dev/zero"), "regular file"),
    Case("prof-vllm-context-beyond-the-models-positions", "real profile",
         _prof_with(lambda r: _write(r, "c.json", CONFIG.replace('"max_position_embeddings": 1024',
                                                                 '"max_position_embeddings": 512')),
                    "--config", "c.json", "--backend", "vllm", "--context", "1024"), "c.json, field 'max_position"),
    Case("prof-out-is-the-config", "real profile",
         lambda r: (_write(r, "x.parquet", CONFIG), [*_prof()(r)[:-2], "--config", "x.parquet", "--out",
                                                      "x.parquet"])[1], "input"),
]


def _run_child(args: list[str], root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    # the child's CPU time bounded (interpreter start-up and imports included), a wall guard for a hang
    return run_child_bounded(CHILD_BOUND_S, [sys.executable, "-m", "tltcli", *args], cwd=root, env=env)


def _params() -> list:
    return [pytest.param(c, id=c.id, marks=pytest.mark.xfail(reason=c.known, run=False) if c.known else ())
            for c in CASES]


@pytest.mark.parametrize("case", _params())
def test_hostile_real(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = [*case.command.split(), *case.argv(tmp_path)]
    before = snapshot(tmp_path)
    t0 = time.process_time()  # CPU time of this process: what a loaded machine does not stretch
    res = _run_child(args, tmp_path) if case.isolated else invoke_cli(*args)
    took = time.process_time() - t0
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("tlt: error:"), res.stderr
    assert case.expect in lines[0], lines[0]
    assert "Traceback" not in res.stderr
    assert snapshot(tmp_path) == before  # nothing written, replaced or deleted
    assert case.isolated or took < BOUND_S, f"{took:.1f} s of CPU"  # a child's CPU: run_child_bounded


def test_case_ids_are_unique_and_every_command_is_met() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert {c.command for c in CASES} == set(COMMANDS)
