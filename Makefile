# Slicewise: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export SLICEWISE_HOME ?= $(CURDIR)/var

.PHONY: demo stop test lint typecheck docs unit integration bench venv system-deps clean

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { echo "error: cannot create a venv with $(PYTHON) (need Python 3.11)"; exit 1; }
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/pip install --quiet --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

system-deps:
	@bash scripts/install-system-deps.sh

demo: venv system-deps
	$(BIN)/python -m slicewise.demo up

stop:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m slicewise.demo down; else echo "nothing to stop"; fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

# The reference under docs/ as a site in site/; strict (mkdocs.yml): a broken link or anchor, or a page missing
# from the nav, fails. (No --quiet: it hides the warnings that strict mode counts.)
docs: venv
	$(BIN)/mkdocs build --strict

# Two pytest-xdist workers (CI has 2 cores): the tests that start real services run one after another on one of
# them (their xdist_group, tests/conftest.py), the other takes the rest; about 10-11 minutes instead of 18.
PYTEST_WORKERS ?= -n 2 --dist loadgroup

unit: venv
	$(BIN)/pytest $(PYTEST_WORKERS) tests/dags tests/unit

integration: venv system-deps
	$(BIN)/pytest tests/integration

test: venv system-deps lint typecheck docs
	$(BIN)/pytest $(PYTEST_WORKERS) tests

bench: venv system-deps
	$(BIN)/python benchmarks/ingest.py

clean:
	rm -rf $(VENV) var site
