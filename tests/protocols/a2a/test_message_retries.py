"""A client that sends the same message again (same ``messageId``) gets the task the first copy
started, never a second run: on one `ca serve` (SQLite), and across two replicas sharing PostgreSQL.

The agent's one tool call waits a moment and then appends a line to a file, so the file shows
how often the run's side effect happened. The official a2a-sdk client sends every copy.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, new_text_part
from a2a.types import Message, Role, SendMessageConfiguration, SendMessageRequest, Task, TaskState

from framework.runtime.message_claims import STALE_S, MessageClaims, claim_key
from framework.runtime.schema import connect
from tests.conftest import write_project
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

SLOW_APPEND = '''
    import asyncio
    from pathlib import Path


    async def slow_append(text: str) -> str:
        """Wait a moment, then append a line to effects.log: how often it ran is how often the line is there."""
        await asyncio.sleep(1.0)
        with (Path(__file__).parent.parent / "effects.log").open("a") as f:
            f.write(text + "\\n")
        return "appended"
'''

AGENT = """
    name: once
    profile: autonomous
    model:
      provider: scripted
      replies:
        - tool_calls: [{name: slow_append, args: {text: hello}}]
        - appended it
    tools:
      - python: tools/slow.py:slow_append
"""

COMPLETED = TaskState.TASK_STATE_COMPLETED


GREETER = """
    name: greeter
    kind: workflow
    steps:
      - {id: hi, message: "Hello, {{ input }}"}
"""
"""A workflow that answers with a Message: no task keeps the answer."""


def project(root: Path, store: str = "", server: str = "") -> Path:
    ca_yaml = "default_agent: once\n" + (f"store: {{url: {store!r}}}\n" if store else "") + server
    files = {
        "ca.yaml": ca_yaml,
        "agents/once.yaml": AGENT,
        "agents/greeter.yaml": GREETER,
        "tools/slow.py": SLOW_APPEND,
    }
    return write_project(root, files)


@asynccontextmanager
async def a2a_client(server: ServerProcess, *, streaming: bool = False) -> AsyncIterator[Client]:
    """The official client, from the agent's card."""
    async with httpx.AsyncClient(timeout=60) as http:
        config = ClientConfig(streaming=streaming, httpx_client=http, supported_protocol_bindings=["JSONRPC"])
        client = await ClientFactory(config).create_from_url(f"{server.url}/agents/once")
        async with client:
            yield client


def request(message_id: str, *, immediately: bool = False) -> SendMessageRequest:
    message = Message(message_id=message_id, role=Role.ROLE_USER, parts=[new_text_part("write it")])
    return SendMessageRequest(message=message, configuration=SendMessageConfiguration(return_immediately=immediately))


async def send(server: ServerProcess, message_id: str, *, streaming: bool = False, immediately: bool = False) -> Task:
    """Send the message; the last task the answer carried (a stream's events applied: its final state)."""
    last: Task | None = None
    state = None
    async with a2a_client(server, streaming=streaming) as client:
        async for event in client.send_message(request(message_id, immediately=immediately)):
            if event.HasField("task"):
                last = event.task
            elif event.HasField("status_update"):
                state = event.status_update.status.state
    assert last is not None, "no task came back"
    if state is not None:
        last.status.state = state
    return last


def effects(*roots: Path) -> list[str]:
    return [
        line for root in roots if (root / "effects.log").exists() for line in (root / "effects.log").read_text().split()
    ]


def reply(task: Task) -> str:
    return "".join(get_artifact_text(artifact) for artifact in task.artifacts)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServerProcess]:
    server = start_serve(project(tmp_path / "one"))
    yield server
    server.stop()


def test_a_retried_message_answers_with_the_first_task_and_runs_once(served: ServerProcess) -> None:
    message_id = uuid.uuid4().hex

    async def main() -> tuple[Task, Task, Task]:
        first = await send(served, message_id)
        again = await send(served, message_id)
        other = await send(served, uuid.uuid4().hex)  # another message is another task
        return first, again, other

    first, again, other = asyncio.run(main())
    assert (first.status.state, reply(first)) == (COMPLETED, "appended it"), first
    assert (again.id, again.status.state, reply(again)) == (first.id, COMPLETED, "appended it"), again
    assert other.id != first.id and other.status.state == COMPLETED
    assert effects(served.root) == ["hello", "hello"], served.output()  # the first message once, the other once


def test_copies_sent_together_while_the_first_runs_share_one_run(served: ServerProcess) -> None:
    message_id = uuid.uuid4().hex

    async def main() -> list[Task]:
        first = asyncio.create_task(send(served, message_id))
        await asyncio.sleep(0.3)  # the first copy's run is in its tool's wait
        copies = [send(served, message_id), send(served, message_id, streaming=True), send(served, message_id)]
        return [await first, *await asyncio.gather(*copies)]

    tasks = asyncio.run(main())
    assert {task.id for task in tasks} == {tasks[0].id}, tasks
    assert [task.status.state for task in tasks] == [COMPLETED] * 4, tasks  # each copy waited for the end
    assert effects(served.root) == ["hello"], served.output()


