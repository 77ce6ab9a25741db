# Two commands set everything up on a fresh machine: `make run` and `make test`.
# The venv is (re)built when pyproject.toml or the constraints change.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONSTRAINTS ?= constraints-cpu.txt
EXTRAS ?= dev,gguf
CONFIG ?= experiments.yaml
STAMP := $(VENV)/.installed

.PHONY: run test lint format setup clean schema

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# torch first, pinned: a plain `torch` would resolve to a multi-GB CUDA build.
	$(PY) -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) torch
	$(PY) -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[$(EXTRAS)]"
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
