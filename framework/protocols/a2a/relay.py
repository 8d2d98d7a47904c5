"""Subscribing on one replica to a task that runs on another: the shared A2A row, followed.

a2a-sdk serves ``SubscribeToTask`` (and v0.3 ``tasks/resubscribe``) from the event queue of
the run, which only the replica running the task has. With ``store.url`` on PostgreSQL every
replica sees the task's row, so a replica without the run follows the row instead:

* every write of a row in PostgreSQL is followed by ``NOTIFY ca_a2a_task, '<task id>'``
  (:meth:`TaskFollower.written`, called by the write-behind store once the row is committed);
* a subscriber ``LISTEN``s on that channel (one connection per server, opened on the first such
  subscription) and, on each notification for its task — or every :data:`POLL_S` seconds should
  a notification be lost with a dropped connection — reads the row again and sends what changed:
  an artifact that is new or different (``append: false``, the whole artifact), then the status
  when it changed;
* it ends, as a2a-sdk's own stream does, at a final or interrupted state (completed, failed,
  canceled, rejected, input-required, auth-required).

Running replicas write a task's intermediate states at most every 0.5 s (the write-behind
store), so a relayed stream is coarser than the one from the replica running it (reply chunks
arrive grouped), and ends with the same final state. On SQLite the same follower serves a task this
server has no SDK run of — one it resumed after a restart (``orphans.py``), one another process on
the same files runs — told of this process's own writes directly and reading the row every
:data:`LOCAL_POLL_S` for the others'.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from a2a.server.agent_execution import RequestContext
from a2a.server.agent_execution.active_task import INTERRUPTED_TASK_STATES, TERMINAL_TASK_STATES, ActiveTask
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types import (
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

if TYPE_CHECKING:
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.tasks import TaskStore
    from a2a.types import AgentCard
    from psycopg import AsyncConnection

logger = logging.getLogger(__name__)

CHANNEL = "ca_a2a_task"
"""The PostgreSQL channel a row's writer notifies, with the task id as payload."""
POLL_S = 2.0
"""Seconds a follower waits for a notification before it reads the row anyway."""
_FINAL = frozenset(TERMINAL_TASK_STATES | INTERRUPTED_TASK_STATES)


LOCAL_POLL_S = 0.2
"""On SQLite: seconds a follower waits before it reads the row again (another process's writes)."""


class TaskFollower:
    """One server's side of the relay: notifies after its writes, listens for the others'. Without an
    ``engine`` (SQLite) only this process's followers are told, and each reads its row every ``poll`` s."""

    def __init__(self, engine: AsyncEngine | None = None, dsn: str = "", *, poll: float = POLL_S) -> None:
        self._engine = engine
        self._dsn = dsn
        self._poll = poll
        self._reader: asyncio.Task[None] | None = None
        """Reads the notifications of the LISTEN connection, opened on the first relayed subscription."""
        self._opening = asyncio.Lock()
        self._woken: dict[str, set[asyncio.Event]] = {}

    async def written(self, task_id: str) -> None:
        """Tell every listening replica that ``task_id``'s row changed (after its write committed)."""
        if self._engine is None:
            for woken in self._woken.get(task_id, ()):
                woken.set()
            return
        async with self._engine.begin() as conn:
            await conn.execute(text("SELECT pg_notify(:channel, :id)"), {"channel": CHANNEL, "id": task_id})

    async def follow(self, task: Task, read: Callable[[], Awaitable[Task | None]]) -> AsyncIterator[Event]:
        """The events that take ``task`` (as last sent) to each later version ``read`` finds, to a final state."""
        woken = asyncio.Event()
        self._woken.setdefault(task.id, set()).add(woken)
        try:
            await self._listen()
            seen = task
            while True:
                with contextlib.suppress(TimeoutError):  # a lost notification costs at most the poll
                    await asyncio.wait_for(woken.wait(), self._poll)
                woken.clear()
                current = await read()
                if current is None:  # deleted meanwhile: nothing more will come
                    return
                for event in changes(seen, current):
                    yield event
                seen = current
                # A task subscribed to while it waited (input-required) is followed until it moves on.
                if current.status.state in _FINAL and current.status != task.status:
                    return
        finally:
            waiting = self._woken.get(task.id, set())
            waiting.discard(woken)
            if not waiting:
                self._woken.pop(task.id, None)

    async def _listen(self) -> None:
        if not self._dsn:  # SQLite: no one else to listen to
            return
        async with self._opening:
            if self._reader is not None and not self._reader.done():
                return
            from psycopg import AsyncConnection, Error

            try:
                listener = await AsyncConnection.connect(self._dsn, autocommit=True, connect_timeout=10)
                await listener.execute(f"LISTEN {CHANNEL}")
            except (OSError, Error) as exc:
                # The row is still read every POLL_S seconds: slower, not wrong.
                logger.warning("cannot LISTEN for task changes (%s); following tasks every %g s", exc, POLL_S)
                return
            self._reader = asyncio.get_running_loop().create_task(self._read(listener))

    async def _read(self, listener: AsyncConnection[Any]) -> None:
        """Wake the followers of each task notified, until the connection ends (the next follower reopens it)."""
        from psycopg import Error

        try:
            async with listener:
                async for notice in listener.notifies():
                    for woken in self._woken.get(notice.payload, ()):
                        woken.set()
        except Error as exc:
            logger.warning("stopped listening for task changes (%s); following tasks every %g s", exc, POLL_S)

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


