"""Three `ca serve` replicas on one PostgreSQL database behave as one server.

Each replica serves its own project folder (as on three hosts) on its own port; all name the same
database, this module's own (:mod:`tests.postgres_db`). A conversation goes A → B → C through the
official a2a-sdk client, and the scripted model (which answers the n-th turn of a conversation
with its n-th reply) shows each replica saw the turns before. A task of A waiting for approval is
approved on B and on C at the same moment: exactly one decision wins (the other starts nothing and
answers the winner's outcome), the tool runs once. Started together on an empty database, the three
create the shared tables once (advisory locks), none fails to start.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, new_text_part
from a2a.types import GetTaskRequest, Message, Role, SendMessageRequest, Task, TaskState

from tests.a2a_peers import user_message
from tests.conftest import SIDE_EFFECT, run_ca, write_project, writer_agent
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, launch_serve

pytestmark = pytest.mark.e2e

THRICE = """
    name: thrice
    model:
      provider: scripted
      replies: ["first answer", "second answer", "third answer"]
"""


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[ServerProcess], Path]]:
    effects = tmp_path_factory.mktemp("effects") / "effects.log"
    with fresh_database("three") as url:
        servers: list[ServerProcess] = []
        try:
            for name in ("a", "b", "c"):  # started together: they migrate the shared schema at once
                files = {
                    "ca.yaml": f"default_agent: thrice\nstore: {{url: {url!r}}}\n",
                    "agents/thrice.yaml": THRICE,
                    "agents/writer.yaml": writer_agent(file=str(effects)),
                    "tools/side.py": SIDE_EFFECT,
                }
                servers.append(launch_serve(write_project(tmp_path_factory.mktemp(name), files), name=name))
            for server in servers:
                server.wait_ready()
            yield servers, effects
        finally:
            for server in servers:
                server.stop()


async def _send(server: ServerProcess, text: str, context_id: str) -> Task:
    """One message through the official client, from the agent's card; the task it ends in."""
    async with httpx.AsyncClient(timeout=60) as http:
        config = ClientConfig(streaming=False, httpx_client=http, supported_protocol_bindings=["JSONRPC"])
        async with await ClientFactory(config).create_from_url(f"{server.url}/agents/thrice") as client:
            message = Message(
                message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[new_text_part(text)], context_id=context_id
            )
            async for event in client.send_message(SendMessageRequest(message=message)):
                if event.HasField("task"):
                    return event.task
    raise AssertionError("no task came back")


async def _get(server: ServerProcess, task_id: str) -> Task:
    async with httpx.AsyncClient(timeout=60) as http:
        config = ClientConfig(httpx_client=http, supported_protocol_bindings=["JSONRPC"])
        async with await ClientFactory(config).create_from_url(f"{server.url}/agents/thrice") as client:
            return await client.get_task(GetTaskRequest(id=task_id))


def _reply(task: Task) -> str:
    return "".join(get_artifact_text(artifact) for artifact in task.artifacts)


def test_a_conversation_goes_from_a_to_b_to_c_with_its_history(
    replicas: tuple[list[ServerProcess], Path],
) -> None:
    (a, b, c), _ = replicas
    context = f"ctx-{uuid.uuid4().hex}"

    async def main() -> tuple[list[Task], Task]:
        turns = [await _send(server, f"turn on {i}", context) for i, server in enumerate((a, b, c))]
        return turns, await _get(a, turns[-1].id)

    turns, seen_on_a = asyncio.run(main())
    # Each replica answered with the next reply: it saw the turns the others had (a fresh one says "first").
    assert [(t.status.state, _reply(t)) for t in turns] == [
        (TaskState.TASK_STATE_COMPLETED, "first answer"),
        (TaskState.TASK_STATE_COMPLETED, "second answer"),
        (TaskState.TASK_STATE_COMPLETED, "third answer"),
    ]
    assert {t.context_id for t in turns} == {context} and len({t.id for t in turns}) == 3
    assert seen_on_a.status.state == TaskState.TASK_STATE_COMPLETED and _reply(seen_on_a) == "third answer"


def test_an_approval_of_a_task_of_a_decided_on_b_and_c_at_once_wins_once(
    replicas: tuple[list[ServerProcess], Path],
) -> None:
    (a, b, c), effects = replicas
    paused = a.rpc("SendMessage", {"message": user_message("go")}, agent="writer")["result"]["task"]
    assert paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", paused
    ids = {"taskId": paused["id"], "contextId": paused["contextId"]}
    start = threading.Barrier(2)
    answers: dict[str, dict[str, Any]] = {}

    def approve(name: str, server: ServerProcess) -> None:
        start.wait()
        answers[name] = server.rpc("SendMessage", {"message": user_message("approve", **ids)}, agent="writer")

    deciders = [threading.Thread(target=approve, args=pair) for pair in (("b", b), ("c", c))]
    for decider in deciders:
        decider.start()
    for decider in deciders:
        decider.join(timeout=60)
    # One claim wins; the other decider starts nothing and gets the outcome of the winner's run (as a
    # message queued behind a run on one server does), or, once that run ended, the SDK's terminal-state error.
    for answer in answers.values():
        if "result" in answer:
            assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
        else:
            assert "terminal state" in answer["error"]["message"], answer
    for server in (a, b, c):
        kept = server.rpc("GetTask", {"id": paused["id"]}, agent="writer")["result"]
        assert kept["status"]["state"] == "TASK_STATE_COMPLETED", kept
    assert effects.read_text() == "hello\n"  # the side effect ran once
    audit = run_ca("audit", "--json", "--limit", "10000", cwd=c.root)
    assert audit.returncode == 0, audit.stderr
    records = [r for r in json.loads(audit.stdout) if r["task_id"] == paused["id"]]
    assert len([r for r in records if r["kind"] == "approval"]) == 1, records  # decided once
    assert len([r for r in records if r["kind"] == "tool.call"]) == 1, records
