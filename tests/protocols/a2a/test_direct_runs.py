"""A SendMessage or SendStreamingMessage that starts a task runs without a2a-sdk's active task
(framework.protocols.a2a.direct): what a2a-sdk gives every other run — cancel, subscribe, a client that goes
away, a failing executor — holds for it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from a2a.client import Client
from a2a.helpers.proto_helpers import get_artifact_text, get_data_parts, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)

from framework.protocols.a2a.direct import DirectRun
from tests.a2a_peers import a2a_client
from tests.conftest import NAP, NAPPER, SIDE_EFFECT, run_ca, write_project, writer_agent
from tests.serving import ServerProcess, start_serve

PROJECT = {
    "ca.yaml": "default_agent: napper\n",
    "agents/napper.yaml": NAPPER,
    "agents/dozer.yaml": """
        name: dozer
        profile: autonomous
        model:
          provider: scripted
          replies:
            - tool_calls: [{name: nap, args: {seconds: 1.5}}]
            - awake again
        tools:
          - python: tools/nap.py:nap
    """,
    "agents/writer.yaml": writer_agent("writer", "written.log"),
    "tools/nap.py": NAP,
    "tools/side.py": SIDE_EFFECT,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = write_project(tmp_path_factory.mktemp("project"), PROJECT)
    srv: ServerProcess = start_serve(root, logs=tmp_path_factory.mktemp("logs"))
    try:
        yield srv
    finally:
        srv.stop()
    srv.assert_clean_exit()


def user_message(text: str, context_id: str) -> Message:
    return Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[new_text_part(text)], context_id=context_id)


async def blocking_send(client: Client, message: Message) -> Task:
    request = SendMessageRequest(message=message, configuration=SendMessageConfiguration(return_immediately=False))
    [response] = [r async for r in client.send_message(request)]
    assert response.HasField("task"), response
    return response.task


async def streamed(client: Client, message: Message) -> AsyncIterator[StreamResponse]:
    """The events of a SendStreamingMessage (``client`` made with streaming=True)."""
    async for response in client.send_message(SendMessageRequest(message=message)):
        yield response


async def napping(client: Client, context_id: str) -> Task:
    """The task of the blocking send in ``context_id``, once it runs its tool (ListTasks, then GetTask)."""
    deadline = time.monotonic() + 20
    while True:
        listed = await client.list_tasks(ListTasksRequest(context_id=context_id))
        if listed.tasks:
            task = await client.get_task(GetTaskRequest(id=listed.tasks[0].id))
            if task.status.state == TaskState.TASK_STATE_WORKING and get_data_parts(list(task.status.message.parts)):
                return task
        assert time.monotonic() < deadline, "the blocking send's task never showed its tool call"
        await asyncio.sleep(0.05)


def recorded_state(server: ServerProcess, task_id: str) -> str:
    """The state of the task's record, as ``ca tasks list`` shows it."""
    listed = run_ca("tasks", "list", "--json", cwd=server.root)
    assert listed.returncode == 0, listed.stderr
    states: dict[str, str] = {t["id"]: t["state"] for t in json.loads(listed.stdout)}
    return states[task_id]


@pytest.mark.e2e
def test_cancel_task_stops_a_blocking_send_and_its_client_is_answered_canceled(server: ServerProcess) -> None:
    async def main() -> tuple[Task, Task, Task, float]:
        async with a2a_client(server.url, "napper") as sender, a2a_client(server.url, "napper") as canceler:
            context = uuid.uuid4().hex
            waiting = asyncio.create_task(blocking_send(sender, user_message("nap", context)))
            started = await napping(canceler, context)
            t0 = time.monotonic()
            canceled = await canceler.cancel_task(CancelTaskRequest(id=started.id))
            answered = await asyncio.wait_for(waiting, 10)
            elapsed = time.monotonic() - t0
            return canceled, answered, await canceler.get_task(GetTaskRequest(id=started.id)), elapsed

    canceled, answered, after, elapsed = asyncio.run(main())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert answered.id == canceled.id and answered.status.state == TaskState.TASK_STATE_CANCELED
    assert after.status.state == TaskState.TASK_STATE_CANCELED
    assert elapsed < 5, f"the 20 s nap was not stopped: the blocking client waited {elapsed:.1f} s"
    assert (server.root / "nap-interrupted").exists(), "the tool was not stopped: the graph still runs"
    assert recorded_state(server, after.id) == "canceled"


