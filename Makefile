# The two commands of the README's Quick start, and what they need.
# Everything installs from the lock file (uv.lock) into .venv; no global installs.

PYTHON ?= python3
UV_VERSION := 0.13.8
UV := $(shell command -v uv 2>/dev/null || echo .tools/bin/uv)
VENV := .venv
BIN := $(VENV)/bin
export UV_PYTHON_DOWNLOADS := never

.PHONY: demo test lint typecheck check bench clean

## demo: install, validate the example project, run its agents on the offline model (one through an MCP server), then serve them over A2A
demo: $(VENV)/.installed
	$(BIN)/ca validate .
	printf 'What is in this project?\n@tool fs.list {"path": "agents"}\n' | $(BIN)/ca run assistant
	$(BIN)/ca run summarizer "CleverAgents declares agents in YAML and serves them over open protocols."
	printf 'Read my notebook.\n@tool notes.list_notes {}\n@tool notes.count_words {"text": "agents in YAML, tools over MCP"}\n' | MCP_PYTHON=$(BIN)/python $(BIN)/ca run notetaker
	@echo ""
	@echo "Serving the example agents. In another terminal, try:"
	@echo "  $(BIN)/ca call http://127.0.0.1:8765/agents/summarizer/ 'Summarise: A2A lets agents talk.'"
	@echo "  curl -s http://127.0.0.1:8765/agents/reviewer/.well-known/agent-card.json"
	@echo "Ctrl-C stops the server."
	$(BIN)/ca serve .

## test: install (with dev tools) and run the whole test suite
test: $(VENV)/.installed
	# tests/fixtures holds files that are broken on purpose (a python tool with a syntax error).
	$(BIN)/python -m compileall -q -x "tests/fixtures/" framework tests bench
	$(BIN)/pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check framework tests bench
	$(BIN)/ruff format --check framework tests bench

typecheck: $(VENV)/.installed
	$(BIN)/mypy

check: lint typecheck test

bench: $(VENV)/.installed
	$(BIN)/python bench/validate.py
	$(BIN)/python bench/run.py
	$(BIN)/python bench/evals.py
	$(BIN)/python bench/governance.py
	$(BIN)/python bench/serve.py
	$(BIN)/python bench/slow_model.py
	$(BIN)/python bench/model_call.py
	$(BIN)/python bench/acp.py
	$(BIN)/python bench/reload.py
	$(BIN)/python bench/mcp.py

$(VENV)/.installed: pyproject.toml uv.lock | $(UV)
	# Compiled at install: the tests start hundreds of `ca` processes, and where the environment sets
	# PYTHONDONTWRITEBYTECODE each of them would otherwise compile every module from source again.
	$(UV) sync --frozen --extra dev --compile-bytecode
	touch $@

.tools/bin/uv:
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

clean:
	rm -rf $(VENV) .tools .ca .pytest_cache .mypy_cache .ruff_cache
