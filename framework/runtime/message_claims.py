"""A retried message starts no second run: the first message with a ``messageId`` claims it.

A client that sent ``SendMessage`` and lost the answer (a timeout, a dropped connection, a replica
that died behind the load balancer) sends the same message again, with the same ``messageId``.
The A2A server claims each message that starts a new task, keyed by the agent, the caller and the
``messageId`` (hashed: a key of any length fits an index), before anything runs: one
``INSERT … ON CONFLICT DO NOTHING`` in the task database, so of any number of copies — on one
server or on replicas sharing PostgreSQL — exactly one claims it and starts the task; the others
get that task's id and answer with the task. A claim also keeps a digest of what the message
says, so a different message under a used ``messageId`` is told apart from a copy.

A claim older than the server's ``retry_window`` is a message of long ago: a copy sent now is a
new message and takes the claim over (and claims that old are deleted when a server starts).
So is a claim whose task never appeared (the process that claimed it died before the run
began), after :data:`STALE_S`. Taking over is one compare-and-set on the old task id, so of
several copies one starts the run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from framework.runtime.database import Database

STALE_S = 10.0
"""How long a claim may point to a run that has not begun before a copy takes the claim over."""


def claim_key(agent: str, caller: str, message_id: str) -> str:
    """The claim of a message: the same ``messageId`` from another caller or to another agent is another message."""
    return hashlib.sha256("\x1f".join((agent, caller, message_id)).encode()).hexdigest()


@dataclass(frozen=True)
class Claim:
    task_id: str
    """The task the claiming copy starts."""
    at: datetime
    digest: str
    """What the claiming copy said (see :meth:`MessageClaims.aclaim`)."""


def _stamp(at: datetime) -> str:
    return at.isoformat(timespec="microseconds")


class MessageClaims:
    """The ``message_claims`` table of a task database; a claim holds for ``window`` seconds."""

    def __init__(self, db: Database, window: float) -> None:
        self.db = db
        self.window = window

    async def aclaim(self, key: str, task_id: str, digest: str) -> Claim:
        """Claim ``key`` for a new task ``task_id`` of a message that says ``digest``: the claim that
        holds (``task_id``'s when this call claimed it, or took over one older than the window)."""
        while True:
            now = datetime.now(UTC)
            claimed = await self.db.aexecute(
                "INSERT INTO message_claims (key, task_id, digest, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (key) DO NOTHING",
                (key, task_id, digest, _stamp(now)),
            )
            if claimed.rowcount == 1:
                return Claim(task_id, now, digest)
            held = await self.aheld(key)
            if held is None:  # released meanwhile (its request was refused before it ran): claim it again
                continue
            if held.at >= now - timedelta(seconds=self.window):
                return held
            if await self.atake_over(key, held.task_id, task_id, digest, self.window):
                return Claim(task_id, datetime.now(UTC), digest)
            # Another copy took the old claim over first: the claim is now theirs, read it again.

    async def aheld(self, key: str) -> Claim | None:
        row = (
            await self.db.aexecute("SELECT task_id, created_at, digest FROM message_claims WHERE key = ?", (key,))
        ).one()
        return Claim(str(row[0]), datetime.fromisoformat(str(row[1])), str(row[2])) if row else None

    async def atake_over(self, key: str, stale: str, task_id: str, digest: str, older_than: float = STALE_S) -> bool:
        """Move a claim of task ``stale`` made more than ``older_than`` seconds ago to the new task
        ``task_id``; False when the claim is younger or another copy took it over first."""
        now = datetime.now(UTC)
        moved = await self.db.aexecute(
            "UPDATE message_claims SET task_id = ?, digest = ?, created_at = ?"
            " WHERE key = ? AND task_id = ? AND created_at < ?",
            (task_id, digest, _stamp(now), key, stale, _stamp(now - timedelta(seconds=older_than))),
        )
        return moved.rowcount == 1

    async def arelease(self, key: str, task_id: str) -> None:
        """Give up the claim of a message whose request was refused before its run began."""
        await self.db.aexecute("DELETE FROM message_claims WHERE key = ? AND task_id = ?", (key, task_id))

    async def aprune(self) -> int:
        """Delete the claims older than the window (nothing answers with them any more); how many."""
        before = _stamp(datetime.now(UTC) - timedelta(seconds=self.window))
        return (await self.db.aexecute("DELETE FROM message_claims WHERE created_at < ?", (before,))).rowcount