@pytest.mark.e2e
def test_a_blocking_send_whose_client_went_away_runs_to_its_end(server: ServerProcess) -> None:
    context = uuid.uuid4().hex
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "doze"}]}
            | {"contextId": context}
        },
    }
    with pytest.raises(httpx.ReadTimeout):  # the client gives up (and closes its connection) mid-nap
        httpx.post(f"{server.url}/agents/dozer/", json=body, headers={"A2A-Version": "1.0"}, timeout=0.5)

    async def main() -> Task:
        async with a2a_client(server.url, "dozer") as client:
            deadline = time.monotonic() + 20
            while True:
                listed = await client.list_tasks(ListTasksRequest(context_id=context, include_artifacts=True))
                if listed.tasks and listed.tasks[0].status.state == TaskState.TASK_STATE_COMPLETED:
                    done: Task = listed.tasks[0]
                    return done
                assert time.monotonic() < deadline, listed
                await asyncio.sleep(0.1)

    done = asyncio.run(main())
    assert [get_artifact_text(a) for a in done.artifacts] == ["awake again"]


@pytest.mark.e2e
def test_another_client_follows_a_blocking_send_to_its_end(server: ServerProcess) -> None:
    async def main() -> tuple[list[StreamResponse], Task]:
        async with (
            a2a_client(server.url, "dozer") as sender,
            a2a_client(server.url, "dozer", streaming=True) as watcher,
        ):
            context = uuid.uuid4().hex
            waiting = asyncio.create_task(blocking_send(sender, user_message("doze", context)))
            started = await napping(sender, context)
            events = [e async for e in watcher.subscribe(SubscribeToTaskRequest(id=started.id))]
            return events, await asyncio.wait_for(waiting, 20)

    events, answered = asyncio.run(main())
    assert events[0].HasField("task") and events[0].task.id == answered.id
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert answered.status.state == TaskState.TASK_STATE_COMPLETED
    [artifact] = answered.artifacts
    assert get_artifact_text(artifact) == "awake again"


