"""Ending any task, wherever it is: ``ca tasks cancel TASK`` and :meth:`Runtime.cancel`.

    the task is                      it is ended by
    ───────────────────────────────  ─────────────────────────────────────────────────────────
    waiting for a decision           one compare-and-set from ``input-required`` to ``canceled``
                                     (the same one a decision's claim makes: exactly one wins)
    running in this process          cancelling its run (its tools stopped, a shell command's
                                     whole process group killed)
    running in another live process  a cancel request on its record; every process that runs
                                     tasks polls its running tasks' records (:class:`CancelWatch`,
                                     every :data:`POLL_S`) and cancels the run itself
    running in a process now gone    one compare-and-set on that dead owner

Each ending is audited (``task.state`` canceled, with who asked). A final task is left as it is.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from framework.errors import RunError, StoreBusy, StoreError, StoreUnreachable, UsageError
from framework.runtime.audit import AuditLog, Source
from framework.runtime.leases import process_alive, this_process
from framework.runtime.task_record import FINAL_STATES, Task
from framework.runtime.tasks import TaskStore

POLL_S = 0.25
"""How often a process running tasks looks for cancel requests on their records."""
STOP_WAIT_S = 5.0
"""How long ``ca tasks cancel`` waits for another process to stop a running task."""
REASON_KEPT_S = 60.0
"""How long a canceled run's reason is remembered after its run ended."""

How = Literal["paused", "here", "other process", "orphan"]


@dataclass(frozen=True)
class Canceled:
    """What a cancel did: the task as it is now, and how it was reached."""

    task: Task
    how: How


def canceled_by(by: str) -> str:
    """The reason a task canceled at ``by``'s request is given (its record's error, its client's text)."""
    return f"canceled by {by}"


class StillRunning(RunError):
    """The process running a task did not stop it within the wait (the request stays on its record)."""


async def cancel_task(
    tasks: TaskStore,
    audit: AuditLog,
    task_id: str,
    *,
    by: str,
    source: Source,
    here: Callable[[str, str], bool] = lambda _task, _by: False,
    wait: float = STOP_WAIT_S,
) -> Canceled:
    """End ``task_id`` (an id or a unique prefix) canceled, as the module doc says.

    ``here(task_id, by)`` cancels a run of this process (as ``by`` asks) and says whether it had one.
    Raises UsageError for an unknown task, RunError for a task already final or one whose run ended
    otherwise (completed, failed) before the request reached it, and :class:`StillRunning` when
    the run was not stopped within ``wait`` seconds in all. A run that paused again meanwhile has
    its pause canceled.
    """
    try:
        task = await tasks.aget(task_id)
    except RunError as exc:  # unknown or ambiguous: the argument is wrong
        raise UsageError(str(exc)) from exc
    reason = canceled_by(by)
    deadline = asyncio.get_running_loop().time() + wait
    asked: How | None = None
    """How the run was asked to stop, once it was: its process ends it with this cancel's reason."""
    while True:
        if asked is not None and task.state == "canceled" and task.error == reason:
            return Canceled(task, asked)  # it was stopped as it paused: its own process recorded the cancel
        if task.state in FINAL_STATES:
            raise RunError(f"task {task.id[:12]} is already {task.state}; there is nothing to cancel")
        if task.state == "input-required":
            if await tasks.acancel_paused(task.id, by, reason):
                return await _ended(tasks, audit, task, by, source, reason, "paused")
        elif task.owner_pid == this_process()[0] and here(task.id, by):
            asked = "here"
            if stopped := await _stopped(tasks, task, asked, deadline, wait):
                return stopped
        elif task.owner_host == this_process()[1] and task.owner_pid and not process_alive(task.owner_pid):
            dead = f"{reason} (the process running it, pid {task.owner_pid}, had stopped)"
            if await tasks.acancel_orphan(task.id, task.owner_pid, dead):
                return await _ended(tasks, audit, task, by, source, dead, "orphan")
        elif await tasks.arequest_cancel(task.id, by):
            asked = "other process"
            if stopped := await _stopped(tasks, task, asked, deadline, wait):
                return stopped
        # it changed meanwhile (decided, ended, claimed again, paused again as it was stopped): look again
        task = await tasks.aget(task.id)


async def _ended(
    tasks: TaskStore, audit: AuditLog, task: Task, by: str, source: Source, reason: str, how: How
) -> Canceled:
    await audit.aappend(
        "task.state",
        source=source,
        task_id=task.id,
        conversation_id=task.conversation,
        agent=task.agent,
        data={"state": "canceled", "error": reason, "by": by},
    )
    return Canceled(await tasks.aget(task.id), how)


