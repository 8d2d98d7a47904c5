"""Group commit of the audit log on SQLite: the appends of one event loop share a transaction.

Async appends commit in groups: the records that the event loop's tasks append before the
loop turns once more are written in one transaction (one ``BEGIN IMMEDIATE``, one read of the
head, their inserts, one update of the head), and each caller resumes once that transaction
has committed. A record is never acknowledged before it is on disk; a server's concurrent
tasks only share the statements around their inserts. The first try is a callback of the
loop's next turn, not a task, so a loop shutting down cannot cancel it before it ran. While
another process holds the write lock the group stays open: what the loop's tasks append
meanwhile joins it, so records commit in the order they were handed over, after one wait for
the lock (never longer than the lock timeout). A caller that gives up during that wait
withdraws all the records it handed over together, or none of them if they were written.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from framework.runtime.store_locks import is_busy, until_free

Row = dict[str, Any]
"""One row of the ``audit`` table, by column."""
Build = Callable[[int, str], Row]
"""A record's row, given the seq and prev_hash it follows."""


class Group(list[tuple[Build, "asyncio.Future[Row]"]]):
    """Records waiting for one group commit: each one's build and the future its caller awaits."""

    tried = False
    """Whether its first try met another process's lock: a caller that gives up now withdraws its records."""


def _settle(group: Group, written: list[Row | Exception] | Exception) -> None:
    """Resume the callers of ``group`` still waiting: each with its row or its build's exception,
    all with ``written`` when it is the exception that failed the whole transaction."""
    for index, (_, done) in enumerate(group):
        if done.done():
            continue
        outcome = written if isinstance(written, Exception) else written[index]
        if isinstance(outcome, Exception):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)


class GroupCommits:
    """The group commit of :class:`~framework.runtime.audit_store.AuditStore` on SQLite, which gives
    it one try at a transaction (``_attempt``: None once the store is closed), a blocking append
    (``append_all``) and its error reporting (``_reported``)."""

    where: str
    lock_timeout: float
    _groups: dict[asyncio.AbstractEventLoop, Group]
    """Each event loop's open group."""
    _flushes: set[asyncio.Task[None]]
    """The groups waiting for another process's write lock."""

    if TYPE_CHECKING:  # given by the store

        def _attempt(self, builds: list[Build]) -> list[Row | Exception] | None: ...

        def append_all(self, builds: Sequence[Build], *, closing: bool = False) -> list[Row | Exception]: ...

        def _reported(self) -> contextlib.AbstractContextManager[None]: ...

    def submit(self, builds: Sequence[Build]) -> list[asyncio.Future[Row]]:
        """Hand the row of each of ``builds``, in order, to this loop's open group (SQLite:
        :attr:`groups`) without waiting: each future is its row once committed (through the engine,
        in a thread, when the store was closed meanwhile).

        A loop has one open group at a time: it is written the loop turn after it began, and while
        another process holds the write lock it stays open, so what is appended meanwhile joins it
        and commits with it, never before it (one wait for the lock, bounded by the lock timeout)."""
        loop = asyncio.get_running_loop()
        group = self._groups.get(loop)
        if group is None:
            group = self._groups[loop] = Group()
            loop.call_soon(self._flush, loop, group)  # a callback: no task a shutdown could cancel before it ran
        waits: list[asyncio.Future[Row]] = []
        for build in builds:
            waits.append(done := loop.create_future())
            group.append((build, done))
        return waits

    async def rows(self, waits: Sequence[asyncio.Future[Row]]) -> list[Row]:
        """The rows of records handed over with :meth:`submit`, once committed: the first failure
        is raised. A cancel while they wait for another process's lock withdraws all of them, a
        cancel before their first try none: a caller's records are written together or not at all."""
        outcomes: list[Row | BaseException]
        if len(waits) == 1:  # the common case, without gather's own future: a cancel cancels it as well
            try:
                outcomes = [await waits[0]]
            except Exception as exc:
                outcomes = [exc]
        else:
            outcomes = await asyncio.gather(*waits, return_exceptions=True)
        rows = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            rows.append(outcome)
        return rows

    def _closed_group(self, loop: asyncio.AbstractEventLoop, group: Group) -> None:
        """``group`` takes no more records: it was written, or failed."""
        if self._groups.get(loop) is group:
            del self._groups[loop]

    def _flush(self, loop: asyncio.AbstractEventLoop, group: Group) -> None:
        """The first try at writing ``group``, the loop turn after it began: every record of it, its
        callers canceled meanwhile included (what they record has happened, and an append used to
        make its first try before it ever waited). While another process holds the write lock the
        group stays the loop's open one and is tried again in a task, without the records whose
        callers gave up meanwhile."""
        if self._groups.get(loop) is not group:  # written already, by flush_open
            return
        try:
            with self._reported():
                written = self._attempt([build for build, _ in group])
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                group.tried = True
                retry = loop.create_task(self._flush_later(loop, group))
                self._flushes.add(retry)
                retry.add_done_callback(self._flushes.discard)
                return
            self._closed_group(loop, group)
            _settle(group, exc)
        except Exception as exc:  # nothing of the group was written: every caller is told why
            self._closed_group(loop, group)
            _settle(group, exc)
        else:
            self._closed_group(loop, group)
            self._settle_written(loop, group, written)

    def _settle_written(
        self, loop: asyncio.AbstractEventLoop, group: Group, written: list[Row | Exception] | None
    ) -> None:
        """Settle ``group`` with what its transaction wrote; None, the store was closed meanwhile: its
        records are written through the engine, in order, in a thread of their own (the loop's
        executor may be shut down already), and settled from there."""
        if written is not None:
            _settle(group, written)
            return
        builds = [build for build, _ in group]

        def write() -> None:
            outcome: list[Row | Exception] | Exception
            try:
                outcome = self.append_all(builds, closing=True)
            except Exception as exc:
                outcome = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: written, and no one waits any more
                loop.call_soon_threadsafe(_settle, group, outcome)

        threading.Thread(target=write, name="ca-audit-closed", daemon=False).start()

    async def _flush_later(self, loop: asyncio.AbstractEventLoop, group: Group) -> None:
        """Write what is left of ``group`` (and what joined it meanwhile) once the write lock is free,
        or fail it past the lock timeout."""

        def attempt() -> tuple[Group, list[Row | Exception] | None]:
            waiting = Group((build, done) for build, done in group if not done.done())
            written = self._attempt([build for build, _ in waiting]) if waiting else []
            self._closed_group(loop, group)  # written, with no await since the snapshot: nothing joined
            return waiting, written

        try:
            with self._reported():
                waiting, written = await until_free(attempt, path=self.where, timeout=self.lock_timeout)
        except Exception as exc:
            self._closed_group(loop, group)
            _settle(group, exc)
            return
        except BaseException:  # canceled with the event loop: nothing of it was written
            self._closed_group(loop, group)
            for _, done in group:
                done.cancel()
            raise
        self._settle_written(loop, waiting, written)

    def flush_open(self) -> bool:
        """Write this loop's open group now, blocking (a log being closed on its event loop): what
        was handed over before the close is written in order, before what the closer writes.
        Whether it was written (or there was none)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return True
        group = self._groups.get(loop)
        if group is None:
            return True
        self._closed_group(loop, group)
        # Not tried yet: every record of it, its callers canceled meanwhile included (as its first try would).
        waiting = Group((build, done) for build, done in group if not (group.tried and done.done()))
        try:
            written = self.append_all([build for build, _ in waiting], closing=True)
        except Exception as exc:
            _settle(waiting, exc)
            return False
        _settle(waiting, written)
        return True
