# Countboard — `make demo` and `make test` work on a fresh clone (they install into .venv first).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PIP_FLAGS ?= -q
STORE ?= mlruns
# Test processes: two workers on 2 cores; --dist loadfile keeps each file's module fixtures in one worker.
TEST_WORKERS ?= 2
# The suite in three parts that together run every test once (tests/test_suite_split.py checks it):
# `make test` the unit suite (≤5 min on a quiet 2-core machine), `make test-slow` the tests marked slow (real sweeps,
# faults with real processes, servers, the browser), `make test-integration` the real services. `.ci/run` runs all.
UNIT_MARKS := not slow and not integration
SLOW_MARKS := slow and not integration
INTEGRATION_MARKS := integration
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.countboard-installed
PYTEST := HF_HUB_OFFLINE=1 $(PY) -m pytest

.PHONY: install demo test test-slow test-all test-integration lint bench bench-quick screenshots clean-store gpu-wheels gpu-check

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	$(PY) -m pip install $(PIP_FLAGS) "$(TORCH_SPEC)"
	$(PY) -m pip install $(PIP_FLAGS) -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

demo: install
	HF_HUB_OFFLINE=1 COUNTBOARD_STORE=$(STORE) $(BIN)/countboard demo

test: install
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "$(UNIT_MARKS)"

test-slow: install
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "$(SLOW_MARKS)"

test-integration: install
	$(PYTEST) -m "$(INTEGRATION_MARKS)" tests/integration -p no:cacheprovider

test-all: test test-slow test-integration

lint: install
	$(BIN)/ruff check src tests leaderboard benchmarks

BENCHES := $(filter-out benchmarks/bcc_quapy.py benchmarks/index_server.py benchmarks/screenshots.py benchmarks/gpu_wheels.py benchmarks/gpu_check.py benchmarks/praco_profile.py,$(wildcard benchmarks/*.py))

bench: install
	@for b in $(BENCHES); do echo "== $$b"; HF_HUB_OFFLINE=1 $(PY) $$b || exit 1; done

bench-quick: install
	@for b in $(BENCHES); do echo "== $$b --quick"; HF_HUB_OFFLINE=1 $(PY) $$b --quick || exit 1; done

# The GPU check (README, "GPU"): `make gpu-wheels` where PyPI is reachable downloads into .gpu/wheels what the GPU
# machine's Python lacks (benchmarks/gpu/wheels.txt); `make gpu-check` runs every GPU claim's check there, writing
# its reports to $$OUT or ./gpu-check; `make gpu-check DEVICE=cpu QUICK=1` runs the same steps on the CPU.
DEVICE ?= cuda
QUICK ?=
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),python3)

gpu-wheels:
	$(PYTHON) benchmarks/gpu_wheels.py --dest .gpu/wheels

gpu-check:
	DEVICE=$(DEVICE) QUICK=$(QUICK) PYTHON=$(GPU_PYTHON) bash benchmarks/gpu_check.sh

# docs/img/*.png: each board page and a run in the MLflow UI, in Debian's Chromium through Playwright (a small
# store built on the fly; SHOTS_STORE=mlruns takes the demo's store instead).
SHOTS_STORE ?=
screenshots: install
	HF_HUB_OFFLINE=1 $(PY) benchmarks/screenshots.py $(if $(SHOTS_STORE),--store $(SHOTS_STORE))

clean-store:
	rm -rf $(STORE)/mlflow.db $(STORE)/artifacts $(STORE)/index.duckdb
