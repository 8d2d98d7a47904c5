"""``ca tasks cancel TASK``: end any task of the project, wherever it waits or runs."""

from __future__ import annotations

import getpass
from pathlib import Path

from framework.runtime.cancel import STOP_WAIT_S, Canceled, cancel_task

HOW = {
    "paused": "it was waiting for a decision",
    "here": "it was running in this process",
    "other process": "the process running it (pid {pid}) stopped it",
    "orphan": "the process that ran it (pid {pid}) had stopped",
}
"""What the line printed after a cancel says about where the task was."""


async def cancel_command(project_dir: Path, task_id: str, wait: float = STOP_WAIT_S) -> Canceled:
    """Cancel ``task_id`` as ``cli:<os user>``: the records are written here, a run in another
    process is stopped by that process (this waits up to ``wait`` seconds for it)."""
    from framework.runtime.audit import AuditLog
    from framework.runtime.audit_chain import chain_key
    from framework.runtime.tasks import TaskStore
    from framework.spec import load_project

    project = load_project(project_dir)
    key = chain_key(project.config.audit, project.root)  # a keyed chain takes only keyed records
    lock_timeout = project.config.store.lock_timeout
    tasks = TaskStore.open(project.root, url=project.config.store.url, lock_timeout=lock_timeout)
    try:
        with AuditLog.of_project(project, key=key, lock_timeout=lock_timeout) as audit:
            return await cancel_task(tasks, audit, task_id, by=f"cli:{getpass.getuser()}", source="cli", wait=wait)
    finally:
        tasks.close()


def describe(outcome: Canceled) -> str:
    """The line ``ca tasks cancel`` prints."""
    return f"canceled task {outcome.task.id[:12]}: " + HOW[outcome.how].format(pid=outcome.task.owner_pid)
