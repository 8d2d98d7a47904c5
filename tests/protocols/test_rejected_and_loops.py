"""Honest ends: a task whose gate a person rejected ends ``rejected`` (A2A ``TASK_STATE_REJECTED``)
on every transport — `ca serve`, `ca run --stdio` (A2A and ACP), `ca run` / `ca approve` — and a
loop that stopped at its ``max`` without its ``until`` holding says so in its step event."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.a2a_peers import Json, StdioPeer, result_of, user_message
from tests.acp_client import Client, agent, run
from tests.conftest import events, run_ca, write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

PROJECT = {
    "ca.yaml": "default_agent: flow\n",
    "agents/echo.yaml": "name: echo\n",
    "agents/flow.yaml": """
        name: flow
        kind: workflow
        steps:
          - {id: check, gate: {message: "Publish it?"}}
          - {id: ship, agent: echo}
    """,
    "agents/tries.yaml": """
        name: tries
        kind: workflow
        steps:
          - id: polish
            loop: {steps: [{id: say, agent: echo}], until: {contains: "never in the reply"}, max: 2}
    """,
    "agents/done.yaml": """
        name: done
        kind: workflow
        steps:
          - id: polish
            loop: {steps: [{id: say, agent: echo}], until: {contains: "You said"}, max: 3}
    """,
}
V1 = {"A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("honest"), PROJECT)


@pytest.fixture(scope="module")
def server(project: Path) -> Iterator[ServerProcess]:
    served = start_serve(project)
    try:
        yield served
    finally:
        served.stop()


def error_data(status: Json) -> Json:
    [data] = [p["data"] for p in status["message"]["parts"] if "data" in p]
    error: Json = data["error"]
    return error


# -- rejected ---------------------------------------------------------------------------------------


def test_a_rejected_gate_ends_the_a2a_task_rejected(server: ServerProcess) -> None:
    paused = result_of(server.rpc("SendMessage", {"message": user_message("go")}, agent="flow"))["task"]
    assert paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    answer = user_message("reject: not today", taskId=paused["id"], contextId=paused["contextId"])
    task = result_of(server.rpc("SendMessage", {"message": answer}, agent="flow"))["task"]
    assert task["status"]["state"] == "TASK_STATE_REJECTED"
    error = error_data(task["status"])
    assert error["code"] == "approval_rejected" and "not today" in error["reason"]
    got = result_of(server.rpc("GetTask", {"id": task["id"]}, agent="flow"))
    assert got["status"]["state"] == "TASK_STATE_REJECTED"
    listed = run_ca("tasks", "list", "--json", cwd=server.root)
    assert {t["id"]: t["state"] for t in json.loads(listed.stdout)}[task["id"]] == "rejected"


def test_a_gate_rejected_from_the_terminal_shows_rejected_on_get_task(server: ServerProcess) -> None:
    paused = result_of(server.rpc("SendMessage", {"message": user_message("go")}, agent="flow"))["task"]
    rejected = run_ca("approve", paused["id"], "--reject", "--reason", "no", cwd=server.root)
    assert rejected.returncode == 1, rejected.stderr
    assert "[rejected]" in rejected.stderr and "gate 'check' rejected: no" in rejected.stderr
    got = httpx.post(
        f"{server.url}/agents/flow/",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": paused["id"]}},
        headers=V1,
        timeout=30,
    ).json()["result"]
    assert got["status"]["state"] == "TASK_STATE_REJECTED"
    assert error_data(got["status"])["code"] == "approval_rejected"


def test_a_rejected_gate_ends_rejected_over_stdio_in_v03(project: Path) -> None:
    peer = StdioPeer(project, "flow")
    try:
        message = {
            "kind": "message",
            "messageId": uuid.uuid4().hex,
            "role": "user",
            "parts": [{"kind": "text", "text": "go"}],
        }
        paused = result_of(peer.request("message/send", {"message": message}))
        assert paused["status"]["state"] == "input-required"
        answer = {
            **message,
            "messageId": uuid.uuid4().hex,
            "taskId": paused["id"],
            "contextId": paused["contextId"],
            "parts": [{"kind": "data", "data": {"decision": "reject", "reason": "too early"}}],
        }
        task = result_of(peer.request("message/send", {"message": answer}))
        assert task["status"]["state"] == "rejected"
    finally:
        peer.kill()


def test_ca_run_and_ca_approve_say_rejected(project: Path) -> None:
    paused = run_ca("run", "flow", "go", "--json", cwd=project)
    assert paused.returncode == 3, paused.stderr
    task_id = events(paused.stdout)[-1]["task_id"]
    rejected = run_ca("approve", task_id, "--reject", "--json", cwd=project)
    assert rejected.returncode == 1, rejected.stderr
    end = events(rejected.stdout)[-1]
    assert (end["state"], end["failure"]["code"], end["failure"]["kind"]) == (
        "rejected",
        "approval_rejected",
        "ApprovalRejected",
    )


def test_a_gate_rejected_in_an_ide_ends_its_task_rejected(project: Path) -> None:
    async def main() -> str:
        async with agent(project, "flow", client=Client(["reject_once"])) as a:
            await a.initialize()
            session = await a.new_session()
            try:
                await a.prompt(session, "go")
            except Exception as exc:  # the turn answers the JSON-RPC error of approval_rejected
                return str(exc)
            raise AssertionError("the rejected gate answered the prompt without an error")

    error = run(main())
    assert "rejected" in error
    listed = json.loads(run_ca("tasks", "list", "--json", cwd=project).stdout)
    assert [t["state"] for t in listed if t["agent"] == "flow" and t["source"] == "acp"][:1] == ["rejected"]


# -- loops ------------------------------------------------------------------------------------------


def loop_end(evs: list[Json]) -> Json:
    [end] = [e for e in evs if e["kind"] == "step" and e["step"] == "polish" and e["status"] == "completed"]
    return end


def test_a_loop_that_hit_max_without_its_until_says_so(project: Path) -> None:
    result = run_ca("run", "tries", "hello", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    assert loop_end(evs)["ended_by"] == "max"
    assert len([e for e in evs if e["kind"] == "step" and e["step"] == "say" and e["status"] == "completed"]) == 2
    text = run_ca("run", "tries", "hello", cwd=project)
    assert "step polish completed (loop: say (max 2)) — stopped at its max, its until never held" in text.stderr


def test_a_loop_whose_until_held_says_so(project: Path) -> None:
    result = run_ca("run", "done", "hello", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert loop_end(events(result.stdout))["ended_by"] == "until"


def test_the_loop_end_reaches_a2a_clients_in_its_step_event(server: ServerProcess) -> None:
    task = result_of(server.rpc("SendMessage", {"message": user_message("hello")}, agent="tries"))["task"]
    steps = [
        p["data"]["caEvent"]
        for m in task["history"]
        for p in m["parts"]
        if "data" in p and isinstance(p["data"].get("caEvent"), dict)
    ]
    [end] = [s for s in steps if s.get("step") == "polish" and s["status"] == "completed"]
    assert end["endedBy"] == "max"
