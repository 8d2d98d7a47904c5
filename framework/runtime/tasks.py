"""Tasks: one request to an agent, from submitted to a final state, kept in ``.ca/tasks.db``.

A task that pauses (``input-required``) keeps its pending decisions here, so any
process — ``ca approve`` in another terminal, a server after a restart — can find
and answer them. The conversation itself (messages, the paused graph) lives in
the checkpointer; this table only says what is waiting for whom.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from framework.errors import Failure, RunError, TaskNotWaiting
from framework.runtime.governance.secrets import KNOWN
from framework.runtime.pauses import Pause, all_questions, read_pause
from framework.runtime.store_locks import LOCK_TIMEOUT_S, no_wait, retried, until_free
from framework.runtime.stores import opening, state_dir

TaskState = Literal["submitted", "working", "input-required", "completed", "failed", "canceled", "rejected"]
FINAL_STATES = ("completed", "failed", "canceled", "rejected")
_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    conversation TEXT NOT NULL,
    source TEXT NOT NULL,
    state TEXT NOT NULL,
    input TEXT NOT NULL DEFAULT '',
    output TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    pending TEXT NOT NULL DEFAULT '[]',
    usage TEXT NOT NULL DEFAULT '{}',
    parent TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at TEXT NOT NULL DEFAULT '',
    failure TEXT NOT NULL DEFAULT '',
    owner_pid INTEGER NOT NULL DEFAULT 0,
    owner_host TEXT NOT NULL DEFAULT '',
    cancel_requested TEXT NOT NULL DEFAULT '',
    caller TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state);
CREATE TABLE IF NOT EXISTS remote_calls (
    key TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    task_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_conversation ON tasks(conversation);
"""


_ADDED_COLUMNS = {
    "decided_by": "TEXT NOT NULL DEFAULT ''",
    "decided_at": "TEXT NOT NULL DEFAULT ''",
    "failure": "TEXT NOT NULL DEFAULT ''",
    "owner_pid": "INTEGER NOT NULL DEFAULT 0",
    "owner_host": "TEXT NOT NULL DEFAULT ''",
    "cancel_requested": "TEXT NOT NULL DEFAULT ''",
    "caller": "TEXT NOT NULL DEFAULT ''",
}
"""Columns added after the first release of the table, with their definitions."""


ORPHANED = (
    "the process running this task (pid {pid} on {host}) stopped while this task was running; it was not "
    "resumed because a tool may have run halfway: send the message again"
)
_RUNNING = ("submitted", "working")


def _owner() -> tuple[int, str]:
    """This process, as a task's owner."""
    return os.getpid(), socket.gethostname()


