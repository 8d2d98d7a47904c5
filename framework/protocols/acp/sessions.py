"""ACP sessions of a project: each session's agent, mode and folder, kept across processes.

An IDE may ``session/load`` a session that another ``ca run --stdio`` process created; the
conversation itself is a LangGraph thread, and this small table says which agent it belongs to
and which mode (automation profile) the person chose. It lives in the project's task database
(``.ca/tasks.db``, or PostgreSQL) beside the task records, in a table of its own that only ACP reads and writes.
"""

from __future__ import annotations

from datetime import UTC, datetime

from framework.runtime.database import Database


class SessionStore:
    """The ``sessions`` table of the task database (``.ca/tasks.db``, or PostgreSQL with ``store.url``);
    safe across threads, processes and replicas.

    ``asave`` waits for another process's SQLite write lock, or PostgreSQL's answer, off the event
    loop, as the task record's writes do (:mod:`framework.runtime.database`).
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        """The task database: the runtime's (``Runtime.database``), which closes it."""

    async def asave(self, session_id: str, agent: str, mode: str, cwd: str) -> None:
        """Remember a session: its agent and chosen mode survive the process."""
        await self.db.aexecute(
            "INSERT INTO sessions (id, agent, mode, cwd, updated_at) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET mode = excluded.mode, cwd = excluded.cwd,"
            " updated_at = excluded.updated_at",
            (session_id, agent, mode, cwd, datetime.now(UTC).isoformat()),
        )

    def get(self, session_id: str) -> dict[str, str] | None:
        """The session's ``agent``, ``mode`` and ``cwd``, or None for a session nobody created here."""
        row = self.db.execute("SELECT agent, mode, cwd FROM sessions WHERE id = ?", (session_id,)).one()
        return None if row is None else {"agent": row[0], "mode": row[1], "cwd": row[2]}

    async def aget(self, session_id: str) -> dict[str, str] | None:
        """:meth:`get`, waiting with the event loop running."""
        row = (await self.db.aexecute("SELECT agent, mode, cwd FROM sessions WHERE id = ?", (session_id,))).one()
        return None if row is None else {"agent": row[0], "mode": row[1], "cwd": row[2]}
