"""Where runs are kept: conversations are LangGraph threads, in SQLite under the project's ``.ca/``
or, when ``store.url`` is PostgreSQL, in LangGraph's Postgres saver (:mod:`framework.runtime.postgres`)."""

from __future__ import annotations

import inspect
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Send

from framework.errors import StoreError, StoreUnreachable
from framework.runtime.governance.secrets import KNOWN
from framework.runtime.held_reads import HeldReads
from framework.runtime.store_locks import LOCK_TIMEOUT_S, in_wal, no_wait, retried, until_free
from framework.runtime.store_url import is_postgres

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple

STATE_DIR = ".ca"
CONVERSATIONS_DB = "conversations.db"
_T = TypeVar("_T")


def state_dir(root: Path) -> Path:
    """``ROOT/.ca``, created on first use, with a .gitignore so state never lands in a commit.

    A ``.ca`` that is not a folder, or a folder that cannot be created, is a StoreError naming it.
    """
    folder = root / STATE_DIR
    if folder.is_dir():
        return folder
    try:
        # Another process may create the folder at the same instant: only a file (or a link to
        # nothing) in its place fails, not the folder's being there already.
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ".gitignore").write_text("*\n", encoding="utf-8")
    except FileExistsError as exc:
        raise StoreError(f"{folder} is not a folder: ca keeps the project's state there; move that file aside") from exc
    except OSError as exc:
        raise StoreError(f"cannot create {folder} for the project's state: {exc.strerror or exc}") from exc
    return folder


_NOT_A_DATABASE = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
"""SQLite's primary result codes for a file that is not a database or whose pages are damaged."""


@contextmanager
def opening(path: Path) -> Iterator[None]:
    """Around opening a SQLite file of ``.ca/``: a file that is not a database (or is damaged)
    becomes a StoreError naming it and what to do; every other error passes."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", -1) & 0xFF not in _NOT_A_DATABASE:
            raise
        raise StoreError(
            f"{path} is not a usable database ({exc}): move it and its -wal and -shm files aside"
            " (keep them as evidence); ca then starts a new one"
        ) from exc


class LoopSqliteSaver(SqliteSaver):
    """LangGraph's SqliteSaver with its async methods answered on the calling thread.

    AsyncSqliteSaver hands every statement to aiosqlite's worker thread and awaits the answer;
    a checkpoint is a fraction of a millisecond of SQLite work, and the thread hops cost more
    than the work (a short run spent half its CPU there). Same tables, same file: only where
    the statements run changes. The connection has no busy timeout: while another process
    holds the file's write lock, a statement fails at once and is tried again after an
    ``asyncio.sleep`` (:func:`~framework.runtime.store_locks.until_free`), so the event loop
    never waits for the lock.
    """

    lock_timeout: float = LOCK_TIMEOUT_S
    """Seconds a statement waits for another process's write lock before StoreBusy."""
    path: Path | str = CONVERSATIONS_DB

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held = HeldReads()

    async def _free(self, attempt: Callable[[], _T]) -> _T:
        return await until_free(attempt, path=self.path, timeout=self.lock_timeout)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.held.read(config, lambda: self._free(lambda: self.get_tuple(config)))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        # Read to the end first: ``list`` holds the saver's thread lock while it iterates, and a
        # put from another task between two yields would wait for it on this very thread.
        found = await self._free(lambda: [*self.list(config, filter=filter, before=before, limit=limit)])
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with self.held.writing(config):
            return await self._free(lambda: self.put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        with self.held.writing(config):
            await self._free(lambda: self.put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        with self.held.writing(thread_id):
            await self._free(lambda: self.delete_thread(thread_id))

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        return await self._free(lambda: self.get_delta_channel_history(config=config, channels=channels))


# LangGraph asks inspect.signature whether ``aput_writes`` takes ``task_path`` at the start of every
# run; inspect reads ``__signature__`` first, so it is worked out once, here.
LoopSqliteSaver.aput_writes.__signature__ = inspect.signature(LoopSqliteSaver.aput_writes)  # type: ignore[attr-defined]


def _rebuilt(item: Any, mask: Callable[[Any], Any]) -> Any:
    """Checkpoint objects that are neither dataclasses nor models: a pending ``Send`` to the tools;
    the error a step raised (a provider's, quoting the key it was given), which LangGraph's
    serializer keeps as its ``repr``: kept as that text, masked."""
    if isinstance(item, Send):
        return Send(item.node, mask(item.arg))
    if isinstance(item, BaseException):
        return mask(repr(item))
    return item


class MaskingSerializer:
    """LangGraph's serializer, with known secrets masked out of what it writes.

    A checkpoint is serialised as usual; only when a secret's bytes occur in the result is the
    object masked (messages, tool calls and results included) and serialised again, so the
    common case costs one search of the bytes.
    """

    def __init__(self, inner: SerializerProtocol | None = None) -> None:
        self.inner = inner or JsonPlusSerializer()

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = self.inner.dumps_typed(obj)
        if KNOWN.found_in(data):
            kind, data = self.inner.dumps_typed(KNOWN.value(obj, other=_rebuilt))
        return kind, data

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(data)


@asynccontextmanager
async def open_checkpointer(
    root: Path, *, lock_timeout: float = LOCK_TIMEOUT_S, url: str | None = None
) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """The conversation store of a project: PostgreSQL when ``url`` (``store.url``) names it,
    else SQLite under ``ROOT/.ca/``. Both mask known secrets out of what they write."""
    if url is not None and is_postgres(url):
        try:
            from framework.runtime.postgres import open_postgres_saver
        except ImportError as exc:
            raise StoreUnreachable(
                f"store.url is PostgreSQL, and its driver {exc.name!r} is not installed:"
                " install the 'postgres' extra (pip install 'cleveragents[postgres]')"
            ) from exc
        async with open_postgres_saver(url, serde=MaskingSerializer(), lock_timeout=lock_timeout) as saver:
            yield saver
        return
    async with _open_sqlite(root, lock_timeout=lock_timeout) as sqlite_saver:
        yield sqlite_saver


@asynccontextmanager
async def _open_sqlite(root: Path, *, lock_timeout: float) -> AsyncIterator[LoopSqliteSaver]:
    """The conversation store of a project: SQLite in WAL mode, waiting for locks off the event loop."""
    path = state_dir(root) / CONVERSATIONS_DB
    conn = sqlite3.connect(path, timeout=lock_timeout, check_same_thread=False)
    try:
        with opening(path):
            in_wal(conn.execute, path=path, timeout=lock_timeout)
            # As for the task table and the audit log: with WAL, NORMAL survives a crash of the
            # process (SIGKILL included) and never corrupts the file; a power cut may lose the last
            # commits. It spares an fsync per checkpoint, which would hold the event loop.
            conn.execute("PRAGMA synchronous=NORMAL")
            saver = LoopSqliteSaver(conn, serde=MaskingSerializer())
            # Its tables are created outside any transaction: a process that found them missing as
            # another created them is answered BUSY at once, and looks again.
            retried(saver.setup, path=path, timeout=lock_timeout, opening=True)
        no_wait(conn)  # set up: from now on a locked file is waited for by store_locks, not SQLite
        saver.lock_timeout, saver.path = lock_timeout, path
        yield saver
    finally:
        conn.close()
