"""A client that sends the same message again (same ``messageId``) gets the task the first copy
started, never a second run: on one `ca serve` (SQLite), and across two replicas sharing PostgreSQL.

The agent's one tool call waits a moment and then appends a line to a file, so the file shows
how often the run's side effect happened. The official a2a-sdk client sends every copy.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.helpers import get_artifact_text, new_text_part
from a2a.types import Message, Role, SendMessageConfiguration, SendMessageRequest, Task, TaskState

from framework.runtime.message_claims import STALE_S, MessageClaims, claim_key
from framework.runtime.schema import connect
from tests.a2a_peers import StdioPeer, a2a_client
from tests.conftest import write_project
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, serving, start_serve

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


APPEND_THEN_NAP = '''
    import asyncio
    from pathlib import Path


    async def append_then_nap(text: str) -> str:
        """Append a line to effects.log, then take a long nap (a process killed meanwhile leaves the line)."""
        with (Path(__file__).parent.parent / "effects.log").open("a") as f:
            f.write(text + "\\n")
        await asyncio.sleep(30)
        return "rested"
'''

CRASHY = """
    name: crashy
    profile: autonomous
    model:
      provider: scripted
      replies:
        - tool_calls: [{name: append_then_nap, args: {text: crashy}}]
        - rested
    tools:
      - python: tools/nap_after.py:append_then_nap
"""

FLOW = """
    name: flow
    kind: workflow
    capabilities: {agents: [crashy]}
    steps:
      - {id: work, agent: crashy}
      - {id: said, message: "crashy said {{ steps.work.output }}"}
