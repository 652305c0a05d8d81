"""``make gpu-bundle``: the wheels a lent GPU machine lacks for ``tlt gpu campaign``, the project as a wheel,
the shared data the campaign reads, and ``install.sh`` to install them offline.

The machine has no network and an image of its own (Python 3.12, torch, Triton, pandas, ...;
:data:`IMAGE_PACKAGES`). Which wheels to bring is computed, not listed by hand: import the campaign's
project's requirements recursively and keep those the image lacks (:func:`missing_distributions`);
then import the campaign's modules in a fresh interpreter and name every imported distribution that
is neither in the image nor brought (:func:`unexplained`): an optional import, or a missing requirement. Each is
downloaded for CPython 3.12 manylinux x86_64, ``--no-deps``, at the version installed here.

Run: ``python -m tltcli.gpu_bundle --out dist/gpu-bundle`` (network needed; tests check the list logic only).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

#: The device image's Python packages, as the device notes (/work/.library/device/KINDS.md, "Python
#: packages already there", read on a machine running the image on 2026-11-17) list them.
IMAGE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())  # noqa: SIM905 (the device notes' list, pasted as is)
#: What ``tlt gpu campaign`` imports, stage d's ``tlt validate`` (simulator, report) included.
CAMPAIGN_MODULES = ("tltcli.cli", "tltcli.gpu", "tltcli.validate", "tltreal.validation.campaign",
                    "tltreal.validation.validate", "tltsim.rollout", "tltsim.scenario", "analysis.validation_report",
                    "tltcore.cost.measured")
PROJECT = "tlt"
#: The shared data the campaign reads (below ../shared): stage e's calibrated model, stage d's trace.
SHARED_FILES = ("gpu-profiles/README.md", "gpu-profiles/vidur/compute/h100", "gpu-profiles/vidur/network/h100_dgx",
                "traces/polytrace_rl_rollouts.csv", "traces/SOURCES.md")
LIMIT_BYTES = 60 * 2**20
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 normalizes it (``Typing_Extensions`` -> ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions(modules: tuple[str, ...] = CAMPAIGN_MODULES) -> set[str]:
    """The distributions whose top-level modules a fresh interpreter holds after importing ``modules``."""
    code = ("import importlib, json, sys\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))")
    names = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    owners = metadata.packages_distributions()
    return {normalize(d) for n in names for d in owners.get(n, ())}


def requirements(dist: str) -> list[str]:
    """``dist``'s unconditional requirements (extras' and other platforms' skipped), normalized names."""
    out = []
    for req in metadata.requires(dist) or ():
        if "extra ==" in req or "sys_platform == \"win32\"" in req:
            continue
        out.append(normalize(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0]))
    return out


def missing_distributions(image: frozenset[str] = IMAGE_PACKAGES, requires=requirements,
                          project: str = PROJECT) -> list[str]:
    """The project's requirements and theirs, recursively, that ``image`` lacks (a package the image has
    brings its own requirements). The project itself is left out: it travels as its own wheel."""
    seen: set[str] = set()
    todo = list(requires(project))
    while todo:
        d = todo.pop()
        if d in seen or d in image or d == project:
            continue
        seen.add(d)
        todo.extend(requires(d))
    return sorted(seen)


def unexplained(imported: set[str], missing: list[str], image: frozenset[str] = IMAGE_PACKAGES,
                project: str = PROJECT) -> list[str]:
    """Distributions the campaign imports that are neither in the image nor brought: optional imports of
    a package the image has (torch tries ``dill``), which it runs without, or an undeclared dependency of
    the project (then add it to pyproject.toml)."""
    return sorted(imported - image - set(missing) - {project})


def _run(args: list[str]) -> None:
    print("$", " ".join(args), flush=True)
    subprocess.run(args, check=True)


def build(out: Path) -> int:
    """Write the bundle to ``out`` (replaced); returns its size in bytes."""
    from tltcore.shared_paths import project_root, shared_dir

    missing = missing_distributions()
    extra = unexplained(imported_distributions(), missing)
    if extra:
        print(f"imported but neither in the image nor required (optional imports, not brought): {', '.join(extra)}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    pins = [f"{d}=={metadata.version(d)}" for d in missing]
    if pins:
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
              "--python-version", "3.12", "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS),
              "-d", str(out), *pins])
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(out),
          str(project_root())])
    shared = shared_dir()
    for rel in SHARED_FILES:
        src, dst = shared / rel, out / "shared" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    (out / "install.sh").write_text(INSTALL_SH.format(packages=" ".join(missing)))
    (out / "install.sh").chmod(0o755)
    (out / "PACKAGES.txt").write_text("\n".join(pins) + "\n")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {len(pins)} wheels ({', '.join(pins)}), the tlt wheel and shared data; {size / 2**20:.1f} MiB "
          f"(limit {LIMIT_BYTES / 2**20:.0f} MiB)")
    if size > LIMIT_BYTES:
        raise SystemExit(f"{out} is {size / 2**20:.1f} MiB, over the {LIMIT_BYTES / 2**20:.0f} MiB limit")
    return size


INSTALL_SH = """#!/usr/bin/env bash
# Offline install of tlt and what the GPU image lacks ({packages}), from this folder only.
# Source it (`. dist/gpu-bundle/install.sh`) so that TLT_SHARED_DIR points at the bundled shared data.
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
python3 -m pip install -q --no-index --find-links "$here" "$here"/tlt-*.whl || return 1 2>/dev/null || exit 1
export TLT_SHARED_DIR="$here/shared"
echo "tlt installed offline; TLT_SHARED_DIR=$TLT_SHARED_DIR"
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("dist/gpu-bundle"))
    parser.add_argument("--list", action="store_true", help="print the missing distributions and exit")
    args = parser.parse_args()
    if args.list:
        missing = missing_distributions()
        print("\n".join(missing))
        print("imported, not brought:", ", ".join(unexplained(imported_distributions(), missing)) or "none")
        return
    build(args.out)


if __name__ == "__main__":
    main()
