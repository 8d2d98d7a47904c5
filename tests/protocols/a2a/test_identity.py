"""Named callers of one `ca serve`: each sees and answers only its own tasks; an approver decides any.

One real server on loopback with three credentials (``team-a`` a bearer token, ``team-b`` an API
key, both ``caller``; ``lead`` a bearer token with ``caller`` and ``approver``; ``reviewer`` an API
key with ``approver`` only), driven with the
official a2a-sdk client and plain JSON-RPC / REST for the platform methods.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_text_part
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from tests.a2a_peers import Json, result_of, user_message
from tests.conftest import NAP, NAPPER, SIDE_EFFECT, write_project, writer_agent
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

T = TypeVar("T")
TASK_NOT_FOUND = -32001
A = {"Authorization": "Bearer team-a-secret-token"}
B = {"X-API-Key": "team-b-secret-key"}
LEAD = {"Authorization": "Bearer lead-secret-token"}
REVIEWER = {"X-API-Key": "reviewer-secret-key"}
ENV = {
    "TEAM_A_TOKEN": "team-a-secret-token",
    "TEAM_B_KEY": "team-b-secret-key",
    "LEAD_TOKEN": "lead-secret-token",
    "REVIEWER_KEY": "reviewer-secret-key",
}
PROJECT = {
    "ca.yaml": """
        default_agent: writer
        server:
          auth:
            credentials:
              - {name: team-a, token_env: TEAM_A_TOKEN, roles: [caller]}
              - {name: team-b, api_key_env: TEAM_B_KEY, roles: [caller]}
              - {name: lead, token_env: LEAD_TOKEN, roles: [caller, approver]}
              - {name: reviewer, api_key_env: REVIEWER_KEY, roles: [approver]}
    """,
    "tools/side.py": SIDE_EFFECT,
    "tools/nap.py": NAP,
    "agents/writer.yaml": writer_agent(),
    "agents/napper.yaml": NAPPER,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = write_project(tmp_path_factory.mktemp("identity"), PROJECT)
    served = start_serve(root, env=ENV)
    try:
        yield served
    finally:
        served.stop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@asynccontextmanager
async def client_as(
    server: ServerProcess, headers: dict[str, str], agent: str = "writer", *, streaming: bool = False
) -> AsyncIterator[Client]:
    """The official client of ``agent``, sending ``headers`` (a caller's credential) on every request."""
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        config = ClientConfig(streaming=streaming, httpx_client=http)
        client = await ClientFactory(config).create_from_url(f"{server.url}/agents/{agent}")
        async with client:
            yield client


def message(text: str, *, task_id: str = "", context_id: str = "") -> Message:
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[new_text_part(text)],
        task_id=task_id,
        context_id=context_id or uuid.uuid4().hex,
    )


async def send(client: Client, sent: Message, *, return_immediately: bool = False) -> Task:
    request = SendMessageRequest(
        message=sent, configuration=SendMessageConfiguration(return_immediately=return_immediately)
    )
    [answer] = [r async for r in client.send_message(request)]
    assert answer.HasField("task"), answer
    return answer.task


def paused_task(server: ServerProcess, headers: dict[str, str]) -> Task:
    """A writer task of the caller with ``headers``, waiting for the approval of its fs write."""

    async def main() -> Task:
        async with client_as(server, headers) as client:
            return await send(client, message("write it"))

    task = run(main())
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    return task


def platform(server: ServerProcess, headers: dict[str, str], method: str, params: Json | None = None) -> Json:
    return server.rpc(f"_cleveragents/{method}", params, agent="writer", headers=headers)


def effects(server: ServerProcess) -> str:
    path = server.root / "effects.log"
    return path.read_text() if path.exists() else ""


def audit(server: ServerProcess, task_id: str, kind: str) -> list[Json]:
    records: list[Json] = result_of(platform(server, LEAD, "audit/query", {"taskId": task_id, "kind": kind}))["records"]
    return records


# -- A2A methods ---------------------------------------------------------------------------------