"""
"""A workflow that may answer with a Message, so its task shows only when its run ends."""


def project(root: Path, store: str = "", server: str = "") -> Path:
    ca_yaml = "default_agent: once\n" + (f"store: {{url: {store!r}}}\n" if store else "") + server
    files = {
        "ca.yaml": ca_yaml,
        "agents/once.yaml": AGENT,
        "agents/greeter.yaml": GREETER,
        "agents/crashy.yaml": CRASHY,
        "agents/flow.yaml": FLOW,
        "tools/slow.py": SLOW_APPEND,
        "tools/nap_after.py": APPEND_THEN_NAP,
    }
    return write_project(root, files)


def request(message_id: str, *, immediately: bool = False) -> SendMessageRequest:
    message = Message(message_id=message_id, role=Role.ROLE_USER, parts=[new_text_part("write it")])
    return SendMessageRequest(message=message, configuration=SendMessageConfiguration(return_immediately=immediately))


async def send(server: ServerProcess, message_id: str, *, streaming: bool = False, immediately: bool = False) -> Task:
    """Send the message; the last task the answer carried (a stream's events applied: its final state)."""
    last: Task | None = None
    state = None
    async with a2a_client(server.url, "once", streaming=streaming) as client:
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


def _body(message_id: str, text: str = "write it", **configuration: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}
    if configuration:
        body["configuration"] = configuration
    return body


def test_a_copy_after_a_crash_mid_run_of_a_late_showing_workflow_gets_the_failed_task(tmp_path: Path) -> None:
    root = project(tmp_path / "crash")
    server = start_serve(root)
    message_id = uuid.uuid4().hex
    answers: list[Any] = []
    try:
        sender = threading.Thread(target=lambda: answers.append(_quietly(server, _body(message_id))))
        sender.start()
        deadline = time.monotonic() + 60
        while not effects(root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert effects(root) == ["crashy"], server.output()
    finally:
        server.stop(signal.SIGKILL)
    sender.join(timeout=30)
    restarted = start_serve(root)
    try:
        copy = restarted.rpc("SendMessage", _body(message_id), agent="flow")
        again = restarted.rpc("GetTask", {"id": copy["result"]["task"]["id"]}, agent="flow")
    finally:
        restarted.stop()
    task = copy["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED", copy  # the run that died, not a second one
    assert "stopped while this task was running" in json.dumps(task["status"]), task
    assert again["result"]["status"]["state"] == "TASK_STATE_FAILED", again  # and GetTask shows it from now on
    assert effects(root) == ["crashy"]  # the side effect ran once


def _quietly(server: ServerProcess, body: dict[str, Any]) -> Any:
    try:
        return server.rpc("SendMessage", body, agent="flow")
    except httpx.TransportError as exc:  # the server was killed under the request
        return exc


def test_a_copy_in_another_process_on_the_same_files_follows_the_run_to_its_end(tmp_path: Path) -> None:
    root = project(tmp_path / "two")
    first, second = StdioPeer(root, "once"), StdioPeer(root, "once")
    message_id = uuid.uuid4().hex
    try:
        first.send({"jsonrpc": "2.0", "id": "a", "method": "SendMessage", "params": _body(message_id)})
        deadline = time.monotonic() + 60
        while not (root / ".ca" / "tasks.db").exists() or not _claimed(root):
            assert time.monotonic() < deadline, first.stderr()
            time.sleep(0.05)
        copy = second.request("SendMessage", _body(message_id), timeout=30)
        original = first.answer("a", timeout=30)
    finally:
        first.kill()
        second.kill()
    assert copy["result"]["task"]["id"] == original["result"]["task"]["id"], (copy, original)
    assert copy["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", copy
    assert effects(root) == ["hello"]


def _claimed(root: Path) -> bool:
    with sqlite3.connect(root / ".ca" / "tasks.db") as tasks:
        try:
            return bool(tasks.execute("SELECT count(*) FROM message_claims").fetchone()[0])
        except sqlite3.OperationalError:  # the table is not made yet
            return False


def test_a_refused_request_gives_its_claim_back_and_another_message_under_its_id_is_refused(
    served: ServerProcess,
) -> None:
    message_id = uuid.uuid4().hex
    refused = served.rpc("SendMessage", _body(message_id, historyLength=-1), agent="once")
    started = time.monotonic()
    corrected = served.rpc("SendMessage", _body(message_id), agent="once")
    took = time.monotonic() - started
    other = served.rpc("SendMessage", _body(message_id, "something else"), agent="once")
    assert refused["error"]["code"] == -32602, refused
    assert corrected["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", corrected
    assert took < 8, took  # it ran at once (1 s of tool), not after a stale claim's 10 s
    assert other["error"]["code"] == -32602 and "already sent with another message" in other["error"]["message"]
    assert effects(served.root) == ["hello"]


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    with (
        fresh_database("message_retries") as url,
        serving(project(tmp_path / "a", url), project(tmp_path / "b", url)) as (
            first,
            second,
        ),
    ):
        yield first, second


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

    async def main() -> tuple[str, str, bool, bool, bool]:
        first = await claims.aclaim(key, "task-dead", "d")
        second = await claims.aclaim(key, "task-retry", "d")
        early = await claims.atake_over(key, "task-dead", "task-retry", "d")  # the first may still be starting
        old = (datetime.now(UTC) - timedelta(seconds=STALE_S + 1)).isoformat(timespec="microseconds")
        await db.aexecute("UPDATE message_claims SET created_at = ? WHERE key = ?", (old, key))
        taken = await claims.atake_over(key, "task-dead", "task-retry", "d")
        twice = await claims.atake_over(key, "task-dead", "task-third", "d")  # another retry lost the race
        return first.task_id, second.task_id, early, taken, twice

    try:
        first, second, early, taken, twice = asyncio.run(main())
        holder = db.execute("SELECT task_id FROM message_claims WHERE key = ?", (key,)).rows
    finally:
        db.close()
    assert first == "task-dead" and second == "task-dead"
    assert (early, taken, twice) == (False, True, False)
    assert holder == [("task-retry",)]
    assert claim_key("once", "bob", "m-1") != key and claim_key("other", "alice", "m-1") != key
    assert len(claim_key("once", "alice", "m" * 100_000)) == 64  # any messageId fits the index


def test_a_copy_sent_after_the_retry_window_is_a_new_message_and_old_claims_are_pruned(tmp_path: Path) -> None:
    db = connect(tmp_path)
    claims = MessageClaims(db, 60)
    key = claim_key("once", "alice", "m-2")

    async def main() -> tuple[str, str, str, int, int]:
        first = await claims.aclaim(key, "task-1", "d")
        within = await claims.aclaim(key, "task-2", "d")
        old = (datetime.now(UTC) - timedelta(seconds=61)).isoformat(timespec="microseconds")
        await db.aexecute("UPDATE message_claims SET created_at = ? WHERE key = ?", (old, key))
        after = await claims.aclaim(key, "task-3", "d")
        kept = await claims.aprune()  # the new claim is young
        await db.aexecute("UPDATE message_claims SET created_at = ? WHERE key = ?", (old, key))
        pruned = await claims.aprune()
        return first.task_id, within.task_id, after.task_id, kept, pruned

    try:
        assert asyncio.run(main()) == ("task-1", "task-1", "task-3", 0, 1)
    finally:
        db.close()
