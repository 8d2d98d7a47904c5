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

from framework.runtime.store_locks import LOCK_TIMEOUT_S, no_wait, retried, until_free
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
    """The ``sessions`` table (SQLite, WAL); safe across threads and processes.

    Another process's write lock is waited for off the event loop (``asave``), as the task
    record's is (:mod:`framework.runtime.store_locks`).
    """

    def __init__(self, path: Path, *, lock_timeout: float = LOCK_TIMEOUT_S) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, timeout=lock_timeout, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)
        no_wait(self._conn)

    @classmethod
    def open(cls, root: Path, *, lock_timeout: float = LOCK_TIMEOUT_S) -> SessionStore:
        path = state_dir(root) / "tasks.db"
        with opening(path):  # a file that is not a database: a StoreError naming it
            return cls(path, lock_timeout=lock_timeout)

    def close(self) -> None:
        self._conn.close()

    async def asave(self, session_id: str, agent: str, mode: str, cwd: str) -> None:
        """Remember a session: its agent and chosen mode survive the process."""
        values = (session_id, agent, mode, cwd, datetime.now(UTC).isoformat())

        def write() -> None:
            with self._lock:
                self._conn.execute(
                    "INSERT INTO sessions (id, agent, mode, cwd, updated_at) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT(id) DO UPDATE SET mode = excluded.mode, cwd = excluded.cwd,"
                    " updated_at = excluded.updated_at",
                    values,
                )

        await until_free(write, path=self.path, timeout=self.lock_timeout)

    def get(self, session_id: str) -> dict[str, str] | None:
        """The session's ``agent``, ``mode`` and ``cwd``, or None for a session nobody created here."""

        def read() -> tuple[str, str, str] | None:
            with self._lock:
                found: tuple[str, str, str] | None = self._conn.execute(
                    "SELECT agent, mode, cwd FROM sessions WHERE id = ?", (session_id,)
                ).fetchone()
            return found

        row = retried(read, path=self.path, timeout=self.lock_timeout)
        return None if row is None else {"agent": row[0], "mode": row[1], "cwd": row[2]}
