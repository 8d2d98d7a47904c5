"""WriteBehindTaskStore: what reaches the database when, and what GetTask answers meanwhile.

"Durable" is checked through a second DatabaseTaskStore on the same SQLite file, as a server
started after a crash would read it. Every test runs over both stores ``ca serve`` puts behind
it: a2a-sdk's DatabaseTaskStore (other databases) and SqliteTaskStore (SQLite).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import DatabaseTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    Artifact,
    ListTasksRequest,
    Message,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
    TaskStatus,
)
from sqlalchemy.ext.asyncio import create_async_engine

from framework.protocols.a2a.http import write_lagging
from framework.protocols.a2a.task_store import SqliteTaskStore, WriteBehindTaskStore
from framework.runtime.tasks import TaskStore

CALLER = ServerCallContext()
SUBMITTED, WORKING = TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING
INPUT_REQUIRED, COMPLETED = TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_COMPLETED


class Named(User):
    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.name


def database(path: Path) -> DatabaseTaskStore:
    return DatabaseTaskStore(create_async_engine(f"sqlite+aiosqlite:///{path}"))


def task(state: TaskState, *, reply: str = "", task_id: str = "t1") -> Task:
    made = Task(id=task_id, context_id="c1", status=TaskStatus(state=state))
    if reply:
        made.artifacts.append(Artifact(artifact_id="reply", parts=[new_text_part(reply)]))
    return made


@pytest.fixture(params=["database", "sqlite"])
def inner(request: pytest.FixtureRequest) -> str:
    """Which store the WriteBehindTaskStore under test wraps."""
    return str(request.param)


def inner_store(kind: str, path: Path) -> DatabaseTaskStore:
    if kind == "sqlite":
        return SqliteTaskStore(create_async_engine(f"sqlite+aiosqlite:///{path}"), path)
    return database(path)


def run(
    tmp_path: Path, body: Callable[[WriteBehindTaskStore, DatabaseTaskStore], Awaitable[None]], kind: str = "database"
) -> None:
    """``body(store, reader)``: the store under test and a second store reading the same file."""

    async def main() -> None:
        inner, reader = inner_store(kind, tmp_path / "state.db"), database(tmp_path / "state.db")
        store = WriteBehindTaskStore(inner, interval=60)  # no background flush unless a test asks
        await store.initialize()
        try:
            await body(store, reader)
        finally:
            await store.close()
            await inner.engine.dispose()
            await reader.engine.dispose()

    asyncio.run(main())


async def state_in_database(reader: DatabaseTaskStore, task_id: str = "t1") -> Any:
    stored = await reader.get(task_id, CALLER)
    return None if stored is None else stored.status.state


def test_the_first_save_is_in_the_database_when_save_returns(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)
        assert await state_in_database(reader) == SUBMITTED

    run(tmp_path, body, inner)


def test_a_new_task_is_found_from_its_first_save_and_only_its_setup_skips_the_database(
    tmp_path: Path, inner: str
) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        with store.new("t1", CALLER):
            assert await store.get("t1", CALLER) is None
            await store.save(task(SUBMITTED), CALLER)
            found = await store.get("t1", CALLER)
            assert found is not None and found.status.state == SUBMITTED
        with store.new("t2", CALLER):
            assert await store.get("t2", CALLER) is None  # a request that never saved its task
        await reader.save(task(COMPLETED, task_id="t2"), CALLER)  # e.g. written by another process later
        found = await store.get("t2", CALLER)
        assert found is not None and found.status.state == COMPLETED

    run(tmp_path, body, inner)


def test_intermediate_states_are_held_but_get_answers_the_latest(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)
        await store.save(task(WORKING, reply="partial"), CALLER)
        assert await state_in_database(reader) == SUBMITTED
        latest = await store.get("t1", CALLER)
        assert latest is not None and latest.status.state == WORKING
        assert latest.artifacts[0].parts[0].text == "partial"

    run(tmp_path, body, inner)


def test_input_required_is_durable_when_save_returns(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)
        await store.save(task(WORKING), CALLER)
        waiting = task(INPUT_REQUIRED)
        waiting.status.message.CopyFrom(
            Message(message_id="m1", role=Role.ROLE_AGENT, parts=[new_text_part("approve?")])
        )
        await store.save(waiting, CALLER)
        stored = await reader.get("t1", CALLER)
        assert stored is not None and stored.status.state == INPUT_REQUIRED
        assert stored.status.message.parts[0].text == "approve?"

    run(tmp_path, body, inner)


def test_a_terminal_state_is_durable_when_save_returns(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)
        await store.save(task(WORKING, reply="par"), CALLER)
        await store.save(task(COMPLETED, reply="partial done"), CALLER)
        stored = await reader.get("t1", CALLER)
        assert stored is not None and stored.status.state == COMPLETED
        assert stored.artifacts[0].parts[0].text == "partial done"

    run(tmp_path, body, inner)


def test_a_held_state_reaches_the_database_within_the_interval(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        store.interval = 0.05
        await store.save(task(SUBMITTED), CALLER)
        await store.save(task(WORKING), CALLER)
        assert await state_in_database(reader) == SUBMITTED
        await asyncio.sleep(0.5)
        assert await state_in_database(reader) == WORKING

    run(tmp_path, body, inner)


def test_close_writes_what_is_held_and_later_saves_write_through(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)
        await store.save(task(WORKING), CALLER)
        await store.close()
        assert await state_in_database(reader) == WORKING
        await store.save(task(SUBMITTED, task_id="t2"), CALLER)
        await store.save(task(WORKING, task_id="t2"), CALLER)
        assert await state_in_database(reader, "t2") == WORKING

    run(tmp_path, body, inner)


def test_list_shows_the_latest_states(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)
        await store.save(task(WORKING), CALLER)
        listed = await store.list(ListTasksRequest(), CALLER)
        assert [(t.id, t.status.state) for t in listed.tasks] == [("t1", WORKING)]

    run(tmp_path, body, inner)


def test_a_held_task_is_seen_only_by_its_owner(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        alice, bob = ServerCallContext(user=Named("alice")), ServerCallContext(user=Named("bob"))
        await store.save(task(SUBMITTED), alice)
        await store.save(task(WORKING), alice)
        assert await store.get("t1", bob) is None
        mine = await store.get("t1", alice)
        assert mine is not None and mine.status.state == WORKING

    run(tmp_path, body, inner)


def test_changing_a_saved_or_returned_task_changes_nothing_stored(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)
        working = task(WORKING)
        await store.save(working, CALLER)
        working.status.state = COMPLETED  # the SDK mutates the task it saved
        answered = await store.get("t1", CALLER)
        assert answered is not None and answered.status.state == WORKING
        answered.status.state = COMPLETED
        again = await store.get("t1", CALLER)
        assert again is not None and again.status.state == WORKING

    run(tmp_path, body, inner)


# -- through a2a-sdk's request handler ------------------------------------------------------


class Chunky(AgentExecutor):
    """Task, WORKING, two reply chunks, then the whole reply and COMPLETED (or INPUT_REQUIRED)."""

    def __init__(self, final: TaskState) -> None:
        self.final = final

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        await event_queue.enqueue_event(
            Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=SUBMITTED),
                history=[context.message] if context.message else [],
            )
        )
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        await updater.add_artifact([new_text_part("he")], artifact_id="reply", name="reply")
        await updater.add_artifact([new_text_part("llo")], artifact_id="reply", name="reply", append=True)
        await updater.add_artifact([new_text_part("hello")], artifact_id="reply", name="reply", last_chunk=True)
        if self.final == COMPLETED:
            await updater.complete()
        else:
            await updater.requires_input(updater.new_agent_message([new_text_part("approve?")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def send_through_handler(tmp_path: Path, inner: str, final: TaskState) -> tuple[Task, Task | None]:
    """SendMessage through DefaultRequestHandler; the answer and the task as the database holds it then."""
    card = AgentCard(
        name="chunky",
        description="d",
        version="1",
        supported_interfaces=[AgentInterface(url="http://x/", protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
    )
    result: dict[str, Any] = {}

    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        handler = DefaultRequestHandler(Chunky(final), store, card)
        message = Message(message_id="m1", role=Role.ROLE_USER, parts=[new_text_part("hi")], context_id="c1")
        answer = await handler.on_message_send(SendMessageRequest(message=message), CALLER)
        assert isinstance(answer, Task)
        result["answer"], result["stored"] = answer, await reader.get(answer.id, CALLER)
        await handler.aclose()

    run(tmp_path, body, inner)
    return result["answer"], result["stored"]


def test_send_message_answers_only_once_the_completed_task_is_durable(tmp_path: Path, inner: str) -> None:
    answer, stored = send_through_handler(tmp_path, inner, COMPLETED)
    assert answer.status.state == COMPLETED
    assert stored is not None and stored.status.state == COMPLETED
    assert [p.text for p in stored.artifacts[0].parts] == ["hello"]
    assert stored.history[0].parts[0].text == "hi"


def test_send_message_answers_only_once_the_waiting_task_is_durable(tmp_path: Path, inner: str) -> None:
    answer, stored = send_through_handler(tmp_path, inner, INPUT_REQUIRED)
    assert answer.status.state == INPUT_REQUIRED
    assert stored is not None and stored.status.state == INPUT_REQUIRED
    assert stored.status.message.parts[0].text == "approve?"


# -- SqliteTaskStore writes and reads the SDK's rows -------------------------------------------


def full_task(task_id: str) -> Task:
    made = task(COMPLETED, reply="héllo", task_id=task_id)
    made.history.append(Message(message_id="m1", role=Role.ROLE_USER, parts=[new_text_part("hi ✓")]))
    made.status.message.CopyFrom(Message(message_id="m2", role=Role.ROLE_AGENT, parts=[new_text_part("done")]))
    made.status.timestamp.FromMicroseconds(1_767_225_600_000_000)  # a whole second: no fraction to print
    made.metadata.update({"stop_reason": "end_turn", "usage": {"input_tokens": 3}})
    return made


def test_every_row_has_a_time_so_a_row_left_running_is_found_once_stale(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)  # as a2a-sdk saves a new task: its status has no time
        await reader.save(task(SUBMITTED, task_id="old"), CALLER)  # a row written before rows had times
        stored = await reader.get("t1", CALLER)
        assert stored is not None and stored.status.HasField("timestamp")
        now = datetime.now(UTC).replace(tzinfo=None)
        assert await store.stale_running(now - timedelta(seconds=60)) == (("old", "", False),)
        assert sorted(await store.stale_running(now + timedelta(seconds=1))) == [("old", "", False), ("t1", "", True)]
        await store.save(task(COMPLETED), CALLER)
        assert await store.stale_running(now + timedelta(seconds=1)) == (("old", "", False),)

    run(tmp_path, body, inner)


def test_a_status_is_stamped_once_and_keeps_its_time_while_it_does_not_change(tmp_path: Path, inner: str) -> None:
    async def body(store: WriteBehindTaskStore, reader: DatabaseTaskStore) -> None:
        await store.save(task(SUBMITTED), CALLER)
        first = await store.get("t1", CALLER)
        await asyncio.sleep(0.01)
        await store.save(task(SUBMITTED, reply="partial"), CALLER)  # an artifact: the status is as it was
        later = await store.get("t1", CALLER)
        assert first is not None and later is not None
        assert later.status == first.status  # the same time: a subscriber elsewhere sees no new status
        await store.flush()
        stored = await reader.get("t1", CALLER)
        assert stored is not None and stored.status == first.status and stored.artifacts

    run(tmp_path, body, inner)


def test_a_sweep_writes_a_row_left_running_only_once_its_record_ended_a_lease_ago(tmp_path: Path) -> None:
    # The record's own server writes the whole row (reply, usage) just after the record: a sweep that
    # wrote it from the record first could be overwritten, or overwrite it, with less.
    records = TaskStore.open(tmp_path, lease=15)
    long_ago = datetime.now(UTC) - timedelta(minutes=5)

    async def main() -> None:
        path = tmp_path / "state.db"
        inner, reader = inner_store("sqlite", path), database(path)
        store = WriteBehindTaskStore(inner, records=records.afind, interval=60)
        await store.initialize()
        try:
            left = task(SUBMITTED)
            left.status.timestamp.FromDatetime(long_ago)
            await store.save(left, CALLER)
            records.create(agent="echo", conversation="c1", source="a2a-http", input="hi", task_id="t1")
            records.update("t1", state="completed", output="done")
            await write_lagging(records, store)
            assert await state_in_database(reader) == SUBMITTED  # ended just now: its server writes the row
            records.db.execute("UPDATE tasks SET updated_at = ? WHERE id = ?", (long_ago.isoformat(), "t1"))
            await write_lagging(records, store)
            assert await state_in_database(reader) == COMPLETED
        finally:
            await store.close()
            await inner.engine.dispose()
            await reader.engine.dispose()

    try:
        asyncio.run(main())
    finally:
        records.close()


def test_sqlite_store_rows_are_the_sdk_rows_both_ways(tmp_path: Path) -> None:
    async def main() -> None:
        path = tmp_path / "state.db"
        ours, sdk = SqliteTaskStore(create_async_engine(f"sqlite+aiosqlite:///{path}"), path), database(path)
        await ours.initialize()
        try:
            await ours.save(full_task("ours"), CALLER)
            await sdk.save(full_task("sdk"), CALLER)
            await sdk.save(task(SUBMITTED, task_id="bare"), CALLER)  # no metadata, no timestamp
            assert await sdk.get("ours", CALLER) == full_task("ours")
            assert await ours.get("sdk", CALLER) == full_task("sdk")
            assert await ours.get("bare", CALLER) == task(SUBMITTED, task_id="bare")
            with sqlite3.connect(path) as raw:  # the same text, so ListTasks orders and pages alike
                rows = dict(raw.execute("SELECT id, last_updated || status || metadata FROM tasks").fetchall())
            assert rows["ours"] == rows["sdk"]
            listed = await sdk.list(ListTasksRequest(status=COMPLETED), CALLER)
            assert sorted(t.id for t in listed.tasks) == ["ours", "sdk"]
            await ours.save(task(WORKING, task_id="sdk"), CALLER)  # an update of a row the SDK wrote
            assert await sdk.get("sdk", CALLER) == task(WORKING, task_id="sdk")
            assert await ours.get("ours", ServerCallContext(user=Named("bob"))) is None
        finally:
            ours.close()
            await ours.engine.dispose()
            await sdk.engine.dispose()

    asyncio.run(main())
