"""The A2A task store of ``ca serve``: a2a-sdk's DatabaseTaskStore, written only when it matters.

a2a-sdk saves the whole task on every event (each status update and each reply chunk), so a
short run cost five writes of the same row. :class:`WriteBehindTaskStore` keeps the latest
version of each running task in memory and writes to the database:

* at once, the first save of a run (the task exists in the database from its start, so a
  server that dies leaves it ``submitted`` or ``working`` for :func:`fail_interrupted`);
* at once, every save into a state that ends a run or waits for someone: completed, failed,
  canceled, rejected, input-required, auth-required. The SDK answers the client only after
  that save returns, so what the client was told survives a restart;
* otherwise at most every ``interval`` seconds (a background flush), and on :meth:`close`.

``get`` answers the latest version (from memory while the task runs), ``list`` flushes first,
so GetTask and ListTasks never show a state older than the last event. Both derive each task's
status from the runtime's task record (``records``; :func:`~framework.protocols.a2a.statuses.derived`):
the record is the one source of truth, so a task decided or ended by another entry point
(``ca approve``, ACP, another process) shows its real state.

On SQLite, :class:`SqliteTaskStore` serves ``save`` and ``get`` through the sqlite3 module. A
``follower`` (:class:`~framework.protocols.a2a.relay.TaskFollower`) is told of each row written, so
subscribers to a task without an SDK run here follow it: on other replicas (PostgreSQL), or in this
process (a run it resumed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from a2a.server.agent_execution.active_task import INTERRUPTED_TASK_STATES, TERMINAL_TASK_STATES
from a2a.server.context import ServerCallContext
from a2a.server.tasks import DatabaseTaskStore, TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState
from sqlalchemy import JSON, DateTime, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import class_mapper

from framework.errors import StoreBusy
from framework.protocols.a2a.relay import TaskFollower
from framework.protocols.a2a.statuses import derived
from framework.runtime.governance.secrets import KNOWN
from framework.runtime.store_locks import LOCK_TIMEOUT_S, in_wal, no_wait, until_free
from framework.runtime.task_record import Task as Record

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 0.5
"""A running task's latest state reaches the database at most this long after it changed."""
DURABLE_STATES = frozenset(TERMINAL_TASK_STATES | INTERRUPTED_TASK_STATES)
"""Saves into these states are written before ``save`` returns."""
RUNNING_STATES = ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
"""The states of a row whose run has not ended nor waits for anyone."""
_RUNNING = "(status ->> 'state') IN ({})".format(", ".join(f"'{state}'" for state in RUNNING_STATES))
"""PostgreSQL: a row still running (the predicate of the partial index the sweep reads)."""
_CREATE_LOCK = 0x6361_6132_6174  # "caa2at": the advisory lock a2a-sdk's table creation runs under


@dataclass
class _Live:
    """A task saved at least once in this run: its latest version and whether the database lags."""

    task: Task
    context: ServerCallContext
    dirty: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Orders this task's writes: asyncio.Lock is FIFO, so a later version is never overwritten."""


def _masked(task: Task) -> Task:
    """A copy of ``task`` to store (the SDK keeps mutating the object it saved), known secrets masked.

    The user's own message is part of the task; masking it costs a search of the serialised task,
    and a round trip through JSON only when a secret is in it.
    """
    latest = Task()
    latest.CopyFrom(task)
    if KNOWN.found_in(latest.SerializeToString()):
        from google.protobuf import json_format

        latest = json_format.ParseDict(KNOWN.value(json_format.MessageToDict(latest)), Task())
    return latest


async def _no_record(task_id: str) -> Record | None:
    return None


