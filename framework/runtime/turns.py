"""One conversation, one turn at a time: the messages of a conversation run in order, never interleaved.

A conversation is one LangGraph thread (A2A ``contextId`` = ACP ``sessionId`` = ``thread_id``);
two runs on it at once would read and write the same checkpoints, and the first task would
answer the last message. So every run of a task — a new message (``Runtime.send``) and a resumed
pause (``Runtime.decide``) alike — first takes its conversation's turn, and gives it back when
the run ends or pauses:

* in this process, an ``asyncio.Lock`` per conversation: waiters take their turn first come,
  first served;
* across processes (`ca serve`, `ca run`, `ca approve`, `ca run --stdio` on one project), a row
  in the ``turns`` table of ``.ca/tasks.db``, the task record, taken with one atomic insert and
  polled every :data:`POLL_S` while another process holds it. A row whose process is gone (killed
  mid-run) does not hold the conversation: the next taker removes it.

A message waits at most the wait limit (:data:`TURN_WAIT_S` by default) for its turn; past it, it
gets :class:`~framework.errors.ConversationBusy` — retryable, nothing of the message ran.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from framework.errors import ConversationBusy, StoreError
from framework.runtime.store_locks import LOCK_TIMEOUT_S, is_busy, no_wait
from framework.runtime.stores import opening, state_dir
from framework.runtime.tasks import now

TURN_WAIT_S = 120.0
"""How long a message waits for the running turn of its conversation before it is refused."""
POLL_S = 0.05
"""How often a message waiting for another process's turn looks at the ``turns`` table again."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    conversation TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TEXT NOT NULL
);
"""


class Turns:
    """The turns of a project's conversations; ``async with turns.take(conversation, task_id):`` runs one."""

    def __init__(self, path: Path, *, wait: float = TURN_WAIT_S, lock_timeout: float = LOCK_TIMEOUT_S) -> None:
        self.wait = wait
        """Seconds a message waits for its turn before ConversationBusy."""
        self.lock_timeout = lock_timeout
        """Seconds giving a turn back waits for another process's write lock on the file."""
        self.path = path
        self._lock = threading.Lock()  # one connection; each statement holds it for no longer than itself
        self._conn = sqlite3.connect(path, timeout=lock_timeout, check_same_thread=False, isolation_level=None)
        self._closed = False
        self._conn.execute("PRAGMA journal_mode=WAL")
        # As for every store of the project (see audit_store): crash-safe in WAL, and no fsync on
        # the event loop; SQLite's default (FULL) cost two fsyncs per turn, claim and give-back.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        no_wait(self._conn)  # a locked file fails a statement at once: the turn is polled for, as it is anyway
        self._locks: dict[str, asyncio.Lock] = {}
        self._giving_back: set[asyncio.Task[None]] = set()
        self._users: dict[str, int] = {}
        self._pid = os.getpid()

    @classmethod
    def open(cls, root: Path, *, lock_timeout: float = LOCK_TIMEOUT_S) -> Turns:
        path = state_dir(root) / "tasks.db"
        with opening(path):  # a file that is not a database: a StoreError naming it
            return cls(path, lock_timeout=lock_timeout)

    def close(self) -> None:
        # Under the lock: a worker thread may still be giving a turn back (shielded from the
        # cancellation that ends the process), and closing a connection in use crashes sqlite3.
        with self._lock:
            self._closed = True
            self._conn.close()

    @asynccontextmanager
    async def take(self, conversation: str, task_id: str) -> AsyncIterator[None]:
        """Hold ``conversation``'s turn for ``task_id``'s run; ConversationBusy after the wait limit."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        lock = self._locks.setdefault(conversation, asyncio.Lock())
        self._users[conversation] = self._users.get(conversation, 0) + 1
        try:
            try:
                async with asyncio.timeout(self.wait):
                    await lock.acquire()
            except TimeoutError:
                raise self._busy(conversation, "a turn of this process") from None
            try:
                while not self._claim(conversation, task_id):  # never waits: a locked file is "not yet"
                    if loop.time() >= deadline:
                        raise self._busy(conversation, "a turn of another process")
                    await asyncio.sleep(POLL_S)
                try:
                    yield
                finally:
                    # At once, with no await: a run that ended holds no turn, even when the process is
                    # being stopped right after its answer went out (one short DELETE, like the task record's).
                    # While another process holds the file's write lock it is given back as soon as it can.
                    if not self._release(conversation, task_id):
                        self._give_back_later(conversation, task_id)
            finally:
                lock.release()
        finally:
            self._users[conversation] -= 1
            if not self._users[conversation]:  # no one else waits here: forget the lock
                del self._users[conversation], self._locks[conversation]

    def _busy(self, conversation: str, holder: str) -> ConversationBusy:
        return ConversationBusy(
            f"conversation {conversation!r} is busy: {holder} did not end within {self.wait:g} s; "
            "nothing of this message ran, send it again later",
            data={"conversation": conversation, "waited_s": self.wait, "retryable": True},
        )

    def _claim(self, conversation: str, task_id: str) -> bool:
        """Take the row of ``conversation`` (one atomic insert); a dead process's row is removed first.

        False when another process holds the row, or the file's write lock (both mean: poll again)."""
        try:
            with self._lock:
                if self._closed:
                    raise StoreError(f"the turns of {self.path} are closed: the process is shutting down")
                taken = self._conn.execute(
                    "INSERT INTO turns (conversation, task_id, pid, started_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT(conversation) DO NOTHING",
                    (conversation, task_id, self._pid, now().isoformat()),
                ).rowcount
                if taken == 1:
                    return True
                row = self._conn.execute(
                    "SELECT task_id, pid FROM turns WHERE conversation = ?", (conversation,)
                ).fetchone()
                if row is not None and not _alive(int(row[1])):
                    # Compare-and-delete: only that dead process's row, so of two takers one wins.
                    self._conn.execute(
                        "DELETE FROM turns WHERE conversation = ? AND task_id = ? AND pid = ?", (conversation, *row)
                    )
                return False
        except sqlite3.Error as exc:
            if is_busy(exc):
                return False
            raise StoreError(f"the turns of {self.path} cannot be read: {exc}") from exc

    def _release(self, conversation: str, task_id: str) -> bool:
        """Give the row back; False when another process holds the file's write lock (nothing changed)."""
        try:
            with self._lock:
                if self._closed:  # shutting down: the row goes with this process (a dead pid's row is taken over)
                    return True
                self._conn.execute("DELETE FROM turns WHERE conversation = ? AND task_id = ?", (conversation, task_id))
            return True
        except sqlite3.Error as exc:
            if is_busy(exc):
                return False
            raise StoreError(f"the turn of conversation {conversation!r} cannot be given back: {exc}") from exc

    def _give_back_later(self, conversation: str, task_id: str) -> None:
        """Give the row back once the file's write lock is free, without holding up the event loop.

        Until then the conversation's next message (here or in another process) polls as for any
        running turn. Past the lock timeout the row stays: it names this process, and the next
        taker removes it once this process is gone.
        """

        async def give_back() -> None:
            deadline = asyncio.get_running_loop().time() + self.lock_timeout
            while not self._release(conversation, task_id):
                if asyncio.get_running_loop().time() >= deadline:
                    print(
                        f"warning: the turn of conversation {conversation!r} could not be given back: "
                        f"{self.path.name} stayed locked for {self.lock_timeout:g} s",
                        file=sys.stderr,
                    )
                    return
                await asyncio.sleep(POLL_S)

        later = asyncio.get_running_loop().create_task(give_back())
        self._giving_back.add(later)
        later.add_done_callback(self._giving_back.discard)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (on this machine: the project's state is local)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True
