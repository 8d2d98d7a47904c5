"""A cold `ca run` and a cold ACP prompt import only what their first answer needs; `ca serve`
only what serving needs.

Imports are most of a cold start (a first token costs ~0.1 s after them), so these tests
guard the wins by what a real process imported, not by a timing: Python's own import log
(``PYTHONPROFILEIMPORTTIME``, the ``-X importtime`` switch) on the process's stderr names
every module it loaded, from start to exit.
"""

from __future__ import annotations

from pathlib import Path

from tests.a2a_peers import result_of, user_message
from tests.acp_client import Raw, agent_env, initialize_params
from tests.conftest import events, run_ca
from tests.serving import start_serve

IMPORT_LOG = {"PYTHONPROFILEIMPORTTIME": "1", "CA_MODEL": "offline"}
SLOW = 180  # seconds: the import log slows a cold start, and a loaded machine more so

SERVING_ONLY = (
    "a2a",  # a2a-sdk and its protobuf types: Agent Cards and the A2A server and client
    "google.protobuf",
    "starlette",
    "sse_starlette",
    "uvicorn",
    "mcp",  # the MCP SDK: only when an agent uses an MCP server
    "prometheus_client",  # `ca serve`'s /metrics
    "genai_prices",  # 0.85 s: only where a price is needed
    "opentelemetry.exporter",  # only when OTEL_* asks for traces
    "jsonschema",
    "sqlalchemy",  # a log set up by an earlier run is opened and appended to with sqlite3 alone
    "httpx",  # only http.get and A2A calls use it; it pulls in rich for its own command line
    "rich",
    "langgraph_sdk.client",  # framework/deferred.py: langgraph needs langgraph_sdk.auth only
    "langsmith.types.run",  # framework/deferred.py: langsmith needs one of its ~150 generated models
    "langchain.agents.middleware.shell_tool",  # framework/deferred.py: LangChain's own middleware
    "pydantic_settings",  # CA_MODEL (set here) is a ${...} variable, not a deployment setting
)
"""Packages the first answer of the offline model never needs (and their submodules), in a project
that has run before (its first run creates the audit log, with SQLAlchemy)."""


def imported(stderr: str) -> set[str]:
    """Every module named by the import log in ``stderr``."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line and "[us]" not in line
    }


def unneeded(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in SERVING_ONLY))


def scaffold(tmp_path: Path) -> Path:
    """A new project, run once (as one is before it is cold again)."""
    root = tmp_path / "project"
    done = run_ca("init", str(root))
    assert done.returncode == 0, done.stderr
    done = run_ca("run", "assistant", "hello", cwd=root, env={"CA_MODEL": "offline"})
    assert done.returncode == 0, done.stderr
    return root


def test_a_cold_ca_run_imports_nothing_of_serving(tmp_path: Path) -> None:
    root = scaffold(tmp_path)
    done = run_ca("run", "assistant", "hello there", "--json", cwd=root, env=IMPORT_LOG, timeout=SLOW)
    assert done.returncode == 0, done.stderr[-3000:]
    assert events(done.stdout)[-1]["output"] == "[assistant] You said: hello there"
    modules = imported(done.stderr)
    assert "langgraph.pregel" in modules  # the log is read: the graph's own imports are in it
    assert unneeded(modules) == []


def test_a_cold_acp_prompt_imports_nothing_of_serving(tmp_path: Path) -> None:
    root = scaffold(tmp_path)
    with Raw(root, env=agent_env(IMPORT_LOG)) as raw:
        assert "result" in raw.answer(raw.request("initialize", initialize_params()), SLOW)
        created = raw.answer(raw.request("session/new", {"cwd": str(root), "mcpServers": []}), SLOW)
        session = created["result"]["sessionId"]
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "hello there"}]}
        answered = raw.answer(raw.request("session/prompt", prompt), SLOW)
        assert answered["result"]["stopReason"] == "end_turn"
        assert raw.close() == 0
        modules = imported(raw.stderr_text())
    # session/new sent the agent's skills as slash commands: listing them needs no Agent Card
    assert any('"available_commands_update"' in line and '"explain"' in line for line in raw.seen)
    assert "langgraph.pregel" in modules
    assert unneeded(modules) == []


NOT_SERVED = (
    "mcp",  # only when an agent uses an MCP server
    "acp",  # the ACP SDK: `ca run --stdio` speaks ACP without it, and serving not at all
    "genai_prices",
    "opentelemetry.exporter",
    "jsonschema",
    "pydantic_settings",  # only when a deployment setting (CA_PORT …) is set
    "langgraph_sdk.client",  # framework/deferred.py
    "langsmith.types.run",  # framework/deferred.py
    "langchain.agents.middleware.shell_tool",  # framework/deferred.py
)
"""Packages `ca serve` of agents on the offline model, with no CA_ variable, never needs: each is
memory every replica would hold for nothing."""


def test_ca_serve_imports_nothing_it_does_not_serve_with(tmp_path: Path) -> None:
    root = scaffold(tmp_path)
    server = start_serve(root, env=IMPORT_LOG)
    try:
        answer = result_of(server.rpc("SendMessage", {"message": user_message("hello")}, agent="assistant"))
    finally:
        server.stop()
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    modules = imported(server.stderr())
    assert {"framework.protocols.a2a.http", "langgraph.pregel"} <= modules  # served, and the log is read
    assert sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in NOT_SERVED)) == []