def test_another_caller_neither_gets_lists_cancels_nor_subscribes_to_a_task(server: ServerProcess) -> None:
    mine = paused_task(server, A)

    async def as_b() -> list[str]:
        refused = []
        async with client_as(server, B, streaming=True) as client:
            for name, call in (
                ("get", client.get_task(GetTaskRequest(id=mine.id))),
                ("cancel", client.cancel_task(CancelTaskRequest(id=mine.id))),
            ):
                with pytest.raises(TaskNotFoundError):
                    await call
                refused.append(name)
            with pytest.raises(TaskNotFoundError):
                async for _ in client.subscribe(SubscribeToTaskRequest(id=mine.id)):
                    pass
            refused.append("subscribe")
            listed = await client.list_tasks(ListTasksRequest())
            assert mine.id not in [t.id for t in listed.tasks]
        return refused

    assert run(as_b()) == ["get", "cancel", "subscribe"]

    async def as_a() -> tuple[Task, list[str], Task]:
        async with client_as(server, A, streaming=True) as client:
            got = await client.get_task(GetTaskRequest(id=mine.id))
            listed = [t.id for t in (await client.list_tasks(ListTasksRequest())).tasks]
            async for event in client.subscribe(SubscribeToTaskRequest(id=mine.id)):
                first = event.task
                break
            return got, listed, first

    got, listed, first = run(as_a())
    assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED  # B's cancel changed nothing
    assert mine.id in listed
    assert first.id == mine.id


def test_another_caller_cannot_cancel_a_running_task_its_owner_can(server: ServerProcess) -> None:
    async def main() -> Task:
        async with client_as(server, A, "napper") as a, client_as(server, B, "napper") as b:
            running = await send(a, message("nap"), return_immediately=True)
            with pytest.raises(TaskNotFoundError):
                await b.cancel_task(CancelTaskRequest(id=running.id))
            still = await a.get_task(GetTaskRequest(id=running.id))
            assert still.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
            return await a.cancel_task(CancelTaskRequest(id=running.id))

    assert run(main()).status.state == TaskState.TASK_STATE_CANCELED


def test_a_reply_from_another_caller_does_not_decide_by_json_rpc_or_rest(server: ServerProcess) -> None:
    mine = paused_task(server, A)
    before = effects(server)

    async def reply_as_b() -> None:
        async with client_as(server, B) as client:
            with pytest.raises(TaskNotFoundError):
                await send(client, message("approve", task_id=mine.id, context_id=mine.context_id))

    run(reply_as_b())
    body = {
        "message": {
            "messageId": uuid.uuid4().hex,
            "role": "ROLE_USER",
            "taskId": mine.id,
            "contextId": mine.context_id,
            "parts": [{"text": "approve"}],
        }
    }
    rest = httpx.post(
        f"{server.url}/agents/writer/rest/message:send", json=body, headers={"A2A-Version": "1.0", **B}, timeout=30
    )
    assert rest.status_code == 404, rest.text
    got = httpx.get(f"{server.url}/agents/writer/rest/tasks/{mine.id}", headers={"A2A-Version": "1.0", **B})
    assert got.status_code == 404, got.text
    assert effects(server) == before  # nothing ran
    waiting = result_of(platform(server, A, "approvals/list"))["approvals"]
    assert mine.id in [a["taskId"] for a in waiting]


def test_the_owner_decides_by_reply_and_the_audit_names_submitter_and_decider(server: ServerProcess) -> None:
    mine = paused_task(server, A)
    before = effects(server).count("hello")

    async def approve() -> Task:
        async with client_as(server, A) as client:
            return await send(client, message("approve", task_id=mine.id, context_id=mine.context_id))

    assert run(approve()).status.state == TaskState.TASK_STATE_COMPLETED
    assert effects(server).count("hello") == before + 1
    submitted = [r for r in audit(server, mine.id, "task.state") if r["data"]["state"] == "submitted"]
    assert [r["data"]["by"] for r in submitted] == ["team-a"]
    assert [r["data"]["by"] for r in audit(server, mine.id, "approval")] == ["team-a"]


