"""The audit log: append-only, hash-chained records of everything governance decided.

Each record names its source (cli, a2a-http, a2a-stdio, acp, agent-call), the task and
conversation it belongs to, and carries ``prev_hash`` (the previous record's hash; 64 zeros
for the first) and ``hash = sha256(canonical JSON of every other field)``, canonical JSON being
``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False)``. Secret values
are masked before a record is hashed or stored, so they never reach the database.

:meth:`AuditLog.verify` walks the chain and names each problem by seq: an edited record (its
hash no longer matches its content), a broken link (a record deleted or reordered) and a gap
in seq. The seq and hash of the last record are also kept in a separate ``audit_head`` row,
written in the same transaction as each append, so a truncated tail shows too.

Known limit: whoever can write the database can delete the tail *and* rewrite
``audit_head``, or rewrite the whole chain from some record on; the chain alone cannot tell.
Anchor the head elsewhere — keep :attr:`VerifyResult.head_hash` (printed by ``ca audit
--verify``) outside the machine, and compare — to detect that.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from hashlib import sha256
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, get_args

from framework.runtime.audit_store import GENESIS, AuditStore, Row
from framework.runtime.stores import state_dir

Source = Literal["cli", "a2a-http", "a2a-stdio", "acp", "agent-call"]
"""Where the request that caused a record came in."""

SOURCES: frozenset[str] = frozenset(get_args(Source))
AUDIT_DB = "audit.db"
MASK = "***"
MIN_SECRET_LENGTH = 4
"""Shorter values are not masked: replacing every "no" or "42" would garble the log and hide nothing."""

_BATCH = 1000


def canonical_json(value: Any) -> str:
    """The one JSON text of a value that hashes are computed over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class AuditRecord:
    """One entry of the log. ``kind`` is e.g. "task.state", "tool.call", "tool.result",
    "decision", "denial", "budget", "contract" or "approval"; ``ts`` is UTC ISO-8601 with
    microseconds; ``data`` is JSON, secrets already masked."""

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


@dataclass(frozen=True)
class VerifyResult:
    """What :meth:`AuditLog.verify` found: ``problems`` names each one by seq, in log order."""

    ok: bool
    checked: int
    problems: list[str] = field(default_factory=list)
    head_hash: str = GENESIS
    """The hash of the last record; keep a copy elsewhere to detect a rewritten tail."""


def record_hash(record: AuditRecord | Row) -> str:
    """``sha256`` of the canonical JSON of every field of ``record`` except ``hash``."""
    fields = asdict(record) if isinstance(record, AuditRecord) else dict(record)
    fields.pop("hash", None)
    return sha256(canonical_json(fields).encode("utf-8")).hexdigest()


class SecretMasker:
    """Replaces every secret value (longest first) with ``***`` in strings, recursively."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        # Alternation tries left to right, so a longer secret wins over one that is its prefix.
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None

    def text(self, value: str) -> str:
        """``value`` with every secret in it masked."""
        return self._pattern.sub(MASK, value) if self._pattern else value

    def value(self, value: Any) -> Any:
        """A copy of a JSON value with every string in it (keys too) masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _missing(first: int, last: int) -> str:
    return f"record {first} is missing" if first == last else f"records {first}–{last} are missing"


def _to_record(row: Row) -> AuditRecord:
    return AuditRecord(**{**row, "data": json.loads(row["data"])})


