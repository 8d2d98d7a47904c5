"""Who runs a task: its owner (the pid and host of the process running it) and that owner's lease,
and the orphans a process leaves when it dies mid-run.

A running task records its owner. On this host a dead owner is seen by its pid; another host's
process cannot be seen from here (replicas sharing PostgreSQL), so the owner renews a lease on
each task it runs every third of its lease, and once the lease (``store.task_lease``, by default
:data:`LEASE_S`) has expired any
replica may settle the task. An orphan is ended ``failed`` with a reason that says why it was not
resumed (a tool may have run halfway): never run twice. The statements here are the task
store's (:class:`~framework.runtime.tasks.TaskStore` ``settle_orphans``, ``arenew``), each a
compare-and-set on the owner and its lease.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Collection
from datetime import UTC, datetime, timedelta
from typing import Any

from framework.errors import Failure, RunError

Statement = tuple[str, tuple[Any, ...]]

LEASE_S = 15.0
"""How long a running task's lease lasts by default (``store.task_lease``, ``CA_TASK_LEASE``): the process
running it renews it every third of that (:attr:`TaskStore.renew_every`, while PostgreSQL holds the tasks);
past it, any replica settles the task as orphaned."""

ORPHANED = (
    "the process running this task (pid {pid} on {host}) stopped while this task was running; it was not "
    "resumed because a tool may have run halfway: send the message again"
)
LEASE_EXPIRED = (
    "the process running this task (pid {pid} on {host}) stopped renewing its lease ({lease:g} s) while this task "
    "was running; it was not resumed because a tool may have run halfway: send the message again"
)
RUNNING = ("submitted", "working")
"""The states of a task some process runs (and owns)."""


def this_process() -> tuple[int, str]:
    """The pid and host a task run by this process records as its owner."""
    return os.getpid(), socket.gethostname()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` (of this host) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def now() -> datetime:
    return datetime.now(UTC)


def lease_end(seconds: float = LEASE_S) -> str:
    """When a lease of ``seconds`` taken now ends (ISO, microseconds always: the text compares as the time does)."""
    return (now() + timedelta(seconds=seconds)).isoformat(timespec="microseconds")


# Running tasks of this host's processes (judged by their pid) and of other hosts' whose lease expired.
RUNNING_OR_EXPIRED = (
    "SELECT id, state, owner_pid, owner_host, lease_until FROM tasks WHERE state IN (?, ?) AND owner_pid != 0"
    " AND (owner_host = ? OR (lease_until != '' AND lease_until < ?))"
)


def running_or_expired(local: bool) -> tuple[Any, ...]:
    """The parameters of :data:`RUNNING_OR_EXPIRED`; ``local``: the database is SQLite, one host's."""
    # Leases are renewed only where replicas share the tasks (PostgreSQL): on SQLite none expires.
    expired_before = "" if local else now().isoformat(timespec="microseconds")
    return (*RUNNING, this_process()[1], expired_before)


def orphans(rows: list[tuple[Any, ...]], length: float = LEASE_S) -> list[tuple[Any, ...]]:
    """(id, state, owner pid, owner host, lease, reason, failure JSON) of each running task whose
    process is gone: on this host a pid that no longer runs, on another a lease (``length`` s) that expired."""
    pid, host = this_process()
    found = []
    for task_id, state, owner, owner_host, lease in rows:
        if owner_host == host:
            if owner == pid or process_alive(owner):
                continue
            reason = ORPHANED.format(pid=owner, host=host)
        else:
            reason = LEASE_EXPIRED.format(pid=owner, host=owner_host, lease=length)
        failure = json.dumps(Failure.of(RunError(reason)).to_json())
        found.append((task_id, state, owner, owner_host, lease, reason, failure))
    return found


def settling(orphan: tuple[Any, ...]) -> Statement:
    """The statement that ends one of :func:`orphans` ``failed``."""
    task_id, state, owner, owner_host, lease, reason, failure = orphan
    # A compare-and-set on the owner and its lease: a task claimed or renewed meanwhile is left alone.
    return (
        "UPDATE tasks SET state = 'failed', error = ?, failure = ?, pending = '[]', updated_at = ?"
        " WHERE id = ? AND state = ? AND owner_pid = ? AND owner_host = ? AND lease_until = ?",
        (reason, failure, now().isoformat(), task_id, state, owner, owner_host, lease),
    )


def renewal(task_ids: Collection[str], lease: float = LEASE_S) -> Statement:
    """The statement that extends this process's leases on these running tasks by ``lease`` seconds."""
    marks = ", ".join("?" for _ in task_ids)
    return (
        f"UPDATE tasks SET lease_until = ? WHERE id IN ({marks}) AND state IN (?, ?)"  # noqa: S608
        " AND owner_pid = ? AND owner_host = ?",
        (lease_end(lease), *task_ids, *RUNNING, *this_process()),
    )
