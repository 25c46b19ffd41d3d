# gpugov: `make run` starts the console with a live demo cluster; `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: setup engine run test lint format pytest test-prereqs migrate demo clean

setup: $(STAMP)

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $(STAMP)

# The engine compiled by mypyc (allocations/engine/compiled.py): about a minute when the engine
# changed, nothing otherwise. Without a C compiler the engine runs from its sources, except in CI.
engine: setup
	@$(PY) scripts/build_engine.py || [ "$$CI" != "true" ]

migrate: engine
	$(PY) manage.py migrate --no-input

demo: migrate
	$(PY) manage.py load_demo --history-days 14

run: demo
	$(PY) scripts/run_dev.py --host $(HOST) --port $(PORT)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test-prereqs: engine
	bash scripts/test-prereqs

pytest: test-prereqs
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test: lint pytest

clean:
	rm -rf $(VENV) var staticfiles build
