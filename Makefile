# Countboard — `make demo` and `make test` work on a fresh clone (they install into .venv first).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PIP_FLAGS ?= -q
STORE ?= mlruns
# Test processes: most tests wait on sweep subprocesses, so two workers halve the wall time on 2 cores.
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.countboard-installed

.PHONY: install demo test test-fast test-integration lint bench bench-quick clean-store

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
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test-integration: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m integration tests/integration -p no:cacheprovider

test-fast: install
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not slow"

lint: install
	$(BIN)/ruff check src tests leaderboard benchmarks

BENCHES := $(filter-out benchmarks/bcc_quapy.py benchmarks/index_server.py,$(wildcard benchmarks/*.py))

bench: install
	@for b in $(BENCHES); do echo "== $$b"; HF_HUB_OFFLINE=1 $(PY) $$b || exit 1; done

bench-quick: install
	@for b in $(BENCHES); do echo "== $$b --quick"; HF_HUB_OFFLINE=1 $(PY) $$b --quick || exit 1; done

clean-store:
	rm -rf $(STORE)/mlflow.db $(STORE)/artifacts $(STORE)/index.duckdb
