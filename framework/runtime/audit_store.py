"""The tables behind the audit log, and the one transaction that appends to them.

    audit       seq INTEGER PRIMARY KEY, ts, kind, source, task_id, conversation_id, agent,
                data (canonical JSON text), prev_hash, hash, chain ('sha256' or 'hmac-sha256'),
                key_id ('' when unkeyed); indexed on task_id and conversation_id
    audit_head  one row (id = 1): the seq and hash of the last record appended

A log written before records had a kind gains ``chain`` and ``key_id`` on open, with the
defaults 'sha256' and '' that describe its rows.

Appends are serialised: the head row is read and rewritten in the same transaction as the
insert. On SQLite that transaction starts with ``BEGIN IMMEDIATE`` (the write lock is taken
before the head is read, so two processes can never both extend the same head); on other
databases the head row is read ``FOR UPDATE``. Within a process a lock orders the threads,
so they queue instead of spinning on SQLite's busy handler. On SQLite an append is the same
four statements sent through the sqlite3 module directly: SQLAlchemy's statement building
cost five times the work of the statements themselves, on every record. A SQLite log that is
set up already (WAL, both tables, every column, the head row) is also opened, and its last
record read, that way: SQLAlchemy is imported only to create or repair a log, to query it, or
for another database.

Async appends on SQLite commit in groups: see :mod:`framework.runtime.audit_groups`.

The store knows rows, not hashes: the caller builds each row from the seq and prev_hash it is
given while the lock is held (see :mod:`framework.runtime.audit`).

A damaged database (not a database, corrupt pages, one of the two tables missing) is reported
as a :class:`~framework.errors.StoreError` naming the file and what to do, wherever the driver
meets it: opening, appending, reading.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from framework.errors import StoreError, UsageError
from framework.runtime.audit_groups import Group, GroupCommits, Row
from framework.runtime.store_locks import LOCK_TIMEOUT_S, in_wal, no_wait, retried
from framework.runtime.store_url import unreachable
from framework.spec.urls import hidden

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine, Table
    from sqlalchemy.engine import URL

GENESIS = "0" * 64
"""The prev_hash of the first record, and the head of an empty log."""

BUSY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10
"""Seconds a database server (PostgreSQL) may take to answer a new connection before it is unreachable."""
_HEAD_ID = 1
_IMMEDIATE = "ca_immediate"
# The audit log uses a sync engine (run in a thread by the async facade); a URL written for an
# async engine, e.g. the task store's, is mapped to the sync driver of the same database.
_SYNC_DRIVERS = {
    "sqlite+aiosqlite": "sqlite",
    "postgresql": "postgresql+psycopg",  # SQLAlchemy's default for it is psycopg2, which ca does not use
    "postgresql+asyncpg": "postgresql+psycopg",
    "postgresql+psycopg_async": "postgresql+psycopg",
}

COLUMNS = (
    "seq",
    "ts",
    "kind",
    "source",
    "task_id",
    "conversation_id",
    "agent",
    "data",
    "prev_hash",
    "hash",
    "chain",
    "key_id",
)
"""The columns of ``audit``, in order (:func:`tables` declares them)."""


class Tables(NamedTuple):
    audit: Table
    head: Table


@functools.cache
def tables() -> Tables:
    """The two tables as SQLAlchemy declares them, built at first use: an append to, or a read of, a
    log on SQLite that is already set up goes through the sqlite3 module alone, and a cold ``ca run``
    then loads no SQLAlchemy (~0.1 s)."""
    from sqlalchemy import Column, Index, Integer, MetaData, String, Table, Text

    metadata = MetaData()
    audit = Table(
        "audit",
        metadata,
        Column("seq", Integer, primary_key=True, autoincrement=False),
        Column("ts", String(32), nullable=False),
        Column("kind", String(64), nullable=False),
        Column("source", String(16), nullable=False),
        Column("task_id", String(255), nullable=False),
        Column("conversation_id", String(255), nullable=False),
        Column("agent", String(255), nullable=False),
        Column("data", Text, nullable=False),
        Column("prev_hash", String(64), nullable=False),
        Column("hash", String(64), nullable=False),
        Column("chain", String(16), nullable=False, server_default="sha256"),
        Column("key_id", String(16), nullable=False, server_default=""),
        Index("ix_audit_task_id", "task_id"),
        Index("ix_audit_conversation_id", "conversation_id"),
    )
    head = Table(
        "audit_head",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=False),
        Column("seq", Integer, nullable=False),
        Column("hash", String(64), nullable=False),
    )
    assert tuple(column.name for column in audit.columns) == COLUMNS
    return Tables(audit, head)


def _sync_url(url: str) -> URL:
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        scheme = url.split("://", 1)[0] if "://" in url else url[:20]
        raise UsageError(f"audit store: {scheme!r}… is not a database URL (e.g. 'sqlite:///path/audit.db')") from exc
    sync = _SYNC_DRIVERS.get(parsed.drivername)
    return parsed.set(drivername=sync) if sync else parsed


def _create_engine(url: str) -> Engine:
    from sqlalchemy import create_engine, event
    from sqlalchemy.exc import NoSuchModuleError

    parsed = _sync_url(url)
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() != "sqlite":
        try:
            return create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
        except NoSuchModuleError as exc:
            raise UsageError(f"audit store {shown!r}: unknown database {parsed.drivername!r}") from exc
        except ImportError as exc:
            raise UsageError(f"audit store {shown!r}: its database driver is not installed ({exc})") from exc
    if parsed.database in (None, "", ":memory:"):
        raise UsageError(f"audit store {shown!r}: an in-memory SQLite database cannot be shared; give a file path")
    engine = create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event, not pysqlite, decide how a transaction starts.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        in_wal(cursor.execute, path=str(parsed.database), timeout=BUSY_TIMEOUT_S)
        # WAL with synchronous=NORMAL: a commit survives a crash of the process (SIGKILL included)
        # and the database is never corrupted; only a power cut may lose the last commits. It
        # saves an fsync per record, which was most of governance's cost per tool call.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get(_IMMEDIATE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


_DAMAGED = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
"""SQLite's primary result codes for a file that is not a database or whose pages are damaged."""
_ADDED_COLUMNS = ("chain", "key_id")
"""Columns added after the first release; their server defaults describe the rows written before."""
_INSERT = f"INSERT INTO audit ({', '.join(COLUMNS)}) VALUES ({', '.join('?' for _ in COLUMNS)})"  # noqa: S608
_LAST = f"SELECT {', '.join(COLUMNS)} FROM audit ORDER BY seq DESC LIMIT 1"  # noqa: S608


