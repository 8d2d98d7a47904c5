"""An a2a-sdk AgentExecutor that runs one agent's tasks through the Runtime.

    run event            A2A
    ─────────────────    ──────────────────────────────────────────────────────────
    TextChunk            artifact "reply" chunk (append=True; last_chunk at the end)
    ToolCallStarted/…    status WORKING with a data part {"caEvent": ...} (progress)
    ArtifactOut          an artifact of its own (text, data, file parts)
    MessageOut           a Message instead of a task, when a run produced nothing else;
                         otherwise status WORKING with the text
    paused               status INPUT_REQUIRED: a data part (APPROVAL_EXTENSION) listing
                         the pending actions and allowed decisions, plus a text fallback
    completed            status COMPLETED (metadata: stopReason, usage)
    failed               status FAILED with a text part and a data part {"error": {"code", "reason"}}:
                         the failure's code (``framework.errors``), see ``statuses.failure_status``

A message sent to a task in INPUT_REQUIRED is its decision: a data part
``{"decision": "approve" | "reject" | "edit" | "always", "reason": ..., "args": ...}`` or
the text ``approve`` / ``reject: REASON``; to a workflow's ``ask``, its text is the answer. A
message to a task that another decision runs now (one that won the claim, here or on another
replica) starts nothing: its answer is the state that run reaches.
Workflows see the message's ``messageId`` and ``metadata`` (``{{ request.* }}`` templates).
Our field names on the wire are camelCase, as A2A's are (``framework.protocols.a2a.wire``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskStore, TaskUpdater
from a2a.types import Message, Part, Task, TaskState, TaskStatus
from a2a.utils.errors import TaskNotCancelableError
from starlette.authentication import AuthCredentials

from framework.compiler.workflow import replies_with_message
from framework.errors import CAError, Failure, PolicyDenied, RunError
from framework.protocols.a2a.auth import DECIDED_BY
from framework.protocols.a2a.statuses import (
    REPLY_ARTIFACT,
    agent_message,
    derived,
    failure_status,
    waiting_message,
)
from framework.protocols.a2a.wire import EVENT_KEY, to_wire
from framework.runtime import logs
from framework.runtime.events import (
    ArtifactOut,
    MessageOut,
    Paused,
    RunEvent,
    RunFinished,
    StepUpdate,
    TextChunk,
    ToolCallFinished,
    ToolCallStarted,
    event_to_json,
)
from framework.runtime.pauses import all_questions
from framework.runtime.runtime import Runtime
from framework.runtime.task_record import FINAL_STATES
from framework.runtime.tasks import AlreadyDecided
from framework.runtime.turn import drive_turn
from framework.spec.agent import WorkflowAgent

COALESCE_SECONDS = 0.05
"""Reply chunks after the first are sent at most this often."""
OUTCOME_POLL_S = 0.1
"""How often a message to a task another decision runs looks whether that run has moved on."""
_RUNNING = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
_RUNNING_STATES = ("submitted", "working")
DECISIONS = ("approve", "reject", "edit", "always")
REFUSED = "cleveragents.refused"
"""Where the request handler leaves, in the call context's state, the error a new task's message
was refused with before it ran (its claim could not be written): the task fails with it at once."""
ANSWER_ONLY = "cleveragents.answer_only"
"""Set by the request handler, in the call context's state, for a non-streaming ``SendMessage`` that
waits for its answer and starts a new task: no one can follow that task's events before the answer
(its id is new), so its run sends no ``working`` status and no reply chunks — only the events that
change what the task ends as. Each event is a task update a2a-sdk applies, queues and fans out. Nor
does it stream its model's tokens (``Runtime.send(tokens=False)``): each model turn's text comes whole."""

_TEXT_DECISION = re.compile(r"^\s*(approve|approved|yes|always|reject|rejected|no)\b\s*:?\s*(.*)$", re.I | re.S)


def _data_decision(message: Message) -> dict[str, Any] | None:
    """A decision (or an ask's answer) sent as a data part, if the message has one."""
    for data in get_data_parts(list(message.parts)):
        if isinstance(data, dict) and data.get("decision") in (*DECISIONS, "answer"):
            return {k: data[k] for k in ("decision", "reason", "args", "text") if k in data}
    return None


def parse_decision(message: Message) -> dict[str, Any]:
    """The decision a person sent to a paused task, from a data part or the text fallback."""
    decided = _data_decision(message)
    if decided is not None:
        return decided
    text = " ".join(get_text_parts(list(message.parts)))
    match = _TEXT_DECISION.match(text)
    if match is None:
        raise RunError(
            "this task is waiting for a decision: answer 'approve', 'reject: REASON', or a data part "
            '{"decision": "approve" | "reject" | "edit" | "always"}'
        )
    word, rest = match.group(1).lower(), match.group(2).strip()
    if word in ("approve", "approved", "yes"):
        return {"decision": "approve"}
    if word == "always":
        return {"decision": "always"}
    return {"decision": "reject", "reason": rest or None}


class CleverAgentExecutor(AgentExecutor):
    """Executes tasks of ``agent`` on the Runtime; cancel stops the graph."""

    def __init__(self, runtime: Runtime, agent: str, rows: TaskStore | None = None) -> None:
        self.runtime = runtime
        self.agent = agent
        self.rows = rows
        """The A2A task rows (read for the outcome of a task another decision runs); None: the task as sent."""
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._stopping: str | None = None

    def running(self) -> list[asyncio.Task[Any]]:
        """The runs in progress (each an ``execute`` of a2a-sdk's producer task)."""
        return list(self._running.values())

    def stop(self, reason: str) -> None:
        """Cancel every run in progress: each task ends ``canceled`` with ``reason`` (its blocking
        client and subscribers get that state), and its tools are stopped (a shell tool's whole
        process group is killed)."""
        self._stopping = reason
        for run in self.running():
            run.cancel()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        current = asyncio.current_task()
        assert current is not None  # a2a-sdk runs execute in its own task
        self._running[task_id] = current
        # a2a-sdk runs each execute in a task of its own: the ids hold for this run's records only.
        logs.bind(task_id=task_id, context_id=context.context_id, caller=context.call_context.user.user_name)
        try:
            await self._execute(context, event_queue)
        finally:
            if self._running.get(task_id) is current:  # a second message's run may hold it now
                del self._running[task_id]

    async def _execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        message = context.message
        current = context.current_task
        if current is not None and current.context_id != context_id:
            # A follow-up naming only its task belongs to the task's context (A2A 3.4.3: "MUST infer
            # contextId from the task"); a2a-sdk 1.3.0 gives it a new one.
            context_id = current.context_id
            if message is not None:
                message.context_id = context_id
        updater = TaskUpdater(event_queue, task_id, context_id)
        answer_only = current is None and context.call_context.state.get(ANSWER_ONLY) is True
        submitted = Task(
            id=task_id,
            context_id=context_id,
            status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
            history=[message] if message is not None else [],
        )
        # An agent with message steps may answer with a Message, which must be the only event:
        # its task is announced only once the run shows it needs one.
        deferred = current is None and self._may_reply_with_message()
        if current is None and not deferred:
            await event_queue.enqueue_event(submitted)
        request = _request(message)
        if current is not None and current.status.state in _RUNNING:
            await self._outcome(context, current, event_queue)
            return
        try:
            if current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                assert message is not None
                try:
                    answer = await self._answer(task_id, message)
                    await self.runtime.acheck_decision(task_id, answer)
                except AlreadyDecided:
                    await self._outcome(context, current, event_queue)
                    return
                except CAError as exc:  # a wrong answer changes nothing: the task still waits, and says why
                    await updater.requires_input(_still_waiting(current, task_id, context_id, str(exc)))
                    return
                events = self.runtime.decide(task_id, answer, request=request, by=_decider(context))
            else:
                _may_send(context)
                text = context.get_user_input() if message is not None else ""
                caps, depth, parent, chain = _caller_limits(message)
                events = self.runtime.send(
                    self.agent,
                    text,
                    conversation=context_id,
                    skill=_skill(message),
                    task_id=task_id,
                    caps=caps,
                    depth=depth,
                    parent=parent,
                    chain=chain,
                    request=request,
                    caller=context.call_context.user.user_name,
                    tokens=not answer_only,
                )
            if deferred:
                seen, reply = await _settle(events)
                if reply is not None:
                    await event_queue.enqueue_event(agent_message("", context_id, [new_text_part(reply)]))
                    return
                await event_queue.enqueue_event(submitted)
                deferred = False
                events = _replay(seen)
            if not answer_only:
                await updater.start_work()
            await self._forward(events, _A2ATurn(self, updater, task_id, context_id, chunks=not answer_only))
        except AlreadyDecided:  # another decider's claim won between the check and ours: its run has the task
            assert current is not None
            await self._outcome(context, current, event_queue)
        except CAError as exc:  # a user-facing failure before the run started (unknown agent, bad decision...)
            if deferred:
                await event_queue.enqueue_event(submitted)
            await self._failed(Failure.of(exc), updater, task_id, context_id)
        except asyncio.CancelledError:
            reason = self._stopping or self.runtime.watch.reason(task_id)  # a server stopping, `ca tasks cancel`
            await self.runtime.amark_canceled(task_id, reason or "")
            if reason is not None:  # stopped by the server or another process, not by CancelTask: say so
                if deferred:
                    await event_queue.enqueue_event(submitted)
                await updater.cancel(agent_message(task_id, context_id, [new_text_part(reason)]))
            raise

    async def _outcome(self, context: RequestContext, current: Task, event_queue: EventQueue) -> None:
        """Answer a message to a task that another decision runs now — in this process or on another
        replica — with the state that run reaches (final, or waiting again), as a2a-sdk answers a
        message queued behind a run on one server. Nothing runs here and the task is left to its run;
        the answer is its row once the record has moved on."""
        while (record := await self.runtime.tasks.afind(current.id)) is not None and record.state in _RUNNING_STATES:
            await asyncio.sleep(OUTCOME_POLL_S)
        latest = await self.rows.get(current.id, context.call_context) if self.rows is not None else None
        await event_queue.enqueue_event(latest or derived(current, record))

    def _may_reply_with_message(self) -> bool:
        spec = self.runtime.bundle.project.agents.get(self.agent)
        return isinstance(spec, WorkflowAgent) and replies_with_message(spec)

    async def _answer(self, task_id: str, message: Message) -> dict[str, Any]:
        """A decision for every pending approval, or the text that answers a workflow's ``ask``."""
        pending = (await self.runtime.tasks.aget(task_id)).pending
        if all_questions([p.pause for p in pending]):
            text = "\n".join(get_text_parts(list(message.parts)))
            return _data_decision(message) or {"decision": "answer", "text": text}
        return parse_decision(message)

    async def _forward(self, events: Any, turn: _A2ATurn) -> None:
        await drive_turn(self.runtime, events, turn)

    async def _finish(
        self,
        event: RunFinished,
        pauses: list[Paused],
        reply: _ReplyStream,
        updater: TaskUpdater,
        task_id: str,
        context_id: str,
    ) -> None:
        if reply.chunks or event.state != "completed":
            await reply.flush()  # the reply so far stays in the task (a completed one's is replaced below)
        if event.failure is not None:
            await self._failed(event.failure, updater, task_id, context_id)
            return
        usage = to_wire(event.usage.to_json())
        if event.state == "input-required":
            await updater.requires_input(
                waiting_message(task_id, context_id, [(p.interrupt_id, p.payload) for p in pauses])
            )
            return
        # Completed: the whole reply as one part, replacing the streamed chunks (what GetTask and
        # non-streaming clients see is the clean text).
        if event.output or reply.sent or reply.buffer:
            await updater.add_artifact(
                [new_text_part(event.output)],
                artifact_id=REPLY_ARTIFACT,
                name="reply",
                append=False,
                last_chunk=True,
            )
        await updater.update_status(
            TaskState.TASK_STATE_COMPLETED,
            metadata={"stopReason": event.stop_reason, "usage": usage},
        )

    @staticmethod
    async def _failed(failure: Failure, updater: TaskUpdater, task_id: str, context_id: str) -> None:
        state, message = failure_status(failure, task_id, context_id)
        await updater.update_status(state, message=message)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel a task this process runs: its record first (one compare-and-set), then its row. A run
        that recorded its end first (completed, failed) keeps it: TaskNotCancelableError, and nothing
        is sent, so the run's own events write that end and the client is not told "canceled"."""
        task_id = context.task_id or ""
        if not await self.runtime.amark_canceled(task_id):
            ended = await self.runtime.tasks.afind(task_id)
            if ended is not None and ended.state in FINAL_STATES and ended.state != "canceled":
                raise TaskNotCancelableError(
                    f"task {task_id} {ended.state} before the cancel reached it; it was not canceled"
                )
        updater = TaskUpdater(event_queue, task_id, context.context_id or "")
        await updater.cancel()


class _A2ATurn:
    """The A2A view of a turn (:class:`framework.runtime.turn.TurnView`): every event becomes a task
    event; it never decides — the turn ends input-required and a decision comes as a message."""

    def __init__(
        self, executor: CleverAgentExecutor, updater: TaskUpdater, task_id: str, context_id: str, *, chunks: bool = True
    ) -> None:
        self.executor = executor
        self.updater = updater
        self.task_id = task_id
        self.context_id = context_id
        self.pauses: list[Paused] = []
        self.reply = _ReplyStream(updater, chunks=chunks)

    async def show(self, event: RunEvent) -> None:
        updater, task_id, context_id = self.updater, self.task_id, self.context_id
        if isinstance(event, TextChunk) and not event.source:
            await self.reply.add(event.text)
            return
        if isinstance(event, Paused):
            self.pauses.append(event)
            return
        if isinstance(event, RunFinished):
            await self.executor._finish(event, self.pauses, self.reply, updater, task_id, context_id)
            return
        if not isinstance(event, ToolCallStarted | ToolCallFinished | StepUpdate | ArtifactOut | MessageOut) or (
            isinstance(event, MessageOut) and event.source
        ):
            return  # usage, thoughts, plans, a called agent's text: no task event
        await self.reply.flush()  # keep the order of text and everything else
        if isinstance(event, ToolCallStarted | ToolCallFinished | StepUpdate):
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                message=agent_message(task_id, context_id, [new_data_part({EVENT_KEY: to_wire(event_to_json(event))})]),
            )
        elif isinstance(event, ArtifactOut):
            await updater.add_artifact(
                [_part(p) for p in event.parts],
                artifact_id=event.artifact_id,
                name=event.name,
                metadata={"description": event.description} if event.description else None,
                last_chunk=True,
            )
        else:
            await updater.update_status(
                TaskState.TASK_STATE_WORKING, message=agent_message(task_id, context_id, [new_text_part(event.text)])
            )

    async def decide(self, finished: RunFinished, pauses: list[Paused]) -> None:
        return None