def changes(before: Task, after: Task) -> list[Event]:
    """The stream events a subscriber that saw ``before`` needs to see ``after``: changed artifacts, then the status."""
    known = {artifact.artifact_id: artifact for artifact in before.artifacts}
    final = after.status.state in _FINAL
    events: list[Event] = [
        TaskArtifactUpdateEvent(
            task_id=after.id, context_id=after.context_id, artifact=artifact, append=False, last_chunk=final
        )
        for artifact in after.artifacts
        if known.get(artifact.artifact_id) != artifact
    ]
    if after.status != before.status:
        events.append(TaskStatusUpdateEvent(task_id=after.id, context_id=after.context_id, status=after.status))
    return events


class RelayingRequestHandler(DefaultRequestHandler):
    """a2a-sdk's handler, whose SubscribeToTask follows the shared row when no SDK run of the task is
    here (it runs on another replica, in another process, or resumed here)."""

    def __init__(
        self, executor: AgentExecutor, rows: TaskStore, card: AgentCard, *, follower: TaskFollower | None, **kwargs: Any
    ) -> None:
        super().__init__(executor, rows, card, **kwargs)
        self.rows = rows
        self.follower = follower

    async def _setup_active_task(
        self, params: SendMessageRequest, call_context: ServerCallContext
    ) -> tuple[ActiveTask, RequestContext]:
        """A message to an ended task is refused, as a2a-sdk refuses it on the server that ended it.

        The SDK asks its own active task, which on a replica that paused the task still waits for
        input after another replica decided and finished it: the shared row says it ended.
        """
        if self.follower is not None and params.message.task_id:
            task = await self.rows.get(params.message.task_id, call_context)
            if task is not None and task.status.state in TERMINAL_TASK_STATES:
                raise UnsupportedOperationError(
                    message=f"Task {task.id} is in terminal state: {TaskState.Name(task.status.state)}"
                )
        return await super()._setup_active_task(params, call_context)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        follower = self.follower
        if follower is None or await self._active_task_registry.get(params.id) is not None:
            async for event in super().on_subscribe_to_task(params, context):
                yield event
            return
        task = await self.rows.get(params.id, context)
        if task is None:
            raise TaskNotFoundError
        if task.status.state in TERMINAL_TASK_STATES:  # as the SDK answers: nothing further to stream
            raise UnsupportedOperationError(
                message=f"Task {task.id} is in terminal state: {TaskState.Name(task.status.state)}"
            )
        yield task  # the spec's first event of a subscription

        async def read() -> Task | None:
            return await self.rows.get(params.id, context)

        async for event in follower.follow(task, read):
            yield event
