"""Every malformed trace gives one InputError line naming file/row/field; the CLI exits 2, prints no
traceback and writes nothing."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_cli
from tltcore.errors import InputError
from tltsim.traces import read_trace
from tltsim.traces.readers import parse_mapping

GOOD = "source,step,prompt_id,group_id,sample_idx,prompt_tokens,response_tokens,hit_cap,length_unit\n" \
       "a,0,p0,p0,0,10,100,0,tokens\na,0,p0,p0,1,10,250,1,tokens\n"

# name -> (file content, expected fragments of the message: file is always checked)
CORPUS: dict[str, tuple[str, list[str]]] = {
    "empty.csv": ("", ["empty"]),
    "header_only.csv": ("source,response_tokens\n", ["no rows"]),
    "missing_column.csv": ("source,prompt_tokens\na,10\n", ["missing required column", "response_tokens"]),
    "text_length.csv": (GOOD.replace(",250,", ",abc,"), ["row 2", "response_tokens", "'abc'"]),
    "fraction_length.csv": (GOOD.replace(",250,", ",12.5,"), ["row 2", "response_tokens", "integer"]),
    "negative_length.csv": (GOOD.replace(",100,", ",-3,"), ["row 1", "response_tokens", "minimum"]),
    "zero_length.csv": (GOOD.replace(",100,", ",0,"), ["row 1", "response_tokens", "minimum"]),
    "blank_length.csv": (GOOD.replace(",100,", ",,"), ["row 1", "response_tokens", "missing"]),
    "negative_prompt.csv": (GOOD.replace(",10,250", ",-1,250"), ["row 2", "prompt_tokens"]),
    "bad_step.csv": (GOOD.replace("a,0,p0,p0,1", "a,x,p0,p0,1"), ["row 2", "step"]),
    "bad_hit_cap.csv": (GOOD.replace(",1,tokens", ",maybe,tokens"), ["row 2", "hit_cap"]),
    "duplicate_key.csv": (GOOD.replace("p0,p0,1", "p0,p0,0"), ["duplicate key", "row 1", "row 2"]),
    "wrong_unit.csv": (GOOD.replace("1,tokens", "1,chars"), ["row 2", "length_unit", "chars"]),
    "bad_quotes.csv": ('source,response_tokens\n"a,1\nb,2\n', ["cannot parse"]),
    "bad.jsonl": ('{"response_tokens": 5}\n{"response_tokens": \n', ["row 2", "invalid JSON"]),
    "not_object.jsonl": ('{"response_tokens": 5}\n[1, 2]\n', ["row 2", "not a JSON object"]),
    "bad.parquet": ("this is not parquet", ["cannot parse parquet"]),
    "unknown.xlsx": ("x", ["unknown trace format"]),
}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    for name, (text, _) in CORPUS.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_malformed_file_raises_one_clear_error(corpus: Path, name: str) -> None:
    with pytest.raises(InputError) as info:
        read_trace(corpus / name)
    msg = str(info.value)
    assert "\n" not in msg
    assert name in msg
    for fragment in CORPUS[name][1]:
        assert fragment in msg, (fragment, msg)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_cli_exits_2_without_traceback_or_output(cli, corpus: Path, name: str, tmp_path: Path) -> None:
    out = tmp_path / "plots"
    for args in (["trace", "stats", str(corpus / name)], ["trace", "plot", str(corpus / name), "--out", str(out)]):
        res = cli(*args)
        assert res.returncode == 2, res
        assert "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
        assert name in res.stderr
        assert res.stdout == ""
    assert not out.exists()


def test_missing_file_and_unknown_name(cli) -> None:
    res = run_cli("trace", "stats", "no_such_trace_anywhere")  # a real process: the user's view
    assert res.returncode == 2 and "unknown trace" in res.stderr and "Traceback" not in res.stderr
    with pytest.raises(InputError, match="not found"):
        read_trace("/nonexistent/x.csv")


def test_good_file_in_three_formats_reads_identically(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(GOOD)
    a = read_trace(tmp_path / "t.csv")
    a.to_parquet(tmp_path / "t.parquet")
    with (tmp_path / "t.jsonl").open("w") as fh:
        for rec in pd.read_csv(tmp_path / "t.csv").to_dict(orient="records"):
            fh.write(json.dumps(rec) + "\n")
    b = read_trace(tmp_path / "t.parquet")
    c = read_trace(tmp_path / "t.jsonl")
    cols = ["source", "step", "prompt_id", "group_id", "sample_idx", "prompt_tokens", "response_tokens", "hit_cap"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    pd.testing.assert_frame_equal(a[cols], c[cols])
    assert a["response_tokens"].tolist() == [100, 250]
    assert a["hit_cap"].tolist() == [False, True]


def test_foreign_format_with_column_mapping(tmp_path: Path) -> None:
    p = tmp_path / "foreign.jsonl"
    p.write_text('{"qid": "q1", "out_len": 40, "in_len": 7}\n{"qid": "q1", "out_len": 90, "in_len": 7}\n')
    df = read_trace(p, parse_mapping(["response_tokens=out_len", "prompt_id=qid", "prompt_tokens=in_len"]))
    assert df["response_tokens"].tolist() == [40, 90]
    assert df["sample_idx"].tolist() == [0, 1]  # derived within the prompt
    assert df["group_id"].tolist() == ["q1", "q1"]
    assert df["source"].iloc[0] == "foreign"
    with pytest.raises(InputError, match="not in file"):
        read_trace(p, {"response_tokens": "nope"})
    with pytest.raises(InputError, match="canonical"):
        parse_mapping(["lengths=out_len"])


def test_response_cap_column_derives_hit_cap(tmp_path: Path) -> None:
    p = tmp_path / "capped.csv"
    p.write_text("response_tokens,response_cap\n100,100\n99,100\n5,\n")
    assert read_trace(p)["hit_cap"].tolist() == [True, False, False]


cell = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True), st.text(string.printable, max_size=6),
                 st.none())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.fixed_dictionaries({"step": cell, "prompt_id": cell, "sample_idx": cell,
                                            "prompt_tokens": cell, "response_tokens": cell, "hit_cap": cell}),
                     max_size=6),
       fmt=st.sampled_from(["csv", "jsonl"]))
def test_fuzzed_tables_either_load_valid_or_raise_input_error(tmp_path_factory, rows, fmt) -> None:
    """No input may crash the reader: it returns a valid canonical table or one InputError line."""
    d = tmp_path_factory.mktemp("fuzz")
    p = d / f"t.{fmt}"
    if fmt == "csv":
        pd.DataFrame(rows, columns=["step", "prompt_id", "sample_idx", "prompt_tokens", "response_tokens",
                                    "hit_cap"]).to_csv(p, index=False)
    else:
        p.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    try:
        df = read_trace(p)
    except InputError as exc:
        assert "\n" not in str(exc) and str(p) in str(exc)
        return
    assert len(df) == len(rows) > 0
    assert (df["response_tokens"] >= 1).all()
    assert (df["step"] >= 0).all() and (df["sample_idx"] >= 0).all()
    assert not df.duplicated(["source", "step", "prompt_id", "sample_idx"]).any()


@settings(max_examples=100, deadline=None)
@given(blob=st.binary(max_size=200), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
def test_fuzzed_bytes_never_crash(tmp_path_factory, blob: bytes, fmt: str) -> None:
    p = tmp_path_factory.mktemp("bytes") / f"b.{fmt}"
    p.write_bytes(blob)
    try:
        read_trace(p)
    except InputError as exc:
        assert "\n" not in str(exc)


EDGES = {"step": 10**9, "sample_idx": 10**9, "prompt_tokens": 0, "response_tokens": 10**7}


def _edge_table() -> pd.DataFrame:
    """Two rows at the documented bounds (tltsim.traces.schema.INT_BOUNDS), which must be accepted."""
    return pd.DataFrame({"prompt_id": ["p", "p"], "step": [10**9, 0], "sample_idx": [10**9, 0],
                         "prompt_tokens": [0, 10**7], "response_tokens": [10**7, 1], "response_cap": [10**7, 1]})


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet-int64", "parquet-uint64", "parquet-float",
                                 "parquet-decimal", "parquet-string"])
def test_values_at_the_bounds_are_accepted(tmp_path: Path, fmt: str) -> None:
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    df, p = _edge_table(), tmp_path / f"edge.{fmt.split('-')[0]}"
    ints = [c for c in df.columns if c != "prompt_id"]
    if fmt == "csv":
        df.to_csv(p, index=False)
    elif fmt == "jsonl":
        p.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict(orient="records")))
    else:
        kind = fmt.split("-")[1]
        make = {"int64": lambda v: pa.array(v, pa.int64()), "uint64": lambda v: pa.array(v, pa.uint64()),
                "float": lambda v: pa.array([float(x) for x in v]), "string": lambda v: pa.array([str(x) for x in v]),
                "decimal": lambda v: pa.array([decimal.Decimal(x) for x in v], pa.decimal128(12, 0))}[kind]
        cols = {"prompt_id": pa.array(df["prompt_id"].tolist()), **{c: make(df[c].tolist()) for c in ints}}
        pq.write_table(pa.table(cols), p)
    got = read_trace(p)
    for c in ("step", "sample_idx", "prompt_tokens", "response_tokens"):
        assert got[c].tolist() == df[c].tolist(), c
    assert got["hit_cap"].tolist() == [True, True]
    assert str(got["response_tokens"].dtype) == "int64" and str(got["prompt_tokens"].dtype) == "Int64"


@pytest.mark.parametrize(("col", "value", "fragment"), [
    ("response_tokens", 10**7 + 1, "above the maximum (allowed: 1 to 10,000,000)"),
    ("response_tokens", 0, "below the minimum (allowed: 1 to"),
    ("prompt_tokens", 10**7 + 1, "above"), ("prompt_tokens", -1, "below the minimum (allowed: 0 to"),
    ("step", 10**9 + 1, "above the maximum (allowed: 0 to 1,000,000,000)"), ("sample_idx", 10**9 + 1, "above"),
    ("step", -1, "below"), ("response_cap", 10**7 + 1, "above"), ("response_cap", 0, "below")])
def test_one_past_each_bound_is_refused(tmp_path: Path, col: str, value: int, fragment: str) -> None:
    df = _edge_table()
    df.loc[1, col] = value
    df.to_csv(tmp_path / "b.csv", index=False)
    with pytest.raises(InputError, match=f"row 2, field '{col}'") as info:
        read_trace(tmp_path / "b.csv")
    assert fragment in str(info.value) and "allowed" in str(info.value)


def _read_column(cells: list[str | None], dtype: str) -> list | str:
    from tltsim.traces.schema import _int_column

    df = pd.DataFrame({"prompt_tokens": pd.Series(cells, dtype=dtype)})
    try:
        return _int_column(df, "prompt_tokens", Path("f.csv"), nullable=True).tolist()
    except InputError as exc:
        return str(exc)


@pytest.mark.parametrize("cells", [["0", "7", "0012", "10000000", None, "999999", "1"], ["5", "1" * 15],
                                   ["5", "1" * 16], ["5", " 5 "], ["5", "-0"], ["5", "+5"], ["5", ""],
                                   ["5", "1e3"], ["5", "5.0"], ["5", "١٢"], ["5", "inf"]])
def test_fast_text_path_agrees_with_general_path(cells: list[str | None]) -> None:
    """Arrow-backed text of plain digits takes a fast path; it must read exactly like the general one."""
    assert _read_column(cells, "string[pyarrow]") == _read_column(cells, "string[python]")


def test_booleans_are_not_lengths_but_hit_cap_still_accepts_them(tmp_path: Path) -> None:
    p = tmp_path / "b.jsonl"
    p.write_text('{"response_tokens": 5, "hit_cap": true}\n{"response_tokens": 6, "hit_cap": 0}\n')
    assert read_trace(p)["hit_cap"].tolist() == [True, False]
    p.write_text('{"response_tokens": 5}\n{"response_tokens": true}\n')
    with pytest.raises(InputError, match=r"row 2, field 'response_tokens': 'True' is a boolean, not an integer"):
        read_trace(p)


def test_bom_does_not_break_the_first_column(tmp_path: Path) -> None:
    (tmp_path / "plain.csv").write_text(GOOD)
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    lines = "".join(json.dumps(r) + "\n" for r in pd.read_csv(tmp_path / "plain.csv").to_dict(orient="records"))
    (tmp_path / "plain.jsonl").write_text(lines)
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + lines.encode())
    cols = ["source", "step", "prompt_id", "sample_idx", "prompt_tokens", "response_tokens", "hit_cap"]
    for fmt in ("csv", "jsonl"):
        a, b = read_trace(tmp_path / f"plain.{fmt}"), read_trace(tmp_path / f"bom.{fmt}")
        assert list(b.columns) == list(a.columns) and b.columns[0] == "source"
        pd.testing.assert_frame_equal(a[cols], b[cols], check_names=False)


def test_duplicate_headers_and_keys_are_refused(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("response_tokens,prompt_id,response_tokens\n5,p,6\n")
    with pytest.raises(InputError, match="field 'response_tokens': column 'response_tokens' appears more than once"):
        read_trace(tmp_path / "d.csv")
    (tmp_path / "blank_names.csv").write_text("response_tokens,,\n5,,\n")  # pandas names them Unnamed: 1, 2
    assert read_trace(tmp_path / "blank_names.csv")["response_tokens"].tolist() == [5]
    (tmp_path / "d.jsonl").write_text('{"response_tokens": 5}\n{"response_tokens": 5, "response_tokens": 9}\n')
    with pytest.raises(InputError, match="row 2, field 'response_tokens': key 'response_tokens' appears more"):
        read_trace(tmp_path / "d.jsonl")


def test_mapping_conflicts_say_what_to_change(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="'response_tokens' and 'prompt_tokens' are both mapped to column 'n'"):
        parse_mapping(["response_tokens=n", "prompt_tokens=n"])
    with pytest.raises(InputError, match=r"'response_tokens' is mapped twice \('n' and 'm'\)"):
        parse_mapping(["response_tokens=n", "response_tokens=m"])
    p = tmp_path / "own.csv"
    p.write_text("response_tokens,prompt_tokens,gen\n5,7,3\n6,8,4\n")
    with pytest.raises(InputError, match="both mapped"):  # the API checks a dict too
        read_trace(p, {"response_tokens": "gen", "prompt_tokens": "gen"})
    with pytest.raises(InputError, match="'prompt_tokens=response_tokens' reads the file's own response_tokens"):
        read_trace(p, {"prompt_tokens": "response_tokens"})
    swapped = read_trace(p, {"prompt_tokens": "response_tokens", "response_tokens": "prompt_tokens"})
    assert swapped["response_tokens"].tolist() == [7, 8] and swapped["prompt_tokens"].tolist() == [5, 6]
    replaced = read_trace(p, {"response_tokens": "gen"})  # e.g. model_generated_tokens in search_r1
    assert replaced["response_tokens"].tolist() == [3, 4] and replaced["prompt_tokens"].tolist() == [7, 8]
    assert read_trace(p, {"response_tokens": "response_tokens"})["response_tokens"].tolist() == [5, 6]


def test_normalize_refuses_a_table_with_repeated_columns() -> None:
    from tltsim.traces.schema import normalize

    df = pd.DataFrame([[5, 6]], columns=["response_tokens", "response_tokens"])
    with pytest.raises(InputError, match="'response_tokens' appears more than once in the table"):
        normalize(df, "api.csv")
