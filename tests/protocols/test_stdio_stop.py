"""Ctrl-C or SIGTERM to `ca run --stdio` while its client keeps stdin open (as an editor does).

The process ends at once (it used to wait until stdin closed), exit 130, and what it was doing
ends as a stop should: the running task recorded canceled with the reason, the tool's process
gone, the ACP prompt answered ``cancelled``, nothing left ``working``, no traceback.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.a2a_peers import Json, StdioPeer, result_of, user_message
from tests.conftest import run_ca, write_project
from tests.serving import group_alive, sleeping_child

pytestmark = pytest.mark.e2e

PROJECT = {
    "ca.yaml": "default_agent: sleeper\n",
    "agents/sleeper.yaml": (
        'name: sleeper\ntools: [shell]\nprofile: autonomous\ncapabilities: {shell: {allow: ["sleep *"], timeout: 1m}}\n'
    ),
}
SLEEP = '@tool shell {"command": "sleep 30"}'
BLOCKING = {
    "agents/blocker.yaml": "name: blocker\nprofile: autonomous\ntools:\n  - python: tools/block.py:block\n",
    "tools/block.py": '''
        import time


        def block(seconds: float) -> str:
            """Block the thread it runs in (a synchronous tool: asyncio's default executor)."""
            time.sleep(seconds)
            return "done"
    ''',
}
SLOW_IMPORT = {
    "agents/slow.yaml": "name: slow\ntools:\n  - python: tools/slow.py:hello\n",
    "tools/slow.py": '''
        import pathlib
        import time

        pathlib.Path("import-started").write_text("x")
        time.sleep(60)


        def hello() -> str:
            """Say hello."""
            return "hello"
    ''',
}
INITIALIZE: Json = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
SIGNALS = [signal.SIGINT, signal.SIGTERM]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path, PROJECT)


def _stopped(peer: StdioPeer, sig: signal.Signals) -> None:
    """Send ``sig`` with stdin still open: the process must be gone within seconds, exit 130, cleanly."""
    peer.proc.send_signal(sig)
    assert peer.proc.wait(timeout=10) == 130, peer.stderr()
    assert "Traceback" not in peer.stderr(), peer.stderr()


def _tasks(project: Path) -> list[Json]:
    listed = run_ca("tasks", "list", "--json", cwd=project)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_an_idle_stdio_server_stops_at_once(project: Path, sig: signal.Signals) -> None:
    peer = StdioPeer(project)
    try:
        assert result_of(peer.request("agent/discover"))["name"] == "sleeper"
        _stopped(peer, sig)
    finally:
        peer.kill()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a2a_over_stdio_stopped_mid_tool_cancels_its_task_and_kills_the_tool(
    project: Path, sig: signal.Signals
) -> None:
    peer = StdioPeer(project)
    try:
        peer.send({"jsonrpc": "2.0", "id": "send", "method": "SendMessage", "params": {"message": user_message(SLEEP)}})
        sleeper = sleeping_child(peer.proc.pid, peer.stderr)
        _stopped(peer, sig)
        answered = result_of(peer.answer("send", timeout=5))["task"]  # the blocking request gets its task's end
    finally:
        peer.kill()
    assert answered["status"]["state"] == "TASK_STATE_CANCELED"
    assert not group_alive(sleeper), "the tool's process outlived the server"
    [task] = _tasks(project)
    assert (task["id"], task["state"]) == (answered["id"], "canceled")
    assert "stopped (Ctrl-C or SIGTERM) before this task finished" in task["error"]


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_acp_stopped_mid_tool_answers_the_prompt_cancelled(project: Path, sig: signal.Signals) -> None:
    peer = StdioPeer(project)
    try:
        peer.send(INITIALIZE)
        peer.answer(0)
        session = result_of(peer.request("session/new", {"cwd": str(project), "mcpServers": []}))["sessionId"]
        peer.send(
            {
                "jsonrpc": "2.0",
                "id": "prompt",
                "method": "session/prompt",
                "params": {"sessionId": session, "prompt": [{"type": "text", "text": SLEEP}]},
            }
        )
        sleeper = sleeping_child(peer.proc.pid, peer.stderr)
        _stopped(peer, sig)
        assert result_of(peer.answer("prompt", timeout=5))["stopReason"] == "cancelled"
    finally:
        peer.kill()
    assert not group_alive(sleeper), "the tool's process outlived the server"
    assert [t["state"] for t in _tasks(project)] == ["canceled"]


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_ca_mcp_serve_stopped_mid_tool_cancels_its_task_and_kills_the_tool(project: Path, sig: signal.Signals) -> None:
    peer = StdioPeer(project, command=("mcp", "serve"))
    try:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}
        result_of(peer.request("initialize", hello))
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        peer.send(
            {
                "jsonrpc": "2.0",
                "id": "call",
                "method": "tools/call",
                "params": {"name": "sleeper", "arguments": {"message": SLEEP}},
            }
        )
        sleeper = sleeping_child(peer.proc.pid, peer.stderr)
        _stopped(peer, sig)
    finally:
        peer.kill()
    assert not group_alive(sleeper), "the tool's process outlived the server"
    [task] = _tasks(project)
    assert (task["source"], task["state"]) == ("mcp", "canceled")


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_synchronous_tool_blocking_its_thread_holds_up_no_stop(tmp_path: Path, sig: signal.Signals) -> None:
    """asyncio's default executor runs synchronous tools, and the interpreter waits for its threads
    at exit: the stopped server ends its process once its task is recorded and its stores closed."""
    project = write_project(tmp_path, {**PROJECT, **BLOCKING})
    peer = StdioPeer(project, "blocker")
    try:
        peer.send(
            {
                "jsonrpc": "2.0",
                "id": "send",
                "method": "SendMessage",
                "params": {"message": user_message('@tool block {"seconds": 60}')},
            }
        )
        deadline = time.monotonic() + 30
        while not [t for t in _tasks(project) if t["state"] == "working"]:
            assert time.monotonic() < deadline, peer.stderr()
            time.sleep(0.1)
        time.sleep(0.5)  # the tool's thread is in time.sleep
        _stopped(peer, sig)
    finally:
        peer.kill()
    [task] = _tasks(project)
    assert task["state"] == "canceled", task


def test_acp_stopped_while_a_session_compiles_a_slow_tool_import_ends_at_once(tmp_path: Path) -> None:
    project = write_project(tmp_path, {**PROJECT, "ca.yaml": "default_agent: slow\n", **SLOW_IMPORT})
    peer = StdioPeer(project)
    try:
        peer.send(INITIALIZE)
        peer.answer(0)
        peer.send(
            {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": str(project), "mcpServers": []}}
        )
        deadline = time.monotonic() + 30
        while not (project / "import-started").exists():
            assert time.monotonic() < deadline, peer.stderr()
            time.sleep(0.05)
        _stopped(peer, signal.SIGTERM)
    finally:
        peer.kill()
