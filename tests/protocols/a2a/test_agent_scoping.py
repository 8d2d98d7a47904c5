"""Under ``/agents/X/`` a caller reaches agent X's tasks only: another agent's path finds none of them.

A real `ca serve` with two agents; a task of ``echo`` is looked up, listed, cancelled and
subscribed to through ``other``'s path (each: task not found, or absent), then through its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NAP, NAPPER, ProjectFactory
from tests.serving import ServerProcess, start_serve

Json = dict[str, Any]
V1 = {"A2A-Version": "1.0"}
TASK_NOT_FOUND = -32001


def _rpc(server: ServerProcess, agent: str, method: str, params: Json) -> Json:
    request = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    answer: Json = httpx.post(f"{server.url}/agents/{agent}/", json=request, headers=V1, timeout=60).json()
    return answer


@pytest.fixture
def served(make_project: ProjectFactory, tmp_path: Path) -> Iterator[ServerProcess]:
    root = make_project(
        {
            "agents/echo.yaml": "name: echo\n",
            "agents/other.yaml": "name: other\n",
            "tools/nap.py": NAP,
            "agents/napper.yaml": NAPPER,
        }
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    server: ServerProcess = start_serve(root, logs=logs)
    yield server
    server.stop()


def _send(server: ServerProcess, agent: str, text: str, *, blocking: bool = True) -> Json:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    params: Json = {"message": message}
    if not blocking:
        params["configuration"] = {"returnImmediately": True}
    task: Json = _rpc(server, agent, "SendMessage", params)["result"]["task"]
    return task


def test_another_agent_s_path_neither_gets_nor_lists_a_task(served: ServerProcess) -> None:
    task = _send(served, "echo", "hello")
    assert _rpc(served, "other", "GetTask", {"id": task["id"]})["error"]["code"] == TASK_NOT_FOUND
    assert _rpc(served, "other", "ListTasks", {}).get("result", {}).get("tasks", []) == []
    own = _rpc(served, "echo", "GetTask", {"id": task["id"]})["result"]
    assert own["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [t["id"] for t in _rpc(served, "echo", "ListTasks", {})["result"]["tasks"]] == [task["id"]]


def test_another_agent_s_path_cannot_cancel_a_running_task(served: ServerProcess) -> None:
    task = _send(served, "napper", "go", blocking=False)
    refused = _rpc(served, "other", "CancelTask", {"id": task["id"]})
    assert refused["error"]["code"] == TASK_NOT_FOUND
    assert _rpc(served, "napper", "GetTask", {"id": task["id"]})["result"]["status"]["state"] in (
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
    )
    canceled = _rpc(served, "napper", "CancelTask", {"id": task["id"]})["result"]
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


def test_another_agent_s_path_cannot_continue_a_task(served: ServerProcess) -> None:
    task = _send(served, "echo", "hello")
    message = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "taskId": task["id"],
        "contextId": task["contextId"],
        "parts": [{"text": "more"}],
    }
    answer = _rpc(served, "other", "SendMessage", {"message": message})
    assert answer["error"]["code"] == TASK_NOT_FOUND
