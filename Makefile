# The two commands of the README's Quick start, and what they need.
# Everything installs from the lock file (uv.lock) into .venv; no global installs.

PYTHON ?= python3
UV_VERSION := 0.13.8
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
VENV := .venv
BIN := $(VENV)/bin
export UV_PYTHON_DOWNLOADS := never

.PHONY: demo test lint typecheck check bench clean

## demo: install, validate the example project, scaffold a demo project and validate it
demo: $(VENV)/.installed
	$(BIN)/ca validate .
	rm -rf .ca/demo && $(BIN)/ca init .ca/demo
	$(BIN)/ca validate .ca/demo

## test: install (with dev tools) and run the whole test suite
test: $(VENV)/.installed
	$(BIN)/pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check framework tests bench
	$(BIN)/ruff format --check framework tests bench

typecheck: $(VENV)/.installed
	$(BIN)/mypy

check: lint typecheck test

bench: $(VENV)/.installed
	$(BIN)/python bench/validate.py

$(VENV)/.installed: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --extra dev
	touch $@

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

clean:
	rm -rf $(VENV) .tools .ca .pytest_cache .mypy_cache .ruff_cache
