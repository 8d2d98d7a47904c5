"""ACP sessions of a project: each session's agent, mode and folder, kept across processes.

An IDE may ``session/load`` a session that another ``ca run --stdio`` process created; the
conversation itself is a LangGraph thread, and this small table says which agent it belongs to
and which mode (automation profile) the person chose. It lives in the project's ``tasks.db``
beside the task records, in a table of its own that only ACP reads and writes.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

from framework.runtime.stores import opening, state_dir

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    mode TEXT NOT NULL DEFAULT '',
    cwd TEXT NOT NULL DEFAULT '',
    updated_at TEXT NOT NULL
);
"""


class SessionStore:
    """The ``sessions`` table (SQLite, WAL, busy timeout); safe across threads and processes."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, timeout=30, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)

    @classmethod
    def open(cls, root: Path) -> SessionStore:
        path = state_dir(root) / "tasks.db"
        with opening(path):  # a file that is not a database: a StoreError naming it
            return cls(path)

    def close(self) -> None:
        self._conn.close()

    def save(self, session_id: str, agent: str, mode: str, cwd: str) -> None:
        """Remember a session: its agent and chosen mode survive the process."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO sessions (id, agent, mode, cwd, updated_at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT(id) DO UPDATE SET mode = excluded.mode, cwd = excluded.cwd,"
                " updated_at = excluded.updated_at",
                (session_id, agent, mode, cwd, datetime.now(UTC).isoformat()),
            )

    def get(self, session_id: str) -> dict[str, str] | None:
        """The session's ``agent``, ``mode`` and ``cwd``, or None for a session nobody created here."""
        with self._lock:
            row = self._conn.execute("SELECT agent, mode, cwd FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else {"agent": row[0], "mode": row[1], "cwd": row[2]}
