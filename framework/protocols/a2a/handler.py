"""The request handler of each served agent: a2a-sdk's, where a retried message runs once.

A client that lost the answer to ``SendMessage`` sends the same message again, with the same
``messageId``. Each message that starts a new task (no ``taskId``) is claimed before anything
runs (:mod:`framework.runtime.message_claims`, keyed by the agent, the caller and the
``messageId``, in the task database every replica shares): the first copy starts the task under
the id it claimed; every later copy, on any replica, answers with that task instead of a second
run —

* ``SendMessage``: the task once it is final or waits for input (at once with
  ``returnImmediately``), as the first copy would have answered;
* ``SendStreamingMessage``: the task, then its events until it ends, as ``SubscribeToTask``.

A message that names its task (a reply, a decision) is not claimed: deciding a task is already
exactly once (the task record's compare-and-set), and the second copy is refused as the SDK
refuses any message to a task that ended.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from a2a.server.agent_execution import RequestContext, SimpleRequestContextBuilder
from a2a.server.agent_execution.active_task import INTERRUPTED_TASK_STATES, TERMINAL_TASK_STATES
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.types import CancelTaskRequest, Message, SendMessageRequest, SubscribeToTaskRequest, Task, TaskState
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.utils.task import apply_history_length, validate_history_length

from framework.errors import StoreBusy, StoreUnreachable
from framework.protocols.a2a.direct import DirectRun
from framework.protocols.a2a.executor import ANSWER_ONLY, REFUSED
from framework.protocols.a2a.relay import RelayingRequestHandler
from framework.protocols.a2a.statuses import derived
from framework.protocols.a2a.task_store import AgentTaskStore
from framework.runtime.message_claims import STALE_S, Claim, MessageClaims, claim_key
from framework.runtime.task_record import FINAL_STATES
from framework.runtime.task_record import Task as Record

if TYPE_CHECKING:
    from a2a.server.agent_execution import AgentExecutor
    from a2a.types import AgentCard

CLAIMED = "cleveragents.claimed_task_id"
"""Where a claimed message's task id waits in the call context's state for the request context builder."""
_SETTLED = frozenset(TERMINAL_TASK_STATES | INTERRUPTED_TASK_STATES)
_ROW_POLL_S = 0.05
_ROW_GRACE_S = 1.0
CLAIM_KEY = "cleveragents.claim_key"


class ClaimedIdBuilder(SimpleRequestContextBuilder):
    """a2a-sdk's request context builder, giving a claimed new task the id its message claimed."""

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        claimed = context.state.get(CLAIMED) if task_id is None else None
        return await super().build(context, params, claimed or task_id, context_id, task)


