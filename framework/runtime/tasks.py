"""Tasks: one request to an agent, from submitted to a final state, kept in the task database
(``.ca/tasks.db``, or PostgreSQL with ``store.url``; :mod:`framework.runtime.database`).

A task that pauses (``input-required``) keeps its pending decisions here, so any
process — ``ca approve`` in another terminal, a server after a restart — can find
and answer them. The conversation itself (messages, the paused graph) lives in
the checkpointer; this table only says what is waiting for whom.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypedDict, Unpack

from framework.errors import Failure, RunError, TaskNotWaiting
from framework.runtime.database import Database, SqliteDatabase
from framework.runtime.governance.secrets import KNOWN
from framework.runtime.leases import (
    LEASE_S,
    MAY_HAVE_RUN,
    RUNNING,
    RUNNING_OR_EXPIRED,
    Orphan,
    Statement,
    lease_end,
    now,
    orphans,
    renewal,
    running_or_expired,
    settling,
    taking_over,
    this_process,
    turn_taken_over,
)
from framework.runtime.pauses import all_questions
from framework.runtime.schema import connect
from framework.runtime.store_locks import LOCK_TIMEOUT_S
from framework.runtime.task_record import FINAL_STATES, Held, Pending, Task, TaskState, row_to_task


class Changes(TypedDict, total=False):
    """What an update of a task record may change besides its state (None, or left out: unchanged)."""

    output: str | None
    error: str | None
    pending: tuple[Pending, ...] | None
    usage: dict[str, Any] | None
    failure: Failure | None


class TaskStore:
    """The task table of the project's task database (:mod:`framework.runtime.database`: ``.ca/tasks.db``
    or PostgreSQL); safe across threads, processes and, on PostgreSQL, replicas.

    Every method has a blocking form and writes have an async one (``acreate``, ``aupdate``,
    ``aclaim``, ...): the async forms wait for another process's SQLite write lock, or for
    PostgreSQL's answer, with the event loop running, so the serving path uses them. Each decision
    (a claim, an ending, a settled orphan) is one conditional ``UPDATE`` whose row count says who won.
    """

    def __init__(self, db: Database, *, lease: float = LEASE_S) -> None:
        self.db = db
        self.path: Path | None = db.path if isinstance(db, SqliteDatabase) else None
        """The SQLite file, when the database is one."""
        self.lease = lease
        """Seconds a lease this process takes on a running task lasts (``store.task_lease``)."""
        self.calls: set[str] = set()
        """The child tasks (in-process agent calls) running inside this process's runs: their leases
        are renewed with their parents' (``CancelWatch``), so no replica takes a long call for an orphan."""

    @classmethod
    def open(
        cls, root: Path, *, url: str = "", lock_timeout: float = LOCK_TIMEOUT_S, lease: float = LEASE_S
    ) -> TaskStore:
        """The tasks of the project at ``root``, on a connection of their own (a CLI command, a test):
        in PostgreSQL when ``url`` (``store.url``) names it. Close it with :meth:`close`; a runtime's
        stores share its one database instead (``TaskStore(runtime.database, lease=...)``)."""
        return cls(connect(root, url, lock_timeout=lock_timeout), lease=lease)

    @property
    def renew_every(self) -> float:
        """How often the leases of running tasks are renewed, and a server looks for expired ones: a third
        of :attr:`lease`, so two renewals may be missed before another replica settles the task."""
        return self.lease / 3

    def close(self) -> None:
        """Close the database (for a store from :meth:`open`: a shared one is closed by its owner)."""
        self.db.close()

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
    ) -> tuple[Task, Statement]:
        stamp = now().isoformat()
        input = KNOWN.text(input)
        pid, host = this_process()
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
            lease_until=lease_end(self.lease),
        )
        values = (
            task.id, agent, conversation, source, task.state, input, parent, stamp, stamp, pid, host, caller,
            task.lease_until,
        )  # fmt: skip
        return task, (
            "INSERT INTO tasks (id, agent, conversation, source, state, input, parent, created_at, updated_at,"
            " owner_pid, owner_host, caller, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        self.db.execute(*insert)
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
        """:meth:`create`, waiting with the event loop running."""
        task, insert = self._creation(
            agent=agent,
            conversation=conversation,
            source=source,
            input=input,
            parent=parent,
            task_id=task_id,
            caller=caller,
        )
        await self.db.aexecute(*insert)
        return task

    def _updating(
        self, task_id: str, *, state: TaskState, unless_final: bool = False, **changes: Unpack[Changes]
    ) -> Statement:
        sets = ["state = ?", "updated_at = ?"]
        values: list[Any] = [state, now().isoformat()]
        if state in RUNNING:  # whoever runs it owns it: a crash of this process leaves an orphan
            sets.append("owner_pid = ?, owner_host = ?, lease_until = ?")
            values.extend((*this_process(), lease_end(self.lease)))
        output, error, pending = changes.get("output"), changes.get("error"), changes.get("pending")
        usage, failure = changes.get("usage"), changes.get("failure")
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
        return f"UPDATE tasks SET {', '.join(sets)} WHERE {where}", (*values, task_id)  # noqa: S608

    def update(self, task_id: str, *, state: TaskState, **changes: Unpack[Changes]) -> Task:
        sql, values = self._updating(task_id, state=state, **changes)
        updated = self.db.execute(sql + _RETURNING, values).records()
        return row_to_task(updated[0]) if updated else self.get(task_id)

    async def aupdate(self, task_id: str, *, state: TaskState, **changes: Unpack[Changes]) -> Task:
        """:meth:`update`, waiting with the event loop running."""
        sql, values = self._updating(task_id, state=state, **changes)
        updated = (await self.db.aexecute(sql + _RETURNING, values)).records()
        return row_to_task(updated[0]) if updated else await self.aget(task_id)

    async def aset(self, task_id: str, *, state: TaskState, **changes: Unpack[Changes]) -> None:
        """:meth:`aupdate` for a caller that does not need the task back (its end): RunError, as there,
        when there is no such task."""
        sql, values = self._updating(task_id, state=state, **changes)
        if (await self.db.aexecute(sql, values)).rowcount == 0:
            await self.aget(task_id)

    async def aend(self, task_id: str, *, state: TaskState, error: str | None = None) -> bool:
        """Move a task that is not final yet to ``state`` (pending decisions dropped), as one
        compare-and-set: of an ending and a decision or another ending at the same moment, one wins.
        Whether this one did."""
        ending = self._updating(task_id, state=state, error=error, pending=(), unless_final=True)
        return (await self.db.aexecute(*ending)).rowcount == 1

    def _claiming(self, task_id: str, by: str) -> Statement:
        stamp = now().isoformat()
        return (
            "UPDATE tasks SET state = 'working', decided_by = ?, decided_at = ?, updated_at = ?,"
            " owner_pid = ?, owner_host = ?, lease_until = ?, cancel_requested = ''"  # a request was for the run that paused
            " WHERE id = ? AND state = 'input-required'",
            (by, stamp, stamp, *this_process(), lease_end(self.lease), task_id),
        )

    @staticmethod
    def _claimed(task: Task, claimed: int) -> Task:
        if claimed != 1:
            who = f" by {task.decided_by} at {task.decided_at}" if task.decided_by else ""
            raise AlreadyDecided(f"task {task.id[:12]} was already decided{who}; it is {task.state} now")
        return task

    def claim(self, task_id: str, by: str) -> Task:
        """Take the decision of a paused task: one atomic compare-and-set from ``input-required`` to
        ``working``, so of any number of deciders — threads, processes, replicas, protocols — exactly
        one wins. The others get a RunError that says who decided and when."""
        claimed = self.db.execute(*self._claiming(task_id, by)).rowcount
        return self._claimed(self.get(task_id), claimed)

    async def aclaim(self, task_id: str, by: str) -> Task:
        """:meth:`claim`, waiting with the event loop running."""
        claimed = (await self.db.aexecute(*self._claiming(task_id, by))).rowcount
        return self._claimed(await self.aget(task_id), claimed)

    def settle_orphans(self) -> list[Task]:
        """End ``failed`` (:data:`~framework.runtime.leases.ORPHANED`, with the pid) every running task
        whose process is gone.

        On this host, tasks owned by a process that no longer exists: a task another live process
        runs is never touched. Another host's processes cannot be seen from here (replicas sharing
        PostgreSQL): its task is settled (:data:`~framework.runtime.leases.LEASE_EXPIRED`) once the
        lease its process renews while running it (:attr:`lease`) has
        expired. Each is one compare-and-set on its owner and lease, so a task that was meanwhile
        claimed again or renewed is left alone. Returns the tasks settled, as they are now.
        """
        rows = self.db.execute(RUNNING_OR_EXPIRED, running_or_expired(self.db.local)).rows
        return [self.get(o.id) for o in orphans(rows, self.lease) if self.db.execute(*settling(o)).rowcount == 1]

    async def asettle_orphans(self) -> list[Task]:
        """:meth:`settle_orphans`, waiting with the event loop running."""
        settled = [await self.asettle(orphan) for orphan in await self.aorphans()]
        return [task for task in settled if task is not None]

    async def aorphans(self) -> list[Orphan]:
        """The running tasks whose process is gone (see :meth:`settle_orphans`), as they are now."""
        rows = (await self.db.aexecute(RUNNING_OR_EXPIRED, running_or_expired(self.db.local))).rows
        return orphans(rows, self.lease)

    async def asettle(self, orphan: Orphan, why: str = MAY_HAVE_RUN) -> Task | None:
        """End ``orphan`` failed, saying ``why`` it was not resumed; the task, or None when it changed
        meanwhile (another process settled, took over or ended it)."""
        settled = await self.db.aexecute(*settling(orphan, why))
        return await self.aget(orphan.id) if settled.rowcount == 1 else None

    async def atake_over(self, orphan: Orphan) -> Task | None:
        """Make this process the owner of ``orphan`` (a fresh lease, its conversation's turn): it runs
        the task again. The task, or None when another process settled or took it over first."""
        taken = await self.db.aexecute(*taking_over(orphan, self.lease))
        if taken.rowcount != 1:
            return None
        task = await self.aget(orphan.id)
        await self.db.aexecute(*turn_taken_over(orphan, task.conversation))
        return task

    async def agive_back_turn(self, task: Task) -> None:
        """Remove the conversation turn this process took over with ``task`` (:meth:`atake_over`) and
        does not run after all."""
        await self.db.aexecute(
            "DELETE FROM turns WHERE conversation = ? AND task_id = ? AND pid = ? AND host = ?",
            (task.conversation, task.id, *this_process()),
        )

    async def aholds(self, task_id: str) -> bool:
        """Whether this process still owns running task ``task_id``, renewing its lease if so (one
        compare-and-set; see :mod:`framework.runtime.fence`)."""
        return (await self.db.aexecute(*renewal([task_id], self.lease))).rowcount == 1

    async def arenew(self, task_ids: Collection[str]) -> int:
        """Extend this process's leases on these running tasks by :attr:`lease`;
        how many it still holds."""
        if not task_ids:
            return 0
        return (await self.db.aexecute(*renewal(task_ids, self.lease))).rowcount

    async def acancel_paused(self, task_id: str, by: str, reason: str) -> bool:
        """End a task that waits for a decision ``canceled``: the same compare-and-set on
        ``input-required`` as :meth:`claim`, so of a cancel and any number of decisions exactly one
        wins (a decider that loses is told who canceled it). Whether this one did."""
        stamp = now().isoformat()
        canceled = await self.db.aexecute(
            "UPDATE tasks SET state = 'canceled', pending = '[]', error = ?, decided_by = ?, decided_at = ?,"
            " updated_at = ? WHERE id = ? AND state = 'input-required'",
            (KNOWN.text(reason), by, stamp, stamp, task_id),
        )
        return canceled.rowcount == 1

    async def acancel_orphan(self, task_id: str, owner_pid: int, reason: str) -> bool:
        """End ``canceled`` a running task whose process (``owner_pid``, on this host) is gone; one
        compare-and-set on that owner. Whether this one did."""
        canceled = await self.db.aexecute(
            "UPDATE tasks SET state = 'canceled', pending = '[]', error = ?, updated_at = ?"
            " WHERE id = ? AND state IN (?, ?) AND owner_pid = ? AND owner_host = ?",
            (KNOWN.text(reason), now().isoformat(), task_id, *RUNNING, owner_pid, this_process()[1]),
        )
        return canceled.rowcount == 1

    async def arequest_cancel(self, task_id: str, by: str) -> bool:
        """Ask the process running a task to stop it (it polls :meth:`cancel_requests`); whether the
        task was still running."""
        asked = await self.db.aexecute(
            "UPDATE tasks SET cancel_requested = ? WHERE id = ? AND state IN (?, ?)", (by, task_id, *RUNNING)
        )
        return asked.rowcount == 1

    @staticmethod
    def _asked(task_ids: Collection[str]) -> Statement:
        marks = ", ".join("?" for _ in task_ids)
        query = (
            f"SELECT id, cancel_requested FROM tasks WHERE id IN ({marks}) AND cancel_requested != ''"  # noqa: S608
            " AND state IN (?, ?)"  # a run that ended or paused keeps its end: the request came too late
        )
        return query, (*task_ids, *RUNNING)

    def cancel_requests(self, task_ids: Collection[str]) -> dict[str, str]:
        """Of these running tasks, those someone asked to stop: id -> who asked."""
        return dict(self.db.execute(*self._asked(task_ids)).rows) if task_ids else {}

    async def acancel_requests(self, task_ids: Collection[str]) -> dict[str, str]:
        """:meth:`cancel_requests`, waiting with the event loop running."""
        return dict((await self.db.aexecute(*self._asked(task_ids))).rows) if task_ids else {}

    def find(self, task_id: str) -> Task | None:
        """The task with exactly this id, or None."""
        found = self.db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).records()
        return row_to_task(found[0]) if found else None

    async def afind(self, task_id: str) -> Task | None:
        """:meth:`find`, waiting with the event loop running."""
        found = (await self.db.aexecute("SELECT * FROM tasks WHERE id = ?", (task_id,))).records()
        return row_to_task(found[0]) if found else None

    # A prefix, as `ca tasks list` shows ids: compared as text of its own length (no LIKE, whose
    # wildcards a typed id could hold).
    _BY_PREFIX = "SELECT * FROM tasks WHERE substr(id, 1, length(?)) = ? ORDER BY created_at LIMIT 2"

    def get(self, task_id: str) -> Task:
        """A task by id or by a unique prefix of it (as ``ca tasks list`` shows them)."""
        rows = self.db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).records()  # the index
        if not rows and task_id:
            rows = self.db.execute(self._BY_PREFIX, (task_id, task_id)).records()
        return _one(task_id, rows)

    async def aget(self, task_id: str) -> Task:
        """:meth:`get`, waiting with the event loop running."""
        rows = (await self.db.aexecute("SELECT * FROM tasks WHERE id = ?", (task_id,))).records()
        if not rows and task_id:
            rows = (await self.db.aexecute(self._BY_PREFIX, (task_id, task_id))).records()
        return _one(task_id, rows)

    _ABANDONED = (
        "SELECT EXISTS (SELECT 1 FROM tasks WHERE conversation = ? AND state IN ('canceled', 'failed'))"
        " AND NOT EXISTS (SELECT 1 FROM tasks WHERE conversation = ? AND state = 'input-required')"
    )
    _WAITING = "SELECT 1 FROM tasks WHERE conversation = ? AND state = 'input-required' LIMIT 1"
    _ASKING = "SELECT id FROM tasks WHERE conversation = ? AND state = 'input-required' ORDER BY created_at DESC"

    async def apause_abandoned_in(self, conversation: str) -> bool:
        """Whether a task of this conversation was canceled or failed, and none waits for a decision:
        a pause the ended task left behind may still block the conversation. One statement."""
        row = (await self.db.aexecute(self._ABANDONED, (conversation, conversation))).one()
        return row is not None and bool(row[0])

    def waiting_in(self, conversation: str) -> bool:
        """Whether a task of this conversation waits for a decision."""
        return self.db.execute(self._WAITING, (conversation,)).one() is not None

    async def awaiting_in(self, conversation: str) -> bool:
        """:meth:`waiting_in`, waiting with the event loop running."""
        return (await self.db.aexecute(self._WAITING, (conversation,))).one() is not None

    def question_in(self, conversation: str) -> Task | None:
        """The task of this conversation that waits for an answer to a workflow's ``ask``, if any."""
        for (task_id,) in self.db.execute(self._ASKING, (conversation,)).rows:
            task = self.get(task_id)
            if all_questions([p.pause for p in task.pending]):
                return task
        return None

    async def aquestion_in(self, conversation: str) -> Task | None:
        """:meth:`question_in`, waiting with the event loop running."""
        for (task_id,) in (await self.db.aexecute(self._ASKING, (conversation,))).rows:
            task = await self.aget(task_id)
            if all_questions([p.pause for p in task.pending]):
                return task
        return None

    _COUNTS = "SELECT state, COUNT(*) FROM tasks GROUP BY state"

    def counts(self) -> dict[str, int]:
        """How many tasks are in each state."""
        return {state: int(count) for state, count in self.db.execute(self._COUNTS).rows}

    async def acounts(self) -> dict[str, int]:
        """:meth:`counts`, waiting with the event loop running."""
        return {state: int(count) for state, count in (await self.db.aexecute(self._COUNTS)).rows}

    _ADOPT = "UPDATE tasks SET caller = ? WHERE caller = '' AND source = ?"

    def adopt(self, caller: str, source: str) -> int:
        """Give ``caller`` the tasks of ``source`` recorded before tasks had callers; how many."""
        return int(self.db.execute(self._ADOPT, (caller, source)).rowcount)

    async def aadopt(self, caller: str, source: str) -> int:
        """:meth:`adopt`, waiting with the event loop running."""
        return int((await self.db.aexecute(self._ADOPT, (caller, source))).rowcount)

    def _held(self, conversation: str) -> Statement:
        if self.db.dialect == "postgresql":
            held = "octet_length(input) + octet_length(COALESCE(output, ''))"
        else:
            held = "LENGTH(CAST(input AS BLOB)) + LENGTH(CAST(COALESCE(output, '') AS BLOB))"
        query = (
            f"SELECT caller, COALESCE(SUM(CASE WHEN parent = '' THEN {held} ELSE 0 END), 0)"  # noqa: S608
            " FROM tasks WHERE conversation = ? GROUP BY caller"
        )
        return query, (conversation,)

    def conversation(self, conversation: str) -> Held:
        """Who sent the tasks of a conversation and what they hold (one read)."""
        return Held.of(self.db.execute(*self._held(conversation)).rows)

    async def aconversation(self, conversation: str) -> Held:
        """:meth:`conversation`, waiting with the event loop running."""
        return Held.of((await self.db.aexecute(*self._held(conversation))).rows)

    @staticmethod
    def _listing(*, pending_only: bool, limit: int, caller: str | None) -> Statement:
        where, values = [], []
        if pending_only:
            where.append("state = 'input-required'")
        if caller is not None:
            where.append("caller = ?")
            values.append(caller)
        query = "SELECT * FROM tasks" + (f" WHERE {' AND '.join(where)}" if where else "")  # noqa: S608
        return query + " ORDER BY created_at DESC LIMIT ?", (*values, limit)

    async def alist(self, *, pending_only: bool = False, limit: int = 50, caller: str | None = None) -> list[Task]:
        """:meth:`list`, waiting with the event loop running (defined first: below, ``list`` is the method)."""
        listing = self._listing(pending_only=pending_only, limit=limit, caller=caller)
        return [row_to_task(row) for row in (await self.db.aexecute(*listing)).records()]

    def list(self, *, pending_only: bool = False, limit: int = 50, caller: str | None = None) -> list[Task]:
        """The latest tasks, newest first; only those waiting for a decision, only those ``caller`` sent."""
        listing = self._listing(pending_only=pending_only, limit=limit, caller=caller)
        return [row_to_task(row) for row in self.db.execute(*listing).records()]


_RETURNING = " RETURNING *"
"""An update answers the task as it left it, in the same statement (SQLite >= 3.35, PostgreSQL)."""


def _one(task_id: str, rows: list[dict[str, Any]]) -> Task:
    if not rows or not task_id:
        raise RunError(f"task {task_id!r} not found; `ca tasks list` shows the tasks of this project")
    if len(rows) > 1:
        raise RunError(f"task id {task_id!r} is ambiguous; give more of it")
    return row_to_task(rows[0])


class AlreadyDecided(TaskNotWaiting):
    """Another decider took the pause first."""
