"""``store.max_conversation_bytes``: a conversation has a size limit, with a clear error, on every entry point.

A message that would take its conversation past the limit fails ``conversation_too_large``
before anything of it runs; the conversation is as it was, and a new one starts from empty.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.a2a_peers import result_of, user_message
from tests.conftest import run_ca, write_project
from tests.serving import start_serve

LIMIT = 4096
PROJECT = {
    "ca.yaml": f"default_agent: echo\nstore:\n  max_conversation_bytes: {LIMIT}\n",
    "agents/echo.yaml": "name: echo\n",  # the offline model echoes a short part of each message
}
BIG = "x" * 3000


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path, PROJECT)


def test_over_a2a_the_message_past_the_limit_fails_and_a_new_conversation_works(project: Path) -> None:
    server = start_serve(project)
    try:
        context = uuid.uuid4().hex
        first = result_of(server.rpc("SendMessage", {"message": user_message(BIG, contextId=context)}))["task"]
        second = result_of(server.rpc("SendMessage", {"message": user_message(BIG, contextId=context)}))["task"]
        fresh = result_of(server.rpc("SendMessage", {"message": user_message(BIG)}))["task"]
        stderr = server.stderr()
    finally:
        server.stop()
    assert first["status"]["state"] == "TASK_STATE_COMPLETED"
    assert second["status"]["state"] == "TASK_STATE_FAILED"
    [error] = [p["data"]["error"] for p in second["status"]["message"]["parts"] if "data" in p]
    assert error["code"] == "conversation_too_large"
    assert "store.max_conversation_bytes" in error["reason"] and "start a new conversation" in error["reason"]
    assert fresh["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "Traceback" not in stderr


def test_ca_run_names_the_limit_and_leaves_the_conversation_as_it_was(project: Path) -> None:
    assert run_ca("run", "echo", BIG, "--session", "long", cwd=project).returncode == 0
    refused = run_ca("run", "echo", BIG, "--session", "long", cwd=project)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.startswith("error: conversation 'long' would hold more than 4096 bytes")
    assert "start a new conversation" in refused.stderr and "Traceback" not in refused.stderr
    small = run_ca("run", "echo", "still here?", "--session", "long", cwd=project)  # nothing was added
    assert small.returncode == 0, small.stderr
