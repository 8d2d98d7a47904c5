"""Where runs are kept: conversations are LangGraph threads in SQLite under the project's ``.ca/``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

STATE_DIR = ".ca"
CONVERSATIONS_DB = "conversations.db"


def state_dir(root: Path) -> Path:
    """``ROOT/.ca``, created on first use, with a .gitignore so state never lands in a commit."""
    folder = root / STATE_DIR
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ".gitignore").write_text("*\n", encoding="utf-8")
    return folder


@asynccontextmanager
async def open_checkpointer(root: Path) -> AsyncIterator[AsyncSqliteSaver]:
    """The conversation store of a project: SQLite in WAL mode with a busy timeout."""
    import aiosqlite

    path = state_dir(root) / CONVERSATIONS_DB
    conn = await aiosqlite.connect(path)
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA busy_timeout=5000")
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        yield saver
    finally:
        await conn.close()
