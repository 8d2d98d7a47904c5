"""The remote task each agent-tool call started, by the call (``TASK_ID:CALL_ID``): a caller resumed
after a pause, or taken over by another process, continues that task instead of sending the message
again. One row per call in the task database's ``remote_calls`` table."""

from __future__ import annotations

from typing import Any

from framework.runtime.database import Database
from framework.runtime.leases import now

_SAVE = (
    "INSERT INTO remote_calls (key, url, task_id, context_id, created_at) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET url = excluded.url, task_id = excluded.task_id,"
    " context_id = excluded.context_id, created_at = excluded.created_at"
)
_FIND = "SELECT url, task_id, context_id FROM remote_calls WHERE key = ?"


class RemoteCalls:
    """The ``remote_calls`` rows of one task database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def asave(self, key: str, url: str, task_id: str, context_id: str) -> None:
        """Remember the remote task the call ``key`` started."""
        await self.db.aexecute(_SAVE, (key, url, task_id, context_id, now().isoformat()))

    async def afind(self, key: str) -> dict[str, str] | None:
        """The remote task the call ``key`` started (``url``, ``task_id``, ``context_id``), or None."""
        row: tuple[Any, ...] | None = (await self.db.aexecute(_FIND, (key,))).one()
        return None if row is None else {"url": row[0], "task_id": row[1], "context_id": row[2]}