class ServingRequestHandler(RelayingRequestHandler):
    """The relaying handler whose new-task messages are claimed once (see the module doc)."""

    def __init__(
        self,
        executor: AgentExecutor,
        rows: AgentTaskStore,
        card: AgentCard,
        *,
        agent: str,
        claims: MessageClaims | None,
        records: Callable[[str], Awaitable[Record | None]],
        **kwargs: Any,
    ) -> None:
        super().__init__(executor, rows, card, request_context_builder=ClaimedIdBuilder(), **kwargs)
        self.agent_rows = rows
        self.agent = agent
        self.claims = claims
        """None: messages are not claimed (``server.retry_window: null``)."""
        self.records = records
        """The runtime's task record of a task id: a run that answers with a Message has one, and no A2A task."""
        self.direct: dict[str, DirectRun] = {}
        """The runs of new tasks' blocking messages, which a2a-sdk does not run (:mod:`.direct`), by task id."""

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        await self._after_direct(params)
        earlier = await self._claim(params, context)
        if earlier is None:
            answer_only = not params.message.task_id and not params.configuration.return_immediately
            context.state[ANSWER_ONLY] = answer_only
            try:
                with self._new(context):
                    if answer_only and self._runs_directly(params):
                        answer: Message | Task = await self._run_direct(params, context)
                    else:
                        answer = await super().on_message_send(params, context)
            except A2AError:
                await self._release_refused(context)
                raise
            return answer
        task = await self._row(earlier, context)
        if task.status.state not in _SETTLED and not params.configuration.return_immediately:
            async for _ in self._events(task, context):
                pass
            task = await self._row(earlier, context)
        return _with_history(task, params)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        await self._after_direct(params)
        streams = self._agent_card.capabilities.streaming
        earlier = await self._claim(params, context) if streams else None
        if earlier is None:
            try:
                with self._new(context):
                    if streams and not params.message.task_id and self._runs_directly(params):
                        events = self._stream_direct(params, context)
                    else:
                        events = super().on_message_send_stream(params, context)
                    async for event in events:
                        yield event
            except A2AError:
                await self._release_refused(context)
                raise
            return
        task = await self._row(earlier, context)
        if task.status.state in _SETTLED:
            yield _with_history(task, params)
            return
        async for event in self._events(task, context):
            yield _with_history(event, params) if isinstance(event, Task) else event

    async def _after_direct(self, params: SendMessageRequest) -> None:
        """A message to a task that runs directly waits for that run to end, as a2a-sdk queues a
        message behind its task's run (then the task ended, or waits for this very message)."""
        run = self.direct.get(params.message.task_id) if params.message.task_id else None
        if run is not None:
            await run.ended()

    def _runs_directly(self, params: SendMessageRequest) -> bool:
        """Whether nothing a2a-sdk's active task does beyond the run itself is asked for: push
        notifications, a cross-replica event stream, input modes checked."""
        has_push = self._push_config_store is not None and params.configuration.HasField(
            "task_push_notification_config"
        )
        return not has_push and self._event_stream is None and not self._validate_input_modes

    async def _run_direct(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        """A new task's blocking message, run without a2a-sdk's active task (:mod:`.direct`)."""
        answer = await (await self._direct(params, context)).answer()
        return _with_history(answer, params) if isinstance(answer, Task) else answer

    async def _stream_direct(self, params: SendMessageRequest, context: ServerCallContext) -> AsyncGenerator[Event]:
        """A new task's streaming message, run without a2a-sdk's active task (:mod:`.direct`)."""
        async for event in (await self._direct(params, context, streams=True)).events():
            yield _with_history(event, params) if isinstance(event, Task) else event

    async def _direct(
        self, params: SendMessageRequest, context: ServerCallContext, *, streams: bool = False
    ) -> DirectRun:
        """The run of a new task's message, checked as a2a-sdk checks it (its id is the claimed one)."""
        validate_proto_required_fields(params)
        validate_history_length(params.configuration)
        request = await self._request_context_builder.build(
            params=params, task_id=None, context_id=params.message.context_id or None, task=None, context=context
        )
        return DirectRun(self.agent_executor, self.agent_rows, request, self.direct, streams=streams)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        run = self.direct.get(params.id)
        if run is None:
            canceled: Task | None = await super().on_cancel_task(params, context)
            return canceled
        validate_proto_required_fields(params)
        task = await self.rows.get(params.id, context)  # the caller's own task, or not found
        if task is None:
            raise TaskNotFoundError
        if task.status.state in TERMINAL_TASK_STATES:
            raise TaskNotCancelableError
        return await run.cancel(context)

    def _new(self, context: ServerCallContext) -> AbstractContextManager[None]:
        """A claimed message's task is new (its id a fresh UUID): it has no row to look up until saved."""
        mine = context.state.get(CLAIMED)
        return self.agent_rows.new(mine, context) if isinstance(mine, str) else nullcontext()

    async def _claim(self, params: SendMessageRequest, context: ServerCallContext) -> str | None:
        """Claim a new task's message: None when this copy runs it (under the id in the context's
        state), else the id of the task an earlier copy started."""
        message = params.message
        if self.claims is None or message.task_id or not message.message_id:
            return None
        key = claim_key(self.agent, context.user.user_name, message.message_id)
        try:
            return await self._earlier(self.claims, key, _digest(message), context)
        except (StoreBusy, StoreUnreachable) as exc:  # the task fails with it without running, as in the run
            context.state[REFUSED] = exc
            return None

    async def _earlier(self, claims: MessageClaims, key: str, digest: str, context: ServerCallContext) -> str | None:
        mine = str(uuid.uuid4())  # the form of the ids a2a-sdk gives the tasks it names itself
        claim = await claims.aclaim(key, mine, digest)
        while claim.task_id != mine:
            if claim.digest != digest:
                raise InvalidParamsError(
                    message="this messageId was already sent with another message (within server.retry_window);"
                    " give every new message a new messageId"
                )
            holder = claim.task_id
            if await self.rows.get(holder, context) is not None:
                return holder  # the earlier copy's task: the answer
            record = await self.records(holder)
            if record is not None and not _ended_long_ago(record):
                await asyncio.sleep(_ROW_POLL_S)  # its run goes on, and shows its task when it has one
            elif record is not None and record.state != "completed":
                return await self._kept(record, context)  # it ended with no task shown: a crash, a failure
            elif record is None and datetime.now(UTC) - claim.at < timedelta(seconds=STALE_S):
                await asyncio.sleep(_ROW_POLL_S)  # being started
            elif await claims.atake_over(key, holder, mine, digest, 0 if record is not None else STALE_S):
                # Its process died before the run began, or the run completed answering with a
                # Message, which no task keeps: this copy runs the message.
                claim = Claim(mine, datetime.now(UTC), digest)
            else:
                claim = await claims.aclaim(key, mine, digest)  # another copy took it over first
        context.state[CLAIMED] = mine
        context.state[CLAIM_KEY] = key
        return None

    async def _kept(self, record: Record, context: ServerCallContext) -> str:
        """The A2A task of a run that ended before it showed one (a workflow whose answer could have
        been a Message, failed or stopped by its process dying): saved now from its record."""
        bare = Task(id=record.id, context_id=record.conversation)
        bare.status.state = TaskState.TASK_STATE_SUBMITTED
        await self.rows.save(derived(bare, record), context)
        return record.id

    async def _release_refused(self, context: ServerCallContext) -> None:
        """Give up this copy's claim when a2a-sdk refused its request before the run began, so the
        request sent again, corrected, runs at once."""
        mine, key = context.state.get(CLAIMED), context.state.get(CLAIM_KEY)
        if self.claims is None or not isinstance(mine, str) or not isinstance(key, str):
            return
        if await self.records(mine) is None and await self.rows.get(mine, context) is None:
            await self.claims.arelease(key, mine)

    async def _row(self, task_id: str, context: ServerCallContext) -> Task:
        task = await self.rows.get(task_id, context)
        if task is None:  # claimed for this caller and agent, and saved: only a deleted task is missing
            raise TaskNotFoundError(message=f"Task {task_id}, which this messageId started, is gone")
        return task

    async def _events(self, task: Task, context: ServerCallContext) -> AsyncGenerator[Event, None]:
        """The task's events until it is final or waits for input, as SubscribeToTask sends them (a run
        of another process or replica, or resumed here, is followed through its row)."""
        try:
            async for event in self.on_subscribe_to_task(SubscribeToTaskRequest(id=task.id), context):
                yield event
        except UnsupportedOperationError:  # it ended between the read and the subscription
            yield await self._row(task.id, context)


def _digest(message: Message) -> str:
    """What a message says, for telling a copy from another message under the same messageId: its
    parts and its context (not its metadata, where a retrying client may put a new trace context)."""
    said = Message()
    said.parts.extend(message.parts)
    said.context_id = message.context_id
    return hashlib.sha256(said.SerializeToString(deterministic=True)).hexdigest()


def _ended_long_ago(record: Record) -> bool:
    """Whether a run ended more than :data:`_ROW_GRACE_S` ago: its A2A task, if it had one, is saved by then."""
    if record.state not in FINAL_STATES:
        return False
    written = record.last_written()  # None: recorded before tasks had times, long ago
    return written is None or datetime.now(UTC) - written > timedelta(seconds=_ROW_GRACE_S)


def _with_history(task: Task, params: SendMessageRequest) -> Task:
    return apply_history_length(task, params.configuration)
