"""Waiting for another process's SQLite write lock without holding the event loop.

Every ``ca`` process of a project writes the same SQLite files under ``.ca/`` (``tasks.db``,
``audit.db``, ``conversations.db``, ``state.db``). SQLite lets one connection write a file at a
time; the others wait. A busy timeout waits *inside* the statement: on the event loop's thread
that would freeze every request of a server (``/healthz`` included) while another process —
``ca approve`` in a terminal, a script holding ``BEGIN IMMEDIATE`` — holds the lock.

So the stores' connections run with no busy timeout once they are set up: a statement that
meets another writer fails at once with ``SQLITE_BUSY``, before it changed anything, and is
tried again after a short pause —

* :func:`until_free` for async callers (the serving path): the pause is ``asyncio.sleep``, so
  the event loop serves every other request meanwhile;
* :func:`retried` for code that is not async (a CLI command, a worker thread): the pause is
  ``time.sleep``. On an event loop's own thread it waits no longer than :data:`LOOP_GRACE_S`
  (an ordinary commit of another process is shorter), so the loop never stalls on a lock.

Past the lock timeout (``ca.yaml`` ``store.lock_timeout``, :data:`LOCK_TIMEOUT_S` by default)
the caller gets :class:`~framework.errors.StoreBusy`: retryable, and nothing of that statement
(or transaction) was written.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from framework.errors import StoreBusy

T = TypeVar("T")

LOCK_TIMEOUT_S = 30.0
"""How long a write waits for another process's write lock before StoreBusy (``store.lock_timeout``)."""
LOOP_GRACE_S = 0.1
"""How long a write that is not async waits for the lock when it runs on an event loop's thread."""
FIRST_PAUSE_S = 0.002
LAST_PAUSE_S = 0.05
"""The pauses between tries grow from the first to the last (a lock held long is polled 20 times a second)."""

_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite saying another connection holds the lock (nothing was written)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.OperationalError) and code is not None and code & 0xFF in _BUSY


def no_wait(conn: sqlite3.Connection) -> sqlite3.Connection:
    """``conn`` with no busy timeout: a locked file fails a statement at once (then tried again here)."""
    conn.execute("PRAGMA busy_timeout = 0")
    return conn


def busy_error(path: Path | str, waited: float) -> StoreBusy:
    name = Path(path).name if str(path) else "the state database"
    return StoreBusy(
        f"the project's database {name} stayed locked by another process for {waited:g} s "
        "(store.lock_timeout); nothing of this request was written: try again",
        data={"database": name, "waited_s": waited, "retryable": True},
    )


async def until_free(attempt: Callable[[], T], *, path: Path | str, timeout: float = LOCK_TIMEOUT_S) -> T:
    """``attempt()``, tried again while the database is locked; the event loop runs meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = FIRST_PAUSE_S
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            if loop.time() >= deadline:
                raise busy_error(path, timeout) from exc
        await asyncio.sleep(pause)
        pause = min(pause * 2, LAST_PAUSE_S)


def retried(attempt: Callable[[], T], *, path: Path | str, timeout: float = LOCK_TIMEOUT_S, opening: bool = False) -> T:
    """``attempt()``, tried again while the database is locked, blocking this thread (see the module doc).
    ``opening``: a store being opened (before it serves anything) or closed waits the whole ``timeout`` on any thread."""
    if _on_event_loop() and not opening:
        timeout = min(timeout, LOOP_GRACE_S)
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE_S
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            if time.monotonic() >= deadline:
                raise busy_error(path, timeout) from exc
        time.sleep(pause)
        pause = min(pause * 2, LAST_PAUSE_S)


def in_wal(execute: Callable[[str], object], *, path: Path | str, timeout: float = LOCK_TIMEOUT_S) -> None:
    """Put a database file in WAL mode (the mode is kept in the file) through ``execute`` (its
    connection's or a cursor's). Processes that open a new file at the same instant each switch it,
    and SQLite answers the losers BUSY at once, whatever their busy timeout: the switch is tried again."""
    retried(lambda: execute("PRAGMA journal_mode=WAL"), path=path, timeout=timeout, opening=True)


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