def test_a_message_into_another_caller_s_conversation_is_refused(server: ServerProcess) -> None:
    mine = paused_task(server, A)

    async def main() -> Task:
        async with client_as(server, B) as client:
            return await send(client, message("what did they say?", context_id=mine.context_id))

    refused = run(main())
    assert refused.status.state == TaskState.TASK_STATE_FAILED
    assert "started by another caller" in refused.status.message.parts[0].text
    assert "write it" not in str(refused)


# -- platform methods --------------------------------------------------------------------------------


def test_approvals_list_shows_a_caller_its_own_and_an_approver_every_one(server: ServerProcess) -> None:
    of_a, of_b = paused_task(server, A), paused_task(server, B)

    def listed(headers: dict[str, str]) -> set[str]:
        return {a["taskId"] for a in result_of(platform(server, headers, "approvals/list"))["approvals"]}

    assert of_a.id in listed(A) and of_b.id not in listed(A)
    assert of_b.id in listed(B) and of_a.id not in listed(B)
    assert {of_a.id, of_b.id} <= listed(LEAD)
    owners = {a["taskId"]: a["caller"] for a in result_of(platform(server, LEAD, "approvals/list"))["approvals"]}
    assert (owners[of_a.id], owners[of_b.id]) == ("team-a", "team-b")