class _ReplyStream:
    """Streams the reply as artifact chunks: the first at once (time to first token), then at most
    one chunk every ``COALESCE_SECONDS``. Each chunk is a task event that a2a-sdk applies to the
    task, queues and sends to every subscriber, so a chunk per token made a short reply cost ten of
    them; clients see the same text, in fewer pieces. Without ``chunks`` (:data:`ANSWER_ONLY`) the text
    is held until another event or the end: a completed run's whole reply replaces it anyway.
    """

    def __init__(self, updater: TaskUpdater, *, chunks: bool = True) -> None:
        self.updater = updater
        self.chunks = chunks
        self.buffer: list[str] = []
        self.sent = 0
        self.last = 0.0

    async def add(self, text: str) -> None:
        self.buffer.append(text)
        if self.chunks and (self.sent == 0 or time.monotonic() - self.last >= COALESCE_SECONDS):
            await self.flush()

    async def flush(self) -> None:
        if not self.buffer:
            return
        text = "".join(self.buffer)
        self.buffer.clear()
        await self.updater.add_artifact(
            [new_text_part(text)], artifact_id=REPLY_ARTIFACT, name="reply", append=self.sent > 0, last_chunk=False
        )
        self.sent += 1
        self.last = time.monotonic()


async def _settle(events: AsyncIterator[RunEvent]) -> tuple[list[RunEvent], str | None]:
    """Run to the end: its events, and the text of its message steps when that is all the run
    produced (a Message reply), else None (the events go out as a task)."""
    seen = [event async for event in events]
    texts = [e.text for e in seen if isinstance(e, MessageOut) and not e.source]
    finished = next((e for e in seen if isinstance(e, RunFinished)), None)
    other = any(isinstance(e, ArtifactOut | ToolCallStarted | Paused) for e in seen)
    if texts and not other and finished is not None and finished.state == "completed":
        return seen, "\n\n".join(texts)
    return seen, None


