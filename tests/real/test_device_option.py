"""``--device`` of ``tlt real profile`` and ``tlt validate``, and ``tlt real profile``'s refusal to replace
a table it did not write.

On this CPU-only suite the good value is ``cpu`` (it must reach the engine and the table's metadata)
and the bad ones are a device this machine lacks and a name torch cannot parse: each is one error
line naming ``--device``, exit 2, before any model is built or any file written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import REPO, invoke_cli  # noqa: E402
from tltcli.validate import RealBackend, torch_device  # noqa: E402
from tltcore.errors import InputError  # noqa: E402

CONFIG = REPO / "examples" / "tiny-llama" / "config.json"
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
vllm_needed = pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is None,
                                 reason="vLLM is not installed (pip install 'tlt[vllm]')")


def test_cpu_is_accepted_as_torch_names_it():
    assert torch_device("cpu") == "cpu"
    assert torch_device("cpu:0") == "cpu"


@no_cuda
@pytest.mark.parametrize("text", ["cuda", "cuda:1"])
def test_a_cuda_device_this_machine_lacks_is_refused(text):
    with pytest.raises(InputError, match="no CUDA device") as err:
        torch_device(text)
    assert err.value.field == "--device"


@pytest.mark.parametrize("text", ["banana", "", "cuda:-1"])
def test_a_name_torch_cannot_parse_is_refused(text):
    with pytest.raises(InputError, match="not a torch device") as err:
        torch_device(text)
    assert err.value.field == "--device"


def test_a_device_type_the_native_engine_does_not_run_on_is_refused():
    with pytest.raises(InputError, match="runs on cpu or cuda"):
        torch_device("meta")


@vllm_needed
def test_vllm_takes_only_its_builds_device():
    from tltreal.backends.vllm_backend import vllm_device

    built = vllm_device()
    assert torch_device(built, RealBackend.vllm) == built
    other = "cuda" if built == "cpu" else "cpu"
    with pytest.raises(InputError, match=f"runs on {built} only"):
        torch_device(other, RealBackend.vllm)


def _one_error(result, fragment: str) -> None:
    lines = [x for x in result.stderr.splitlines() if x.startswith("tlt: error:")]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@no_cuda
def test_validate_refuses_a_missing_device_before_any_work(tmp_path):
    out = tmp_path / "report"
    _one_error(invoke_cli("validate", "--device", "cuda", "--out", str(out)), "--device")
    assert not out.exists()


@no_cuda
def test_profile_refuses_a_missing_device_before_any_work(tmp_path):
    out = tmp_path / "t.parquet"
    _one_error(invoke_cli("real", "profile", "--config", str(CONFIG), "--device", "cuda", "--out", str(out)),
               "--device")
    assert not out.exists()


def _profile(out: Path, *extra: str):
    return invoke_cli("real", "profile", "--config", str(CONFIG), "--shape", "2_1_2", "--batch", "1", "--context",
                      "16", "--repeats", "1", "--out", str(out), *extra)


def _meta(path: Path) -> dict:
    import pyarrow.parquet as pq

    from tltcore.cost.table import META_KEY

    return json.loads(pq.read_schema(path).metadata[META_KEY])


def test_profile_on_cpu_writes_its_table_and_may_replace_only_its_own(tmp_path):
    """``--device cpu`` profiles on the CPU (the table says so and who wrote it); a second run may
    replace that table; a Parquet file someone else wrote is refused, its bytes untouched."""
    pytest.importorskip("pyarrow")
    out = tmp_path / "t.parquet"
    first = _profile(out, "--device", "cpu")
    assert first.returncode == 0, first.stderr
    meta = _meta(out)
    assert meta["device"] == "cpu-calibrated" and meta["writer"] == "tlt real profile"
    again = _profile(out)
    assert again.returncode == 0, again.stderr
    theirs = tmp_path / "theirs.parquet"
    theirs.write_bytes(b"PAR1 not ours")
    _one_error(_profile(theirs), "was not written by tlt real profile")
    assert theirs.read_bytes() == b"PAR1 not ours"


def test_the_thread_clock_is_refused_off_the_cpu():
    from tltcli.validate import Clock, check_clock

    assert check_clock(Clock.thread, "cpu") == "thread"
    assert check_clock(Clock.wall, "cuda:0") == "wall"
    with pytest.raises(InputError, match="CPU work only") as err:
        check_clock(Clock.thread, "cuda:0")
    assert err.value.field == "--clock"
