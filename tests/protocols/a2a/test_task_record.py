"""One task record: a decision made outside the A2A server shows on its next GetTask and ListTasks.

A real `ca serve` pauses a task for an approval; `ca approve` in another process answers it
(the run finishes in that process). The server's A2A answers must show the final state at once.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import SIDE_EFFECT, ProjectFactory, run_ca, writer_agent
from tests.serving import ServerProcess, start_serve

Json = dict[str, Any]
V1 = {"A2A-Version": "1.0"}


def _rpc(server: ServerProcess, method: str, params: Json) -> Json:
    request = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    answer: Json = httpx.post(f"{server.url}/agents/writer/", json=request, headers=V1, timeout=60).json()
    assert "error" not in answer, answer
    return answer["result"]


def _paused_task(make_project: ProjectFactory, tmp_path: Path) -> tuple[Path, ServerProcess, Json]:
    root = make_project({"tools/side.py": SIDE_EFFECT, "agents/writer.yaml": writer_agent()})
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, logs=logs)
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "go"}]}
    task = _rpc(server, "SendMessage", {"message": message})["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return root, server, task


def test_get_task_shows_a_decision_made_by_ca_approve_at_once(make_project: ProjectFactory, tmp_path: Path) -> None:
    root, server, task = _paused_task(make_project, tmp_path)
    try:
        approved = run_ca("approve", task["id"], cwd=root)
        assert approved.returncode == 0, approved.stderr
        assert (root / "effects.log").read_text() == "hello\n"
        got = _rpc(server, "GetTask", {"id": task["id"]})
        listed = _rpc(server, "ListTasks", {})
        completed = _rpc(server, "ListTasks", {"status": "TASK_STATE_COMPLETED"})
        waiting = _rpc(server, "ListTasks", {"status": "TASK_STATE_INPUT_REQUIRED"})
    finally:
        server.stop()
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    reply = next(a for a in got["artifacts"] if a["artifactId"] == "reply")
    assert reply["parts"] == [{"text": "done"}]
    assert [t["status"]["state"] for t in listed["tasks"] if t["id"] == task["id"]] == ["TASK_STATE_COMPLETED"]
    assert [t["id"] for t in completed["tasks"]] == [task["id"]]
    assert waiting.get("tasks", []) == []
    server.assert_clean_exit()


def test_a_task_decided_elsewhere_takes_no_second_decision_over_a2a(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root, server, task = _paused_task(make_project, tmp_path)
    try:
        assert run_ca("approve", task["id"], "--reject", "--reason", "not today", cwd=root).returncode == 0
        decision = {
            "messageId": uuid.uuid4().hex,
            "role": "ROLE_USER",
            "taskId": task["id"],
            "contextId": task["contextId"],
            "parts": [{"text": "approve"}],
        }
        request = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": decision}}
        answer = httpx.post(f"{server.url}/agents/writer/", json=request, headers=V1, timeout=60).json()
    finally:
        server.stop()
    assert "error" in answer, answer
    assert not (root / "effects.log").exists()


def test_a_failure_decided_elsewhere_shows_on_get_task_with_its_code(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    flow = 'name: flow\nkind: workflow\nsteps:\n  - {id: check, gate: {message: "Publish it"}}\n'
    root = make_project({"agents/flow.yaml": flow})
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, logs=logs)
    try:
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "go"}]}
        request = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        url = f"{server.url}/agents/flow/"
        task = httpx.post(url, json=request, headers=V1, timeout=60).json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        run_ca("approve", task["id"], "--reject", "--reason", "not today", cwd=root)
        get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}
        got = httpx.post(url, json=get, headers=V1, timeout=60).json()["result"]
    finally:
        server.stop()
    assert got["status"]["state"] == "TASK_STATE_REJECTED"  # a person rejected the gate
    [data] = [p["data"] for p in got["status"]["message"]["parts"] if "data" in p]
    assert data["error"]["code"] == "approval_rejected"
    assert "not today" in data["error"]["reason"]