async def announced(context: RequestContext, event_queue: EventQueue) -> TaskUpdater:
    """Announce the request's task (submitted); its updater."""
    task_id, context_id = context.task_id or "", context.context_id or ""
    await event_queue.enqueue_event(
        Task(id=task_id, context_id=context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
    )
    return TaskUpdater(event_queue, task_id, context_id)


class Breaks(AgentExecutor):
    """Announces its task, then fails in a way no one handled (a bug in an executor)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await (await announced(context, event_queue)).start_work()
        raise RuntimeError("the executor broke")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise AssertionError("not canceled")


def test_an_executor_that_raises_leaves_its_task_failed_and_the_client_gets_the_error() -> None:
    async def main() -> Task | None:
        rows = InMemoryTaskStore()
        call = ServerCallContext()
        request = RequestContext(call_context=call, task_id="t-1", context_id="c-1")
        runs: dict[str, DirectRun] = {}
        with pytest.raises(RuntimeError, match="the executor broke"):
            await DirectRun(Breaks(), rows, request, runs).answer()
        assert runs == {}, "an ended run is still listed for CancelTask"
        return await rows.get("t-1", call)

    stored = asyncio.run(main())
    assert stored is not None and stored.status.state == TaskState.TASK_STATE_FAILED


@pytest.mark.e2e
def test_a_blocking_send_that_paused_is_canceled_for_good(server: ServerProcess) -> None:
    async def main() -> tuple[Task, Task, Task, str]:
        async with a2a_client(server.url, "writer") as client:
            paused = await blocking_send(client, user_message("write it", uuid.uuid4().hex))
            canceled = await client.cancel_task(CancelTaskRequest(id=paused.id))
            after = await client.get_task(GetTaskRequest(id=paused.id))
            approve = Message(
                message_id=uuid.uuid4().hex,
                role=Role.ROLE_USER,
                parts=[Part(text="approve")],
                task_id=paused.id,
                context_id=paused.context_id,
            )
            try:
                await blocking_send(client, approve)
                refused = ""
            except Exception as exc:  # the SDK client raises the server's JSON-RPC error
                refused = str(exc)
            return paused, canceled, after, refused

    paused, canceled, after, refused = asyncio.run(main())
    assert paused.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert after.status.state == TaskState.TASK_STATE_CANCELED, "GetTask shows the task waiting again"
    assert "terminal state" in refused, refused
    assert not (server.root / "written.log").exists(), "the canceled task's approval still ran its tool"
    assert recorded_state(server, paused.id) == "canceled"


@pytest.mark.e2e
def test_a_message_to_a_running_blocking_send_waits_for_its_run(server: ServerProcess) -> None:
    async def main() -> tuple[Task, str, float]:
        async with a2a_client(server.url, "dozer") as sender, a2a_client(server.url, "dozer") as other:
            context = uuid.uuid4().hex
            waiting = asyncio.create_task(blocking_send(sender, user_message("doze", context)))
            started = await napping(other, context)
            napping_at = time.monotonic()  # its 1.5 s nap has just begun
            again = user_message("are you awake?", context)
            again.task_id = started.id
            try:
                await blocking_send(other, again)
                refused = ""
            except Exception as exc:
                refused = str(exc)
            refused_at = time.monotonic()
            first = await waiting
            return first, refused, refused_at - napping_at

    first, refused, held = asyncio.run(main())
    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(a) for a in first.artifacts] == ["awake again"]
    assert "terminal state" in refused, f"the message to a running task was not held until it ended: {refused!r}"
    assert held >= 1.0, f"the message to the running task was answered {held:.2f} s into a 1.5 s nap"


class EndsThenLingers(AgentExecutor):
    """Completes its task, then is still busy (releasing what it held) when a cancel arrives."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.release = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await (await announced(context, event_queue)).complete()
        self.done.set()
        await self.release.wait()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise AssertionError("an ended task's run was canceled")


def test_a_cancel_that_comes_as_the_run_ends_leaves_the_task_completed() -> None:
    async def main() -> tuple[Task, Message | Task, Task | None]:
        rows = InMemoryTaskStore()
        call = ServerCallContext()
        executor = EndsThenLingers()
        run = DirectRun(executor, rows, RequestContext(call_context=call, task_id="t-2", context_id="c-2"), {})
        answering = asyncio.create_task(run.answer())
        await executor.done.wait()
        canceled = await run.cancel(call)
        executor.release.set()
        return canceled, await answering, await rows.get("t-2", call)

    canceled, answered, stored = asyncio.run(main())
    assert canceled.status.state == TaskState.TASK_STATE_COMPLETED
    assert isinstance(answered, Task) and answered.status.state == TaskState.TASK_STATE_COMPLETED
    assert stored is not None and stored.status.state == TaskState.TASK_STATE_COMPLETED


def states(events: list[StreamResponse]) -> list[str]:
    """What each event of a stream is: the task's state, a status update's, or "artifact"."""
    said = []
    for event in events:
        if event.HasField("task"):
            said.append(TaskState.Name(event.task.status.state))
        elif event.HasField("status_update"):
            said.append(TaskState.Name(event.status_update.status.state))
        else:
            said.append(event.WhichOneof("payload") or "?")
    return said


@pytest.mark.e2e
def test_a_streaming_send_and_a_second_subscriber_both_follow_it_to_its_end(server: ServerProcess) -> None:
    async def main() -> tuple[list[StreamResponse], list[StreamResponse], Task]:
        async with (
            a2a_client(server.url, "dozer", streaming=True) as sender,
            a2a_client(server.url, "dozer", streaming=True) as watcher,
        ):
            events: list[StreamResponse] = []
            async for event in streamed(sender, user_message("doze", uuid.uuid4().hex)):
                events.append(event)
                if len(events) == 1:  # it has told the task's id: another client follows it
                    task_id = event.task.id
                    watching = asyncio.create_task(_subscribed(watcher, task_id))
            return events, await asyncio.wait_for(watching, 20), await sender.get_task(GetTaskRequest(id=task_id))

    events, watched, stored = asyncio.run(main())
    said = states(events)
    assert said[0] == "TASK_STATE_SUBMITTED" and events[0].task.history[0].parts[0].text == "doze", said
    assert "TASK_STATE_WORKING" in said and said[-1] == "TASK_STATE_COMPLETED", said
    assert "artifact_update" in said, f"the reply was not streamed: {said}"
    assert states(watched)[-1] == "TASK_STATE_COMPLETED", states(watched)
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(a) for a in stored.artifacts] == ["awake again"]


async def _subscribed(client: Client, task_id: str) -> list[StreamResponse]:
    return [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]


