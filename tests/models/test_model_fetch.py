"""`tlt model fetch ORG/NAME` against a made-up hub on 127.0.0.1 (tests/fake_hub.py): the bytes as served,
the token sent (to the hub's host only, never printed), a 401, a non-config, a slow server, size bounds,
and files tlt did not write left alone."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fake_hub import TOKEN, serve_hub

from conftest import invoke_cli

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "model_configs"
QWEN = (CONFIGS / "Qwen3-8B" / "config.json").read_bytes()
FILES = {"Qwen/Qwen3-8B": QWEN, "acme/no-type": json.dumps({"hidden_size": 8}).encode(),
         "acme/gpt2": json.dumps({"model_type": "gpt2", "n_layer": 2}).encode(), "acme/list": b"[1, 2]"}


@pytest.fixture
def hub(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("TLT_FETCH_TIMEOUT", "3")
    with serve_hub(FILES) as h:
        yield h


def _fetch(monkeypatch, hub, mode: str, *args: str):
    monkeypatch.setenv("HF_ENDPOINT", f"{hub.url}/{mode}")
    return invoke_cli("model", "fetch", *args)


def test_fetch_writes_the_served_bytes_and_marks_them_as_tlt_s(hub, monkeypatch, tmp_path):
    out = tmp_path / "m" / "config.json"
    res = _fetch(monkeypatch, hub, "ok", "Qwen/Qwen3-8B", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == QWEN and "Qwen3" in res.stdout and f"--model {out}" in res.stdout
    assert hub.requests == [("/ok/Qwen/Qwen3-8B/resolve/main/config.json", None)]  # no token set: none sent
    assert json.loads((tmp_path / "m" / ".config.json.tlt-fetch.json").read_text())["repo_id"] == "Qwen/Qwen3-8B"
    shown = invoke_cli("model", "show", str(out))
    assert "tlt model fetch: http://127.0.0.1" in shown.stdout
    again = _fetch(monkeypatch, hub, "ok", "Qwen/Qwen3-8B", "--out", str(tmp_path / "m"), "--revision", "v1.0")
    assert again.returncode == 0, again.stderr  # tlt's own file is replaced; a folder gets config.json
    assert hub.requests[-1][0] == "/ok/Qwen/Qwen3-8B/resolve/v1.0/config.json"


def test_default_out_is_name_slash_config_json(hub, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert _fetch(monkeypatch, hub, "ok", "Qwen/Qwen3-8B").returncode == 0
    assert (tmp_path / "Qwen3-8B" / "config.json").read_bytes() == QWEN
    run = invoke_cli("model", "show", "Qwen3-8B")  # the folder wins over the catalog entry of that name
    assert str(Path("Qwen3-8B") / "config.json") in run.stdout


def test_the_token_is_sent_as_a_bearer_and_never_printed(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    res = _fetch(monkeypatch, hub, "auth", "Qwen/Qwen3-8B", "--out", str(tmp_path / "config.json"))
    assert res.returncode == 0, res.stderr
    assert hub.requests[-1][1] == f"Bearer {TOKEN}" and TOKEN not in res.stdout + res.stderr


@pytest.mark.parametrize("token", [None, "hf_wrong"])
def test_a_401_is_one_line_and_writes_nothing(hub, monkeypatch, tmp_path, token):
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    res = _fetch(monkeypatch, hub, "auth", "Qwen/Qwen3-8B", "--out", str(tmp_path / "config.json"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "HTTP 401" in res.stderr and "HF_TOKEN" in res.stderr and "nothing was written" in res.stderr
    assert ("was refused" if token else "none is set") in res.stderr and (token or "hf_") not in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_redirects_carry_the_token_to_the_same_host_only(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("TLT_FETCH_TIMEOUT", "3")
    with serve_hub(FILES) as other, serve_hub(FILES, redirect_to=other.url.replace("127.0.0.1", "localhost")) as hub:
        res = _fetch(monkeypatch, hub, "redirect", "Qwen/Qwen3-8B", "--out", str(tmp_path / "config.json"))
        assert res.returncode == 0, res.stderr
        assert hub.requests[0][1] == f"Bearer {TOKEN}" and other.requests == [
            ("/ok/Qwen/Qwen3-8B/resolve/main/config.json", None)]


@pytest.mark.parametrize(("mode", "repo", "why"), [
    ("html", "Qwen/Qwen3-8B", "an HTML page"),
    ("ok", "acme/no-type", "no model_type"),
    ("ok", "acme/gpt2", "'gpt2' is not one of llama"),
    ("ok", "acme/list", "expected a JSON object"),
    ("ok", "acme/missing", "HTTP 404"),
    ("big", "Qwen/Qwen3-8B", "more than 1,048,576 bytes"),
])
def test_what_is_not_a_config_json_is_refused_and_nothing_written(hub, monkeypatch, tmp_path, mode, repo, why):
    res = _fetch(monkeypatch, hub, mode, repo, "--out", str(tmp_path / "x" / "config.json"))
    assert res.returncode == 2 and why in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "nothing was written" in res.stderr and not (tmp_path / "x").exists()


@pytest.mark.parametrize("mode", ["drip", "hang"])
def test_a_slow_or_silent_server_is_cut_at_the_deadline(hub, monkeypatch, tmp_path, mode):
    monkeypatch.setenv("TLT_FETCH_TIMEOUT", "1.5")
    start = time.monotonic()
    res = _fetch(monkeypatch, hub, mode, "Qwen/Qwen3-8B", "--out", str(tmp_path / "config.json"))
    assert res.returncode == 2 and "within 1.5 s" in res.stderr and "TLT_FETCH_TIMEOUT" in res.stderr
    assert time.monotonic() - start < 6 and list(tmp_path.iterdir()) == []


def test_every_wait_ends_at_the_deadline_not_one_timeout_after_it(hub):
    """The server answers at 1.8 s of a 2 s budget and then stalls: urllib's own per-wait timeout (the 2 s
    left when the request went out) would end the read at 3.8 s; each wait bounded by the time left ends
    it at 2 s. (The download itself is timed: the CLI's start-up is not the point.)"""
    from tltcore.errors import InputError
    from tltcore.model_fetch import config_url, download

    url = config_url("Qwen/Qwen3-8B", endpoint=f"{hub.url}/stall")
    start = time.monotonic()
    with pytest.raises(InputError, match="not finished within 2 s"):
        download(url, token=None, timeout=2.0)
    assert time.monotonic() - start < 3.2


def test_a_file_tlt_did_not_write_is_never_replaced(hub, monkeypatch, tmp_path):
    mine = tmp_path / "config.json"
    mine.write_text("{}")
    res = _fetch(monkeypatch, hub, "ok", "Qwen/Qwen3-8B", "--out", str(mine))
    assert res.returncode == 2 and "was not written by tlt model fetch" in res.stderr and mine.read_text() == "{}"
    assert hub.requests == []  # refused before downloading
    fetched = tmp_path / "f" / "config.json"
    assert _fetch(monkeypatch, hub, "ok", "Qwen/Qwen3-8B", "--out", str(fetched)).returncode == 0
    fetched.write_bytes(QWEN.replace(b'"num_hidden_layers": 36', b'"num_hidden_layers": 2'))  # the user edits it
    res = _fetch(monkeypatch, hub, "ok", "Qwen/Qwen3-8B", "--out", str(fetched))
    assert res.returncode == 2 and b'"num_hidden_layers": 2' in fetched.read_bytes()


@pytest.mark.parametrize(("args", "field"), [
    (("Qwen3-8B",), "ORG/NAME"), (("Qwen/../etc",), "ORG/NAME"), (("a/b/c",), "ORG/NAME"),
    (("Qwen/Qwen3-8B", "--revision", " "), "--revision"),
])
def test_bad_ids_are_refused_before_any_request(hub, monkeypatch, args, field):
    res = _fetch(monkeypatch, hub, "ok", *args)
    assert res.returncode == 2 and f"field '{field}'" in res.stderr and hub.requests == []


def test_a_bad_endpoint_or_timeout_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", "ftp://example.org")
    res = invoke_cli("model", "fetch", "Qwen/Qwen3-8B", "--out", str(tmp_path / "c.json"))
    assert res.returncode == 2 and "HF_ENDPOINT" in res.stderr
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("TLT_FETCH_TIMEOUT", "soon")
    res = invoke_cli("model", "fetch", "Qwen/Qwen3-8B", "--out", str(tmp_path / "c.json"))
    assert res.returncode == 2 and "TLT_FETCH_TIMEOUT" in res.stderr
