"""The task database: ``.ca/tasks.db`` (SQLite), or PostgreSQL when ``store.url`` says so.

The task records, the remote calls, the conversation turns and the ACP sessions live in one
database. Embedded, it is the project's ``.ca/tasks.db``, as fast as ever: WAL, statements run on
the calling thread, no busy timeout (another process's write lock is waited for by
:mod:`framework.runtime.store_locks`, off the event loop). With ``store.url: postgresql://…``
every replica of a server shares the same rows in PostgreSQL, through psycopg 3: blocking
statements on a ``psycopg.Connection``, async ones on a ``psycopg.AsyncConnection`` so the event
loop never waits for the server. Coordination is PostgreSQL's own: each statement is its own
transaction, a conditional ``UPDATE … WHERE state = …`` takes a decision exactly once (the second
writer waits for the first's row lock, then finds the row changed), and migrations run under an
advisory lock.

The stores write their SQL once, with ``?`` placeholders; :func:`_pg` turns them into psycopg's
``%s`` once per statement. Where the dialects really differ, the store asks :attr:`Database.dialect`.

psycopg is imported only when the URL is PostgreSQL (``ca validate``, ``ca --help`` and ACP's
initialize never load it).
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from framework.errors import StoreError, StoreUnreachable
from framework.runtime.store_locks import LOCK_TIMEOUT_S, in_wal, is_busy, no_wait, retried, until_free
from framework.runtime.store_url import is_postgres, libpq_url
from framework.runtime.stores import opening, state_dir
from framework.spec.urls import hidden

TASKS_DB = "tasks.db"
PG_SCHEMA = "ca"
"""The PostgreSQL schema of the task database's tables: a2a-sdk's own ``tasks`` table (and LangGraph's)
may share the database, so ours live apart and every connection reads them first (``search_path``)."""
CONNECT_TIMEOUT_S = 10
"""How long opening a PostgreSQL connection may take before the store is called unreachable."""
APPLICATION_NAME = "ca-tasks"
"""What ``pg_stat_activity`` calls the task database's connections: one blocking and one async per process."""

Dialect = Literal["sqlite", "postgresql"]
Params = Sequence[Any]


@dataclass(frozen=True)
class Result:
    """What a statement returned: its rows (read to the end), their column names, the rows it changed."""

    rows: list[tuple[Any, ...]]
    columns: list[str]
    rowcount: int

    def one(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def records(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


Run = Callable[..., "Result"]
"""A statement in a transaction: ``run(sql, params=())``."""


class Database(ABC):
    """One connection (or, on PostgreSQL, one blocking and one async connection) to the task database.

    Every statement is its own transaction. ``execute`` blocks its thread; ``aexecute`` lets the
    event loop run while it waits (for SQLite's write lock or for PostgreSQL's answer);
    ``attempt`` is one try that answers None where SQLite's file is locked (a caller that polls
    anyway, like a turn, looks again later).
    """

    dialect: Dialect
    name: str
    """What messages call it: ``tasks.db``, or the URL with its password hidden."""
    lock_timeout: float
    """Seconds a statement waits for another process's SQLite write lock before StoreBusy."""
    local: bool
    """Whether a statement is a local call (SQLite) rather than a round trip to a server."""

    @abstractmethod
    def execute(self, sql: str, params: Params = ()) -> Result:
        """One statement (``?`` placeholders), blocking this thread; StoreBusy past the lock timeout."""

    @abstractmethod
    async def aexecute(self, sql: str, params: Params = ()) -> Result:
        """One statement, the event loop running while it waits (for a lock or for the server)."""

    @abstractmethod
    def attempt(self, sql: str, params: Params = ()) -> Result | None:
        """One try: None, with nothing done, while another process holds SQLite's write lock."""

    async def aattempt(self, sql: str, params: Params = ()) -> Result | None:
        """:meth:`attempt` with the event loop running: on SQLite the same one local try."""
        return self.attempt(sql, params)

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Run]:
        """Statements that commit together (``with db.transaction() as run: run(sql, params)``)."""

    def ready(self) -> Database:
        """The database once migrated, for the stores to use."""
        return self

    @abstractmethod
    def close(self) -> None:
        """Close the connections (another thread's statement in progress ends first)."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """Whether :meth:`close` was called (a statement then fails with StoreError)."""


def _sqlite_result(cursor: sqlite3.Cursor) -> Result:
    rows = cursor.fetchall()
    return Result(rows, [d[0] for d in cursor.description or ()], cursor.rowcount)


class SqliteDatabase(Database):
    """``.ca/tasks.db``: WAL, no busy timeout once set up, statements on the calling thread."""

    dialect: Dialect = "sqlite"
    local = True

    def __init__(self, path: Path, *, lock_timeout: float = LOCK_TIMEOUT_S) -> None:
        self.path = path
        self.name = path.name
        self.lock_timeout = lock_timeout
        self._lock = threading.Lock()
        self._closed = False
        with opening(path):  # a file that is not a database: a StoreError naming it
            self._conn = sqlite3.connect(path, timeout=lock_timeout, check_same_thread=False, isolation_level=None)
            in_wal(self._conn.execute, path=path, timeout=lock_timeout)
            self._conn.execute("PRAGMA synchronous=NORMAL")  # crash-safe in WAL; see audit_store

    def ready(self) -> SqliteDatabase:
        """Set up (migrated): from now on a locked file is waited for by store_locks, not SQLite."""
        no_wait(self._conn)
        return self

    def _once(self, sql: str, params: Params) -> Result:
        with self._lock:
            if self._closed:
                raise StoreError(f"{self.path} is closed: the process is shutting down")
            return _sqlite_result(self._conn.execute(sql, tuple(params)))

    def execute(self, sql: str, params: Params = ()) -> Result:
        return retried(lambda: self._once(sql, params), path=self.path, timeout=self.lock_timeout)

    async def aexecute(self, sql: str, params: Params = ()) -> Result:
        return await until_free(lambda: self._once(sql, params), path=self.path, timeout=self.lock_timeout)

    def attempt(self, sql: str, params: Params = ()) -> Result | None:
        try:
            return self._once(sql, params)
        except sqlite3.OperationalError as exc:
            if is_busy(exc):
                return None
            raise StoreError(f"{self.path} cannot be used: {exc}") from exc

    @contextmanager
    def transaction(self) -> Iterator[Run]:
        """One transaction that takes the write lock first (set-up: SQLite's busy timeout waits for it)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield lambda sql, params=(): _sqlite_result(self._conn.execute(sql, tuple(params)))
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        # Under the lock: another thread may be mid-statement, and closing a connection in use crashes sqlite3.
        with self._lock:
            self._closed = True
            self._conn.close()

    @property
    def closed(self) -> bool:
        return self._closed


@functools.lru_cache(maxsize=512)
def _pg(sql: str) -> str:
    """``sql`` with its ``?`` placeholders as psycopg's ``%s`` (and literal ``%`` doubled); quoted text is kept."""
    out: list[str] = []
    quote = ""
    for char in sql:
        if quote:
            if char == quote:
                quote = ""
            out.append("%%" if char == "%" else char)
        elif char in "'\"":
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    return "".join(out)


class PostgresDatabase(Database):
    """The task database in PostgreSQL: autocommit connections, each statement one transaction.

    The async connection belongs to the event loop that opened it (psycopg waits on that loop's
    sockets); a second loop in the process (``asyncio.run`` twice in a CLI) gets its own.
    A connection that broke (the server restarted) is replaced on the next statement.
    """

    dialect: Dialect = "postgresql"
    local = False

    def __init__(self, url: str, *, lock_timeout: float = LOCK_TIMEOUT_S) -> None:
        self.url = libpq_url(url)
        self.name = hidden(self.url)
        self.lock_timeout = lock_timeout
        try:
            import psycopg
        except ImportError as exc:
            raise StoreUnreachable(
                f"store.url {self.name} needs the PostgreSQL driver ({exc.name or 'psycopg'}): "
                "pip install 'cleveragents[postgres]', or remove store.url to keep the state in .ca/"
            ) from None
        self._psycopg = psycopg
        self._settings: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": f"-c search_path={PG_SCHEMA}",
            "application_name": APPLICATION_NAME,
        }
        self._lock = threading.Lock()
        self._closed = False
        self._conn: Any = self._connect()
        self._aconn: Any = None
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._aopening: asyncio.Lock | None = None

    def _unavailable(self, exc: Exception) -> StoreUnreachable:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return StoreUnreachable(
            f"cannot use the task store {self.name} ({type(exc).__name__}{': ' + reason if reason else ''}): "
            "start PostgreSQL there, create the database, or fix store.url in ca.yaml",
            data={"store": self.name, "retryable": True},
        )

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.url, **self._settings)
        except self._psycopg.Error as exc:
            raise self._unavailable(exc) from None

    def _error(self, exc: Exception, sql: str) -> Exception:
        """A driver's error as ours: a lost server is retryable, anything else names the statement."""
        if isinstance(exc, self._psycopg.OperationalError):
            return self._unavailable(exc)
        return StoreError(f"the task database {self.name} refused {sql.split(None, 1)[0]}: {exc}")

    @staticmethod
    def _result(cursor: Any) -> Result:
        columns = [d.name for d in cursor.description or ()]
        rows = [tuple(r) for r in cursor.fetchall()] if cursor.description else []
        return Result(rows, columns, cursor.rowcount)

    def execute(self, sql: str, params: Params = ()) -> Result:
        with self._lock:
            if self._closed:
                raise StoreError(f"the task database {self.name} is closed: the process is shutting down")
            if self._conn.closed:
                self._conn = self._connect()
            try:
                with self._conn.cursor() as cursor:
                    cursor.execute(_pg(sql), tuple(params))
                    return self._result(cursor)
            except self._psycopg.Error as exc:
                raise self._error(exc, sql) from None

    async def _async_connection(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._aloop is not loop or self._aopening is None:
            self._drop_async()
            self._aloop, self._aopening = loop, asyncio.Lock()
        async with self._aopening:
            if self._aconn is None or self._aconn.closed:
                try:
                    self._aconn = await self._psycopg.AsyncConnection.connect(self.url, **self._settings)
                except self._psycopg.Error as exc:
                    raise self._unavailable(exc) from None
            return self._aconn

    async def aexecute(self, sql: str, params: Params = ()) -> Result:
        if self._closed:
            raise StoreError(f"the task database {self.name} is closed: the process is shutting down")
        conn = await self._async_connection()
        try:
            async with conn.cursor() as cursor:
                await cursor.execute(_pg(sql), tuple(params))
                columns = [d.name for d in cursor.description or ()]
                rows = [tuple(r) for r in await cursor.fetchall()] if cursor.description else []
                return Result(rows, columns, cursor.rowcount)
        except self._psycopg.Error as exc:
            raise self._error(exc, sql) from None

    def attempt(self, sql: str, params: Params = ()) -> Result | None:
        return self.execute(sql, params)  # PostgreSQL has no file lock to give up on: a row lock is waited for

    async def aattempt(self, sql: str, params: Params = ()) -> Result | None:
        return await self.aexecute(sql, params)

    @contextmanager
    def transaction(self) -> Iterator[Run]:
        with self._lock:
            if self._conn.closed:
                self._conn = self._connect()
            try:
                with self._conn.transaction(), self._conn.cursor() as cursor:

                    def run(sql: str, params: Params = ()) -> Result:
                        cursor.execute(_pg(sql), tuple(params))
                        return self._result(cursor)

                    yield run
            except self._psycopg.Error as exc:
                raise self._error(exc, "the migration") from None

    def advisory(self, key: int) -> _Advisory:
        """``with db.advisory(key):`` holds PostgreSQL's session advisory lock ``key`` (waiting for it)."""
        return _Advisory(self, key)

    def _drop_async(self) -> None:
        """Close the async connection of another (or no longer running) loop without awaiting on it."""
        if self._aconn is not None and not self._aconn.closed:
            self._aconn.pgconn.finish()  # libpq's own close: no round trip, no loop needed
        self._aconn = None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()
            self._drop_async()

    @property
    def closed(self) -> bool:
        return self._closed


class _Advisory:
    def __init__(self, db: PostgresDatabase, key: int) -> None:
        self.db, self.key = db, key

    def __enter__(self) -> None:
        self.db.execute("SELECT pg_advisory_lock(?)", (self.key,))

    def __exit__(self, *exc: object) -> None:
        self.db.execute("SELECT pg_advisory_unlock(?)", (self.key,))


def open_database(root: Path, url: str = "", *, lock_timeout: float = LOCK_TIMEOUT_S) -> Database:
    """The task database of the project at ``root`` as it is (not migrated): PostgreSQL when ``url``
    (``store.url``) names it, else ``.ca/tasks.db``."""
    if is_postgres(url):
        return PostgresDatabase(url, lock_timeout=lock_timeout)
    return SqliteDatabase(state_dir(root) / TASKS_DB, lock_timeout=lock_timeout)
