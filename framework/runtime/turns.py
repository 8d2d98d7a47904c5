"""One conversation, one turn at a time: the messages of a conversation run in order, never interleaved.

A conversation is one LangGraph thread (A2A ``contextId`` = ACP ``sessionId`` = ``thread_id``);
two runs on it at once would read and write the same checkpoints, and the first task would
answer the last message. So every run of a task — a new message (``Runtime.send``) and a resumed
pause (``Runtime.decide``) alike — first takes its conversation's turn, and gives it back when
the run ends or pauses:

* in this process, an ``asyncio.Lock`` per conversation: waiters take their turn first come,
  first served;
* across processes (`ca serve`, `ca run`, `ca approve`, `ca run --stdio` on one project) and
  replicas (one PostgreSQL ``store.url``), a row in the ``turns`` table of the task database,
  taken with one atomic insert and polled every :data:`POLL_S` while another process holds it.
  A row whose process is gone (killed mid-run) does not hold the conversation: the next taker
  removes it — on this host when its pid no longer runs, for another host's process (whose pid
  cannot be seen from here) once its task no longer runs — it ended, paused (its pause is checkpointed
  before its record says so) or was settled as an orphan — or when the taker runs that very task (the
  decision of a task whose process died after it paused).

A message waits at most the wait limit (:data:`TURN_WAIT_S` by default) for its turn; past it, it
gets :class:`~framework.errors.ConversationBusy` — retryable, nothing of the message ran.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from framework.errors import ConversationBusy, StoreError
from framework.runtime.database import Database
from framework.runtime.leases import RUNNING, now

TURN_WAIT_S = 120.0
"""How long a message waits for the running turn of its conversation before it is refused."""
POLL_S = 0.05
"""How often a message waiting for another process's turn looks at the ``turns`` table again."""


_RUNS = f"SELECT 1 FROM tasks WHERE tasks.id = turns.task_id AND tasks.state IN {RUNNING!r}"  # noqa: S608
_FREED_ELSEWHERE = f"DELETE FROM turns WHERE conversation = ? AND task_id = ? AND pid = ? AND host = ? AND (task_id = ? OR NOT EXISTS ({_RUNS}))"  # noqa: S608
"""Another host's row, removed (a compare-and-delete, as for a dead pid) once its task no longer runs
— it ended, was settled as an orphan, or paused: a process killed between its pause and giving its
turn back would otherwise hold the conversation until the decision timed out — or when the row's
task is the taker's own: the decision this process claimed for that paused task. A task another
process took over keeps its row (it moves to the taker with the task), so no later message runs
before the orphan's run."""


class Turns:
    """The turns of a project's conversations; ``async with turns.take(conversation, task_id):`` runs one."""

    def __init__(self, db: Database, *, wait: float = TURN_WAIT_S) -> None:
        self.wait = wait
        """Seconds a message waits for its turn before ConversationBusy."""
        self.db = db
        """The task database (shared with the process's other stores, which close it)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._giving_back: set[asyncio.Task[None]] = set()
        self._users: dict[str, int] = {}
        self._pid = os.getpid()
        self._host = socket.gethostname()

    @asynccontextmanager
    async def take(self, conversation: str, task_id: str, *, taken_over: bool = False) -> AsyncIterator[None]:
        """Hold ``conversation``'s turn for ``task_id``'s run; ConversationBusy after the wait limit.

        ``taken_over``: the task is a dead process's this process took over (``TaskStore.atake_over``),
        which gave its turn, if it held one, to this process: that row is this run's."""
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
                while not await self._claim(conversation, task_id, taken_over):  # a locked file is "not yet"
                    if loop.time() >= deadline:
                        raise self._busy(conversation, "a turn of another process")
                    await asyncio.sleep(POLL_S)
                try:
                    yield
                finally:
                    # On SQLite at once, with no await: a run that ended holds no turn, even when the process
                    # is being stopped right after its answer went out (one short DELETE, like the task
                    # record's); while another process holds the file's write lock it is given back as soon
                    # as it can. On PostgreSQL a round trip the loop does not wait for, shielded from the
                    # cancellation that may be ending this run.
                    if not self.db.local:
                        await asyncio.shield(self._arelease(conversation, task_id))
                    elif not self._release(conversation, task_id):
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

    async def _claim(self, conversation: str, task_id: str, taken_over: bool = False) -> bool:
        """Take the row of ``conversation`` (one atomic insert); a dead process's row is removed first.

        False when another process holds the row, or the file's write lock (both mean: poll again)."""
        if self.db.closed:
            raise StoreError(f"the turns of {self.db.name} are closed: the process is shutting down")
        taken = await self.db.aattempt(
            "INSERT INTO turns (conversation, task_id, pid, host, started_at) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (conversation) DO NOTHING",
            (conversation, task_id, self._pid, self._host, now().isoformat()),
        )
        if taken is None:
            return False
        if taken.rowcount == 1:
            return True
        found = await self.db.aattempt("SELECT task_id, pid, host FROM turns WHERE conversation = ?", (conversation,))
        row = found.one() if found is not None else None
        if row is None:
            return False
        held_by, pid, host = row
        if taken_over and (held_by, int(pid), host) == (task_id, self._pid, self._host):
            return True
        if host in ("", self._host):  # a process of this host (or recorded before hosts were): its pid says
            if not _alive(int(pid)):
                # Compare-and-delete: only that dead process's row, so of two takers one wins.
                await self.db.aattempt(
                    "DELETE FROM turns WHERE conversation = ? AND task_id = ? AND pid = ?", (conversation, held_by, pid)
                )
        else:  # another host's: free once its task no longer runs, or when it is this run's task
            await self.db.aattempt(_FREED_ELSEWHERE, (conversation, held_by, pid, host, task_id))
        return False

    _GIVE_BACK = "DELETE FROM turns WHERE conversation = ? AND task_id = ? AND pid = ? AND host = ?"
    """Only this process's row: a decision of the same task on another replica may hold the turn now."""

    def _release(self, conversation: str, task_id: str) -> bool:
        """Give the row back; False when another process holds the file's write lock (nothing changed)."""
        if self.db.closed:  # shutting down: the row goes with this process (a dead pid's row is taken over)
            return True
        try:
            return self.db.attempt(self._GIVE_BACK, (conversation, task_id, self._pid, self._host)) is not None
        except StoreError as exc:
            raise StoreError(f"the turn of conversation {conversation!r} cannot be given back: {exc}") from exc

    async def _arelease(self, conversation: str, task_id: str) -> None:
        if not self.db.closed:
            await self.db.aexecute(self._GIVE_BACK, (conversation, task_id, self._pid, self._host))

    def _give_back_later(self, conversation: str, task_id: str) -> None:
        """Give the row back once the file's write lock is free, without holding up the event loop.

        Until then the conversation's next message (here or in another process) polls as for any
        running turn. Past the lock timeout the row stays: it names this process, and the next
        taker removes it once this process is gone.
        """

        async def give_back() -> None:
            deadline = asyncio.get_running_loop().time() + self.db.lock_timeout
            while not self._release(conversation, task_id):
                if asyncio.get_running_loop().time() >= deadline:
                    print(
                        f"warning: the turn of conversation {conversation!r} could not be given back: "
                        f"{self.db.name} stayed locked for {self.db.lock_timeout:g} s",
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