class WriteBehindTaskStore(TaskStore):
    """A :class:`DatabaseTaskStore` whose intermediate saves are held in memory (see the module doc)."""

    def __init__(
        self,
        store: DatabaseTaskStore,
        *,
        records: Callable[[str], Awaitable[Record | None]] = _no_record,
        interval: float = FLUSH_SECONDS,
        follower: TaskFollower | None = None,
        stop: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.follower = follower
        """Told of every row written (see :mod:`~framework.protocols.a2a.relay`)."""
        self.records = records
        self.stop = stop
        """Called with a task's id before its row is saved canceled: the SDK answers a CancelTask for a task
        another replica runs by saving the row canceled, and the run must stop first (through its record)."""
        self.interval = interval
        self._owner: Callable[[ServerCallContext], str] = store.owner_resolver
        self._live: dict[tuple[str, str], _Live] = {}
        self._unsaved: set[tuple[str, str]] = set()
        """Tasks whose id this process has just given and that are not saved yet (see :meth:`new`)."""
        self._sleeper: asyncio.Task[None] | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def store_name(self) -> str:
        path = getattr(self.store, "path", None)
        return path.name if isinstance(path, Path) else "the task store"

    async def initialize(self) -> None:
        engine = self.store.engine
        if engine.dialect.name != "postgresql":
            await self.store.initialize()
            return
        # Replicas starting together on an empty database: a2a-sdk's CREATE TABLE of one fails on the
        # other's (a unique violation in pg_type). Under a session advisory lock one creates, the others
        # wait and then find the table.
        async with engine.connect() as lock:
            await lock.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _CREATE_LOCK})
            try:
                await self.store.initialize()
                # The rows still running, for the sweep of every replica (stale_running): a few among
                # all the tasks ever served, which it would otherwise read every time.
                table = self.store.task_model.__tablename__
                await lock.execute(
                    text(f"CREATE INDEX IF NOT EXISTS ca_{table}_running ON {table} (last_updated) WHERE {_RUNNING}")
                )
                await lock.commit()
            finally:
                await lock.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _CREATE_LOCK})

    @contextmanager
    def new(self, task_id: str, context: ServerCallContext) -> Iterator[None]:
        """While a request sets up the task whose id this process has just given (a fresh UUID, so
        no row of it exists anywhere): ``get`` answers None without asking the database, until the
        task's first save. a2a-sdk looks a new task up three times before it saves it."""
        key = (self._owner(context), task_id)
        self._unsaved.add(key)
        try:
            yield
        finally:
            self._unsaved.discard(key)

    async def save(self, task: Task, context: ServerCallContext) -> None:
        if self.stop is not None and task.status.state == TaskState.TASK_STATE_CANCELED:
            await self.stop(task.id)
        key = (self._owner(context), task.id)
        self._unsaved.discard(key)
        latest = _masked(task)
        live = self._live.get(key)
        if not latest.status.HasField("timestamp"):
            # a2a-sdk's first save of a task (and a blocking SendMessage's row until it ends) has no
            # time: stamped once, the row's last_updated tells a sweep that it was left running (its
            # later saves in that state keep that time: the status did not change)
            if live is not None and live.task.status.state == latest.status.state:
                latest.status.timestamp.CopyFrom(live.task.status.timestamp)
            else:
                latest.status.timestamp.GetCurrentTime()
        durable = self._closed or latest.status.state in DURABLE_STATES
        if live is None:
            live = _Live(latest, context)
            if not durable:
                self._live[key] = live
            try:
                await self._write(live, latest, context)
            except StoreBusy:
                live.dirty = True  # as below: kept, and written once the file is free
                self._live[key] = live
                self._schedule_flush()
                logger.warning("task %s: its A2A row is written once %s is free", task.id, self.store_name)
            return
        live.task, live.context = latest, context
        if not durable:
            live.dirty = True
            self._schedule_flush()
            return
        live.dirty = False
        try:
            await self._write(live, latest, context)
        except StoreBusy:
            # Another process held the file past store.lock_timeout: the runtime's record already
            # has the state, so the row follows as soon as the lock is given back (the flush).
            live.dirty = True
            self._schedule_flush()
            logger.warning("task %s: its A2A row is written once %s is free", task.id, self.store_name)
            return
        except BaseException:
            live.dirty = live.task is latest or live.dirty
            raise
        if live.task is latest and self._live.get(key) is live:
            del self._live[key]  # nothing newer arrived while it was written

    async def get(self, task_id: str, context: ServerCallContext, *, agent: str | None = None) -> Task | None:
        """The task, its status derived from its record; None when it has no row, or (``agent``)
        when its record is another agent's."""
        key = (self._owner(context), task_id)
        if key in self._unsaved:
            return None
        live = self._live.get(key)
        if live is None:
            task = await self.store.get(task_id, context)
            if task is None:
                return None
        else:
            task = Task()
            task.CopyFrom(live.task)
        record = await self.records(task_id)  # read once: for the agent and for the status
        if agent is not None and record is not None and record.agent != agent:
            return None
        return derived(task, record)

    async def list(
        self, params: ListTasksRequest, context: ServerCallContext, *, agent: str | None = None
    ) -> ListTasksResponse:
        await self.flush()
        query = ListTasksRequest()
        query.CopyFrom(params)
        query.ClearField("status")  # a row's stored state may lag its record: filter on the derived one
        found = await self.store.list(query, context)
        tasks = []
        for task in found.tasks:
            record = await self.records(task.id)
            if agent is None or record is None or record.agent == agent:
                tasks.append(derived(task, record))
        if params.status:
            tasks = [task for task in tasks if task.status.state == params.status]
        del found.tasks[:]
        found.tasks.extend(tasks)
        return found

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._live.pop((self._owner(context), task_id), None)
        await self.store.delete(task_id, context)

    async def stale_running(self, before: datetime) -> tuple[tuple[str, str, bool], ...]:
        """(id, owner, dated) of the rows that still show a running state (submitted, working) and were
        last written before ``before`` (naive UTC, as the SDK stores times), or at a time nobody knows
        (``dated`` False: a row without a time, written before :meth:`save` stamped every row)."""
        from sqlalchemy import or_, select

        model = self.store.task_model
        if self.store.engine.dialect.name == "postgresql":  # in the text of the index's predicate, which
            running: Any = text(_RUNNING)  # the planner matches only against constants, not parameters
        else:
            running = model.status["state"].as_string().in_(RUNNING_STATES)
        stale = or_(model.last_updated < before, model.last_updated.is_(None))
        await self.store._ensure_initialized()
        async with self.store.async_session_maker() as session:
            found = await session.execute(select(model.id, model.owner, model.last_updated).where(stale, running))
        return tuple((row[0], row[1] or "", row[2] is not None) for row in found.all())

    async def adopt_unowned(self, owner: str) -> int:
        """Give ``owner`` every task row recorded before tasks had owners (owner ``''``); how many."""
        from sqlalchemy import or_, update

        model = self.store.task_model
        await self.store._ensure_initialized()
        async with self.store.async_session_maker.begin() as session:
            result = await session.execute(
                update(model).where(or_(model.owner == "", model.owner.is_(None))).values(owner=owner)
            )
        return int(getattr(result, "rowcount", 0) or 0)

    async def flush(self) -> None:
        """Write every task whose latest version is not in the database yet."""
        for live in list(self._live.values()):
            if not live.dirty:
                continue
            live.dirty = False
            task = live.task
            try:
                await self._write(live, task, live.context)
            except BaseException:
                live.dirty = True  # the next flush (or close) tries again
                raise

    async def close(self) -> None:
        """Write what is held and write through from now on (the server is stopping)."""
        self._closed = True
        if self._sleeper is not None:
            self._sleeper.cancel()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        await self.flush()
        if isinstance(self.store, SqliteTaskStore):
            self.store.close()  # a save after this (written through) opens it again
        if self.follower is not None:
            await self.follower.close()

    async def _write(self, live: _Live, task: Task, context: ServerCallContext) -> None:
        async with live.lock:
            await self.store.save(task, context)
        if self.follower is not None:
            try:
                await self.follower.written(task.id)
            except SQLAlchemyError as exc:  # the row is written; subscribers elsewhere see it at their next poll
                logger.warning("task %s: could not notify the other servers of its row (%s)", task.id, exc)

    def _schedule_flush(self) -> None:
        if self._sleeper is not None:
            return
        flush = asyncio.get_running_loop().create_task(self._flush_later())
        self._sleeper = flush
        self._flushes.add(flush)
        flush.add_done_callback(self._flushes.discard)

    async def _flush_later(self) -> None:
        try:
            await asyncio.sleep(self.interval)
        finally:
            self._sleeper = None  # a save from now on schedules the next flush
        try:
            await self.flush()
        except StoreBusy:
            logger.warning("%s is still locked by another process; writing its running tasks later", self.store_name)
            if not self._closed:
                self._schedule_flush()
        except Exception:
            logger.exception("writing running tasks to the task store failed; trying again")
            if not self._closed:
                self._schedule_flush()


