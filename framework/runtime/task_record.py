"""A task's record: one request to an agent, from submitted to a final state, as the task
database keeps it (:class:`~framework.runtime.tasks.TaskStore` reads and writes it), with the
decisions it waits for and what its conversation holds."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from framework.errors import Failure
from framework.runtime.leases import now
from framework.runtime.pauses import Pause, read_pause

TaskState = Literal["submitted", "working", "input-required", "completed", "failed", "canceled", "rejected"]
FINAL_STATES = ("completed", "failed", "canceled", "rejected")


@dataclass(frozen=True)
class Pending:
    """A decision a paused task waits for."""

    interrupt_id: str
    payload: dict[str, Any]
    paused_at: str
    expires_at: str | None = None
    on_timeout: str = "reject"

    def expired(self, at: datetime | None = None) -> bool:
        return self.expires_at is not None and (at or now()) >= datetime.fromisoformat(self.expires_at)

    @property
    def pause(self) -> Pause:
        """What the decision is about, typed (the payload is its wire form)."""
        return read_pause(self.payload)


@dataclass(frozen=True)
class Task:
    id: str
    agent: str
    conversation: str
    source: str
    state: TaskState
    input: str = ""
    output: str = ""
    error: str = ""
    pending: tuple[Pending, ...] = ()
    usage: dict[str, Any] = field(default_factory=dict)
    parent: str = ""
    created_at: str = ""
    updated_at: str = ""
    decided_by: str = ""
    """Who answered the task's last pause (``cli:alice``, ``acp``, a credential's name)."""
    decided_at: str = ""
    failure: Failure | None = None
    """How the task failed, typed (kind, code, message), when it did."""
    owner_pid: int = 0
    """The process that last started running the task (0: recorded before owners were)."""
    owner_host: str = ""
    """The host of that process."""
    lease_until: str = ""
    """Until when the owner's lease on this running task holds (renewed while it runs; see
    :data:`~framework.runtime.leases.LEASE_S`)."""
    cancel_requested: str = ""
    """Who asked another process to stop this running task (``ca tasks cancel``), empty if no one."""
    caller: str = ""
    """Who sent the task (its A2A owner): a credential's name, ``local:<os user>``, ``cli:<os user>``,
    ``acp``, ``anonymous``; a child task has its parent's. Empty for tasks recorded before callers were."""

    def last_written(self) -> datetime | None:
        """When the record was last written (UTC), None for a record from before records had times;
        a time stored without a zone is UTC, as every writer stamps it."""
        if not self.updated_at:
            return None
        written = datetime.fromisoformat(self.updated_at)
        return written.astimezone(UTC) if written.tzinfo else written.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Held:
    """What a conversation's tasks hold: who sent them, and their messages and answers in UTF-8
    bytes (a child task's are its caller's, so not counted)."""

    callers: frozenset[str]
    bytes: int

    @classmethod
    def of(cls, rows: list[tuple[Any, ...]]) -> Held:
        return cls(frozenset(caller for caller, _ in rows), sum(int(size) for _, size in rows))


def row_to_task(row: dict[str, Any]) -> Task:
    """The task a row of the ``tasks`` table holds (the row is consumed)."""
    pending = tuple(Pending(**p) for p in json.loads(row.pop("pending") or "[]"))
    usage = json.loads(row.pop("usage") or "{}")
    failure = row.pop("failure", "")
    return Task(
        **row, pending=pending, usage=usage, failure=Failure.from_json(json.loads(failure)) if failure else None
    )


def expiry(paused: datetime, timeout_seconds: float | None) -> str | None:
    """When a pause made at ``paused`` expires (ISO-8601), None when it waits for ever."""
    return (paused + timedelta(seconds=timeout_seconds)).isoformat() if timeout_seconds else None