def test_a_retry_with_return_immediately_gets_the_running_task_at_once(served: ServerProcess) -> None:
    message_id = uuid.uuid4().hex

    async def main() -> tuple[Task, Task, Task]:
        started = await send(served, message_id, immediately=True)
        again = await send(served, message_id, immediately=True)
        done = await send(served, message_id)
        return started, again, done

    started, again, done = asyncio.run(main())
    assert again.id == started.id and again.status.state == TaskState.TASK_STATE_WORKING, again
    assert done.id == started.id and done.status.state == COMPLETED, done
    assert effects(served.root) == ["hello"]


def test_with_no_retry_window_every_copy_runs(tmp_path: Path) -> None:
    server = start_serve(project(tmp_path / "off", server="server: {retry_window: null}\n"))
    message_id = uuid.uuid4().hex
    try:
        first, again = asyncio.run(send(server, message_id)), asyncio.run(send(server, message_id))
    finally:
        server.stop()
    assert first.id != again.id and again.status.state == COMPLETED
    assert effects(server.root) == ["hello", "hello"]


def test_a_message_answered_with_a_message_is_not_kept_and_a_copy_runs_again(served: ServerProcess) -> None:
    body = {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "Ada"}]}}
    first = served.rpc("SendMessage", body, agent="greeter")
    started = time.monotonic()
    again = served.rpc("SendMessage", body, agent="greeter")
    took = time.monotonic() - started
    for got in (first, again):
        assert got["result"]["message"]["parts"][0]["text"] == "Hello, Ada", got
    with sqlite3.connect(served.root / ".ca" / "tasks.db") as tasks:
        runs = tasks.execute("SELECT count(*) FROM tasks WHERE agent = 'greeter'").fetchone()[0]
    assert runs == 2, runs  # no task keeps a Message: the copy ran again
    assert took < 5, took  # at once, not after the 10 s a claim without any run waits


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with fresh_database("message_retries") as url:
        first = start_serve(project(tmp_path / "a", url))
        try:
            second = start_serve(project(tmp_path / "b", url))
        except BaseException:
            first.stop()
            raise
        try:
            yield first, second
        finally:
            first.stop()
            second.stop()


def test_copies_of_one_message_on_two_replicas_run_once(replicas: tuple[ServerProcess, ServerProcess]) -> None:
    a, b = replicas
    raced, retried = uuid.uuid4().hex, uuid.uuid4().hex

    async def main() -> tuple[list[Task], Task, Task]:
        together = await asyncio.gather(send(a, raced), send(b, raced), send(b, raced, streaming=True))
        first = await send(a, retried)
        again = await send(b, retried)  # the client's retry reached the other replica
        return list(together), first, again

    together, first, again = asyncio.run(main())
    assert {task.id for task in together} == {together[0].id}, together
    assert [task.status.state for task in together] == [COMPLETED] * 3, together
    assert again.id == first.id and again.status.state == COMPLETED and reply(again) == "appended it", again
    assert effects(a.root, b.root) == ["hello", "hello"], f"{a.output()}\n{b.output()}"  # one per message


def test_a_claim_whose_task_never_appeared_is_taken_over_once_stale(tmp_path: Path) -> None:
    db = connect(tmp_path)
    claims = MessageClaims(db, 86400)
    key = claim_key("once", "alice", "m-1")

    async def main() -> tuple[tuple[str, datetime], tuple[str, datetime], bool, bool, bool]:
        first = await claims.aclaim(key, "task-dead")
        second = await claims.aclaim(key, "task-retry")
        early = await claims.atake_over(key, "task-dead", "task-retry")  # the first may still be starting
        old = (datetime.now(UTC) - timedelta(seconds=STALE_S + 1)).isoformat(timespec="microseconds")
        await db.aexecute("UPDATE message_claims SET created_at = ? WHERE key = ?", (old, key))
        taken = await claims.atake_over(key, "task-dead", "task-retry")
        twice = await claims.atake_over(key, "task-dead", "task-third")  # another retry lost the race
        return first, second, early, taken, twice

    try:
        first, second, early, taken, twice = asyncio.run(main())
        holder = db.execute("SELECT task_id FROM message_claims WHERE key = ?", (key,)).rows
    finally:
        db.close()
    assert first[0] == "task-dead" and second[0] == "task-dead"
    assert (early, taken, twice) == (False, True, False)
    assert holder == [("task-retry",)]
    assert claim_key("once", "bob", "m-1") != key and claim_key("other", "alice", "m-1") != key


def test_a_copy_sent_after_the_retry_window_is_a_new_message(tmp_path: Path) -> None:
    db = connect(tmp_path)
    claims = MessageClaims(db, 60)
    key = claim_key("once", "alice", "m-2")

    async def main() -> tuple[str, str, str]:
        first, _ = await claims.aclaim(key, "task-1")
        within, _ = await claims.aclaim(key, "task-2")
        old = (datetime.now(UTC) - timedelta(seconds=61)).isoformat(timespec="microseconds")
        await db.aexecute("UPDATE message_claims SET created_at = ? WHERE key = ?", (old, key))
        after, _ = await claims.aclaim(key, "task-3")
        return first, within, after

    try:
        assert asyncio.run(main()) == ("task-1", "task-1", "task-3")
    finally:
        db.close()
