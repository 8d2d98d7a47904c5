"""Review finding (critical): ``/mcp`` on ``ca serve`` ignores who the caller is.

``framework/protocols/mcp/server.py`` (``AgentTools.call_tool``) never reads the request's
:class:`~framework.protocols.a2a.auth.Caller`. Behind the same ``server.auth`` as A2A, any
credential — a caller-only one of another team, an approver-only one — can on ``/mcp``:

* decide another caller's pending approval: ``decision: approve`` with the conversation's
  ``context_id`` picks the first pending task of that conversation of *any* caller;
* decide it without knowing any id: the elicitation answer's ``request_state`` is looked up with
  ``TaskStore.get``, which accepts a unique *prefix*, so ``request_state: "3"`` decides the one
  task whose id starts with 3, whoever's it is;
* send into another caller's conversation (``Runtime.send`` without ``caller=``: no
  ConversationNotYours check) and so read what the model remembers of it;
* start tasks with a credential that has no ``caller`` role (no ``_may_send``).

The audit names the decider ``mcp``, not the credential.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from tests.a2a_peers import result_of, user_message
from tests.conftest import SIDE_EFFECT, write_project, writer_agent
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

A = {"Authorization": "Bearer team-a-secret-token"}
B = {"X-API-Key": "team-b-secret-key"}
REVIEWER = {"X-API-Key": "reviewer-secret-key"}
ENV = {"TEAM_A_TOKEN": "team-a-secret-token", "TEAM_B_KEY": "team-b-secret-key", "REVIEWER_KEY": "reviewer-secret-key"}
CHATTY = """
name: chatty
model: {provider: scripted, replies: [first answer, second answer, third answer, fourth answer]}
"""
PROJECT = {
    "ca.yaml": """
        server:
          auth:
            credentials:
              - {name: team-a, token_env: TEAM_A_TOKEN, roles: [caller]}
              - {name: team-b, api_key_env: TEAM_B_KEY, roles: [caller]}
              - {name: reviewer, api_key_env: REVIEWER_KEY, roles: [approver]}
    """,
    "tools/side.py": SIDE_EFFECT,
    "agents/writer.yaml": writer_agent(),
    "agents/chatty.yaml": CHATTY,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    served = start_serve(write_project(tmp_path_factory.mktemp("mcp-callers"), PROJECT), env=ENV)
    try:
        yield served
    finally:
        served.stop()


def as_mcp(server: ServerProcess, headers: dict[str, str], body: Callable[[Any], Awaitable[Any]]) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> Any:
        transport = streamable_http_client(f"{server.url}/mcp", http_client=httpx2.AsyncClient(headers=headers))
        async with Client(transport, read_timeout_seconds=60) as client:
            return await body(client)

    return asyncio.run(asyncio.wait_for(main(), 120))


def paused_task_of_a(server: ServerProcess) -> dict[str, Any]:
    task: dict[str, Any] = result_of(
        server.rpc("SendMessage", {"message": user_message("write it")}, agent="writer", headers=A)
    )["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


def state_for_a(server: ServerProcess, task_id: str) -> str:
    return str(result_of(server.rpc("GetTask", {"id": task_id}, agent="writer", headers=A))["status"]["state"])


def effects(server: ServerProcess) -> str:
    path = server.root / "effects.log"
    return path.read_text() if path.exists() else ""


def test_another_caller_cannot_decide_a_task_by_its_context_id_over_mcp(server: ServerProcess) -> None:
    mine = paused_task_of_a(server)
    before = effects(server)

    async def approve(client: Any) -> Any:
        return await client.call_tool("writer", {"message": "", "context_id": mine["contextId"], "decision": "approve"})

    answer = as_mcp(server, B, approve)
    assert answer.is_error, answer
    assert effects(server) == before  # A's tool did not run on B's word
    assert state_for_a(server, mine["id"]) == "TASK_STATE_INPUT_REQUIRED"


def test_another_caller_cannot_decide_a_task_by_an_id_prefix_over_mcp(server: ServerProcess) -> None:
    from mcp.types import ElicitResult

    mine = paused_task_of_a(server)
    before = effects(server)

    async def approve(client: Any) -> Any:
        answers = {"approval": ElicitResult(action="accept", content={"decision": "approve"})}
        try:
            return await client.call_tool(
                "writer", {"message": ""}, input_responses=answers, request_state=mine["id"][:8]
            )
        except Exception as exc:  # an MCP error answer is a refusal too
            return exc

    as_mcp(server, B, approve)
    assert effects(server) == before
    assert state_for_a(server, mine["id"]) == "TASK_STATE_INPUT_REQUIRED"


def test_another_caller_cannot_continue_a_conversation_over_mcp(server: ServerProcess) -> None:
    first = result_of(server.rpc("SendMessage", {"message": user_message("hi")}, agent="chatty", headers=A))["task"]

    async def follow_up(client: Any) -> Any:
        return await client.call_tool("chatty", {"message": "what did they say?", "context_id": first["contextId"]})

    answer = as_mcp(server, B, follow_up)
    assert answer.is_error and "another caller" in "".join(b.text for b in answer.content), answer


def test_a_credential_without_the_caller_role_cannot_start_tasks_over_mcp(server: ServerProcess) -> None:
    async def send(client: Any) -> Any:
        return await client.call_tool("chatty", {"message": "let me run something"})

    answer = as_mcp(server, REVIEWER, send)
    assert answer.is_error and "has no role 'caller'" in "".join(b.text for b in answer.content), answer
