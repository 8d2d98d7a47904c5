"""Who runs a task: its owner (the pid and host of the process running it) and that owner's lease,
and the orphans a process leaves when it dies mid-run.

A running task records its owner. On this host a dead owner is seen by its pid; another host's
process cannot be seen from here (replicas sharing PostgreSQL), so the owner renews a lease on
each task it runs every third of its lease, and once the lease (``store.task_lease``, by default
:data:`LEASE_S`) has expired any replica may settle the task. An orphan is either taken over
(:func:`taking_over`: an A2A server runs it again from its conversation's last checkpoint when
nothing of it can have had an effect, see ``Runtime.settle_orphans``) or ended ``failed`` with a
reason that says why it was not resumed (:func:`settling`): never run twice. The statements here
are the task store's (:class:`~framework.runtime.tasks.TaskStore` ``settle_orphans``, ``arenew``),
each a compare-and-set on the owner and its lease.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Collection
from dataclasses import dataclass
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
    "resumed because {why}: send the message again"
)
LEASE_EXPIRED = (
    "the process running this task (pid {pid} on {host}) stopped renewing its lease ({lease:g} s) while this task "
    "was running; it was not resumed because {why}: send the message again"
)
MAY_HAVE_RUN = "a tool may have run halfway"
"""Why an orphan is not resumed when nothing more is known (``ca run``, ACP, a task store on its own)."""
RUNNING = ("submitted", "working")
"""The states of a task some process runs (and owns)."""


def this_process() -> tuple[int, str]:
    """The pid and host a task run by this process records as its owner: the host as it was named
    when the process first asked (one name for all its rows; a fork asks again)."""
    global _ME
    pid = os.getpid()
    if _ME is None or _ME[0] != pid:
        _ME = (pid, socket.gethostname())
    return _ME


_ME: tuple[int, str] | None = None


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


@dataclass(frozen=True)
class Orphan:
    """A running task whose process is gone, as its row showed it (the compare-and-set of every statement on it)."""

    id: str
    state: str
    pid: int
    host: str
    lease: str
    expired: float = 0.0
    """The length of the lease that expired (another host's process), or 0: a dead pid of this host."""

    def reason(self, why: str = MAY_HAVE_RUN) -> str:
        """Why the task ends: its process stopped, and ``why`` it was not resumed."""
        if self.expired:
            return LEASE_EXPIRED.format(pid=self.pid, host=self.host, lease=self.expired, why=why)
        return ORPHANED.format(pid=self.pid, host=self.host, why=why)

    @property
    def owner(self) -> str:
        return f"pid {self.pid} on {self.host}"


def orphans(rows: list[tuple[Any, ...]], length: float = LEASE_S) -> list[Orphan]:
    """Each running task whose process is gone: on this host a pid that no longer runs, on another a
    lease (``length`` s) that expired."""
    pid, host = this_process()
    found = []
    for task_id, state, owner, owner_host, lease in rows:
        if owner_host == host and (owner == pid or process_alive(owner)):
            continue
        found.append(Orphan(task_id, state, owner, owner_host, lease, 0.0 if owner_host == host else length))
    return found


def _owned_as_seen(orphan: Orphan) -> tuple[str, tuple[Any, ...]]:
    """The condition (and its parameters) that the task is as :func:`orphans` saw it: claimed or
    renewed meanwhile, it is left alone."""
    return (
        "id = ? AND state = ? AND owner_pid = ? AND owner_host = ? AND lease_until = ?",
        (orphan.id, orphan.state, orphan.pid, orphan.host, orphan.lease),
    )


def settling(orphan: Orphan, why: str = MAY_HAVE_RUN) -> Statement:
    """The statement that ends an orphan ``failed``, saying ``why`` it was not resumed."""
    reason = orphan.reason(why)
    failure = json.dumps(Failure.of(RunError(reason)).to_json())
    where, params = _owned_as_seen(orphan)
    return (
        f"UPDATE tasks SET state = 'failed', error = ?, failure = ?, pending = '[]', updated_at = ? WHERE {where}",  # noqa: S608
        (reason, failure, now().isoformat(), *params),
    )


def taking_over(orphan: Orphan, lease: float = LEASE_S) -> Statement:
    """The statement that makes this process the owner of an orphan, with a new lease, still running."""
    where, params = _owned_as_seen(orphan)
    return (
        f"UPDATE tasks SET owner_pid = ?, owner_host = ?, lease_until = ?, updated_at = ? WHERE {where}",  # noqa: S608
        (*this_process(), lease_end(lease), now().isoformat(), *params),
    )


def turn_taken_over(orphan: Orphan, conversation: str) -> Statement:
    """The statement that gives the dead owner's turn of the conversation (see ``turns``) to this process,
    so the orphan's run keeps its place before any later message of the conversation."""
    return (
        "UPDATE turns SET pid = ?, host = ?, started_at = ? WHERE conversation = ? AND task_id = ? AND pid = ?"
        " AND host IN (?, '')",
        (*this_process(), now().isoformat(), conversation, orphan.id, orphan.pid, orphan.host),
    )


def renewal(task_ids: Collection[str], lease: float = LEASE_S) -> Statement:
    """The statement that extends this process's leases on these running tasks by ``lease`` seconds."""
    marks = ", ".join("?" for _ in task_ids)
    return (
        f"UPDATE tasks SET lease_until = ? WHERE id IN ({marks}) AND state IN (?, ?)"  # noqa: S608
        " AND owner_pid = ? AND owner_host = ?",
        (lease_end(lease), *task_ids, *RUNNING, *this_process()),
    )
