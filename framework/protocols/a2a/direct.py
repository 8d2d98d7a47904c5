"""A new task's message, run without a2a-sdk's active task.

a2a-sdk runs every message through an ``ActiveTask``: a producer task runs the executor, a
consumer task takes each event from a queue, applies it to the task, saves the task and puts the
result on a second queue that each subscriber taps. A message that starts a new task has one
reader, its own request, until it tells the task's id: a blocking ``SendMessage`` tells it with its
answer, a ``SendStreamingMessage`` with its first event (a later ``SubscribeToTask`` follows the
task's row, :mod:`.relay`). For those messages the serving handler runs the executor itself, in a
task of its own, with :class:`DirectRun` as its event queue: each event is applied to the task where
it is sent and the task saved, as a2a-sdk saves it after each event (the write-behind store holds
what is not final), then, for a stream, sent to the request as a2a-sdk's subscriber would send it;
so the rows, the records and the answer are the same. The two background tasks, the queues and the
per-event copies are not there: about a seventh of a served request's CPU was that machinery.

What a2a-sdk gives an active task, a direct run keeps:

* the run goes on when the client goes away (the request only waits for it, or reads its events);
* ``CancelTask`` stops it here, as a2a-sdk's local cancel does (:meth:`DirectRun.cancel`); once it
  waits for input, the task record is canceled (``stop_elsewhere``), as on another replica; once its
  run recorded its end, the cancel is refused (TaskNotCancelableError) and the run writes that end;
* a follow-up message naming the task waits for the run to end, then goes to a2a-sdk's run of it;
* ``SubscribeToTask`` follows its row, as for a run resumed here (:mod:`.relay`);
* a server that stops lets it finish, then cancels it (the executor's ``running``);
* an executor that raises leaves the task ``failed`` and the client gets the error (a stream: after
  the events sent before it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection
from typing import TYPE_CHECKING

from a2a.server.agent_execution.active_task import INTERRUPTED_TASK_STATES, TERMINAL_TASK_STATES
from a2a.server.events.event_queue import Event, EventQueue
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types import Message, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent
from a2a.utils.errors import TaskNotCancelableError

if TYPE_CHECKING:
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.context import ServerCallContext
    from a2a.server.tasks import TaskStore

logger = logging.getLogger(__name__)

SETTLED = frozenset(TERMINAL_TASK_STATES | INTERRUPTED_TASK_STATES)


class DirectRun(EventQueue):
    """One new task's run: the executor's event queue, which applies and saves each event as it comes
    (and, for :meth:`events`, passes it on)."""

    def __init__(
        self,
        executor: AgentExecutor,
        rows: TaskStore,
        request: RequestContext,
        runs: dict[str, DirectRun],
        *,
        streams: bool = False,
    ) -> None:
        self.executor = executor
        self.rows = rows
        self.request = request
        self.task_id = request.task_id or ""
        self.context_id = request.context_id or ""
        self.task: Task | None = None
        self.message: Message | None = None
        """The answer when the run answered with a Message (no task)."""
        self.runs = runs
        """The direct runs of the handler, by task id: this one is in it until it ends (not the request)."""
        self._run: asyncio.Task[None] | None = None
        self._failed_settled = False
        """Whether the run failed after its task had ended or paused (its answer then)."""
        self.streams = streams
        self._heard: asyncio.Queue[Event | None] | None = asyncio.Queue() if streams else None
        """The events a streaming request has yet to send, in order (None: the run ended); None when
        nothing reads them (not a stream, or its client went away)."""

    async def enqueue_event(self, event: Event) -> None:
        if self.settled(TERMINAL_TASK_STATES):
            return  # a cancel that came as the run ended: the end stays (a2a-sdk's task is finished then)
        if isinstance(event, Message):
            self.message = event
            self._tell(event)
            return
        if isinstance(event, Task):
            self.task = task = event
        elif isinstance(event, TaskStatusUpdateEvent):
            task = self._current()
            if task.status.HasField("message"):
                task.history.append(task.status.message)
            if event.metadata:
                task.metadata.MergeFrom(event.metadata)
            task.status.CopyFrom(event.status)
        elif isinstance(event, TaskArtifactUpdateEvent):
            task = self._current()
            append_artifact_to_task(task, event)
        else:
            return
        await self.rows.save(task, self.request.call_context)
        if self._heard is not None:  # as a2a-sdk's subscriber has them: a task as saved, an update as sent
            self._tell(self._copy() if isinstance(event, Task) else event)

    def _tell(self, event: Event | None) -> None:
        if self._heard is not None:
            self._heard.put_nowait(event)

    def settled(self, states: Collection[TaskState] = SETTLED) -> bool:
        """Whether the task is in one of ``states`` (by default: ended, or waiting for input)."""
        return self.task is not None and self.task.status.state in states

    def _current(self) -> Task:
        """The task: as the executor announced it, or (an update first) new, as a2a-sdk makes it then."""
        if self.task is None:
            message = self.request.message
            self.task = Task(
                id=self.task_id,
                context_id=self.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[message] if message is not None else [],
            )
        return self.task

    def _start(self) -> asyncio.Task[None]:
        run = asyncio.get_running_loop().create_task(self._execute(), name=f"direct:{self.task_id}")
        self._run = run
        self.runs[self.task_id] = self
        run.add_done_callback(self._ended)
        return run

    def _ended(self, run: asyncio.Task[None]) -> None:
        self.runs.pop(self.task_id, None)
        self._tell(None)
        if not run.cancelled():
            run.exception()  # read here too: its client may have gone (_execute logged it, the task failed)

    async def events(self) -> AsyncIterator[Event]:
        """Run the executor (``streams=True``), sending each event once it is applied and saved; the
        run goes on when the client goes away. An executor that raised raises here after its events."""
        heard = self._heard
        if not self.streams or heard is None:
            raise RuntimeError("events() is read once, from a DirectRun made with streams=True")
        run = self._start()
        try:
            while (event := await heard.get()) is not None:
                yield event
        finally:
            self._heard = None  # nothing is kept for a client that went away
        if not run.cancelled() and (failure := run.exception()) is not None:
            raise failure

    async def answer(self) -> Message | Task:
        """Run the executor to its end and answer with what it produced."""
        run = self._start()
        try:
            await asyncio.shield(run)  # a client that goes away leaves the run going
        except asyncio.CancelledError:
            if not run.cancelled():
                raise  # this request was canceled, not the run
        except Exception:
            if not self._failed_settled:
                raise
            # The task had ended or paused when what came after failed (logged): that is its answer,
            # as a2a-sdk answers with the first such task it sees.
        if self.message is not None:
            return self.message
        return self._copy()

    async def ended(self) -> None:
        """Wait until the run has ended, however it ended (its own request reports that)."""
        if self._run is not None:
            await asyncio.wait([self._run])

    async def _execute(self) -> None:
        try:
            await self.executor.execute(self.request, self)
        except asyncio.CancelledError:
            raise  # stopped (CancelTask, a server stopping): the executor sent what it ended as
        except Exception:
            # As a2a-sdk leaves it: the task failed (made now if the run never announced it), and
            # the error goes on to the client.
            logger.exception("task %s: its run failed", self.task_id)
            self._failed_settled = self.settled()
            await self._fail()
            raise

    async def _fail(self) -> None:
        """Save the task failed, unless it has ended."""
        task = self._current()
        if task.status.state not in TERMINAL_TASK_STATES:
            task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_FAILED))
            task.status.timestamp.GetCurrentTime()
            await self.rows.save(task, self.request.call_context)

    async def cancel(self, context: ServerCallContext) -> Task:
        """Stop the run, as a2a-sdk cancels a task it runs: the executor's cancel says it ended, then
        the run is stopped; a task the run left unended is saved canceled."""
        from a2a.server.agent_execution import RequestContext

        run = self._run
        request = RequestContext(call_context=context, task_id=self.task_id, context_id=self.context_id, task=self.task)
        if run is not None and not run.done() and not self.settled(TERMINAL_TASK_STATES):
            try:
                await self.executor.cancel(request, self)
            except TaskNotCancelableError:
                await asyncio.wait([run])  # it recorded its end first: its run writes that end, as it was
                raise
            except Exception:
                # As a2a-sdk: the task fails (a stream ends with that status), its run is stopped,
                # and the caller gets the error.
                await self._fail()
                status = self._current().status
                if status.state == TaskState.TASK_STATE_FAILED:
                    self._tell(TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=status))
                run.cancel()
                raise
            run.cancel()
            await asyncio.wait([run])
        task = self._current()
        if task.status.state not in TERMINAL_TASK_STATES:
            task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_CANCELED))
            task.status.timestamp.GetCurrentTime()
            await self.rows.save(task, context)
        return self._copy()

    def _copy(self) -> Task:
        answer = Task()
        answer.CopyFrom(self._current())
        return answer
