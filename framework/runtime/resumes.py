"""Which orphans (tasks whose process died mid-run, :mod:`~framework.runtime.leases`) may run again.

A run checkpoints its conversation only when it ends or pauses, and every tool call — MCP and agent
calls included — is audited (``tool.call``) before it runs. So a task whose audit shows no tool call
and no pause has had no effect yet: running it again from its conversation's last checkpoint (its own,
when it got to its end or pause before it died: ``Runner.run(again=True)``) repeats nothing but
model calls. ``Runtime.settle_orphans`` asks :func:`why_not_resumed` of each.
"""

from __future__ import annotations

from typing import Any

from framework.runtime.audit import AuditLog
from framework.runtime.leases import MAY_HAVE_RUN
from framework.runtime.task_record import Task
from framework.spec.project import Project

RESUMES = 2
"""How many times an orphan is resumed at most: a message whose run stops its process each time
(out of memory, say) must not stop every replica in turn."""
_ASKED = ("skill", "caps", "depth", "chain")
"""What a ``submitted`` audit record keeps of a message besides its text: what a resumed run needs."""
_RESUME_RECORDS = 1000
"""An orphan with more audit records than this is not looked through, and not resumed."""


async def why_not_resumed(task: Task, project: Project, audit: AuditLog) -> tuple[str, dict[str, Any]]:
    """Why the orphan ``task`` cannot run again ("" when it can), and what its message asked (the
    skill and limits its ``submitted`` audit record keeps)."""
    if task.source != "a2a-http":
        return MAY_HAVE_RUN, {}
    if task.parent:
        return "it was a call made by another task's run, which is settled on its own", {}
    spec = project.agents.get(task.agent)
    if spec is None:
        return f"its agent {task.agent!r} is no longer served", {}
    if spec.kind == "workflow":
        return "a workflow is not run again once it started", {}
    records = await audit.aquery(task_id=task.id, limit=_RESUME_RECORDS)
    asked: dict[str, Any] | None = None
    resumed = 0
    for record in records:
        if record.kind == "tool.call":
            return f"a tool call ({record.data.get('tool', '?')}) had started", {}
        state = record.data.get("state") if record.kind == "task.state" else None
        if state == "submitted":
            if record.data.get("masked"):  # run again, the model would get another message than was sent
                return "its message held a secret value, which the task record keeps masked", {}
            asked = {k: record.data[k] for k in _ASKED if k in record.data}
        elif state == "input-required":
            return "it had paused for a decision, and what was decided may have run", {}
        elif state == "working" and "resumed_from" in record.data:
            resumed += 1
    if asked is None or len(records) >= _RESUME_RECORDS:  # not all of its records seen
        return MAY_HAVE_RUN, {}
    if resumed >= RESUMES:
        return f"it was resumed {resumed} times already and its process stopped each time", {}
    return "", asked
