"""A retried message starts no second run: the first message with a ``messageId`` claims it.

A client that sent ``SendMessage`` and lost the answer (a timeout, a dropped connection, a replica
that died behind the load balancer) sends the same message again, with the same ``messageId``.
The A2A server claims each message that starts a new task, keyed by the agent, the caller and the
``messageId``, before anything runs: one ``INSERT … ON CONFLICT DO NOTHING`` in the task database,
so of any number of copies — on one server or on replicas sharing PostgreSQL — exactly one
claims it and starts the task; the others get that task's id and answer with the task.

A claim older than the server's ``retry_window`` is a message of long ago: a copy sent now is a
new message and takes the claim over. So is a claim whose task never appeared (the process that
claimed it died before the task's first save), after :data:`STALE_S`. Taking over is one
compare-and-set on the old task id, so of several copies one starts the run.
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
    """The ``message_claims`` table of a task database; a claim holds for ``window`` seconds."""

    def __init__(self, db: Database, window: float) -> None:
        self.db = db
        self.window = window

    async def aclaim(self, key: str, task_id: str) -> tuple[str, datetime]:
        """Claim ``key`` for a new task ``task_id``: the task that holds it (``task_id`` when this call
        claimed it, or took over a claim older than the window) and when it was claimed."""
        stamp = _now()
        claimed = await self.db.aexecute(
            "INSERT INTO message_claims (key, task_id, created_at) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
            (key, task_id, stamp.isoformat(timespec="microseconds")),
        )
        if claimed.rowcount == 1:
            return task_id, stamp
        row = (await self.db.aexecute("SELECT task_id, created_at FROM message_claims WHERE key = ?", (key,))).one()
        if row is None:  # claims are never deleted: the row that refused ours is there
            raise StoreError(f"the claim of message {key!r} was refused but is not in {self.db.name}")
        holder, at = str(row[0]), datetime.fromisoformat(str(row[1]))
        if at < stamp - timedelta(seconds=self.window) and await self.atake_over(key, holder, task_id, self.window):
            return task_id, _now()
        return holder, at

    async def atake_over(self, key: str, stale: str, task_id: str, older_than: float = STALE_S) -> bool:
        """Move a claim of task ``stale`` made more than ``older_than`` seconds ago to the new task
        ``task_id``; False when the claim is younger or another copy took it over first."""
        now = _now()
        moved = await self.db.aexecute(
            "UPDATE message_claims SET task_id = ?, created_at = ? WHERE key = ? AND task_id = ? AND created_at < ?",
            (
                task_id,
                now.isoformat(timespec="microseconds"),
                key,
                stale,
                (now - timedelta(seconds=older_than)).isoformat(timespec="microseconds"),
            ),
        )
        return moved.rowcount == 1


def _now() -> datetime:
    return datetime.now(UTC)