async def _replay(events: list[RunEvent]) -> AsyncIterator[RunEvent]:
    for event in events:
        yield event


def _part(part: Mapping[str, Any]) -> Part:
    """An A2A part from an ArtifactOut part (text, data, or a file as bytes or a URL)."""
    if "text" in part:
        return new_text_part(str(part["text"]))
    if "data" in part:
        return new_data_part(part["data"])
    file = part.get("file") or {}
    if "url" in file:
        return Part(url=str(file["url"]), filename=file.get("name", ""), media_type=file.get("media_type", ""))
    return Part(
        raw=str(file.get("content", "")).encode(), filename=file.get("name", ""), media_type=file.get("media_type", "")
    )


def _request(message: Message | None) -> dict[str, Any]:
    """What workflows see of the message (``{{ request.message_id }}``, ``{{ request.metadata.KEY }}``)."""
    if message is None:
        return {}
    from google.protobuf import json_format

    metadata = json_format.MessageToDict(message.metadata) if message.HasField("metadata") else {}
    return {"message_id": message.message_id, "metadata": metadata}


def _may_send(context: RequestContext) -> None:
    """A new task needs the ``caller`` role (an approver-only credential lists and decides approvals),
    and fails without running when the server refused its message before it reached here (:data:`REFUSED`)."""
    refused = context.call_context.state.get(REFUSED)
    if isinstance(refused, CAError):
        raise refused
    auth = context.call_context.state.get("auth")  # the request's AuthCredentials (a2a-sdk copies it here)
    if isinstance(auth, AuthCredentials) and "caller" not in auth.scopes:
        raise PolicyDenied(
            f"credential {context.call_context.user.user_name!r} has no role 'caller': it may list and decide"
            " approvals, not send messages; add 'caller' to its roles in server.auth.credentials"
        )