async def _stopped(tasks: TaskStore, task: Task, how: How, deadline: float, wait: float) -> Canceled | None:
    """Wait for the run's own process to end the task (it records and audits the cancel).

    None when the run paused again first (the caller cancels the pause); a RunError when it ended
    otherwise first: it completed or failed before its process saw the request.
    """
    loop = asyncio.get_running_loop()
    while (now := await tasks.aget(task.id)).state not in (*FINAL_STATES, "input-required"):
        if loop.time() >= deadline:
            raise StillRunning(
                f"task {task.id[:12]} is still {now.state}: the process running it (pid {task.owner_pid} on "
                f"{task.owner_host}) did not stop it within {wait:g} s; the cancel request stays on the task, "
                "and that process stops it when it next looks"
            )
        await asyncio.sleep(0.05)
    if now.state == "input-required":
        return None
    if now.state != "canceled":
        raise RunError(f"task {task.id[:12]} {now.state} before the cancel reached it; it was not canceled")
    return Canceled(now, how)


class CancelWatch:
    """The runs of one process, stopped when another process asks (a cancel request on the record).

    ``track`` registers a run (the asyncio task driving it) for the time it runs; while any run is
    tracked, one watcher polls their records every :data:`POLL_S` and cancels each run asked to
    stop (a record still ``submitted`` or ``working``: a run that ended, paused or is recording its
    end keeps that end, :meth:`finishing`), remembering who asked (:meth:`requester`, and the
    :meth:`reason` it gives), so the transport can say so to its client and the audit record names
    who. On PostgreSQL it also renews their leases (every :attr:`TaskStore.renew_every`), so other
    replicas see they still run.
    """

    def __init__(self, tasks: TaskStore) -> None:
        self.tasks = tasks
        self.runs: dict[str, asyncio.Task[object]] = {}
        self.requesters: dict[str, str] = {}
        """Who asked to stop each run stopped through this watch (kept a while after it ended)."""
        self._watcher: asyncio.Task[None] | None = None

    def track(self, task_id: str) -> None:
        current = asyncio.current_task()
        if current is None:
            return
        self.runs[task_id] = current
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    def untrack(self, task_id: str) -> None:
        self.runs.pop(task_id, None)
        if task_id in self.requesters:  # kept a while: the transport reads it as the cancel reaches it
            try:
                asyncio.get_running_loop().call_later(REASON_KEPT_S, self.requesters.pop, task_id, None)
            except RuntimeError:  # no loop runs any more (the generator closed at exit): nobody will read it
                self.requesters.pop(task_id, None)

    def finishing(self, task_id: str) -> None:
        """The run of ``task_id`` is writing its end (completed, failed, paused): from here on it is
        not stopped, so a request that comes now finds that end, and the end is what every client
        is told. Called with no await before the end's first write, so a stop either came before
        it (the run is canceled where it waited, before anything of the end is written) or not at all."""
        self.runs.pop(task_id, None)

    def stop(self, task_id: str, by: str) -> bool:
        """Cancel this process's run of ``task_id`` as ``by`` asks; whether there was one."""
        run = self.runs.get(task_id)
        if run is None or run.done():
            return False
        self.requesters[task_id] = by
        run.cancel(canceled_by(by))
        return True

    def reason(self, task_id: str) -> str | None:
        """Why the run of ``task_id`` was canceled, when it was canceled through this watch."""
        by = self.requesters.get(task_id)
        return None if by is None else canceled_by(by)

    def requester(self, task_id: str) -> str:
        """Who asked to cancel the run of ``task_id`` through this watch ("" when no one did)."""
        return self.requesters.get(task_id, "")

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        renew_at = loop.time() + self.tasks.renew_every
        while self.runs:
            await asyncio.sleep(POLL_S)
            if not self.tasks.db.local and loop.time() >= renew_at:  # replicas see each other's runs by lease
                renew_at = loop.time() + self.tasks.renew_every
                try:
                    await self.tasks.arenew([*self.runs, *self.tasks.calls])  # their calls' too
                except (StoreBusy, StoreUnreachable) as exc:
                    print(f"warning: task leases not renewed: {exc}", file=sys.stderr)
            try:
                asked = await self.tasks.acancel_requests(list(self.runs))
            except (StoreBusy, StoreUnreachable) as exc:  # locked, or the server lost, just now: look again
                print(f"warning: cancel requests not read: {exc}", file=sys.stderr)
                continue
            except StoreError:
                if self.tasks.db.closed:  # the task store was closed: this process is stopping
                    return
                raise
            for task_id, who in asked.items():
                if task_id not in self.requesters:
                    self.stop(task_id, who)
