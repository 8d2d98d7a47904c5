"""What a decision on a paused task may be, what each pending pause is answered with, and how long
a pause may wait: the rules :meth:`Runtime.decide` and :meth:`Runtime._finish` apply (the Runtime
records and audits; these only decide)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from framework.errors import ApprovalTimedOut, RunError
from framework.runtime.audit import AuditLog
from framework.runtime.events import Paused
from framework.runtime.leases import now
from framework.runtime.pauses import Gate, Pause, Question
from framework.runtime.task_record import Pending, Task, expiry
from framework.runtime.tasks import AlreadyDecided
from framework.spec.project import Project


def check_decision(task: Task, decision: Mapping[str, Any]) -> None:
    """Raise AlreadyDecided unless ``task`` waits for a decision, and a RunError saying what it waits
    for when ``decision`` cannot answer it (an answer to an approval, an approval of a question)."""
    if task.state != "input-required" or not task.pending:
        who = f"was already decided by {task.decided_by} at {task.decided_at}; it " if task.decided_by else ""
        raise AlreadyDecided(f"task {task.id[:12]} {who}is {task.state}, not waiting for a decision")
    asks = [isinstance(p.pause, Question) for p in task.pending]
    kind = decision.get("decision")
    if kind == "answer" and not all(asks):
        raise RunError(f"task {task.id[:12]} waits for an approval, not an answer: approve or reject it")
    if kind in ("approve", "always", "edit") and any(asks):
        raise RunError(f"task {task.id[:12]} asks a question: answer it with text (or reject it)")


def answer_to(task: Task, pending: Pending, decision: Mapping[str, Any]) -> dict[str, Any]:
    """What answers ``pending``: ``decision``, or once it expired its ``on_timeout`` (approve or
    reject); ApprovalTimedOut when it expired under ``on_timeout: fail``."""
    if not pending.expired():
        return dict(decision)
    if pending.on_timeout == "fail":
        raise ApprovalTimedOut(
            f"task {task.id[:12]}: the approval timed out (on_timeout: fail); the task failed",
            data={"interrupt": pending.interrupt_id, "expired_at": pending.expires_at},
        )
    return {"decision": "approve" if pending.on_timeout == "approve" else "reject", "reason": "the approval timed out"}


def resume_value(pause: Pause, answer: Mapping[str, Any]) -> Any:
    """A workflow gate reads ``{approved, reason}``, an ask ``{text}`` or ``{declined, reason}``;
    tool approvals and budgets read ``{decision, ...}``."""
    if isinstance(pause, Question):
        if answer.get("decision") == "reject":
            return {"declined": True, "reason": answer.get("reason")}
        return {"text": str(answer.get("text") or "")}
    if isinstance(pause, Gate):
        return {"approved": answer.get("decision") in ("approve", "always"), "reason": answer.get("reason")}
    return dict(answer)


def pending_of(project: Project, agent: str, paused: Paused) -> Pending:
    """The pending decision ``paused`` leaves on a task of ``agent``, paused now, with its expiry."""
    paused_at = now()
    timeout, on_timeout = _timeout(project, agent, paused.pause)
    return Pending(paused.interrupt_id, paused.payload, paused_at.isoformat(), expiry(paused_at, timeout), on_timeout)


def _timeout(project: Project, agent: str, pause: Pause) -> tuple[float | None, str]:
    """How long a pause may wait, and what answers it then: a step's own timeout (rejected), or
    the approval timeout of the asking agent's profile."""
    if isinstance(pause, Gate | Question):
        return pause.timeout, "reject"
    spec = project.agents.get(pause.agent or agent)
    name = (spec.profile if spec else None) or project.config.defaults.profile
    profile = project.profiles.get(name) if name else None
    if profile is None:
        return None, "reject"
    return profile.approval.timeout, profile.approval.on_timeout


async def answers_of(task: Task, decision: Mapping[str, Any], audit: AuditLog, source: str) -> dict[str, Any]:
    """The resume value of each pending decision of ``task``, by interrupt id, each audited
    (``approval``, from ``source``); ApprovalTimedOut when one expired under ``on_timeout: fail``
    (:func:`answer_to`). The records of the decisions answered before one that failed are
    written, all of them in one group (:meth:`AuditLog.aappend_all`)."""
    answers: dict[str, Any] = {}
    records: list[tuple[str, dict[str, Any]]] = []
    try:
        for pending in task.pending:
            answer = answer_to(task, pending, decision)
            data = {"interrupt": pending.interrupt_id, "payload_kind": pending.pause.kind, "by": task.decided_by}
            records.append(
                (
                    "approval",
                    {
                        "source": source,
                        "task_id": task.id,
                        "conversation_id": task.conversation,
                        "agent": task.agent,
                        "data": {**data, **answer},
                    },
                )
            )
            answers[pending.interrupt_id] = resume_value(pending.pause, answer)
    finally:
        await audit.aappend_all(records)
    return answers
