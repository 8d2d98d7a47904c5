"""Another connection holds a store's SQLite write lock: async writes wait with the event loop
running, then write; past the timeout they fail StoreBusy having written nothing; blocking writes
on the loop's own thread give up after the short grace instead of stalling the loop."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from framework.errors import StoreBusy
from framework.runtime.audit import AuditLog
from framework.runtime.store_locks import LOOP_GRACE_S
from framework.runtime.tasks import TaskStore


def _holder(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_an_async_write_waits_for_the_lock_while_the_loop_runs_on(tmp_path: Path) -> None:
    store = TaskStore.open(tmp_path)
    audit = AuditLog.open(tmp_path)

    async def go() -> tuple[int, float]:
        holders = [_holder(store.path), _holder(tmp_path / ".ca" / "audit.db")]
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        loop = asyncio.get_running_loop()
        loop.call_later(0.5, lambda: [h.execute("COMMIT") for h in holders])
        started = time.monotonic()
        task = await store.acreate(agent="a", conversation="c", source="cli", input="hi")
        await audit.aappend("task.state", source="cli", task_id=task.id, data={"state": "submitted"})
        waited = time.monotonic() - started
        ticker.cancel()
        return ticks, waited

    ticks, waited = asyncio.run(go())
    assert waited >= 0.45, waited  # it did wait for the lock
    assert ticks >= 20, ticks  # and the loop kept running meanwhile (0.5 s / 10 ms, give or take)
    assert [t.input for t in store.list()] == ["hi"]
    assert [r.kind for r in audit.query()] == ["task.state"]
    assert audit.verify().ok


def test_past_the_lock_timeout_a_write_fails_retryable_and_writes_nothing(tmp_path: Path) -> None:
    store = TaskStore.open(tmp_path, lock_timeout=0.3)
    holder = _holder(store.path)
    with pytest.raises(StoreBusy) as busy:
        asyncio.run(store.acreate(agent="a", conversation="c", source="cli", input="hi"))
    holder.execute("COMMIT")
    assert str(busy.value) == (
        "the project's database tasks.db stayed locked by another process for 0.3 s (store.lock_timeout); "
        "nothing of this request was written: try again"
    )
    assert busy.value.code == "store_busy" and busy.value.data["retryable"] is True
    assert store.list() == []


def test_a_blocking_write_on_the_loop_thread_gives_up_after_the_grace(tmp_path: Path) -> None:
    store = TaskStore.open(tmp_path)
    holder = _holder(store.path)

    async def go() -> float:
        started = time.monotonic()
        with pytest.raises(StoreBusy):
            store.create(agent="a", conversation="c", source="cli", input="hi")
        return time.monotonic() - started

    held = asyncio.run(go())
    holder.execute("COMMIT")
    assert held < LOOP_GRACE_S + 0.1, held
    store.create(agent="a", conversation="c", source="cli", input="now")  # off the loop: it just writes
    assert [t.input for t in store.list()] == ["now"]
