"""SIGTERM to `ca serve` with a tool running: it waits ``server.shutdown_timeout``, then cancels.

No task is left ``working``, no tool's process outlives the server, and the blocking client
gets the task's final state (canceled, with the reason) instead of a dropped connection.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ProjectFactory
from tests.serving import ServerProcess, group_alive, sleeping_child, start_serve

SLEEPER = """
name: sleeper
tools: [shell]
profile: autonomous
capabilities: {shell: {allow: ["sleep *"], timeout: 1m}}
"""

CA_YAML = """
default_agent: sleeper
server:
  shutdown_timeout: 2s
"""

SLEEP = '@tool shell {"command": "sleep 30"}'


def _message(text: str, message_id: str) -> dict[str, Any]:
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}


@pytest.fixture
def stopped(make_project: ProjectFactory) -> tuple[Path, ServerProcess, dict[str, Any], float, int]:
    """A server SIGTERMed while a blocking SendMessage runs ``sleep 30``: the project, the server, the
    blocking client's answer, how long the server took to exit, and the sleep's process group."""
    root = make_project({"ca.yaml": CA_YAML, "agents/sleeper.yaml": SLEEPER})
    server = start_serve(root)
    answers: list[dict[str, Any]] = []
    try:
        caller = threading.Thread(
            target=lambda: answers.append(server.rpc("SendMessage", _message(SLEEP, "m-1"), agent="sleeper"))
        )
        caller.start()
        child = sleeping_child(server.proc.pid, server.output)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=20)
        took = time.monotonic() - started
        caller.join(timeout=20)
    finally:
        server.stop(signal.SIGKILL)
    assert answers, f"the blocking client got no answer:\n{server.output()}"
    return root, server, answers[0], took, child


def test_sigterm_exits_within_the_shutdown_timeout(
    stopped: tuple[Path, ServerProcess, dict[str, Any], float, int],
) -> None:
    _, server, _, took, _ = stopped
    assert took < 2 + 5, f"took {took:.1f} s:\n{server.output()}"
    server.assert_clean_exit()


def test_sigterm_leaves_no_tool_process_behind(stopped: tuple[Path, ServerProcess, dict[str, Any], float, int]) -> None:
    _, _, _, _, child = stopped
    assert not group_alive(child), "the shell tool's sleep outlived the server"


def test_blocking_client_gets_the_canceled_task_with_the_reason(
    stopped: tuple[Path, ServerProcess, dict[str, Any], float, int],
) -> None:
    _, _, answer, _, _ = stopped
    status = answer["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_CANCELED", answer
    assert "server shut down" in str(status["message"]), answer


def test_task_reads_canceled_after_restart(stopped: tuple[Path, ServerProcess, dict[str, Any], float, int]) -> None:
    root, _, answer, _, _ = stopped
    task_id = answer["result"]["task"]["id"]
    again = start_serve(root)
    try:
        got = again.rpc("GetTask", {"id": task_id}, agent="sleeper")
    finally:
        again.stop()
    assert got["result"]["status"]["state"] == "TASK_STATE_CANCELED", got
