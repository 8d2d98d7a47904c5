"""How a task's state reads on the A2A wire, stated once.

The task record of the runtime (:class:`framework.runtime.tasks.TaskStore`) is the one source
of truth for a task's state; every entry point writes it. The A2A task row keeps what only A2A
has (history, streamed artifacts) and its status is *derived* from the record: the executor
words each state it reaches with these functions, and the task store, reading a row, derives
its status from the record with the same functions (:func:`derived`). So a decision made
elsewhere — ``ca approve`` in a terminal, an ACP client, another process — shows on the next
GetTask, ListTasks or subscription at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus

from framework.errors import Failure, FailureCode, RunError
from framework.protocols.a2a.wire import to_wire
from framework.runtime.pauses import all_questions, read_pause

if TYPE_CHECKING:
    from framework.runtime.task_record import Task as Record

APPROVAL_EXTENSION = "urn:cleveragents:extensions:v1"
"""Data parts of input-required statuses and of decisions are defined by this extension."""
REPLY_ARTIFACT = "reply"
"""The artifact that holds an agent's answer (streamed in chunks, then replaced whole)."""

STATES: Mapping[str, TaskState] = {
    "submitted": TaskState.TASK_STATE_SUBMITTED,
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
    "rejected": TaskState.TASK_STATE_REJECTED,
}
"""A task record's state -> the A2A task state."""


def agent_message(task_id: str, context_id: str, parts: list[Part]) -> Message:
    """A message from the agent in a task (a status message, or a reply)."""
    return Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_AGENT, parts=parts, task_id=task_id, context_id=context_id
    )


def waiting_message(task_id: str, context_id: str, pauses: Sequence[tuple[str, Mapping[str, Any]]]) -> Message:
    """The input-required status message for ``pauses`` ((interrupt id, payload) pairs): the questions
    as text, and a data part listing each pending decision with the answers it takes."""
    typed = [(interrupt_id, payload, read_pause(payload)) for interrupt_id, payload in pauses]
    pending = [to_wire({"id": i, **payload, "decisions": list(pause.decisions)}) for i, payload, pause in typed]
    text = "\n".join(pause.message or pause.kind for _, _, pause in typed)
    asks = all_questions([pause for _, _, pause in typed])
    how = "Reply with your answer." if asks else "Reply 'approve' or 'reject: REASON'."
    return agent_message(
        task_id,
        context_id,
        [new_text_part(f"{text}\n{how}"), new_data_part({"extension": APPROVAL_EXTENSION, "pending": pending})],
    )


FAILURE_STATES: Mapping[FailureCode, TaskState] = {"cancelled": TaskState.TASK_STATE_CANCELED}
"""The A2A task state a failure ends its task in: FAILED unless listed here, or REJECTED when its
error class says a person rejected it (``Failure.rejected``)."""


def failure_status(failure: Failure, task_id: str, context_id: str) -> tuple[TaskState, Message]:
    """The A2A end of a failed run: its state, and a status message with the reason as text and
    ``{"error": {"code": CODE, "reason": TEXT}}`` as data (the code is the failure's, never guessed)."""
    state = FAILURE_STATES.get(failure.code, TaskState.TASK_STATE_FAILED)
    if failure.rejected:  # a person said no: A2A's REJECTED, the code still approval_rejected
        state = TaskState.TASK_STATE_REJECTED
    error = {"code": failure.code, "reason": failure.message}
    return state, agent_message(task_id, context_id, [new_text_part(failure.message), new_data_part({"error": error})])


def derived(task: Task, record: Record | None) -> Task:
    """``task`` (an A2A row) with the state its record has, worded as the executor words it.

    The row is returned as it is when it already shows the record's state (the usual case:
    the executor wrote both) or when no record names it.
    """
    state = STATES.get(record.state) if record is not None else None
    if record is None or state is None or task.status.state == state:
        return task
    out = Task()
    out.CopyFrom(task)
    message: Message | None = None
    if record.state == "input-required":
        message = waiting_message(task.id, task.context_id, [(p.interrupt_id, p.payload) for p in record.pending])
    elif record.state in ("failed", "rejected"):
        state, message = failure_status(record.failure or Failure.of(RunError(record.error)), task.id, task.context_id)
    elif record.state == "completed":
        kept = [a for a in out.artifacts if a.artifact_id != REPLY_ARTIFACT]
        del out.artifacts[:]
        out.artifacts.extend(kept)
        if record.output:
            out.artifacts.append(
                Artifact(artifact_id=REPLY_ARTIFACT, name="reply", parts=[new_text_part(record.output)])
            )
    status = TaskStatus(state=state, message=message) if message is not None else TaskStatus(state=state)
    if record.updated_at:
        status.timestamp.FromDatetime(datetime.fromisoformat(record.updated_at))
    out.status.CopyFrom(status)
    return out
