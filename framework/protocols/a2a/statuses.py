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

from framework.protocols.a2a.wire import to_wire

if TYPE_CHECKING:
    from framework.runtime.tasks import Pending
    from framework.runtime.tasks import Task as Record

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


def decisions(payload: Mapping[str, Any]) -> list[str]:
    """What a person may answer to one pause: an ask takes free text (or a reject)."""
    if payload.get("kind") == "ask":
        return ["answer", "reject"]
    return list(payload.get("options", ["approve", "reject"]))


def waiting_message(task_id: str, context_id: str, pauses: Sequence[tuple[str, Mapping[str, Any]]]) -> Message:
    """The input-required status message for ``pauses`` ((interrupt id, payload) pairs): the questions
    as text, and a data part listing each pending decision with the answers it takes."""
    pending = [
        to_wire({"id": interrupt_id, **payload, "decisions": decisions(payload)}) for interrupt_id, payload in pauses
    ]
    text = "\n".join(str(p.get("message", p.get("kind"))) for p in pending)
    asks = all(p.get("kind") == "ask" for p in pending)
    how = "Reply with your answer." if asks else "Reply 'approve' or 'reject: REASON'."
    return agent_message(
        task_id,
        context_id,
        [new_text_part(f"{text}\n{how}"), new_data_part({"extension": APPROVAL_EXTENSION, "pending": pending})],
    )


def failed_message(task_id: str, context_id: str, error: str, code: str) -> Message:
    """The failed status message: the error as text, and ``{"error": {code, reason}}`` as data."""
    reason = {"code": code, "reason": error}
    return agent_message(task_id, context_id, [new_text_part(error), new_data_part({"error": reason})])


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
        message = waiting_message(task.id, task.context_id, [_pause(p) for p in record.pending])
    elif record.state == "failed":
        message = failed_message(task.id, task.context_id, record.error, "run_failed")
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


def _pause(pending: Pending) -> tuple[str, Mapping[str, Any]]:
    return pending.interrupt_id, pending.payload