def _decider(context: RequestContext) -> str:
    """Who decides: an approver deciding through ``_cleveragents/approvals/decide`` (which sends the
    decision as the task's owner), else the caller who sent the reply (the task's owner)."""
    by = context.call_context.state.get(DECIDED_BY)
    return by if isinstance(by, str) and by else context.call_context.user.user_name


def _still_waiting(current: Task, task_id: str, context_id: str, why: str) -> Message:
    """The input-required status again, led by why the last answer could not be taken."""
    parts = list(current.status.message.parts) if current.status.HasField("message") else []
    texts = [p for p in parts if p.HasField("text")]  # [an earlier why,] the question
    rest = [p for p in parts if not p.HasField("text")]
    return agent_message(task_id, context_id, [new_text_part(f"{why}\n"), *texts[-1:], *rest])


def _caller_limits(message: Message | None) -> tuple[dict[str, float] | None, int, str, tuple[str, ...]]:
    """What a CleverAgents caller has left, how deep the call is, and the caller's task (metadata ``cleveragents``)."""
    if message is None or not message.HasField("metadata"):
        return None, 0, "", ()
    from google.protobuf import json_format

    data = json_format.MessageToDict(message.metadata).get("cleveragents")
    if not isinstance(data, dict):
        return None, 0, "", ()
    raw = data.get("caps")
    caps = {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)} if isinstance(raw, dict) else {}
    depth = data.get("depth")
    parent = data.get("parentTask")
    chain = tuple(str(x) for x in data.get("chain", []) if isinstance(x, str))
    return (caps or None), int(depth) if isinstance(depth, int | float) else 0, str(parent or ""), chain


def _skill(message: Message | None) -> str | None:
    if message is None or not message.HasField("metadata"):
        return None
    value = message.metadata.fields.get("skill")
    return value.string_value if value is not None and value.string_value else None
