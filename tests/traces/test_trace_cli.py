"""`tlt trace list|stats|plot` and `tlt demo` from a user's point of view."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import needs_shared_traces

pytestmark = needs_shared_traces()


def test_list_shows_catalog_and_locations(cli) -> None:
    res = cli("trace", "list")
    assert res.returncode == 0, res.stderr
    for name in ("polytrace_rl_rollouts", "r1distill_qwen1.5b_aime_8samples", "intern_s1_math"):
        assert name in res.stdout
    assert "not found" not in res.stdout and "DIFFERS" not in res.stdout


def test_stats_formats(cli) -> None:
    res = cli("trace", "stats", "polytrace_rl_rollouts", "--by", "source", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = {r["source"]: r for r in json.loads(res.stdout)}
    assert rows["polytrace/verl_dapo_qwen2.5-32b"]["n"] == 4608
    assert round(rows["polytrace/verl_dapo_qwen2.5-32b"]["p99"]) == 2711
    csv = cli("trace", "stats", "polytrace_rl_rollouts", "--by", "source,step", "--format", "csv")
    assert csv.returncode == 0 and csv.stdout.splitlines()[0].startswith("source,step,n,mean")
    table = cli("trace", "stats", "polytrace_rl_rollouts", "--by", "source")
    assert "10,112" in table.stdout and "4,608" in table.stdout


def test_plot_writes_png_and_pdf(cli, tmp_path: Path) -> None:
    res = cli("trace", "plot", "polytrace_rl_rollouts", "--out", str(tmp_path / "p"))
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in (tmp_path / "p").iterdir())
    assert names == ["polytrace_rl_rollouts_length_cdf.pdf", "polytrace_rl_rollouts_length_cdf.png",
                     "polytrace_rl_rollouts_straggler.pdf", "polytrace_rl_rollouts_straggler.png"]
    assert all((tmp_path / "p" / n).stat().st_size > 1000 for n in names)


def test_demo_writes_report_atomically(cli, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    res = cli("demo", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert {"README.md", "trace_stats.csv", "length_cdf.png", "length_cdf.pdf"} <= {p.name for p in out.iterdir()}
    readme = (out / "README.md").read_text()
    assert "4,608" in readme and "elastic+beg-mab" in readme
    assert {"sim_summary.csv", "rollout_timeline.png", "makespan.pdf", "scenario.resolved.toml"} <= {
        p.name for p in out.iterdir()}
    bad = cli("demo", "--trace", "nope_not_a_trace", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()
    assert list(tmp_path.iterdir()) == [out]  # no temp folders left behind