def this_process() -> tuple[int, str]:
    """The pid and host a task run by this process records as its owner."""
    return _owner()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` (of this host) still runs."""
    return _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Pending:
    """A decision a paused task waits for."""

    interrupt_id: str
    payload: dict[str, Any]
    paused_at: str
    expires_at: str | None = None
    on_timeout: str = "reject"

    def expired(self, at: datetime | None = None) -> bool:
        return self.expires_at is not None and (at or now()) >= datetime.fromisoformat(self.expires_at)

    @property
    def pause(self) -> Pause:
        """What the decision is about, typed (the payload is its wire form)."""
        return read_pause(self.payload)


@dataclass(frozen=True)
class Task:
    id: str
    agent: str
    conversation: str
    source: str
    state: TaskState
    input: str = ""
    output: str = ""
    error: str = ""
    pending: tuple[Pending, ...] = ()
    usage: dict[str, Any] = field(default_factory=dict)
    parent: str = ""
    created_at: str = ""
    updated_at: str = ""
    decided_by: str = ""
    """Who answered the task's last pause (``cli:alice``, ``acp``, a credential's name)."""
    decided_at: str = ""
    failure: Failure | None = None
    """How the task failed, typed (kind, code, message), when it did."""
    owner_pid: int = 0
    """The process that last started running the task (0: recorded before owners were)."""
    owner_host: str = ""
    """The host of that process."""
    cancel_requested: str = ""
    """Who asked another process to stop this running task (``ca tasks cancel``), empty if no one."""
    caller: str = ""
    """Who sent the task (its A2A owner): a credential's name, ``local:<os user>``, ``cli:<os user>``,
    ``acp``, ``anonymous``; a child task has its parent's. Empty for tasks recorded before callers were."""


class TaskStore:
    """SQLite-backed task table (WAL); safe across threads and processes.

    Every method has a blocking form and writes have an async one (``acreate``, ``aupdate``,
    ``aclaim``, ...): the async forms wait for another process's write lock with the event loop
    running (:mod:`framework.runtime.store_locks`), so the serving path uses them.
    """

    def __init__(self, path: Path, *, lock_timeout: float = LOCK_TIMEOUT_S) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        """Seconds a write waits for another process's write lock before StoreBusy."""
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, timeout=lock_timeout, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")  # crash-safe in WAL; see audit_store
        self._conn.executescript(_SCHEMA)
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(tasks)")}
        for column in _ADDED_COLUMNS.keys() - columns:  # a tasks.db written before these existed
            self._conn.execute(f"ALTER TABLE tasks ADD COLUMN {column} {_ADDED_COLUMNS[column]}")
        no_wait(self._conn)  # set up: from now on a locked file is waited for by store_locks, not SQLite

    @classmethod
    def open(cls, root: Path, *, lock_timeout: float = LOCK_TIMEOUT_S) -> TaskStore:
        path = state_dir(root) / "tasks.db"
        with opening(path):  # a file that is not a database: a StoreError naming it
            return cls(path, lock_timeout=lock_timeout)

    def close(self) -> None:
        self._conn.close()

    def _run(self, statement: Callable[[sqlite3.Connection], _T]) -> _T:
        """``statement`` on the connection, waiting (blocking) while another process writes."""
        return retried(lambda: self._locked(statement), path=self.path, timeout=self.lock_timeout)

    async def _arun(self, statement: Callable[[sqlite3.Connection], _T]) -> _T:
        """``statement`` on the connection, waiting with the event loop running while another process writes."""
        return await until_free(lambda: self._locked(statement), path=self.path, timeout=self.lock_timeout)

    def _locked(self, statement: Callable[[sqlite3.Connection], _T]) -> _T:
        with self._lock:
            return statement(self._conn)

    def _creation(
        self,
        *,
        agent: str,
        conversation: str,
        source: str,
        input: str,
        parent: str,
        task_id: str | None,
        caller: str,
    ) -> tuple[Task, Callable[[sqlite3.Connection], object]]:
        stamp = now().isoformat()
        input = KNOWN.text(input)
        pid, host = _owner()
        task = Task(
            id=task_id or uuid.uuid4().hex,
            agent=agent,
            conversation=conversation,
            source=source,
            state="submitted",
            input=input,
            parent=parent,
            created_at=stamp,
            updated_at=stamp,
            owner_pid=pid,
            owner_host=host,
            caller=caller,
        )
        values = (task.id, agent, conversation, source, task.state, input, parent, stamp, stamp, pid, host, caller)
        return task, lambda conn: conn.execute(
            "INSERT INTO tasks (id, agent, conversation, source, state, input, parent, created_at, updated_at,"
            " owner_pid, owner_host, caller) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            values,
        )

    def create(
        self,
        *,
        agent: str,
        conversation: str,
        source: str,
        input: str,
        parent: str = "",
        task_id: str | None = None,
        caller: str = "",
    ) -> Task:
        """Record a new task (``task_id``: a transport's own id, e.g. an A2A task id) sent by ``caller``."""
        task, insert = self._creation(
            agent=agent,
            conversation=conversation,
            source=source,
            input=input,
            parent=parent,
            task_id=task_id,
            caller=caller,
        )
        self._run(insert)
        return task

    async def acreate(
        self,
        *,
        agent: str,
        conversation: str,
        source: str,
        input: str,
        parent: str = "",
        task_id: str | None = None,
        caller: str = "",
    ) -> Task:
        """:meth:`create`, waiting for the lock with the event loop running."""
        task, insert = self._creation(
            agent=agent,
            conversation=conversation,
            source=source,
            input=input,
            parent=parent,
            task_id=task_id,
            caller=caller,
        )
        await self._arun(insert)
        return task

    def _updating(
        self,
        task_id: str,
        *,
        state: TaskState,
        output: str | None = None,
        error: str | None = None,
        pending: tuple[Pending, ...] | None = None,
        usage: dict[str, Any] | None = None,
        failure: Failure | None = None,
        unless_final: bool = False,
    ) -> Callable[[sqlite3.Connection], int]:
        sets = ["state = ?", "updated_at = ?"]
        values: list[Any] = [state, now().isoformat()]
        if state in _RUNNING:  # whoever runs it owns it: a crash of this process leaves an orphan
            sets.append("owner_pid = ?, owner_host = ?")
            values.extend(_owner())
        for column, value in (("output", output), ("error", error)):
            if value is not None:
                sets.append(f"{column} = ?")
                values.append(KNOWN.text(value))
        if pending is not None:
            sets.append("pending = ?")
            values.append(json.dumps(KNOWN.value([p.__dict__ for p in pending])))
        if usage is not None:
            sets.append("usage = ?")
            values.append(json.dumps(usage))
        if failure is not None:
            sets.append("failure = ?")
            values.append(json.dumps(KNOWN.value(failure.to_json())))
        where = "id = ?" + (f" AND state NOT IN {FINAL_STATES!r}" if unless_final else "")
        query = f"UPDATE tasks SET {', '.join(sets)} WHERE {where}"  # noqa: S608
        return lambda conn: conn.execute(query, (*values, task_id)).rowcount

    def update(
        self,
        task_id: str,
        *,
        state: TaskState,
        output: str | None = None,
        error: str | None = None,
        pending: tuple[Pending, ...] | None = None,
        usage: dict[str, Any] | None = None,
        failure: Failure | None = None,
    ) -> Task:
        self._run(
            self._updating(
                task_id, state=state, output=output, error=error, pending=pending, usage=usage, failure=failure
            )
        )
        return self.get(task_id)

    async def aupdate(
        self,
        task_id: str,
        *,
        state: TaskState,
        output: str | None = None,
        error: str | None = None,
        pending: tuple[Pending, ...] | None = None,
        usage: dict[str, Any] | None = None,
        failure: Failure | None = None,
    ) -> Task:
        """:meth:`update`, waiting for the lock with the event loop running."""
        await self._arun(
            self._updating(
                task_id, state=state, output=output, error=error, pending=pending, usage=usage, failure=failure
            )
        )
        return self.get(task_id)

    async def aend(self, task_id: str, *, state: TaskState, error: str | None = None) -> bool:
        """Move a task that is not final yet to ``state`` (pending decisions dropped), as one
        compare-and-set: of an ending and a decision or another ending at the same moment, one wins.
        Whether this one did."""
        return await self._arun(self._updating(task_id, state=state, error=error, pending=(), unless_final=True)) == 1

    def _claiming(self, task_id: str, by: str) -> Callable[[sqlite3.Connection], int]:
        stamp = now().isoformat()
        owner = _owner()
        return lambda conn: (
            conn.execute(
                "UPDATE tasks SET state = 'working', decided_by = ?, decided_at = ?, updated_at = ?,"
                " owner_pid = ?, owner_host = ? WHERE id = ? AND state = 'input-required'",
                (by, stamp, stamp, *owner, task_id),
            ).rowcount
        )

    def _claimed(self, task_id: str, claimed: int) -> Task:
        task = self.get(task_id)
        if claimed != 1:
            who = f" by {task.decided_by} at {task.decided_at}" if task.decided_by else ""
            raise AlreadyDecided(f"task {task.id[:12]} was already decided{who}; it is {task.state} now")
        return task

    def claim(self, task_id: str, by: str) -> Task:
        """Take the decision of a paused task: one atomic compare-and-set from ``input-required`` to
        ``working``, so of any number of deciders — threads, processes, protocols — exactly one wins.
        The others get a RunError that says who decided and when."""
        return self._claimed(task_id, self._run(self._claiming(task_id, by)))

    async def aclaim(self, task_id: str, by: str) -> Task:
        """:meth:`claim`, waiting for the lock with the event loop running."""
        return self._claimed(task_id, await self._arun(self._claiming(task_id, by)))

    def _orphans(self) -> list[tuple[str, str, int, str, str]]:
        """(id, state, owner pid, reason, failure JSON) of each running task whose process is gone."""
        pid, host = _owner()
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT id, state, owner_pid FROM tasks WHERE state IN (?, ?) AND owner_host = ? AND owner_pid != 0",
                (*_RUNNING, host),
            ).fetchall()
        )
        found = []
        for task_id, state, owner in rows:
            if owner == pid or _alive(owner):
                continue
            reason = ORPHANED.format(pid=owner, host=host)
            found.append((task_id, state, owner, reason, json.dumps(Failure.of(RunError(reason)).to_json())))
        return found

    @staticmethod
    def _settling(orphan: tuple[str, str, int, str, str]) -> Callable[[sqlite3.Connection], int]:
        task_id, state, owner, reason, failure = orphan
        host = _owner()[1]
        return lambda conn: (
            conn.execute(
                "UPDATE tasks SET state = 'failed', error = ?, failure = ?, pending = '[]', updated_at = ?"
                " WHERE id = ? AND state = ? AND owner_pid = ? AND owner_host = ?",
                (reason, failure, now().isoformat(), task_id, state, owner, host),
            ).rowcount
        )

    def settle_orphans(self) -> list[Task]:
        """End ``failed`` (:data:`ORPHANED`, with the pid) every running task whose process is gone.

        Only tasks owned on this host by a process that no longer exists: a task another live
        process runs is never touched (nor one of another host, whose processes cannot be seen
        from here). Each is one compare-and-set on its owner, so a task that was meanwhile
        claimed again is left alone. Returns the tasks settled, as they are now.
        """
        return [self.get(o[0]) for o in self._orphans() if self._run(self._settling(o)) == 1]

    async def asettle_orphans(self) -> list[Task]:
        """:meth:`settle_orphans`, waiting for the lock with the event loop running."""
        return [self.get(o[0]) for o in self._orphans() if await self._arun(self._settling(o)) == 1]

    async def acancel_paused(self, task_id: str, by: str, reason: str) -> bool:
        """End a task that waits for a decision ``canceled``: the same compare-and-set on
        ``input-required`` as :meth:`claim`, so of a cancel and any number of decisions exactly one
        wins (a decider that loses is told who canceled it). Whether this one did."""
        stamp = now().isoformat()
        return (
            await self._arun(
                lambda conn: (
                    conn.execute(
                        "UPDATE tasks SET state = 'canceled', pending = '[]', error = ?, decided_by = ?, decided_at = ?,"
                        " updated_at = ? WHERE id = ? AND state = 'input-required'",
                        (KNOWN.text(reason), by, stamp, stamp, task_id),
                    ).rowcount
                )
            )
            == 1
        )

    async def acancel_orphan(self, task_id: str, owner_pid: int, reason: str) -> bool:
        """End ``canceled`` a running task whose process (``owner_pid``, on this host) is gone; one
        compare-and-set on that owner. Whether this one did."""
        return (
            await self._arun(
                lambda conn: (
                    conn.execute(
                        "UPDATE tasks SET state = 'canceled', pending = '[]', error = ?, updated_at = ?"
                        " WHERE id = ? AND state IN (?, ?) AND owner_pid = ? AND owner_host = ?",
                        (KNOWN.text(reason), now().isoformat(), task_id, *_RUNNING, owner_pid, _owner()[1]),
                    ).rowcount
                )
            )
            == 1
        )

    async def arequest_cancel(self, task_id: str, by: str) -> bool:
        """Ask the process running a task to stop it (it polls :meth:`cancel_requests`); whether the
        task was still running."""
        return (
            await self._arun(
                lambda conn: (
                    conn.execute(
                        "UPDATE tasks SET cancel_requested = ? WHERE id = ? AND state IN (?, ?)",
                        (by, task_id, *_RUNNING),
                    ).rowcount
                )
            )
            == 1
        )

    def cancel_requests(self, task_ids: Collection[str]) -> dict[str, str]:
        """Of these running tasks, those someone asked to stop: id -> who asked."""
        if not task_ids:
            return {}
        marks = ", ".join("?" for _ in task_ids)
        query = f"SELECT id, cancel_requested FROM tasks WHERE id IN ({marks}) AND cancel_requested != ''"  # noqa: S608
        return dict(self._run(lambda conn: conn.execute(query, tuple(task_ids)).fetchall()))

    def find(self, task_id: str) -> Task | None:
        """The task with exactly this id, or None."""

        def read(conn: sqlite3.Connection) -> tuple[Any, list[str]]:
            cursor = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,))
            return cursor.fetchone(), [d[0] for d in cursor.description]

        row, names = self._run(read)
        return _row_to_task(dict(zip(names, row, strict=True))) if row is not None else None

    def get(self, task_id: str) -> Task:
        """A task by id or by a unique prefix of it (as ``ca tasks list`` shows them)."""

        def read(conn: sqlite3.Connection) -> tuple[list[Any], list[str]]:
            rows = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchall()  # the index
            if not rows:  # a prefix, as `ca tasks list` shows ids
                rows = conn.execute(
                    "SELECT * FROM tasks WHERE substr(id, 1, ?) = ? ORDER BY created_at LIMIT 2",
                    (len(task_id), task_id),
                ).fetchall()
            return rows, [d[0] for d in conn.execute("SELECT * FROM tasks LIMIT 0").description]

        rows, names = self._run(read)
        if not rows or not task_id:
            raise RunError(f"task {task_id!r} not found; `ca tasks list` shows the tasks of this project")
        if len(rows) > 1:
            raise RunError(f"task id {task_id!r} is ambiguous; give more of it")
        return _row_to_task(dict(zip(names, rows[0], strict=True)))

    def _exists(self, query: str, *args: Any) -> bool:
        return self._run(lambda conn: conn.execute(query, args).fetchone()) is not None

    def ended_early_in(self, conversation: str) -> bool:
        """Whether a task of this conversation was canceled or failed (and may have left a pause behind)."""
        return self._exists(
            "SELECT 1 FROM tasks WHERE conversation = ? AND state IN ('canceled', 'failed') LIMIT 1", conversation
        )

    def waiting_in(self, conversation: str) -> bool:
        """Whether a task of this conversation waits for a decision."""
        return self._exists(
            "SELECT 1 FROM tasks WHERE conversation = ? AND state = 'input-required' LIMIT 1", conversation
        )

    def question_in(self, conversation: str) -> Task | None:
        """The task of this conversation that waits for an answer to a workflow's ``ask``, if any."""
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT id FROM tasks WHERE conversation = ? AND state = 'input-required' ORDER BY created_at DESC",
                (conversation,),
            ).fetchall()
        )
        for (task_id,) in rows:
            task = self.get(task_id)
            if all_questions([p.pause for p in task.pending]):
                return task
        return None

    def save_remote(self, key: str, url: str, task_id: str, context_id: str) -> None:
        """Remember the remote task a tool call started (so a resumed caller continues it)."""
        self._run(self._saving_remote(key, url, task_id, context_id))

    async def asave_remote(self, key: str, url: str, task_id: str, context_id: str) -> None:
        """:meth:`save_remote`, waiting for the lock with the event loop running."""
        await self._arun(self._saving_remote(key, url, task_id, context_id))

    @staticmethod
    def _saving_remote(key: str, url: str, task_id: str, context_id: str) -> Callable[[sqlite3.Connection], object]:
        stamp = now().isoformat()
        return lambda conn: conn.execute(
            "INSERT OR REPLACE INTO remote_calls (key, url, task_id, context_id, created_at) VALUES (?, ?, ?, ?, ?)",
            (key, url, task_id, context_id, stamp),
        )

    def get_remote(self, key: str) -> dict[str, str] | None:
        row = self._run(
            lambda conn: conn.execute(
                "SELECT url, task_id, context_id FROM remote_calls WHERE key = ?", (key,)
            ).fetchone()
        )
        return None if row is None else {"url": row[0], "task_id": row[1], "context_id": row[2]}

    def counts(self) -> dict[str, int]:
        """How many tasks are in each state."""
        return dict(self._run(lambda conn: conn.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()))

    def adopt(self, caller: str, source: str) -> int:
        """Give ``caller`` the tasks of ``source`` recorded before tasks had callers; how many."""
        return int(
            self._run(
                lambda conn: (
                    conn.execute(
                        "UPDATE tasks SET caller = ? WHERE caller = '' AND source = ?", (caller, source)
                    ).rowcount
                )
            )
        )

    def conversation_bytes(self, conversation: str) -> int:
        """What the tasks of a conversation hold: their messages and answers, in UTF-8 bytes."""
        with self._lock:
            row = self._conn.execute(
                "SELECT COALESCE(SUM(LENGTH(CAST(input AS BLOB)) + LENGTH(CAST(COALESCE(output, '') AS BLOB))), 0)"
                " FROM tasks WHERE conversation = ? AND parent = ''",
                (conversation,),
            ).fetchone()
        return int(row[0])

    def callers_in(self, conversation: str) -> set[str]:
        """Who sent the tasks of this conversation (a conversation belongs to the caller who started it)."""
        rows = self._run(
            lambda conn: conn.execute(
                "SELECT DISTINCT caller FROM tasks WHERE conversation = ?", (conversation,)
            ).fetchall()
        )
        return {caller for (caller,) in rows}

    def list(self, *, pending_only: bool = False, limit: int = 50, caller: str | None = None) -> list[Task]:
        """The latest tasks, newest first; only those waiting for a decision, only those ``caller`` sent."""
        where, values = [], []
        if pending_only:
            where.append("state = 'input-required'")
        if caller is not None:
            where.append("caller = ?")
            values.append(caller)
        query = "SELECT * FROM tasks" + (f" WHERE {' AND '.join(where)}" if where else "")  # noqa: S608
        query += " ORDER BY created_at DESC LIMIT ?"

        def read(conn: sqlite3.Connection) -> tuple[list[Any], list[str]]:
            cursor = conn.execute(query, (*values, limit))
            return cursor.fetchall(), [d[0] for d in cursor.description]

        rows, names = self._run(read)
        return [_row_to_task(dict(zip(names, row, strict=True))) for row in rows]


class AlreadyDecided(TaskNotWaiting):
    """Another decider took the pause first."""


def _row_to_task(row: dict[str, Any]) -> Task:
    pending = tuple(Pending(**p) for p in json.loads(row.pop("pending") or "[]"))
    usage = json.loads(row.pop("usage") or "{}")
    failure = row.pop("failure", "")
    return Task(
        **row, pending=pending, usage=usage, failure=Failure.from_json(json.loads(failure)) if failure else None
    )


def expiry(paused: datetime, timeout_seconds: float | None) -> str | None:
    return (paused + timedelta(seconds=timeout_seconds)).isoformat() if timeout_seconds else None
