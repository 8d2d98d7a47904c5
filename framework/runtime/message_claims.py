"""A retried message starts no second run: the first message with a ``messageId`` claims it.

A client that sent ``SendMessage`` and lost the answer (a timeout, a dropped connection, a replica
that died behind the load balancer) sends the same message again, with the same ``messageId``.
The A2A server claims each message that starts a new task, keyed by the agent, the caller and the
``messageId``, before anything runs: one ``INSERT … ON CONFLICT DO NOTHING`` in the task database,
so of any number of copies — on one server or on replicas sharing PostgreSQL — exactly one
claims it and starts the task; the others get that task's id and answer with the task.

A claim whose task never appeared (the process that claimed it died before the task's first
save) is taken over after :data:`STALE_S`: one compare-and-set on the old task id, so of several
retries one starts the run.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from framework.errors import StoreError
from framework.runtime.database import Database

STALE_S = 10.0
"""How long a claim may point to a task that is not saved before a retry takes the claim over."""


def claim_key(agent: str, caller: str, message_id: str) -> str:
    """The claim of a message: the same ``messageId`` from another caller or to another agent is another message."""
    return "\x1f".join((agent, caller, message_id))


class MessageClaims:
    """The ``message_claims`` table of a task database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def aclaim(self, key: str, task_id: str) -> tuple[str, datetime]:
        """Claim ``key`` for a new task ``task_id``: the task that holds it (``task_id`` when this call
        claimed it, else the first claimer's) and when it was claimed."""
        stamp = datetime.now(UTC).isoformat(timespec="microseconds")
        claimed = await self.db.aexecute(
            "INSERT INTO message_claims (key, task_id, created_at) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
            (key, task_id, stamp),
        )
        if claimed.rowcount == 1:
            return task_id, datetime.fromisoformat(stamp)
        row = (await self.db.aexecute("SELECT task_id, created_at FROM message_claims WHERE key = ?", (key,))).one()
        if row is None:  # claims are never deleted: the row that refused ours is there
            raise StoreError(f"the claim of message {key!r} was refused but is not in {self.db.name}")
        return str(row[0]), datetime.fromisoformat(str(row[1]))

    async def atake_over(self, key: str, stale: str, task_id: str) -> bool:
        """Move a claim whose task ``stale`` never appeared to the new task ``task_id``; False when another
        retry took it over first (or the claim is younger than :data:`STALE_S`)."""
        now = datetime.now(UTC)
        before = (now - timedelta(seconds=STALE_S)).isoformat(timespec="microseconds")
        moved = await self.db.aexecute(
            "UPDATE message_claims SET task_id = ?, created_at = ? WHERE key = ? AND task_id = ? AND created_at < ?",
            (task_id, now.isoformat(timespec="microseconds"), key, stale, before),
        )
        return moved.rowcount == 1
