"""Hostile trace files through the CLI: `tlt trace stats FILE` must exit 2 with exactly one
`tlt: error:` line naming the file (and the row and field where there is one), print no traceback,
write nothing and change nothing.

Each case is a file (CSV, Parquet or JSONL) built in a temporary folder, plus optional CLI
arguments and the fragments the message must contain. Integer columns are bounded by
``tltsim.traces.schema.INT_BOUNDS`` (tokens 10^7, steps and indices 10^9), checked before any cast.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tltsim.traces.schema import INT_BOUNDS

HEADER = "source,step,prompt_id,sample_idx,prompt_tokens,response_tokens,hit_cap"
ROWS = ["a,0,p0,0,10,100,0", "a,0,p0,1,10,250,1", "a,1,p1,0,12,80,0"]
COLS = HEADER.split(",")

ABOVE, BELOW, NOT_INT, BOOL = "above the maximum", "below the minimum", "is not an integer", "is a boolean"
U64_MAX, I64_MAX = 2**64 - 1, 2**63 - 1


@dataclass(frozen=True)
class Case:
    id: str
    suffix: str
    make: Callable[[Path], None]
    expect: tuple[str, ...]
    args: tuple[str, ...] = ()
    names_file: bool = True  # False only for --map errors, found before any file is opened


CASES: list[Case] = []


def case(id: str, suffix: str, make: Callable[[Path], None], *expect: str, args: tuple[str, ...] = (),
         names_file: bool = True) -> None:
    CASES.append(Case(id, suffix, make, expect, args, names_file))


def raw(data: bytes | str) -> Callable[[Path], None]:
    blob = data.encode() if isinstance(data, str) else data

    def make(path: Path) -> None:
        path.write_bytes(blob)
    return make


def csv_cell(col: str, value: str, row: int = 2) -> Callable[[Path], None]:
    """The good three-row CSV with one cell (1-based data row) replaced."""
    rows = [r.split(",") for r in ROWS]
    rows[row - 1][COLS.index(col)] = value
    return raw("\n".join([HEADER, *(",".join(r) for r in rows)]) + "\n")


def jsonl(lines: list[str]) -> Callable[[Path], None]:
    return raw("".join(line + "\n" for line in lines))


def json_cell(col: str, value: str, row: int = 2) -> Callable[[Path], None]:
    """Three good JSON objects, one with ``col`` set to the literal JSON text ``value``."""
    lines = []
    for i, r in enumerate(ROWS, start=1):
        fields = {c: json.dumps(v if c in ("source", "prompt_id") else int(v)) for c, v in zip(COLS, r.split(","),
                                                                                            strict=True)}
        if i == row:
            fields[col] = value
        lines.append("{" + ", ".join(f'"{c}": {v}' for c, v in fields.items()) + "}")
    return jsonl(lines)


def parquet(columns: dict[str, pa.Array], names: list[str] | None = None) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        pq.write_table(pa.Table.from_arrays(list(columns.values()), names=names or list(columns)), path)
    return make


def pq_col(col: str, array: pa.Array) -> Callable[[Path], None]:
    """A three-row Parquet trace whose ``col`` is ``array`` (other columns valid)."""
    base: dict[str, pa.Array] = {"prompt_id": pa.array(["p0", "p0", "p1"]), "sample_idx": pa.array([0, 1, 0]),
                                 "response_tokens": pa.array([100, 250, 80])}
    base[col] = array
    return parquet(base)


def truncated_parquet(keep: float) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        pq_col("response_tokens", pa.array([100, 250, 80]))(path)
        blob = path.read_bytes()
        path.write_bytes(blob[: int(len(blob) * keep)])
    return make


def garbage(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


# --- CSV: integers out of range or not integers, checked on the text before any cast ------------
for col, value, why in [
    ("response_tokens", "100000000000000000000", ABOVE),      # 10^20: used to wrap to a negative int64
    ("response_tokens", str(U64_MAX), ABOVE),
    ("response_tokens", str(I64_MAX + 1), ABOVE),
    ("response_tokens", str(I64_MAX), ABOVE),
    ("response_tokens", "1" + "0" * 400, ABOVE),               # parses to inf, still an integer
    ("response_tokens", str(10**7 + 1), ABOVE),
    ("response_tokens", "1e20", ABOVE),
    ("response_tokens", "-9223372036854775809", BELOW),
    ("response_tokens", "-1" + "0" * 400, BELOW),
    ("response_tokens", "-0", BELOW),                          # negative zero is zero: below 1
    ("response_tokens", "-0.0", BELOW),
    ("response_tokens", "0", BELOW),
    ("response_tokens", "1e999", NOT_INT),
    ("response_tokens", "inf", NOT_INT),
    ("response_tokens", "-Infinity", NOT_INT),
    ("response_tokens", "NaN", NOT_INT),
    ("response_tokens", "12.5", NOT_INT),
    ("response_tokens", "true", NOT_INT),
    ("response_tokens", "0x10", NOT_INT),
    ("response_tokens", "１２", NOT_INT),                       # full-width digits
    ("response_tokens", "1_000", NOT_INT),
    ("response_tokens", '"1,000"', NOT_INT),
    ("response_tokens", "12 tokens", NOT_INT),
    ("response_tokens", "5\x00", NOT_INT),                     # NUL byte inside a cell
    ("prompt_tokens", "100000000000000000000", ABOVE),
    ("prompt_tokens", str(U64_MAX), ABOVE),
    ("prompt_tokens", str(10**7 + 1), ABOVE),
    ("prompt_tokens", "-1", BELOW),
    ("prompt_tokens", "inf", NOT_INT),
    ("prompt_tokens", "False", NOT_INT),
    ("step", str(10**9 + 1), ABOVE),
    ("step", str(U64_MAX), ABOVE),
    ("step", "-1", BELOW),
    ("step", "1.5", NOT_INT),
    ("sample_idx", "1" + "0" * 30, ABOVE),
    ("sample_idx", "-9223372036854775808", BELOW),
    ("sample_idx", "nan", NOT_INT),
]:
    case(f"csv-{col}-{value[:24].encode('unicode_escape').decode()}", ".csv", csv_cell(col, value), "row 2",
         f"field '{col}'", why)

case("csv-cap-overflow", ".csv", raw("response_tokens,response_cap\n5,100\n7,100000000000000000000\n"), "row 2",
     "field 'response_cap'", ABOVE)
case("csv-cap-overflow-with-hit-cap", ".csv",
     raw("response_tokens,hit_cap,response_cap\n5,0,100\n7,0,18446744073709551615\n"), "row 2",
     "field 'response_cap'", ABOVE)
case("csv-cap-zero", ".csv", raw("response_tokens,response_cap\n5,0\n"), "row 1", "field 'response_cap'", BELOW)
case("csv-hit-cap-2", ".csv", csv_cell("hit_cap", "2"), "row 2", "field 'hit_cap'", "not a boolean")
case("csv-mixed-types", ".csv", raw("response_tokens\n12\n12.0\ntwelve\n"), "row 3", "field 'response_tokens'",
     NOT_INT)
case("csv-wrong-unit", ".csv", raw("response_tokens,length_unit\n5,tokens\n7,chars\n"), "row 2",
     "field 'length_unit'", "'chars'")
case("csv-words-unit", ".csv", raw("response_tokens,length_unit\n5,words\n"), "row 1", "'words'")

# --- CSV: headers, encodings, bytes ----------------------------------------------------------------
case("csv-dup-header", ".csv", raw("response_tokens,response_tokens\n5,6\n"),
     "'response_tokens' appears more than once", "field 'response_tokens'")
case("csv-dup-header-other", ".csv", raw("prompt_id,response_tokens,prompt_id\np,5,q\n"), "'prompt_id' appears more",
     "field 'prompt_id'")
case("csv-dup-header-quoted", ".csv", raw('response_tokens,"response_tokens"\n5,6\n'), "appears more than once")
case("csv-dup-header-bom", ".csv", raw("\ufeffresponse_tokens,response_tokens\n5,6\n"), "appears more than once",
     "field 'response_tokens'")
case("csv-dup-header-newline", ".csv", raw('"a\nb","a\nb",response_tokens\n1,2,3\n'), "appears more than once",
     "a\\nb")
case("csv-bom-first-column", ".csv", raw("\ufeffresponse_tokens,prompt_id\n5,p\n0,q\n"), "row 2",
     "field 'response_tokens'", BELOW)
case("csv-double-bom-first-column", ".csv", raw("\ufeff\ufeffresponse_tokens\n5\nx\n"), "row 2",
     "field 'response_tokens'", NOT_INT)
case("csv-utf16", ".csv", raw("response_tokens\n5\n".encode("utf-16")), "UTF-16")
case("csv-latin1", ".csv", raw("prompt_id,response_tokens\ncaf\xe9,5\n".encode("latin-1")), "cannot parse csv")
case("csv-binary-garbage", ".csv", raw(garbage(4096, 1)), "cannot parse csv")
case("csv-png", ".csv", raw(b"\x89PNG\r\n\x1a\n" + garbage(500, 2)), "cannot parse csv")
case("csv-gzipped", ".csv", raw(gzip.compress(b"response_tokens\n5\n")), "cannot parse csv")
case("csv-all-nul", ".csv", raw(b"\x00" * 200), "no rows")
case("csv-nul-lines", ".csv", raw(b"\x00\x00\n\x00\n"), "missing required column", "'\\x00\\x00'")
case("csv-empty", ".csv", raw(b""), "file is empty")
case("csv-blank-lines", ".csv", raw("\n\n\n"), "file is empty")
case("csv-header-only", ".csv", raw("source,response_tokens\n"), "no rows")
case("csv-missing-column", ".csv", raw("source,prompt_tokens\na,10\n"), "missing required column", "response_tokens")
case("csv-ragged", ".csv", raw("response_tokens,b\n1,2\n3,4,5,6\n"), "cannot parse csv")
case("csv-open-quote", ".csv", raw('response_tokens,b\n"1,2\n3,4\n'), "cannot parse csv")
case("csv-blank-length", ".csv", csv_cell("response_tokens", ""), "row 2", "field 'response_tokens'", "missing")
case("csv-huge-line", ".csv", raw("response_tokens\n5\n" + "7" * 2_000_000 + "\n"), "row 2", ABOVE)
case("csv-huge-cell-text", ".csv", raw("prompt_id,response_tokens\n" + "x" * 2_000_000 + ",abc\n"), "row 1",
     NOT_INT)
case("csv-many-columns", ".csv", raw(",".join(f"c{i}" for i in range(5000)) + "\n" + ",".join("1" * 5000) + "\n"),
     "missing required column", "more)")
case("csv-duplicate-key", ".csv", csv_cell("sample_idx", "0"), "duplicate key", "row 1", "row 2")

# --- JSONL -----------------------------------------------------------------------------------------
for col, value, why in [
    ("response_tokens", str(10**20), ABOVE),
    ("response_tokens", str(U64_MAX), ABOVE),
    ("response_tokens", str(I64_MAX + 1), ABOVE),
    ("response_tokens", str(-(2**63) - 1), BELOW),
    ("response_tokens", "1" + "0" * 400, ABOVE),
    ("response_tokens", str(10**7 + 1), ABOVE),
    ("response_tokens", "1e400", NOT_INT),
    ("response_tokens", "Infinity", NOT_INT),
    ("response_tokens", "-0.0", BELOW),
    ("response_tokens", "-0", BELOW),
    ("response_tokens", "12.5", NOT_INT),
    ("response_tokens", '"abc"', NOT_INT),
    ("response_tokens", '"100000000000000000000"', ABOVE),
    ("response_tokens", "[1, 2]", NOT_INT),
    ("response_tokens", '{"n": 5}', NOT_INT),
    ("response_tokens", "true", BOOL),
    ("response_tokens", "false", BOOL),
    ("response_tokens", "null", "missing"),
    ("response_tokens", "NaN", "missing"),
    ("prompt_tokens", "true", BOOL),
    ("prompt_tokens", str(U64_MAX), ABOVE),
    ("step", "true", BOOL),
    ("step", str(10**9 + 1), ABOVE),
    ("sample_idx", "false", BOOL),
    ("sample_idx", "-1", BELOW),
    ("hit_cap", "2", "not a boolean"),
]:
    case(f"jsonl-{col}-{value[:24]}", ".jsonl", json_cell(col, value), "row 2", f"field '{col}'", why)

case("jsonl-all-true", ".jsonl", jsonl(['{"response_tokens": true}', '{"response_tokens": false}']), "row 1", BOOL)
case("jsonl-mixed-types", ".jsonl", jsonl(['{"response_tokens": 5}', '{"response_tokens": "6"}',
                                           '{"response_tokens": 6.5}']), "row 3", NOT_INT)
case("jsonl-dup-key", ".jsonl", jsonl(['{"response_tokens": 5}', '{"response_tokens": 5, "response_tokens": 9}']),
     "row 2", "field 'response_tokens'", "appears more than once")
case("jsonl-dup-key-other", ".jsonl", jsonl(['{"prompt_id": "a", "response_tokens": 5, "prompt_id": "b"}']),
     "row 1", "'prompt_id' appears more than once")
case("jsonl-dup-key-nested", ".jsonl", jsonl(['{"response_tokens": 5}', '{"response_tokens": 5}',
                                              '{"response_tokens": 5, "meta": {"k": 1, "k": 2}}']),
     "row 3", "'k' appears more than once")
case("jsonl-bom", ".jsonl", raw('\ufeff{"response_tokens": 0}\n'), "row 1", "field 'response_tokens'", BELOW)
case("jsonl-bom-concatenated", ".jsonl", raw('\ufeff{"response_tokens": 5}\n\ufeff{"response_tokens": true}\n'),
     "row 2", BOOL)
case("jsonl-utf16", ".jsonl", raw('{"response_tokens": 5}\n'.encode("utf-16")), "UTF-16")
case("jsonl-bad-utf8-row3", ".jsonl", raw(b'{"response_tokens": 5}\n{"response_tokens": 6}\n{"p": "\xff"}\n'),
     "row 3", "not UTF-8")
case("jsonl-nul-byte", ".jsonl", raw('{"response_tokens": 5}\n{"response_tokens": 5\x00}\n'), "row 2",
     "invalid JSON")
case("jsonl-binary-garbage", ".jsonl", raw(garbage(4096, 3)), "not UTF-8")
case("jsonl-truncated", ".jsonl", raw('{"response_tokens": 5}\n{"response_tokens": 6, "pro'), "row 2",
     "invalid JSON")
case("jsonl-not-object", ".jsonl", jsonl(['{"response_tokens": 5}', "[1, 2]"]), "row 2", "not a JSON object")
case("jsonl-scalar", ".jsonl", jsonl(["5"]), "row 1", "not a JSON object")
case("jsonl-deep-nesting", ".jsonl", jsonl(["[" * 100_000 + "]" * 100_000]), "row 1", "invalid JSON")
case("jsonl-5000-digits", ".jsonl", jsonl(['{"response_tokens": ' + "1" * 5000 + "}"]), "row 1", "invalid JSON")
case("jsonl-huge-line", ".jsonl", jsonl(['{"prompt_id": "a", "response_tokens": 5}', '{"prompt_id": "' + "x" * 2_000_000
                                        + '", "response_tokens": 0}']), "row 2", BELOW)
case("jsonl-huge-unterminated", ".jsonl", raw('{"prompt_id": "' + "x" * 2_000_000), "row 1", "invalid JSON")
case("jsonl-blank-only", ".jsonl", raw("\n \n\n"), "no rows")
case("jsonl-wrong-unit", ".jsonl", jsonl(['{"response_tokens": 5, "length_unit": "characters"}']), "row 1",
     "field 'length_unit'")
case("ndjson-overflow", ".ndjson", jsonl(['{"response_tokens": 100000000000000000000}']), "row 1", ABOVE)
case("jsonl-missing-column", ".jsonl", jsonl(['{"output_len": 5}']), "missing required column", "'output_len'")

# --- Parquet: typed columns ------------------------------------------------------------------------
for id, col, array, why in [
    ("uint64-max", "response_tokens", pa.array([100, U64_MAX, 80], pa.uint64()), ABOVE),  # used to read as -1
    ("uint64-2^63", "response_tokens", pa.array([100, 2**63, 80], pa.uint64()), ABOVE),
    ("int64-max", "response_tokens", pa.array([100, I64_MAX, 80], pa.int64()), ABOVE),
    ("int64-min", "response_tokens", pa.array([100, -(2**63), 80], pa.int64()), BELOW),
    ("uint32-max", "prompt_tokens", pa.array([1, 2**32 - 1, 3], pa.uint32()), ABOVE),
    ("int8-negative", "prompt_tokens", pa.array([1, -1, 3], pa.int8()), BELOW),
    ("uint8-zero", "response_tokens", pa.array([1, 0, 3], pa.uint8()), BELOW),
    ("step-uint64-max", "step", pa.array([0, U64_MAX, 0], pa.uint64()), ABOVE),
    ("sample-idx-minus-one", "sample_idx", pa.array([0, -1, 0], pa.int64()), BELOW),
    ("float-1e20", "response_tokens", pa.array([100.0, 1e20, 80.0]), ABOVE),
    ("float-inf", "response_tokens", pa.array([100.0, float("inf"), 80.0]), NOT_INT),
    ("float-fraction", "response_tokens", pa.array([100.0, 12.5, 80.0]), NOT_INT),
    ("float-nan", "response_tokens", pa.array([100.0, float("nan"), 80.0]), "missing"),
    ("float-negative-zero", "response_tokens", pa.array([100.0, -0.0, 80.0]), BELOW),
    ("float16-fraction", "response_tokens", pa.array([100, 0.5, 80], pa.float16()), NOT_INT),
    ("bool", "response_tokens", pa.array([True, True, False]), BOOL),
    ("bool-nullable", "prompt_tokens", pa.array([None, True, None], pa.bool_()), BOOL),
    ("decimal-huge", "response_tokens", pa.array([Decimal(100), Decimal(10**30), Decimal(80)], pa.decimal128(38, 0)),
     ABOVE),
    ("decimal-fraction", "response_tokens", pa.array([Decimal("100.00"), Decimal("12.50"), Decimal("80.00")],
                                                     pa.decimal128(10, 2)), NOT_INT),
    ("string-overflow", "response_tokens", pa.array(["100", "100000000000000000000", "80"]), ABOVE),
    ("string-text", "response_tokens", pa.array(["100", "abc", "80"]), NOT_INT),
    ("large-string", "response_tokens", pa.array(["100", "-5", "80"], pa.large_string()), BELOW),
    ("dictionary", "response_tokens", pa.array(["100", "x", "80"]).dictionary_encode(), NOT_INT),
    ("binary", "response_tokens", pa.array([b"100", b"\xff", b"80"]), NOT_INT),
    ("timestamp", "response_tokens", pa.array([1, 2, 3], pa.timestamp("s")), NOT_INT),
    ("date", "response_tokens", pa.array([1, 2, 3], pa.date32()), NOT_INT),
    ("duration", "response_tokens", pa.array([1, 2, 3], pa.duration("s")), NOT_INT),
    ("list", "response_tokens", pa.array([[1], [2], [3]]), NOT_INT),
    ("struct", "response_tokens", pa.array([{"a": 1}, {"a": 2}, {"a": 3}]), NOT_INT),
    ("null-type", "response_tokens", pa.array([None, None, None], pa.null()), "missing"),
    ("cap-uint64-max", "response_cap", pa.array([100, U64_MAX, 100], pa.uint64()), ABOVE),
    ("hit-cap-int", "hit_cap", pa.array([0, 2, 1]), "not a boolean"),
]:
    row = "row 1" if id in ("bool", "binary", "timestamp", "date", "duration", "list", "struct", "null-type") \
        else "row 2"
    case(f"parquet-{id}", ".parquet", pq_col(col, array), row, f"field '{col}'", why)

for col in ("prompt_id", "group_id", "source", "hit_cap", "length_unit"):
    case(f"parquet-{col}-not-utf8", ".parquet", pq_col(col, pa.array([b"p0", b"\xff\xfe", b"p1"])), "row 2",
         f"field '{col}'", "is not text")
case("parquet-dup-columns", ".parquet", parquet({"a": pa.array([1]), "b": pa.array([2])},
                                                names=["response_tokens", "response_tokens"]),
     "'response_tokens' appears more than once", "field 'response_tokens'")
case("parquet-truncated-tail", ".parquet", truncated_parquet(0.8), "cannot parse parquet")
case("parquet-truncated-half", ".parquet", truncated_parquet(0.5), "cannot parse parquet")
case("parquet-magic-only", ".parquet", raw(b"PAR1PAR1"), "cannot parse parquet")
case("parquet-garbage", ".parquet", raw(b"PAR1" + garbage(3000, 4) + b"PAR1"), "cannot parse parquet")
for id, meta in [("json", "{"), ("type", "5"), ("key", '{"columns": 5}'), ("index", '{"index_columns": ["nope"]}'),
                 ("dtype", '{"columns": [{"name": "response_tokens", "pandas_type": "int64", "numpy_type": "bogus", '
                           '"metadata": null, "field_name": "response_tokens"}], "index_columns": [], '
                           '"column_indexes": []}')]:
    case(f"parquet-bad-pandas-metadata-{id}", ".parquet", lambda path, meta=meta: pq.write_table(
        pa.table({"response_tokens": [1, 2]}).replace_schema_metadata({b"pandas": meta.encode()}), path),
         "cannot parse parquet")
case("parquet-is-csv", ".parquet", raw("response_tokens\n5\n"), "cannot parse parquet")
case("parquet-no-rows", ".parquet", parquet({"response_tokens": pa.array([], pa.int64())}), "no rows")
case("parquet-wrong-unit", ".parquet", parquet({"response_tokens": pa.array([5]), "length_unit": pa.array(["chars"])}),
     "row 1", "field 'length_unit'")
case("parquet-missing-column", ".parquet", parquet({"output_len": pa.array([5])}), "missing required column")

# --- --map -----------------------------------------------------------------------------------------
FOREIGN = '{"n": 5, "m": 7, "qid": "q"}\n{"n": 6, "m": 8, "qid": "q"}\n'
OWN = "response_tokens,prompt_tokens,prompt_id,out\n5,7,p,9\n6,8,p,10\n"
case("map-two-canonical-one-column", ".jsonl", raw(FOREIGN), "'response_tokens' and 'prompt_tokens' are both mapped",
     "'n'", "drop one", "--map", args=("--map", "response_tokens=n", "--map", "prompt_tokens=n"), names_file=False)
case("map-canonical-twice", ".jsonl", raw(FOREIGN), "'response_tokens' is mapped twice", "'n' and 'm'", "--map",
     args=("--map", "response_tokens=n", "--map", "response_tokens=m"), names_file=False)
case("map-foreign-is-other-canonical", ".csv", raw(OWN), "'prompt_tokens=response_tokens'",
     "file's own response_tokens column", "map response_tokens too", "field '--map'",
     args=("--map", "prompt_tokens=response_tokens"))
case("map-prompt-id-as-group", ".csv", raw(OWN), "'group_id=prompt_id'", "leaving prompt_id without data",
     args=("--map", "group_id=prompt_id"))
case("map-absent", ".jsonl", raw(FOREIGN), "not in file", "'n'", args=("--map", "response_tokens=nope"))
case("map-not-canonical", ".jsonl", raw(FOREIGN), "not a canonical column", args=("--map", "lengths=n"),
     names_file=False)
case("map-no-equals", ".jsonl", raw(FOREIGN), "not of the form", args=("--map", "response_tokens"),
     names_file=False)
case("map-empty-foreign", ".jsonl", raw(FOREIGN), "not of the form", args=("--map", "response_tokens="),
     names_file=False)
case("map-overflow-through-mapping", ".jsonl", jsonl(['{"n": 5}', '{"n": 18446744073709551615}']), "row 2",
     "field 'response_tokens'", ABOVE, args=("--map", "response_tokens=n"))
case("map-bool-through-mapping", ".jsonl", jsonl(['{"n": 5, "m": true}']), "row 1", "field 'prompt_tokens'", BOOL,
     args=("--map", "response_tokens=n", "--map", "prompt_tokens=m"))


def test_corpus_is_big_enough() -> None:
    assert len(CASES) >= 90
    assert len({c.id for c in CASES}) == len(CASES)
    assert {c.suffix for c in CASES} >= {".csv", ".parquet", ".jsonl"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_trace_is_one_clean_error(cli, case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs, work = tmp_path / "in", tmp_path / "work"
    inputs.mkdir()
    work.mkdir()
    path = inputs / f"t{case.suffix}"
    case.make(path)
    before = path.read_bytes()
    monkeypatch.chdir(work)
    res = cli("trace", "stats", str(path), *case.args)
    assert res.returncode == 2, (res.returncode, res.stdout[-300:], res.stderr[-1000:])
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr[:2000]
    line = lines[0]
    assert line.startswith("tlt: error: "), line
    assert len(line) < 1500, line[:300]
    assert res.stdout == ""
    if case.names_file:
        assert str(path) in line, line
    for fragment in case.expect:
        assert fragment in line, (fragment, line)
    assert list(work.iterdir()) == []  # nothing written where the user stands
    assert [p.name for p in inputs.iterdir()] == [path.name] and path.read_bytes() == before  # nor beside the file


def test_bounds_are_documented_for_every_integer_column() -> None:
    assert INT_BOUNDS == {"step": (0, 10**9), "sample_idx": (0, 10**9), "prompt_tokens": (0, 10**7),
                          "response_tokens": (1, 10**7), "response_cap": (1, 10**7)}
