"""Two `ca serve` replicas sharing one PostgreSQL database behave as one server, end to end.

Each replica serves its own project folder (as on two hosts) on its own port; both name the
same database in ``store.url`` — one of this module's own on the real server
(:mod:`tests.postgres_db`), skipped saying why where none answers. The official a2a-sdk client
drives them: a conversation started on A continues on B with its history (the scripted model
answers the n-th turn of a conversation with its n-th reply), B reads A's task, a subscriber on
B gets A's live run to its final state, and ``ca audit --verify`` finds one valid chain holding
both replicas' records.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client
from a2a.helpers import get_artifact_text, new_text_part
from a2a.types import (
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)

from tests.a2a_peers import a2a_client
from tests.conftest import NAP, run_ca, write_project
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, serving

pytestmark = pytest.mark.e2e

AGENTS = {
    "agents/twice.yaml": """
        name: twice
        model:
          provider: scripted
          replies: ["first answer", "second answer"]
    """,
    "agents/slow.yaml": """
        name: slow
        profile: autonomous
        model:
          provider: scripted
          replies:
            - tool_calls: [{name: nap, args: {seconds: 5}}]
            - rested enough
        tools:
          - python: tools/nap.py:nap
    """,
    "tools/nap.py": NAP,
}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with fresh_database("replicas") as url:
        roots = [
            write_project(
                tmp_path_factory.mktemp(name), {"ca.yaml": f"default_agent: twice\nstore: {{url: {url!r}}}\n", **AGENTS}
            )
            for name in ("a", "b")
        ]
        with serving(*roots) as (first, second):
            yield first, second


def message(text: str, context_id: str) -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[new_text_part(text)], context_id=context_id)


async def send(client: Client, text: str, context_id: str) -> Task:
    async for event in client.send_message(SendMessageRequest(message=message(text, context_id))):
        if event.HasField("task"):
            return event.task
    raise AssertionError("no task came back")


def reply(task: Task) -> str:
    return "".join(get_artifact_text(artifact) for artifact in task.artifacts)


def test_a_conversation_started_on_one_replica_continues_on_the_other(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    first, second = replicas
    context = f"ctx-{uuid.uuid4().hex}"

    async def main() -> tuple[Task, Task, Task]:
        async with a2a_client(first.url, "twice") as on_a, a2a_client(second.url, "twice") as on_b:
            started = await send(on_a, "hello", context)
            continued = await send(on_b, "and again", context)
            seen_on_b = await on_b.get_task(GetTaskRequest(id=started.id))
            return started, continued, seen_on_b

    started, continued, seen_on_b = asyncio.run(main())
    assert (started.status.state, reply(started)) == (TaskState.TASK_STATE_COMPLETED, "first answer")
    # The second reply: B's model saw A's turn in the conversation (a fresh one would answer "first answer").
    assert (continued.status.state, reply(continued)) == (TaskState.TASK_STATE_COMPLETED, "second answer")
    assert continued.context_id == context and continued.id != started.id
    assert seen_on_b.status.state == TaskState.TASK_STATE_COMPLETED and reply(seen_on_b) == "first answer"


async def started_on(first: ServerProcess, second: ServerProcess, context: str) -> tuple[asyncio.Task[Task], str]:
    """A run of ``slow`` sent to ``first`` (its answer, pending) and its task id, once ``second`` lists it."""

    async def nap_on_a() -> Task:
        async with a2a_client(first.url, "slow") as on_a:
            return await send(on_a, "take a nap", context)

    async with a2a_client(second.url, "slow") as lister:
        running = asyncio.create_task(nap_on_a())
        deadline = time.monotonic() + 60
        while not (found := await lister.list_tasks(ListTasksRequest(context_id=context))).tasks:
            assert time.monotonic() < deadline, "the task started on A never showed on B"
            assert not running.done(), running  # A writes the task's row when its run starts
            await asyncio.sleep(0.05)
    return running, found.tasks[0].id


def test_a_subscriber_on_one_replica_gets_the_run_on_the_other_to_its_end(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    first, second = replicas

    async def main() -> tuple[Task, list[StreamResponse]]:
        running, task_id = await started_on(first, second, f"ctx-{uuid.uuid4().hex}")
        async with a2a_client(second.url, "slow", streaming=True) as on_b:
            events = [event async for event in on_b.subscribe(SubscribeToTaskRequest(id=task_id))]
        return await running, events

    done, events = asyncio.run(main())
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and reply(done) == "rested enough"
    assert events[0].HasField("task") and events[0].task.id == done.id
    assert events[0].task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert events[-1].HasField("status_update"), events[-1]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    relayed = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert relayed and get_artifact_text(relayed[-1]) == "rested enough"


def test_a_v03_resubscribe_on_one_replica_gets_the_run_on_the_other_to_its_end(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    first, second = replicas

    async def main() -> tuple[Task, list[dict[str, Any]]]:
        running, task_id = await started_on(first, second, f"ctx-{uuid.uuid4().hex}")
        body = {"jsonrpc": "2.0", "id": "r1", "method": "tasks/resubscribe", "params": {"id": task_id}}
        results: list[dict[str, Any]] = []
        async with (
            httpx.AsyncClient(timeout=60) as http,
            http.stream(
                "POST", f"{second.url}/agents/slow/", json=body, headers={"Accept": "text/event-stream"}
            ) as sse,
        ):
            assert sse.status_code == 200
            async for line in sse.aiter_lines():  # no A2A-Version header: the v0.3 shapes
                if line.startswith("data:"):
                    results.append(json.loads(line.removeprefix("data:"))["result"])
        return await running, results

    done, results = asyncio.run(main())
    assert results[0]["kind"] == "task" and results[0]["id"] == done.id
    assert results[-1]["kind"] == "status-update" and results[-1]["final"] is True, results[-1]
    assert results[-1]["status"]["state"] == "completed" and results[-1]["taskId"] == done.id


def test_one_audit_chain_holds_both_replicas_records(replicas: tuple[ServerProcess, ServerProcess]) -> None:
    first, second = replicas
    context = f"ctx-{uuid.uuid4().hex}"

    async def main() -> tuple[Task, Task]:
        async with a2a_client(first.url, "twice") as on_a, a2a_client(second.url, "twice") as on_b:
            return await send(on_a, "audited", context), await send(on_b, "audited too", context)

    on_a, on_b = asyncio.run(main())
    verified = [run_ca("audit", "--verify", cwd=server.root) for server in replicas]
    for done in verified:
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("audit log ok: ")
    assert verified[0].stdout == verified[1].stdout  # the same chain, read from either folder
    listed = run_ca("audit", "--json", "--limit", "10000", cwd=first.root)
    assert listed.returncode == 0, listed.stderr
    tasks = {record["task_id"] for record in json.loads(listed.stdout)}
    assert {on_a.id, on_b.id} <= tasks
    assert not (first.root / ".ca" / "audit.db").exists() and not (second.root / ".ca" / "audit.db").exists()
    assert not any((server.root / ".ca" / "conversations.db").exists() for server in (first, second))


def test_an_unreachable_database_stops_serve_with_one_line(tmp_path: Path) -> None:
    root = write_project(
        tmp_path, {"ca.yaml": "store: {url: 'postgresql://ca:hunter2@127.0.0.1:1/nowhere'}\n", **AGENTS}
    )
    done = run_ca("serve", "--port", "0", cwd=root)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "hunter2" not in lines[0], done.stderr
    assert lines[0].startswith("error: cannot use the store postgresql://ca:***@127.0.0.1:1/nowhere (")