def _missing_tables(conn: Connection) -> list[str]:
    from sqlalchemy import inspect as inspect_schema

    names = set(inspect_schema(conn).get_table_names())
    return [table for table in ("audit", "audit_head") if table not in names]


def _plain_sqlite_file(url: str) -> str | None:
    """The file of ``sqlite:///FILE`` (as :meth:`AuditLog.open` writes it) when it exists, else None:
    anything else (a query, an escape, another database) is read by SQLAlchemy."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url or "%" in url:
        return None
    path = url.removeprefix(prefix)
    return path if path and path != ":memory:" and Path(path).is_file() else None


def _open_set_up(file: str) -> sqlite3.Connection | None:
    """A connection to the log in ``file`` when it needs nothing of ``_setup`` (WAL, every column,
    the head row), else None: anything else, a damaged file included, is left to ``_setup``, which
    says what is wrong."""
    conn: sqlite3.Connection | None = None
    try:
        conn = _connect_sqlite(file)
        wal = conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        columns = {row[1] for row in conn.execute("PRAGMA table_info(audit)")}
        head = conn.execute("SELECT 1 FROM audit_head WHERE id = ?", (_HEAD_ID,)).fetchone()
        if wal and set(COLUMNS) <= columns and head is not None:
            return conn
    except sqlite3.Error:
        pass
    if conn is not None:
        conn.close()
    return None


def _connect_sqlite(path: str) -> sqlite3.Connection:
    """A plain sqlite3 connection with the engine's settings (see ``_on_connect``).

    Opened after ``_setup``, when the engine has already put the file in WAL mode (which is kept
    in the file): asking again would be one more chance to meet another process switching it.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA synchronous=NORMAL")
    return no_wait(conn)  # another process's write lock is waited for by store_locks, not inside SQLite


