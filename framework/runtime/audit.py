"""The audit log: append-only, hash-chained records of everything governance decided.

Each record names its source (cli, a2a-http, a2a-stdio, acp, agent-call, mcp), the task and
conversation it belongs to, and carries ``prev_hash`` (the previous record's hash; 64 zeros
for the first) and ``hash``, computed over every other field as :mod:`framework.runtime.audit_chain`
says for the record's ``chain``: ``sha256`` (unkeyed) or ``hmac-sha256`` (keyed, with the key
``ca.yaml`` ``audit.key_env`` names; ``key_id`` says which key). Secret values are masked before
a record is hashed or stored, so they never reach the database.

:meth:`AuditLog.verify` walks the chain and names each problem by seq: an edited record (its
hash no longer matches its content), a broken link (a record deleted or reordered), a gap in
seq, and in a keyed chain a record rewritten without the key. The seq and hash of the last
record are also kept in a separate ``audit_head`` row, written in the same transaction as each
append, so a truncated tail shows too.

Known limit: whoever can write the database can delete the tail *and* rewrite
``audit_head``; without a key they can also rewrite the whole chain from some record on. The
chain alone cannot tell. Anchor the head elsewhere — keep :attr:`VerifyResult.head_hash`
(printed by ``ca audit --verify``) outside the machine, and compare — to detect that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Self, get_args

from framework.errors import StoreBusy, StoreError
from framework.runtime.audit_chain import (
    KEYED,
    UNKEYED,
    Chain,
    ChainKey,
    VerifyResult,
    canonical_json,
    check_tail,
    keyed_hash,
    record_hash,
    verify_chain,
)
from framework.runtime.audit_groups import Row
from framework.runtime.audit_store import AuditStore
from framework.runtime.governance.secrets import KNOWN, SecretValues
from framework.runtime.store_locks import LOCK_TIMEOUT_S
from framework.runtime.store_url import is_postgres, psycopg_url
from framework.runtime.stores import state_dir

if TYPE_CHECKING:
    from framework.spec import Project

Source = Literal["cli", "a2a-http", "a2a-stdio", "acp", "agent-call", "mcp"]
"""Where the request that caused a record came in."""

SOURCES: frozenset[str] = frozenset(get_args(Source))
AUDIT_DB = "audit.db"

_BATCH = 1000
HOLD_S = 0.05
"""How long :meth:`AuditLog.hold` keeps a record at most before it is written on its own."""
_log = logging.getLogger(__name__)
_PLAIN = json.JSONEncoder(default=str)
"""What a record's data becomes before it is masked: what JSON cannot represent, as its ``str()``."""


def _masked(masker: SecretValues, plain: str) -> Any:
    """The record data of the JSON text ``plain``, its secrets masked: in the text, where they are in
    their JSON-escaped form (data nested as deep as JSON takes it needs no walk); for a secret whose
    mask breaks the JSON (one that spans a quote of it), by walking the data."""
    if not masker.found_in(plain):
        return json.loads(plain)
    try:
        return json.loads(masker.text(plain))
    except ValueError:
        return masker.value(json.loads(plain))


@dataclass
class _Batch:
    """Held records handed to the store together, on ``loop``, and the futures of their rows."""

    loop: asyncio.AbstractEventLoop
    held: list[_Built]
    waits: list[asyncio.Future[Row]]
    settled: bool = False


class _Built(NamedTuple):
    """A record ready to append: its row given the seq and prev_hash it follows, its data as stored."""

    build: Callable[[int, str], Row]
    body: dict[str, Any]
    kind: str
    task_id: str


@dataclass(frozen=True)
class AuditRecord:
    """One entry of the log. ``kind`` is e.g. "task.state", "model.call", "tool.call", "tool.result",
    "decision", "denial", "budget", "contract" or "approval"; ``ts`` is UTC ISO-8601 with
    microseconds; ``data`` is JSON, secrets already masked; ``chain`` and ``key_id`` say how
    ``hash`` was made (:mod:`framework.runtime.audit_chain`)."""

    seq: int
    ts: str
    kind: str
    source: Source
    task_id: str
    conversation_id: str
    agent: str
    data: dict[str, Any]
    prev_hash: str
    hash: str
    chain: Chain = UNKEYED
    key_id: str = ""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _to_record(row: Row) -> AuditRecord:
    return AuditRecord(**{**row, "data": json.loads(row["data"])})