def test_a_caller_cannot_decide_another_s_approval_an_approver_can(server: ServerProcess) -> None:
    mine = paused_task(server, A)
    before = effects(server).count("hello")
    refused = platform(server, B, "approvals/decide", {"taskId": mine.id, "decision": "approve"})
    assert refused["error"]["code"] == TASK_NOT_FOUND
    assert "not found" in refused["error"]["message"]  # as if it did not exist, not "forbidden"
    assert effects(server).count("hello") == before
    decided = result_of(platform(server, LEAD, "approvals/decide", {"taskId": mine.id, "decision": "approve"}))
    assert decided["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert effects(server).count("hello") == before + 1
    assert [r["data"]["by"] for r in audit(server, mine.id, "approval")] == ["lead"]

    async def owner_view() -> Task:  # the owner sees the decision on its own task
        async with client_as(server, A) as client:
            return await client.get_task(GetTaskRequest(id=mine.id))

    assert run(owner_view()).status.state == TaskState.TASK_STATE_COMPLETED


def test_budget_status_is_the_owner_s_and_the_approver_s(server: ServerProcess) -> None:
    mine = paused_task(server, A)
    assert platform(server, B, "budget/status", {"taskId": mine.id})["error"]["code"] == TASK_NOT_FOUND
    for headers in (A, LEAD):
        assert result_of(platform(server, headers, "budget/status", {"taskId": mine.id}))["taskId"] == mine.id


def test_audit_query_shows_a_caller_only_its_own_tasks(server: ServerProcess) -> None:
    of_a, of_b = paused_task(server, A), paused_task(server, B)
    assert platform(server, B, "audit/query", {"taskId": of_a.id})["error"]["code"] == TASK_NOT_FOUND
    seen_by_b = {r["taskId"] for r in result_of(platform(server, B, "audit/query", {"limit": 1000}))["records"]}
    assert of_b.id in seen_by_b and of_a.id not in seen_by_b
    by_context = platform(server, B, "audit/query", {"contextId": of_a.context_id})
    assert result_of(by_context)["records"] == []
    seen_by_lead = {r["taskId"] for r in result_of(platform(server, LEAD, "audit/query", {"limit": 1000}))["records"]}
    assert {of_a.id, of_b.id} <= seen_by_lead


def usage_of(server: ServerProcess, headers: dict[str, str], **params: str) -> Json:
    report: Json = result_of(platform(server, headers, "usage", params))
    return report


def test_usage_is_a_caller_s_own_and_equals_its_audit_records(server: ServerProcess) -> None:
    paused_task(server, A)
    paused_task(server, B)
    mine, theirs = usage_of(server, A)["total"], usage_of(server, B)["total"]
    paused_task(server, A)
    again = usage_of(server, A, by="caller")
    assert [g["group"] for g in again["groups"]] == ["team-a"]  # nobody else's calls, not even as a group
    assert again["total"]["runs"] == mine["runs"] + 1 and again["total"]["modelCalls"] == mine["modelCalls"] + 1
    assert usage_of(server, B)["total"] == theirs  # A's new task is not B's
    records = result_of(platform(server, A, "audit/query", {"kind": "model.call", "limit": 1000}))["records"]
    assert again["total"]["modelCalls"] == len(records)
    assert again["total"]["inputTokens"] == sum(r["data"]["inputTokens"] for r in records)
    assert again["total"]["outputTokens"] == sum(r["data"]["outputTokens"] for r in records)
    assert {r["data"]["caller"] for r in records} == {"team-a"}
    assert again["total"]["costUsd"] == 0  # the scripted model: local, so free and known
    everyone = {g["group"]: g for g in usage_of(server, LEAD, by="caller")["groups"]}  # an approver reads all
    assert everyone["team-a"]["runs"] == again["total"]["runs"] and everyone["team-b"] == {**theirs, "group": "team-b"}
    bad = platform(server, A, "usage", {"since": "yesterday"})
    assert bad["error"]["code"] == -32602 and "since 'yesterday' is neither an ISO time" in bad["error"]["message"]
    assert platform(server, A, "usage", {"by": "week"})["error"]["code"] == -32602


def test_an_approver_only_credential_decides_but_cannot_send(server: ServerProcess) -> None:
    of_b = paused_task(server, B)
    before = effects(server)

    async def main() -> Task:
        async with client_as(server, REVIEWER) as client:
            return await send(client, message("let me run something"))

    refused = run(main())
    assert refused.status.state == TaskState.TASK_STATE_FAILED
    assert "has no role 'caller'" in refused.status.message.parts[0].text
    listed = {a["taskId"] for a in result_of(platform(server, REVIEWER, "approvals/list"))["approvals"]}
    assert of_b.id in listed
    rejected = platform(server, REVIEWER, "approvals/decide", {"taskId": of_b.id, "decision": "reject", "reason": "no"})
    assert result_of(rejected)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"  # the model took the "no"
    assert effects(server) == before
    [approval] = audit(server, of_b.id, "approval")
    assert (approval["data"]["by"], approval["data"]["decision"]) == ("reviewer", "reject")


def test_a_server_without_auth_keeps_its_tasks_from_before_callers(tmp_path: Path) -> None:
    """Rows written before tasks had owners (owner and caller empty) are the anonymous caller's after
    an upgrade: a server without ``server.auth`` still gets and lists them."""
    root = write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    first = start_serve(root)
    try:
        task = result_of(first.rpc("SendMessage", {"message": user_message("before")}))["task"]
    finally:
        first.stop()
    with sqlite3.connect(root / ".ca" / "state.db") as db:
        assert db.execute("UPDATE tasks SET owner = ''").rowcount == 1  # as an older release wrote it
    with sqlite3.connect(root / ".ca" / "tasks.db") as db:
        db.execute("UPDATE tasks SET caller = ''")
    again = start_serve(root)
    try:
        assert result_of(again.rpc("GetTask", {"id": task["id"]}))["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [t["id"] for t in result_of(again.rpc("ListTasks", {}))["tasks"]] == [task["id"]]
    finally:
        again.stop()
    with sqlite3.connect(root / ".ca" / "tasks.db") as db:
        assert db.execute("SELECT caller FROM tasks").fetchall() == [("anonymous",)]


def test_the_card_declares_the_schemes_the_credentials_use(server: ServerProcess) -> None:
    card = httpx.get(f"{server.url}/agents/writer/.well-known/agent-card.json").json()
    assert set(card["securitySchemes"]) == {"bearer", "apiKey"}
    assert card["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"] == "X-API-Key"