class AgentTaskStore(TaskStore):
    """One agent's view of the shared task store: the tasks of other agents are not found.

    Each agent's request handler gets one, so GetTask, ListTasks, CancelTask, subscriptions and
    follow-up messages under ``/agents/X/`` reach agent X's tasks only (a task of another agent
    is -32001, task not found, as if it did not exist). The agent is the task record's.
    """

    def __init__(self, shared: WriteBehindTaskStore, agent: str) -> None:
        self.shared = shared
        self.agent = agent

    async def _other_agents(self, task_id: str) -> bool:
        record = await self.shared.records(task_id)
        return record is not None and record.agent != self.agent

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self.shared.save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await self.shared.get(task_id, context, agent=self.agent)

    def new(self, task_id: str, context: ServerCallContext) -> AbstractContextManager[None]:
        """See :meth:`WriteBehindTaskStore.new`."""
        return self.shared.new(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await self.shared.list(params, context, agent=self.agent)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        if not await self._other_agents(task_id):
            await self.shared.delete(task_id, context)


class SqliteTaskStore(DatabaseTaskStore):
    """DatabaseTaskStore whose ``save`` and ``get`` run on a plain sqlite3 connection to the same file.

    Through SQLAlchemy's async engine each statement hops to aiosqlite's worker thread and back
    through a greenlet: a save cost about 2 ms of CPU for well under 0.1 ms of SQLite work. The
    rows are the SDK's own (its ``_to_orm``/``_from_orm`` map tasks; values are stored as
    SQLAlchemy stores them on SQLite: JSON text, ``YYYY-MM-DD HH:MM:SS.ffffff`` times), so the
    SDK's ``list`` and ``delete``, which stay on the engine, read and remove them as before.
    The connection has no busy timeout: while another process holds the file's write lock a
    statement fails at once and is tried again with the event loop running
    (:func:`~framework.runtime.store_locks.until_free`).
    """

    def __init__(self, engine: AsyncEngine, path: Path, *, lock_timeout: float = LOCK_TIMEOUT_S) -> None:
        super().__init__(engine)
        self.path = path
        self.lock_timeout = lock_timeout
        """Seconds a save waits for another process's write lock on the file before StoreBusy."""
        self._conn: sqlite3.Connection | None = None
        self._columns = tuple(
            (attr.key, attr.columns[0].name, _kind(attr.columns[0].type))
            for attr in class_mapper(self.task_model).column_attrs
        )
        names = ", ".join(name for _, name, _ in self._columns)
        marks = ", ".join("?" for _ in self._columns)
        updates = ", ".join(f"{name} = excluded.{name}" for _, name, _ in self._columns if name != "id")
        table = self.task_model.__tablename__
        self._upsert = f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT(id) DO UPDATE SET {updates}"  # noqa: S608
        self._select = f"SELECT {names} FROM {table} WHERE id = ? AND owner = ?"  # noqa: S608

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, timeout=self.lock_timeout, isolation_level=None, check_same_thread=False)
            try:
                in_wal(conn.execute, path=self.path, timeout=self.lock_timeout)
                conn.execute("PRAGMA synchronous=NORMAL")
            except BaseException:
                conn.close()
                raise
            self._conn = no_wait(conn)  # a locked file: waited for by until_free, with the event loop running
        return self._conn

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._ensure_initialized()
        fields = self._fields(task, self.owner_resolver(context))
        values = tuple(_to_column(kind, fields.get(key)) for key, _, kind in self._columns)
        await until_free(
            lambda: self._connection().execute(self._upsert, values), path=self.path, timeout=self.lock_timeout
        )

    def _fields(self, task: Task, owner: str) -> dict[str, Any]:
        """The row's values by attribute, as the SDK's ``_to_orm`` maps them, without building the
        ORM instance: its instrumented constructor was the most of a save's CPU after the JSON."""
        fields: Any = DatabaseTaskStore._to_orm(_AS_FIELDS, task, owner)  # type: ignore[arg-type]
        return cast("dict[str, Any]", fields)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        await self._ensure_initialized()
        key = (task_id, self.owner_resolver(context))
        row = await until_free(
            lambda: self._connection().execute(self._select, key).fetchone(), path=self.path, timeout=self.lock_timeout
        )
        if row is None:
            return None
        fields = {key: _from_column(kind, value) for (key, _, kind), value in zip(self._columns, row, strict=True)}
        return self._from_orm(self.task_model(**fields))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


_AS_FIELDS = SimpleNamespace(core_to_model_conversion=None, task_model=dict)
"""What the SDK's ``_to_orm`` reads of its store, with a task model that is the keyword arguments it
is given: the SDK's own mapping, as a dict."""


def _kind(column_type: Any) -> str:
    if isinstance(column_type, JSON):
        return "json"
    if isinstance(column_type, DateTime):
        return "datetime"
    return "plain"


def _to_column(kind: str, value: Any) -> Any:
    """A value as SQLAlchemy writes it to SQLite (its JSON type stores None as the text 'null')."""
    if kind == "json":
        return json.dumps(value)
    if kind == "datetime" and value is not None:
        return f"{value:%Y-%m-%d %H:%M:%S}.{value.microsecond:06d}"
    return value


def _from_column(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "json":
        return json.loads(value)
    if kind == "datetime":
        return datetime.fromisoformat(value)
    return value