def _stored(row: Row, body: dict[str, Any]) -> AuditRecord:
    """The record of a row just appended: its ``data`` is ``body``, which the row holds as JSON text."""
    return AuditRecord(**{**row, "data": body})


class AuditLog:
    """The audit log of a project (or of any database URL). Safe to share between threads and tasks.

    ``append`` blocks for one short transaction; async code calls ``aappend``, which waits for
    another process's write lock with the event loop running. Appends from several tasks, threads and processes form one chain. With a
    ``key`` the records appended are keyed; without one they are not.
    """

    def __init__(self, store: AuditStore, secrets: Iterable[str] = (), key: ChainKey | None = None) -> None:
        self._store = store
        # The key is masked like any secret: a record carrying it would hand it to whoever reads the log.
        self._secrets = {*secrets, key.secret.decode("utf-8")} if key else set(secrets)
        self._known: frozenset[str] | None = None
        """The process's secrets (KNOWN) that :attr:`_masker` masks: it is remade when they grow."""
        self._masker = self._masking()
        self._key = key
        self.observers: list[Callable[[AuditRecord], None]] = []
        """Called with each record once it is stored (masked): the run's trace shows it as an event."""
        self._extendable = False
        """Whether the chain's tail was found to accept this log's records (checked before the first append)."""
        self._held: dict[asyncio.AbstractEventLoop, list[_Built]] = {}
        """Records held (:meth:`hold`) on each event loop: written ahead of its next append, at the
        latest HOLD_S later."""
        self._held_lock = threading.Lock()
        self._due: set[asyncio.AbstractEventLoop] = set()
        """The loops a call of ``_held_due`` is scheduled on."""
        self._in_flight: list[_Batch] = []
        """Held records handed to the store, not settled yet."""

    def _masking(self) -> SecretValues:
        """What masks the records: this log's own secrets and every secret the process knows now —
        :data:`~framework.runtime.governance.secrets.KNOWN` grows while the log is open (a reload's
        new ``${VAR}`` secrets, the headers an editor gives an MCP server over ACP)."""
        known = KNOWN.values
        if known is not self._known:
            self._known, self._masker = known, SecretValues({*self._secrets, *known})
        return self._masker

    @classmethod
    def open(
        cls,
        target: str | Path,
        *,
        secrets: Iterable[str] = (),
        key: ChainKey | None = None,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> AuditLog:
        """Open (creating if needed) the log at a SQLAlchemy URL, or at ``ROOT/.ca/audit.db`` for a project root.

        A sync driver serves the log; an async URL (``sqlite+aiosqlite``, ``postgresql+asyncpg``) is
        mapped to its database's sync driver, which must be installed. ``key``: the key that
        appends are keyed with and ``verify`` checks with (from :func:`~framework.runtime.audit_chain.chain_key`).
        A damaged database raises :class:`~framework.errors.StoreError`.
        """
        if isinstance(target, Path) or "://" not in target:
            target = f"sqlite:///{state_dir(Path(target)) / AUDIT_DB}"
        return cls(AuditStore(target, lock_timeout=lock_timeout), secrets, key)

    @classmethod
    def of_project(
        cls,
        project: Project,
        *,
        secrets: Iterable[str] = (),
        key: ChainKey | None = None,
        lock_timeout: float = LOCK_TIMEOUT_S,
    ) -> AuditLog:
        """The project's log: in the database ``store.url`` names when it is PostgreSQL (one chain
        for every replica, appends serialised by the database), else ``ROOT/.ca/audit.db``."""
        url = project.config.store.url
        target = psycopg_url(url) if is_postgres(url) else project.root
        return cls.open(target, secrets=secrets, key=key, lock_timeout=lock_timeout)

    def check_extendable(self) -> None:
        """Raise UsageError unless this log's records may follow the chain's last record: a keyed
        chain takes only records keyed with its own key. ``append`` checks before its first record;
        call it to fail at start-up instead."""
        check_tail(self._store.last(), self._key, self._store.where)
        self._extendable = True

    def append(
        self,
        kind: str,
        *,
        source: Source,
        task_id: str,
        conversation_id: str = "",
        agent: str = "",
        data: dict[str, Any] | None = None,
    ) -> AuditRecord:
        """Append one record and return it as stored (masked, with its seq, ts and hashes).

        Values in ``data`` that JSON cannot represent are stored as their ``str()``.
        """
        build, body = self._builder(kind, source, task_id, conversation_id, agent, data)
        return self._observed(_stored(self._store.append(build), body))

    async def aappend(
        self,
        kind: str,
        *,
        source: Source,
        task_id: str,
        conversation_id: str = "",
        agent: str = "",
        data: dict[str, Any] | None = None,
    ) -> AuditRecord:
        """:meth:`append` for async code: another process's write lock is waited for with the
        event loop running (:mod:`framework.runtime.store_locks`)."""
        fields = {
            "source": source,
            "task_id": task_id,
            "conversation_id": conversation_id,
            "agent": agent,
            "data": data,
        }
        [record] = await self.aappend_all([(kind, fields)])
        return record

    async def aappend_all(self, entries: Sequence[tuple[str, Mapping[str, Any]]]) -> list[AuditRecord]:
        """Append each ``(kind, fields)`` in order (``fields``: the keyword arguments of :meth:`append`),
        every one of them handed to the store before this waits: a cancel meanwhile loses none, or,
        once they wait for another process's write lock, withdraws them all (see
        :meth:`AuditStore.rows`). The records held (:meth:`hold`) go first, in the same
        transaction; with no ``entries`` this waits until those are written (or held again)."""
        own = [self._entry(kind, fields) for kind, fields in entries]
        if not self._store.groups:  # nothing is ever held there
            rows = await self._store.aappend_all([built.build for built in own])
        else:
            loop = asyncio.get_running_loop()
            held = self._take_held(loop)
            if not held and not own:
                return []
            waits = self._store.submit([built.build for built in [*held, *own]])
            if held:
                self._track(loop, held, waits[: len(held)])
                if not own:
                    await asyncio.wait(waits[: len(held)])  # settled by _held_settled, whatever became of them
            rows = await self._store.rows(waits[len(held) :])
        return [self._observed(_stored(row, built.body)) for row, built in zip(rows, own, strict=True)]

    def hold(self, entries: Sequence[tuple[str, Mapping[str, Any]]]) -> bool:
        """Keep these records (as :meth:`aappend_all` takes them) to be written ahead of the next
        record appended on this event loop, in its transaction, or :data:`HOLD_S` later at the
        latest, or when the log is closed, whichever comes first; False, nothing held, where appends
        do not commit in groups (PostgreSQL): the caller appends them itself.

        For records whose next step stays in this process and appends a record of its own before
        it has consequences (a model turn that asks for tools: the first call's ``tool.call`` or
        denial, the pause's or the end's ``task.state``), so that both cost one transaction. No
        caller waits for them or can cancel them: their transaction failing (another process held
        the lock past the lock timeout) or the loop closing under it holds them again, ahead of
        what is held since, with a warning; any other failure is logged. A crash of the process
        before they are written loses them, as a crash before they were made would."""
        if not self._store.groups:
            return False
        built = [self._entry(kind, fields) for kind, fields in entries]
        loop = asyncio.get_running_loop()
        with self._held_lock:
            self._held.setdefault(loop, []).extend(built)
        self._arm(loop)
        return True

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have ``_held_due`` run on ``loop`` (the running one) :data:`HOLD_S` from now, unless it will already."""
        with self._held_lock:
            if loop in self._due:
                return
            self._due.add(loop)
        loop.call_later(HOLD_S, self._held_due, loop)

    def _take_held(self, loop: asyncio.AbstractEventLoop) -> list[_Built]:
        """What ``loop`` holds, no longer held: first those of its failed transactions, held again;
        before them, what a loop that closed left held or in flight (nothing else can take it)."""
        if not self._held and not self._in_flight:  # the common case: nothing held anywhere
            return []
        self._settle_finished(lambda batch: batch.loop is loop or batch.loop.is_closed())
        with self._held_lock:
            gone = [records for other, records in self._held.items() if other is not loop and other.is_closed()]
            self._held = {other: records for other, records in self._held.items() if not other.is_closed()}
            self._due = {other for other in self._due if not other.is_closed()}
            return [*(built for records in gone for built in records), *self._held.pop(loop, [])]

    def _settle_finished(self, which: Callable[[_Batch], bool]) -> None:
        """Settle now, not in their callbacks' turn (a taker in between would miss what is held
        again), the batches of ``which`` whose futures are all settled, or whose loop closed
        with some still pending: a pending future was never committed (a group is settled in the
        step that writes it)."""
        with self._held_lock:
            finished = [
                batch
                for batch in self._in_flight
                if which(batch) and (batch.loop.is_closed() or all(w.done() for w in batch.waits))
            ]
        for batch in finished:
            self._held_settled(batch)

    def _held_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """:data:`HOLD_S` after a record was held: what no append has taken meanwhile joins the loop's group."""
        with self._held_lock:
            self._due.discard(loop)
        if held := self._take_held(loop):
            self._track(loop, held, self._store.submit([built.build for built in held]))

    def _track(self, loop: asyncio.AbstractEventLoop, held: list[_Built], waits: list[asyncio.Future[Row]]) -> None:
        """Follow held records handed to the store: :meth:`_held_settled` once the last is settled
        (they are settled together, in order)."""
        batch = _Batch(loop, held, waits)
        with self._held_lock:
            self._in_flight.append(batch)
        waits[-1].add_done_callback(lambda _: self._held_settled(batch))

    def _held_settled(self, batch: _Batch) -> None:
        """Observe the held records written; hold again those that the database kept out (locked,
        an I/O error, the loop closing: in their order, ahead of what is held since; the next
        append takes them along, or the timer, or close); log a record whose own build failed."""
        with self._held_lock:
            if batch.settled:
                return
            batch.settled = True
            self._in_flight.remove(batch)
        again: list[_Built] = []
        retry = False  # soon, on its own: the lock is given back in time; an I/O error waits for the next append
        for built, done in zip(batch.held, batch.waits, strict=True):
            if not done.done() or done.cancelled():
                again.append(built)  # never committed: its loop closed, or shut down while it waited
                retry = True
            elif isinstance(error := done.exception(), (StoreBusy, StoreError, sqlite3.Error, OSError)):
                again.append(built)
                retry = retry or isinstance(error, StoreBusy)
                _log.warning(
                    "audit record %s of task %s not written yet, held again: %s", built.kind, built.task_id, error
                )
            elif error is not None:
                _log.error("audit record %s of task %s not written: %s", built.kind, built.task_id, error)
            else:
                self._observed(_stored(done.result(), built.body))
        if not again:
            return
        with self._held_lock:
            self._held[batch.loop] = [*again, *self._held.get(batch.loop, [])]
        try:
            on_its_loop = asyncio.get_running_loop() is batch.loop
        except RuntimeError:
            on_its_loop = False
        if on_its_loop and retry:  # else a closer (it writes them) or a closed loop's (the next taker does)
            self._arm(batch.loop)

    def _write_now(self, held: list[_Built]) -> None:
        """Write ``held`` in order, blocking, waiting the whole lock timeout; log what fails."""
        try:
            rows = self._store.append_all([built.build for built in held], closing=True)
        except Exception as exc:
            rows = [exc] * len(held)
        for built, row in zip(held, rows, strict=True):
            if isinstance(row, Exception):
                _log.error("audit record %s of task %s not written: %s", built.kind, built.task_id, row)
            else:
                self._observed(_stored(row, built.body))

    def _entry(self, kind: str, fields: Mapping[str, Any]) -> _Built:
        task_id = fields["task_id"]
        build, body = self._builder(
            kind,
            fields["source"],
            task_id,
            fields.get("conversation_id", ""),
            fields.get("agent", ""),
            fields.get("data"),
        )
        return _Built(build, body, kind, task_id)

    def _observed(self, record: AuditRecord) -> AuditRecord:
        for observe in self.observers:
            observe(record)
        return record

    def _builder(
        self, kind: str, source: Source, task_id: str, conversation_id: str, agent: str, data: dict[str, Any] | None
    ) -> tuple[Callable[[int, str], Row], dict[str, Any]]:
        """The row of a record, given the seq and prev_hash it follows (masked, hashed), and its
        ``data`` as stored (masked, as JSON reads it back)."""
        if source not in SOURCES:
            raise ValueError(f"unknown audit source {source!r}; expected one of {sorted(SOURCES)}")
        if not all(isinstance(value, str) for value in (kind, task_id, conversation_id, agent)):
            # stored as text, a number would hash differently when read back: verify would call it edited
            named = {"kind": kind, "task_id": task_id, "conversation_id": conversation_id, "agent": agent}
            wrong = [f"{k} {v!r} ({type(v).__name__})" for k, v in named.items() if not isinstance(v, str)]
            raise TypeError(f"audit record fields must be text: {', '.join(wrong)}")
        if not self._extendable:  # one more read, before the first append only
            self.check_extendable()
        masker = self._masking()
        mask = masker.text
        body = _masked(masker, _PLAIN.encode(data or {}))
        fields = {"kind": mask(kind), "source": source, "task_id": mask(task_id)}
        fields |= {"conversation_id": mask(conversation_id), "agent": mask(agent)}
        key = self._key
        fields |= {"chain": KEYED, "key_id": key.id} if key else {"chain": UNKEYED, "key_id": ""}

        text = canonical_json(body)  # made once, before the transaction that chains the record

        def build(seq: int, prev_hash: str) -> Row:
            row: Row = {"seq": seq, "ts": _now(), **fields, "data": text, "prev_hash": prev_hash}
            return {**row, "hash": keyed_hash(row, key, text) if key else record_hash(row, text)}

        return build, body

    def query(
        self,
        *,
        task_id: str | None = None,
        conversation_id: str | None = None,
        kind: str | None = None,
        since_seq: int | None = None,
        since_ts: str | None = None,
        limit: int = 1000,
        newest: bool = False,
    ) -> list[AuditRecord]:
        """Records matching every filter given, oldest first; ``since_seq`` is exclusive (pass the last
        seq seen), ``since_ts`` (UTC ISO-8601) inclusive; ``newest``: the last ``limit`` of them."""
        rows = self._store.select(
            task_id=task_id,
            conversation_id=conversation_id,
            kind=kind,
            since_seq=since_seq,
            since_ts=since_ts,
            limit=limit,
            newest=newest,
        )
        return [_to_record(row) for row in rows]

    async def aquery(
        self,
        *,
        task_id: str | None = None,
        conversation_id: str | None = None,
        kind: str | None = None,
        since_seq: int | None = None,
        limit: int = 1000,
    ) -> list[AuditRecord]:
        """:meth:`query` in a worker thread."""
        return await asyncio.to_thread(
            self.query, task_id=task_id, conversation_id=conversation_id, kind=kind, since_seq=since_seq, limit=limit
        )

    def records(self, *, since_ts: str | None = None) -> Iterator[AuditRecord]:
        """Every record (from ``since_ts`` on, inclusive), oldest first, read a batch at a time."""
        last = 0
        while batch := self.query(since_seq=last, since_ts=since_ts, limit=_BATCH):
            yield from batch
            last = batch[-1].seq

    def verify(self) -> VerifyResult:
        """Walk the whole chain and the head, and report every problem with the seq it concerns
        (see :func:`~framework.runtime.audit_chain.verify_chain`; keyed records are checked with this log's key)."""
        # Each record's fields as they are (``asdict`` would copy ``data`` recursively, which a deeply
        # nested value a model passed as a tool's arguments took past the recursion limit).
        return verify_chain((dict(vars(record)) for record in self.records()), self._store.head(), self._key)

    def close(self) -> None:
        """Write what is handed over and held (:meth:`hold`), in order, then release the database
        connections. Called on an event loop, its open group comes first; a loop that appends
        meanwhile on another thread has what it hands over written through the engine."""
        try:
            written = self._store.flush_open()  # records handed over before the held ones
            self._settle_finished(lambda batch: True)  # another loop's still waiting: written once settled
            with self._held_lock:
                held = [built for records in self._held.values() for built in records]
                self._held.clear()
            if not held:
                return
            if written:
                self._write_now(held)
            else:  # the database stayed locked the whole lock timeout already: not a second one
                for built in held:
                    _log.error(
                        "audit record %s of task %s not written: the database is locked", built.kind, built.task_id
                    )
        finally:
            self._store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _field(key: str, value: Any, width: int) -> str:
    if not isinstance(value, str):  # JSON is already one unambiguous token: its strings are escaped
        return f"{key}={_shorten(canonical_json(value), width)}"
    short = _shorten(value, width)
    if not short or any(c.isspace() or c in "=\"'" for c in short):
        short = json.dumps(short, ensure_ascii=False)
    return f"{key}={short}"


def format_record(record: AuditRecord, *, width: int = 60) -> str:
    """One line for ``ca audit``: ``seq ts source kind task=… agent=… key=value …``, long values shortened."""
    parts = [str(record.seq), record.ts, record.source, record.kind, _field("task", record.task_id, width)]
    if record.conversation_id:
        parts.append(_field("conversation", record.conversation_id, width))
    if record.agent:
        parts.append(_field("agent", record.agent, width))
    parts.extend(_field(key, value, width) for key, value in sorted(record.data.items()))
    return " ".join(parts)