class AuditStore(GroupCommits):
    """One database holding the ``audit`` and ``audit_head`` tables; safe to share between threads."""

    def __init__(self, url: str, *, lock_timeout: float = LOCK_TIMEOUT_S) -> None:
        self.lock_timeout = lock_timeout
        """Seconds an append waits for another process's write lock on SQLite before StoreBusy."""
        self._url = url
        self._lock = threading.Lock()
        self._sqlite: sqlite3.Connection | None = None
        self._groups: dict[asyncio.AbstractEventLoop, Group] = {}
        self._flushes: set[asyncio.Task[None]] = set()
        file = _plain_sqlite_file(url)
        if file and (conn := _open_set_up(file)):  # a log set up already needs no engine to open
            self.where: str = file
            """The file (or URL, password hidden) of the log, for messages."""
            self._file: str | None = file
            self._sqlite = conn
            return
        engine = self._engine
        database = engine.url.database if engine.dialect.name == "sqlite" else None
        self.where = database or hidden(engine.url.render_as_string(hide_password=False))
        self._file = database
        try:
            with self._reported():
                self._setup()
                self._sqlite = _connect_sqlite(database) if database else None
        except BaseException:
            engine.dispose()
            raise

    @functools.cached_property
    def _engine(self) -> Engine:
        """The SQLAlchemy engine: made at first use (see :func:`tables`)."""
        return _create_engine(self._url)

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Connection]:
        with self._lock, self._engine.connect() as conn:
            conn.execution_options(**{_IMMEDIATE: write})
            with conn.begin():
                yield conn

    @contextmanager
    def _reported(self) -> Iterator[None]:
        """Turn the driver's word for a damaged database, or for a server that cannot be reached,
        into a StoreError; let every other error pass."""
        try:
            yield
        except Exception as exc:
            if isinstance(exc, sqlite3.Error):
                error: BaseException | None = exc
            elif "_engine" not in vars(self):  # no engine, so no error of SQLAlchemy's
                raise
            else:
                from sqlalchemy.exc import DBAPIError, OperationalError

                if not isinstance(exc, DBAPIError):
                    raise
                if isinstance(exc, OperationalError) and self._file is None:
                    # a server (PostgreSQL) that is down, refuses the login or has no such database
                    raise unreachable(self.where, exc.orig or exc) from exc
                error = exc.orig
            # The primary result code (the low byte of an extended one); only the sqlite3 driver sets it.
            code = getattr(error, "sqlite_errorcode", -1) & 0xFF if isinstance(error, sqlite3.Error) else None
            if code in _DAMAGED:
                raise self._corrupt(str(error)) from exc
            if code == sqlite3.SQLITE_ERROR:  # e.g. "no such table": a table dropped while the log is open
                with self._engine.connect() as conn:
                    missing = _missing_tables(conn)
                if missing:
                    raise self._corrupt(f"its table {missing[0]!r} is missing") from exc
            raise

    def _corrupt(self, detail: str) -> StoreError:
        if self._file:
            todo = (
                f"move {self.where} and its -wal and -shm files aside (keep them as evidence); ca then starts a new log"
            )
        else:
            todo = "restore the audit tables from a backup, or drop both to start a new log"
        return StoreError(f"the audit log {self.where} is corrupt ({detail}): {todo}")

    def _setup(self) -> None:
        from sqlalchemy import insert, select, text
        from sqlalchemy import inspect as inspect_schema
        from sqlalchemy.schema import CreateColumn

        audit_table, head_table = tables()
        with self._transaction(write=True) as conn:
            if conn.dialect.name == "postgresql":  # replicas starting together must not race on CREATE TABLE
                conn.execute(text("SELECT pg_advisory_xact_lock(7412290141)"))
            missing = _missing_tables(conn)
            if len(missing) == 1:  # both missing is a new log; one missing is a damaged one
                raise self._corrupt(f"its table {missing[0]!r} is missing")
            audit_table.metadata.create_all(conn)
            columns = {column["name"] for column in inspect_schema(conn).get_columns("audit")}
            for name in _ADDED_COLUMNS:
                if name not in columns:  # the column as the table declares it, server default included
                    column = CreateColumn(audit_table.c[name]).compile(dialect=conn.dialect)
                    conn.execute(text(f"ALTER TABLE audit ADD COLUMN {column}"))
            if conn.execute(select(head_table.c.id)).first() is None:
                last = conn.execute(
                    select(audit_table.c.seq, audit_table.c.hash).order_by(audit_table.c.seq.desc()).limit(1)
                ).first()
                seq, hash_ = (last.seq, last.hash) if last else (0, GENESIS)
                conn.execute(insert(head_table).values(id=_HEAD_ID, seq=seq, hash=hash_))

    def append(self, build: Callable[[int, str], Row]) -> Row:
        """Insert ``build(seq, prev_hash)`` as the next row, extending the head in the same transaction."""
        with self._reported():
            return self._append(build)

    @property
    def groups(self) -> bool:
        """Whether async appends commit in groups on the event loop (SQLite): :meth:`submit` takes records."""
        return self._sqlite is not None

    async def aappend_all(self, builds: Sequence[Callable[[int, str], Row]]) -> list[Row]:
        """Append the row of each of ``builds``, in order. On SQLite they join this loop's open group
        (one transaction for all of its records, see :meth:`submit`), all of them before the caller
        waits: a cancel meanwhile loses none of them, or, once they wait for another process's
        write lock, withdraws them all. Another process's write lock is waited for with the event
        loop running. Other databases append in a worker thread, one transaction per record."""
        if not builds:
            return []
        if self._sqlite is None:
            return [await asyncio.to_thread(self.append, build) for build in builds]
        return await self.rows(self.submit(builds))

    def append_all(
        self, builds: Sequence[Callable[[int, str], Row]], *, closing: bool = False
    ) -> list[Row | Exception]:
        """Append the row of each of ``builds``, in order, in one transaction where the store groups
        (SQLite), blocking this thread; a build that raised gives its exception in its place.
        ``closing``: the log is being closed: another process's lock is waited for the whole lock
        timeout, on an event loop's thread too."""
        with self._reported():
            if self._sqlite is not None:
                written = retried(
                    lambda: self._attempt(list(builds)), path=self.where, timeout=self.lock_timeout, opening=closing
                )
                if written is not None:
                    return written
            rows: list[Row | Exception] = []
            for build in builds:
                try:
                    rows.append(self._append(build))
                except Exception as exc:  # that record's own fault, as in a group: given in its place
                    rows.append(exc)
            return rows

    def _attempt(self, builds: list[Callable[[int, str], Row]]) -> list[Row | Exception] | None:
        """One try at appending ``builds`` in one transaction on the sqlite3 connection; None when it
        was closed meanwhile."""
        with self._lock:
            if self._sqlite is None:
                return None
            return self._append_sqlite(self._sqlite, builds)

    def _append(self, build: Callable[[int, str], Row]) -> Row:
        if self._sqlite is not None:
            written = retried(lambda: self._attempt([build]), path=self.where, timeout=self.lock_timeout)
            if written is not None:
                if isinstance(row := written[0], Exception):
                    raise row
                return row
        from sqlalchemy import insert, select, update

        audit_table, head_table = tables()
        with self._transaction(write=True) as conn:
            head = conn.execute(
                select(head_table.c.seq, head_table.c.hash).where(head_table.c.id == _HEAD_ID).with_for_update()
            ).first()
            if head is None:
                raise self._corrupt("its audit_head row is missing, so the log cannot be extended")
            row = build(head.seq + 1, head.hash)
            conn.execute(insert(audit_table).values(**row))
            conn.execute(update(head_table).where(head_table.c.id == _HEAD_ID).values(seq=row["seq"], hash=row["hash"]))
        return row

    def _append_sqlite(
        self, conn: sqlite3.Connection, builds: list[Callable[[int, str], Row]]
    ) -> list[Row | Exception]:
        """Append the row of each of ``builds``, in order, in one transaction on a plain sqlite3
        connection; the caller holds the lock. A build that raises gives its exception in its place
        and leaves the chain as it was for the next.

        ``BEGIN IMMEDIATE`` fails at once while another process writes (the caller tries again);
        once it succeeds, the write lock is this connection's until the commit."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            head = conn.execute("SELECT seq, hash FROM audit_head WHERE id = ?", (_HEAD_ID,)).fetchone()
            if head is None:
                raise self._corrupt("its audit_head row is missing, so the log cannot be extended")
            seq, prev_hash = head
            written: list[Row | Exception] = []
            for build in builds:
                try:
                    row = build(seq + 1, prev_hash)
                except Exception as exc:  # this record's own fault: its caller gets it, the others go on
                    written.append(exc)
                    continue
                written.append(row)
                seq, prev_hash = row["seq"], row["hash"]
            rows = [row for row in written if not isinstance(row, Exception)]
            conn.executemany(_INSERT, [tuple(row[name] for name in COLUMNS) for row in rows])
            conn.execute("UPDATE audit_head SET seq = ?, hash = ? WHERE id = ?", (seq, prev_hash, _HEAD_ID))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return written

    def _last_sqlite(self) -> list[Row] | None:
        """:meth:`last` on the sqlite3 connection, as a list of none or one row; None when it was closed meanwhile."""
        with self._lock:
            if self._sqlite is None:
                return None
            found = self._sqlite.execute(_LAST).fetchall()
        return [dict(zip(COLUMNS, row, strict=True)) for row in found]

    def select(
        self,
        *,
        task_id: str | None = None,
        conversation_id: str | None = None,
        kind: str | None = None,
        since_seq: int | None = None,
        since_ts: str | None = None,
        limit: int = 1000,
        newest: bool = False,
    ) -> list[Row]:
        """Rows in seq order, filtered by every criterion given; ``since_seq`` is exclusive,
        ``since_ts`` (UTC ISO-8601, as ``ts`` is written) inclusive; ``newest``: the last ``limit``."""
        from sqlalchemy import select

        audit_table = tables().audit
        order = audit_table.c.seq.desc() if newest else audit_table.c.seq
        query = select(audit_table).order_by(order).limit(limit)
        if since_ts is not None:
            query = query.where(audit_table.c.ts >= since_ts)
        if task_id is not None:
            query = query.where(audit_table.c.task_id == task_id)
        if conversation_id is not None:
            query = query.where(audit_table.c.conversation_id == conversation_id)
        if kind is not None:
            query = query.where(audit_table.c.kind == kind)
        if since_seq is not None:
            query = query.where(audit_table.c.seq > since_seq)
        with self._reported(), self._transaction(write=False) as conn:
            rows = [dict(row) for row in conn.execute(query).mappings()]
        return rows[::-1] if newest else rows

    def last(self) -> Row | None:
        """The row with the highest seq, or None for an empty log."""
        if self._sqlite is not None:  # read as it is appended to: through the sqlite3 module
            with self._reported():
                found = retried(self._last_sqlite, path=self.where, timeout=self.lock_timeout)
            if found is not None:
                return found[0] if found else None
        from sqlalchemy import select

        audit_table = tables().audit
        query = select(audit_table).order_by(audit_table.c.seq.desc()).limit(1)
        with self._reported(), self._transaction(write=False) as conn:
            row = conn.execute(query).mappings().first()
        return dict(row) if row else None

    def head(self) -> tuple[int, str] | None:
        """The (seq, hash) the last append left in ``audit_head``; None if that row was removed."""
        from sqlalchemy import select

        head_table = tables().head
        with self._reported(), self._transaction(write=False) as conn:
            row = conn.execute(select(head_table.c.seq, head_table.c.hash).where(head_table.c.id == _HEAD_ID)).first()
        return (row.seq, row.hash) if row else None

    def close(self) -> None:
        """Close every connection (SQLite then folds its WAL back into the file)."""
        with self._lock:
            if self._sqlite is not None:
                self._sqlite.close()
                self._sqlite = None  # a later append reopens through the engine, as it did before
        if "_engine" in vars(self):
            self._engine.dispose()
