"""A CancelTask that reaches a run of this process after the run recorded its end.

The task record is the one truth: a run writes its end there first, then sends the events that write
the A2A row. A cancel that comes in between finds the row still running; it must not tell the client
"canceled" (nor save the row so) while the record says completed and the run's effects all happened.
It is refused with TaskNotCancelableError, and the run's own end reaches the row. Both ways a run
is served are covered: a2a-sdk's (the executor's ``cancel``) and a direct run's.
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from a2a.server.agent_execution import RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event, EventQueue
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import Message, Part, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import TaskNotCancelableError

from framework.protocols.a2a.direct import DirectRun
from framework.protocols.a2a.executor import CleverAgentExecutor
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import write_project


class _Sent(EventQueue):
    """The events a cancel sends."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def enqueue_event(self, event: Event) -> None:
        self.events.append(event)


def _project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project", {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})


def _states(records: list[Any], task_id: str) -> list[str]:
    return [r.data["state"] for r in records if r.task_id == task_id and r.kind == "task.state"]


def test_a_cancel_of_a_run_that_recorded_its_end_is_refused_and_sends_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(_project(tmp_path)), source="a2a-http", stack=stack)
            done = [e async for e in runtime.send("echo", "hi", conversation="c1", task_id="t1")][-1]
            assert done.state == "completed"
            sent = _Sent()
            context = RequestContext(call_context=ServerCallContext(), task_id="t1", context_id="c1")
            with pytest.raises(TaskNotCancelableError, match="completed before the cancel reached it"):
                await CleverAgentExecutor(runtime, "echo").cancel(context, sent)
            assert sent.events == []
            assert (await runtime.tasks.aget("t1")).state == "completed"
            assert _states(runtime.audit.query(task_id="t1"), "t1") == ["submitted", "working", "completed"]

    asyncio.run(main())


def test_a_cancel_of_a_direct_run_that_recorded_its_end_leaves_that_end_in_its_row(tmp_path: Path) -> None:
    """The cancel comes at the one moment that matters: right after the run wrote ``completed`` to the
    record, before the run's events reached the row."""

    async def main() -> None:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(_project(tmp_path)), source="a2a-http", stack=stack)
            rows = InMemoryTaskStore()
            call = ServerCallContext()
            message = Message(
                message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="hi")], context_id="c1"
            )
            request = RequestContext(
                call_context=call, request=SendMessageRequest(message=message), task_id="t1", context_id="c1"
            )
            direct = DirectRun(CleverAgentExecutor(runtime, "echo", rows), rows, request, {})
            cancels: list[asyncio.Task[Task]] = []
            update = runtime.tasks.aset

            async def recorded(task_id: str, **fields: Any) -> Any:
                written = await update(task_id, **fields)
                if fields.get("state") == "completed":
                    cancels.append(asyncio.create_task(direct.cancel(call)))
                    await asyncio.sleep(0.05)  # the cancel runs now, while the run has sent nothing of its end
                return written

            runtime.tasks.aset = recorded  # type: ignore[method-assign]
            answer = await direct.answer()
            assert isinstance(answer, Task), answer
            assert answer.status.state == TaskState.TASK_STATE_COMPLETED, answer
            assert len(cancels) == 1
            with pytest.raises(TaskNotCancelableError):  # told once the run's end was written
                await cancels[0]
            row = await rows.get("t1", call)
            assert row is not None and row.status.state == TaskState.TASK_STATE_COMPLETED, row
            assert (await runtime.tasks.aget("t1")).state == "completed"

    asyncio.run(main())