@pytest.mark.e2e
def test_a_streaming_send_whose_client_went_away_runs_to_its_end(server: ServerProcess) -> None:
    async def main() -> Task:
        async with a2a_client(server.url, "dozer", streaming=True) as client:
            async for event in streamed(client, user_message("doze", uuid.uuid4().hex)):
                task_id = event.task.id
                break  # the client stops reading after the first event, and its stream is closed
            deadline = time.monotonic() + 20
            while (task := await client.get_task(GetTaskRequest(id=task_id))).status.state not in (
                TaskState.TASK_STATE_COMPLETED,
                TaskState.TASK_STATE_FAILED,
            ):
                assert time.monotonic() < deadline, task
                await asyncio.sleep(0.1)
            return task

    done = asyncio.run(main())
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(a) for a in done.artifacts] == ["awake again"]


@pytest.mark.e2e
def test_cancel_task_stops_a_streaming_send_and_its_stream_ends_canceled(server: ServerProcess) -> None:
    (server.root / "nap-interrupted").unlink(missing_ok=True)

    async def main() -> tuple[list[StreamResponse], Task, float]:
        async with (
            a2a_client(server.url, "napper", streaming=True) as sender,
            a2a_client(server.url, "napper") as canceler,
        ):
            context = uuid.uuid4().hex
            events: list[StreamResponse] = []

            async def read() -> None:
                async for event in streamed(sender, user_message("nap", context)):
                    events.append(event)

            reading = asyncio.create_task(read())
            started = await napping(canceler, context)
            t0 = time.monotonic()
            canceled = await canceler.cancel_task(CancelTaskRequest(id=started.id))
            await asyncio.wait_for(reading, 10)
            return events, canceled, time.monotonic() - t0

    events, canceled, elapsed = asyncio.run(main())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert states(events)[-1] == "TASK_STATE_CANCELED", states(events)
    assert elapsed < 5, f"the 20 s nap was not stopped: the stream ended {elapsed:.1f} s after the cancel"
    assert (server.root / "nap-interrupted").exists(), "the tool was not stopped: the graph still runs"
    assert recorded_state(server, canceled.id) == "canceled"


def test_a_streamed_executor_that_raises_sends_its_events_then_the_error_and_its_task_fails() -> None:
    async def main() -> tuple[list[object], Task | None]:
        rows = InMemoryTaskStore()
        call = ServerCallContext()
        request = RequestContext(call_context=call, task_id="t-3", context_id="c-3")
        runs: dict[str, DirectRun] = {}
        seen: list[object] = []
        with pytest.raises(RuntimeError, match="the executor broke"):
            async for event in DirectRun(Breaks(), rows, request, runs, streams=True).events():
                seen.append(event)
        assert runs == {}, "an ended run is still listed for CancelTask"
        return seen, await rows.get("t-3", call)

    seen, stored = asyncio.run(main())
    assert [type(e).__name__ for e in seen] == ["Task", "TaskStatusUpdateEvent"]
    assert stored is not None and stored.status.state == TaskState.TASK_STATE_FAILED


class CancelBreaks(AgentExecutor):
    """Works until canceled, and its cancel fails (its store cannot be written, say)."""

    def __init__(self) -> None:
        self.working = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await (await announced(context, event_queue)).start_work()
        self.working.set()
        await asyncio.sleep(30)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise RuntimeError("the cancel broke")


def test_a_stream_whose_cancel_fails_ends_with_its_task_failed() -> None:
    async def main() -> tuple[list[TaskState], Task | None]:
        rows = InMemoryTaskStore()
        call = ServerCallContext()
        executor = CancelBreaks()
        run = DirectRun(
            executor, rows, RequestContext(call_context=call, task_id="t-4", context_id="c-4"), {}, streams=True
        )
        seen: list[TaskState] = []

        async def read() -> None:
            async for event in run.events():
                seen.append(event.status.state)  # type: ignore[union-attr]

        reading = asyncio.create_task(read())
        await executor.working.wait()
        with pytest.raises(RuntimeError, match="the cancel broke"):
            await run.cancel(call)
        await asyncio.wait_for(reading, 5)
        return seen, await rows.get("t-4", call)

    seen, stored = asyncio.run(main())
    assert seen[-1] == TaskState.TASK_STATE_FAILED, f"the stream ended without the task's end: {seen}"
    assert stored is not None and stored.status.state == TaskState.TASK_STATE_FAILED
