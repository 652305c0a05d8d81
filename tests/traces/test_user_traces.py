"""Traces from where users have them (issue 42 item 1): value mappings, ``trace.map``, compressed
files, verl and NeMo-RL rollout dump folders, ``tlt trace import``; every command that takes a trace
takes the same mapping. Fixtures (tests/data/traces, rebuilt by make_fixtures.py) are in each
framework's own layout."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import invoke_cli
from tltcore.errors import InputError
from tltsim.scenario import load_scenario, scenario_hash, scenario_toml
from tltsim.traces import TRACE_COLUMNS, load_trace, read_trace, textio
from tltsim.traces.mapping import parse_mapping

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
VERL, NEMO, CSV = DATA / "verl_rollout_dump", DATA / "nemo_rl_logs", DATA / "foreign_rollouts.csv"
TOKENIZER = DATA / "wordlevel_tokenizer.json"
MAP = ["--map", "response_tokens=response_length", "--map", "hit_cap=finish_reason:length"]
#: tiny and fast: 8 GPUs, TP 2, one seed, one setting (a few seconds)
FAST = ["--gpus", "8", "--tp", "2", "--quick"]


def _raw_csv() -> pd.DataFrame:
    return pd.read_csv(CSV)


# ---- value mappings and the one parser ------------------------------------------------------------------
def test_a_value_mapping_marks_hit_cap_where_the_column_holds_the_value():
    df = read_trace(CSV, parse_mapping(["response_tokens=response_length", "hit_cap=finish_reason:length"]))
    raw = _raw_csv()
    assert df["hit_cap"].tolist() == (raw["finish_reason"] == "length").tolist()
    assert df["response_tokens"].tolist() == raw["response_length"].tolist()
    assert "finish_reason" in df.columns  # the source column stays, as an extra column


def test_several_values_separated_by_a_bar_and_the_same_syntax_in_a_scenario(tmp_path):
    both = read_trace(CSV, parse_mapping(["response_tokens=response_length", "hit_cap=finish_reason:length|stop"]))
    assert both["hit_cap"].all()
    sc = tmp_path / "s.toml"
    sc.write_text(f'[trace]\nname = "{CSV}"\nmap = {{response_tokens = "response_length", '
                  'hit_cap = "finish_reason:length"}\n')
    s = load_scenario(sc)
    assert s.trace.map == {"response_tokens": "response_length", "hit_cap": "finish_reason:length"}
    assert '[trace.map]' in scenario_toml(s) and 'hit_cap = "finish_reason:length"' in scenario_toml(s)


@pytest.mark.parametrize("items, message", [
    (["response_tokens=finish_reason:length"], "a value mapping (COLUMN:VALUE) fills a boolean column only"),
    (["hit_cap=finish_reason:"], "give the value(s) that mean true"),
    (["bogus=x"], "'bogus' is not a canonical column"),
])
def test_bad_mappings_are_one_line_naming_the_option(items, message):
    with pytest.raises(InputError, match=re.escape(message)) as err:
        parse_mapping(items)
    assert err.value.field == "--map"


def test_no_row_with_the_value_warns_instead_of_reading_as_nothing_capped(capsys):
    df = read_trace(CSV, parse_mapping(["response_tokens=response_length", "hit_cap=finish_reason:lenght"]))
    assert not df["hit_cap"].any()
    assert "no row has finish_reason = lenght" in capsys.readouterr().err


def test_a_missing_cell_in_a_value_mapped_column_names_the_row_and_column(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("response_length,finish_reason\n5,stop\n7,\n")
    with pytest.raises(InputError, match=r"t\.csv, row 2, field 'finish_reason': value is missing"):
        read_trace(p, {"response_tokens": "response_length", "hit_cap": "finish_reason:length"})


# ---- compressed files -------------------------------------------------------------------------------------
def test_gz_and_zst_read_the_same_as_plain(tmp_path):
    import zstandard

    mapping = parse_mapping(MAP[1::2])
    plain = read_trace(CSV, mapping)
    gz = read_trace(DATA / "foreign_rollouts.csv.gz", mapping)
    zst = tmp_path / "foreign_rollouts.csv.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(CSV.read_bytes()))
    jsonl = tmp_path / "foreign_rollouts.jsonl.gz"
    jsonl.write_bytes(gzip.compress(_raw_csv().to_json(orient="records", lines=True).encode()))
    canonical = list(TRACE_COLUMNS)
    for other in (gz, read_trace(zst, mapping), read_trace(jsonl, mapping)):
        pd.testing.assert_frame_equal(other[canonical], plain[canonical])
    assert set(gz["source"]) == {"foreign_rollouts"}  # the name without .csv.gz


def test_a_corrupt_gz_and_a_decompression_bomb_are_one_line(tmp_path, monkeypatch):
    bad = tmp_path / "cut.csv.gz"
    bad.write_bytes((DATA / "foreign_rollouts.csv.gz").read_bytes()[:60])
    with pytest.raises(InputError, match=r"cut\.csv\.gz: cannot decompress gzip file"):
        read_trace(bad)
    bomb = tmp_path / "bomb.csv.gz"
    bomb.write_bytes(gzip.compress(b"response_tokens\n" + b"1\n" * 50_000))
    monkeypatch.setattr(textio, "MAX_DECOMPRESSED", 10_000)
    with pytest.raises(InputError, match="expands to more than 10,000 bytes"):
        read_trace(bomb)


# ---- framework dumps ----------------------------------------------------------------------------------------
def test_verl_dump_counts_tokens_with_the_tokenizer_and_groups_by_prompt_text():
    df = read_trace(VERL, tokenizer=TOKENIZER)
    rows = [json.loads(line) for line in (VERL / "1.jsonl").read_text().splitlines()]
    step1 = df[df["step"] == 1]
    assert step1["response_tokens"].tolist() == [len(r["output"].split()) for r in rows]  # a word is a token
    assert step1["prompt_tokens"].tolist() == [len(r["input"].split()) for r in rows]
    assert sorted(df["step"].unique()) == [1, 2]
    assert (step1.groupby("group_id").size() == 4).all() and step1["group_id"].nunique() == 3
    same = step1.groupby("group_id")["prompt_tokens"].nunique()
    assert (same == 1).all()


def test_verl_dump_without_tokenizer_is_refused_saying_what_to_pass():
    with pytest.raises(InputError, match=r"holds text only .* --tokenizer PATH/tokenizer\.json") as err:
        read_trace(VERL)
    assert err.value.field == "trace.tokenizer" and str(err.value.path).endswith("1.jsonl")


def test_verl_lengths_a_reward_function_logged_need_no_tokenizer(tmp_path):
    folder = tmp_path / "dump"
    folder.mkdir()
    rows = [{"input": f"q{i // 2}", "output": "x", "step": 3, "score": 0, "response_length": 10 + i} for i in range(4)]
    (folder / "3.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    df = read_trace(folder)
    assert df["response_tokens"].tolist() == [10, 11, 12, 13] and df["group_id"].nunique() == 2


def test_nemo_rl_dump_reads_generated_tokens_from_the_loss_mask():
    df = read_trace(NEMO)
    first = json.loads((NEMO / "train_data_step1.jsonl").read_text().splitlines()[0])
    mask = first["token_loss_mask"][0]
    assert df.iloc[0]["response_tokens"] == sum(mask) and df.iloc[0]["prompt_tokens"] == mask.index(1)
    assert sorted(df["step"].unique()) == [1, 2] and len(df) == 24  # val_data_step1.jsonl is not read
    assert (df[df["step"] == 1].groupby("group_id").size() == 4).all()


def test_an_empty_dump_folder_is_one_line_naming_it(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=r"no rollout dump files in this folder .* files found: notes\.txt"):
        read_trace(tmp_path)


# ---- the scenario field, the hash, every command -------------------------------------------------------------
def test_a_scenario_without_trace_map_keeps_its_toml_and_hash():
    """None (the default) is left out of the resolved TOML, so every existing scenario's TOML and
    hash stay as they were (checked against main when this landed: intern_s1_math, 341ec47ec0)."""
    from tltsim.scenario.schema import Scenario, TraceSection

    plain = Scenario(trace=TraceSection(name="intern_s1_math"))
    text = scenario_toml(plain)
    assert "map" not in text and "tokenizer" not in text
    empty = Scenario(trace=TraceSection(name="intern_s1_math", map={}))
    assert empty.trace.map is None and scenario_hash(empty) == scenario_hash(plain)  # an empty table is no mapping


def test_the_hash_follows_the_mapping(tmp_path):
    base = f'[trace]\nname = "{CSV}"\n'
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(base + 'map = {response_tokens = "response_length"}\n')
    b.write_text(base + 'map = {response_tokens = "response_length", hit_cap = "finish_reason:length"}\n')
    assert scenario_hash(load_scenario(a)) != scenario_hash(load_scenario(b))


def test_a_csv_mapped_in_a_scenario_file_runs_through_advise(tmp_path):
    sc = tmp_path / "mine.toml"
    shutil.copy(CSV, tmp_path / "rollouts.csv")
    sc.write_text('[trace]\nname = "rollouts.csv"\nmap = {response_tokens = "response_length", '
                  'hit_cap = "finish_reason:length", group_id = "uid"}\n')
    res = invoke_cli("advise", "--scenario", str(sc), *FAST, "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert "Recommended" in res.stdout and "rollouts.csv" in res.stdout


def test_a_verl_dump_runs_through_advise(tmp_path):
    res = invoke_cli("advise", "--trace", str(VERL), "--tokenizer", str(TOKENIZER), *FAST, "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert "Recommended" in res.stdout


def test_a_nemo_rl_dump_runs_through_advise(tmp_path):
    res = invoke_cli("advise", "--trace", str(NEMO), *FAST, "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr
    assert "Recommended" in res.stdout


def test_map_on_the_command_line_works_on_advise(tmp_path):
    res = invoke_cli("advise", "--trace", str(DATA / "foreign_rollouts.csv.gz"), *MAP, *FAST,
                     "--out", str(tmp_path / "r"))
    assert res.returncode == 0, res.stderr


def test_map_on_the_command_line_works_on_sim_run_and_is_recorded(tmp_path):
    out = tmp_path / "r"
    res = invoke_cli("sim", "run", "--trace", str(CSV), *MAP, "--gpus", "8", "--tp", "2", "--seeds", "1",
                     "--perfetto", "off", "--out", str(out))
    assert res.returncode == 0, res.stderr
    text = (out / "scenario.resolved.toml").read_text()
    assert "[trace.map]" in text and 'hit_cap = "finish_reason:length"' in text


def test_map_on_the_command_line_works_on_trace_stats():
    res = invoke_cli("trace", "stats", str(CSV), *MAP, "--format", "json")
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout)[0]
    assert row["n"] == 24 and row["hit_cap_frac"] == pytest.approx((_raw_csv()["finish_reason"] == "length").mean())


@pytest.mark.parametrize("args, where", [
    (["--map", "response_tokens=response_length", "--map", "hit_cap=nocolumn:length"], "field 'nocolumn'"),
    (["--map", "response_tokens=finish_reason:length"], "field '--map'"),
])
def test_bad_mappings_exit_2_with_one_line(args, where):
    res = invoke_cli("trace", "stats", str(CSV), *args)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and where in res.stderr


def test_a_corrupt_gz_and_an_empty_dump_exit_2_with_one_line(tmp_path):
    bad = tmp_path / "cut.csv.gz"
    bad.write_bytes((DATA / "foreign_rollouts.csv.gz").read_bytes()[:60])
    empty = tmp_path / "dump"
    empty.mkdir()
    for target in (bad, empty):
        res = invoke_cli("trace", "stats", str(target))
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and str(target) in res.stderr


def test_a_bad_value_mapping_in_a_scenario_names_the_field(tmp_path):
    sc = tmp_path / "s.toml"
    sc.write_text(f'[trace]\nname = "{CSV}"\nmap = {{response_tokens = "finish_reason:length"}}\n')
    res = invoke_cli("sim", "run", "--scenario", str(sc), "--seeds", "1")
    assert res.returncode == 2 and "trace.map" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# ---- import ------------------------------------------------------------------------------------------------
def test_import_writes_a_canonical_csv_that_reads_back_the_same_with_provenance(tmp_path):
    out = tmp_path / "canon.csv"
    res = invoke_cli("trace", "import", str(DATA / "foreign_rollouts.csv.gz"), "--out", str(out), *MAP,
                     "--map", "group_id=uid")
    assert res.returncode == 0, res.stderr
    direct = load_trace(DATA / "foreign_rollouts.csv.gz", parse_mapping([*MAP[1::2], "group_id=uid"]))
    again = read_trace(out)
    cols = list(again.columns)
    pd.testing.assert_frame_equal(again, direct[cols], check_dtype=False)
    meta = json.loads((tmp_path / "canon.csv.provenance.json").read_text())
    assert meta["columns"]["hit_cap"].startswith("file column 'finish_reason', true where it is 'length'")
    assert meta["columns"]["step"] == "file column 'step'"
    assert meta["columns"]["sample_idx"].startswith("default:")
    assert meta["files"][0]["sha256"] and meta["tlt_version"]
    again_run = invoke_cli("trace", "import", str(NEMO), "--out", str(out))  # ours: replaced
    assert again_run.returncode == 0, again_run.stderr
    assert json.loads((tmp_path / "canon.csv.provenance.json").read_text())["framework"] == "nemo-rl"


def test_import_never_overwrites_a_file_it_did_not_write(tmp_path):
    out = tmp_path / "mine.csv"
    out.write_text("precious\n")
    res = invoke_cli("trace", "import", str(NEMO), "--out", str(out))
    assert res.returncode == 2 and "was not written by tlt trace import" in res.stderr
    assert out.read_text() == "precious\n" and not (tmp_path / "mine.csv.provenance.json").exists()


def test_the_parsed_trace_cache_keys_on_the_mapping_and_the_dump_files(tmp_path):
    base = ["response_tokens=response_length"]
    plain = load_trace(CSV, parse_mapping(base))
    capped = load_trace(CSV, parse_mapping([*base, "hit_cap=finish_reason:length"]))
    assert not plain["hit_cap"].any() and capped["hit_cap"].any()
    folder = tmp_path / "dump"
    shutil.copytree(NEMO, folder)
    assert len(load_trace(folder)) == 24
    shutil.copy(folder / "train_data_step2.jsonl", folder / "train_data_step3.jsonl")  # a new step file
    assert sorted(load_trace(folder)["step"].unique()) == [1, 2, 3]
    before = folder.stat().st_mtime_ns
    step1 = folder / "train_data_step1.jsonl"
    step1.write_text("".join(step1.read_text().splitlines(keepends=True)[:4]))  # rewritten in place
    os.utime(step1, ns=(1, 10**18))
    os.utime(folder, ns=(before, before))  # the folder's own mtime does not tell
    assert len(load_trace(folder)) == 4 + 12 + 12
