"""A one-snapshot trace without ``trace.prompts_per_step`` holds one RL step: asking for more runs
one, and says so in one warning line (it used to run one step without a word)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tltsim.scenario import TraceSection, load_steps


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "t.csv"
    path.write_text("response_tokens\n" + "\n".join(str(10 + i) for i in range(16)) + "\n")
    return str(path)


def test_more_steps_than_a_snapshot_holds_is_one_warning_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    steps = load_steps(TraceSection(name=_trace(tmp_path), num_steps=3))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(steps) == 1
    assert len(err) == 1 and err[0].startswith("tlt: warning:") and "3 RL steps were asked and 1 will run" in err[0]
    assert "trace.prompts_per_step" in err[0]


def test_sampled_steps_and_a_single_step_say_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert len(load_steps(TraceSection(name=_trace(tmp_path), num_steps=3, prompts_per_step=4))) == 3
    assert len(load_steps(TraceSection(name=_trace(tmp_path), num_steps=1))) == 1
    assert capsys.readouterr().err == ""


def test_more_prompts_per_step_than_the_trace_holds_is_one_warning_line(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """A verl batch of 1,024 prompts on a trace of 596 groups simulated 596 without a word."""
    steps = load_steps(TraceSection(name=_trace(tmp_path), num_steps=2, prompts_per_step=20))
    err = capsys.readouterr().err.strip().splitlines()
    assert [len(s.group_ids) for s in steps] == [16, 16]
    assert len(err) == 1 and "trace.prompts_per_step = 20" in err[0] and "each simulated step has 16 groups" in err[0]