class AuditLog:
    """The audit log of a project (or of any database URL). Safe to share between threads and tasks.

    ``append`` blocks for one short transaction; async code calls ``aappend``, which runs it in a
    worker thread. Appends from several tasks, threads and processes form one chain.
    """

    def __init__(self, store: AuditStore, secrets: Iterable[str] = ()) -> None:
        self._store = store
        self._secrets = set(secrets)
        self._masker = SecretMasker(self._secrets)

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """Mask these values too from now on (a reload may bring new ``${VAR}`` secrets)."""
        self._secrets = {*getattr(self, "_secrets", set()), *secrets}
        self._masker = SecretMasker(self._secrets)

    @classmethod
    def open(cls, target: str | Path, *, secrets: Iterable[str] = ()) -> AuditLog:
        """Open (creating if needed) the log at a SQLAlchemy URL, or at ``ROOT/.ca/audit.db`` for a project root.

        A sync driver serves the log; an async URL (``sqlite+aiosqlite``, ``postgresql+asyncpg``) is
        mapped to its database's sync driver, which must be installed.
        """
        if isinstance(target, Path) or "://" not in target:
            target = f"sqlite:///{state_dir(Path(target)) / AUDIT_DB}"
        return cls(AuditStore(target), secrets)

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
        if source not in SOURCES:
            raise ValueError(f"unknown audit source {source!r}; expected one of {sorted(SOURCES)}")
        mask = self._masker.text
        body = self._masker.value(json.loads(json.dumps(data or {}, default=str)))
        fields = {"kind": mask(kind), "source": source, "task_id": mask(task_id)}
        fields |= {"conversation_id": mask(conversation_id), "agent": mask(agent)}

        def build(seq: int, prev_hash: str) -> Row:
            row: Row = {"seq": seq, "ts": _now(), **fields, "data": body, "prev_hash": prev_hash}
            return {**row, "data": canonical_json(body), "hash": record_hash(row)}

        return _to_record(self._store.append(build))

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
        """:meth:`append` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(
            self.append,
            kind,
            source=source,
            task_id=task_id,
            conversation_id=conversation_id,
            agent=agent,
            data=data,
        )

    def query(
        self,
        *,
        task_id: str | None = None,
        conversation_id: str | None = None,
        kind: str | None = None,
        since_seq: int | None = None,
        limit: int = 1000,
    ) -> list[AuditRecord]:
        """Records matching every filter given, oldest first; ``since_seq`` is exclusive (pass the last seq seen)."""
        rows = self._store.select(
            task_id=task_id, conversation_id=conversation_id, kind=kind, since_seq=since_seq, limit=limit
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

    def _records(self) -> Iterator[AuditRecord]:
        last = 0
        while batch := self.query(since_seq=last, limit=_BATCH):
            yield from batch
            last = batch[-1].seq

    def verify(self) -> VerifyResult:
        """Walk the whole chain and the head, and report every problem with the seq it concerns."""
        problems: list[str] = []
        checked, last_seq, last_hash = 0, 0, GENESIS
        for record in self._records():
            checked += 1
            if record_hash(record) != record.hash:
                problems.append(f"record {record.seq} was edited: its hash does not match its content")
            if record.seq > last_seq + 1:
                problems.append(_missing(last_seq + 1, record.seq - 1))
            if record.prev_hash != last_hash:
                after = f"record {last_seq}" if last_seq else "the start of the log"
                problems.append(
                    f"record {record.seq} does not follow {after}: prev_hash mismatch"
                    " — a record was deleted or reordered"
                )
            last_seq, last_hash = record.seq, record.hash
        problems.extend(self._check_head(last_seq, last_hash))
        return VerifyResult(ok=not problems, checked=checked, problems=problems, head_hash=last_hash)

    def _check_head(self, last_seq: int, last_hash: str) -> list[str]:
        head = self._store.head()
        if head is None:
            return ["the audit_head row is missing: the log's length cannot be checked"]
        head_seq, head_hash = head
        if head_seq > last_seq:
            return [f"{_missing(last_seq + 1, head_seq)} at the end: the head says {head_seq} — the log was truncated"]
        if head_seq < last_seq:
            return [f"records {head_seq + 1}–{last_seq} are past the head ({head_seq}): written outside the audit log"]
        if head_hash != last_hash:
            return [f"record {last_seq} does not match the head hash: the last record was replaced"]
        return []

    def close(self) -> None:
        """Release the database connections."""
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
