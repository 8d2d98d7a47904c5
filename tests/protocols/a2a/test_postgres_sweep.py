"""The sweep every replica runs (``stale_running``) reads only the rows still running, however many
tasks the shared PostgreSQL database holds.

Needs a real PostgreSQL server (:mod:`tests.postgres_db`); where none answers the test skips and
says so: a query plan cannot be faked with SQLite.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from a2a.server.tasks import DatabaseTaskStore
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine

from framework.protocols.a2a.task_store import WriteBehindTaskStore
from tests.postgres_db import fresh_database

ROW = (
    "INSERT INTO tasks (id, context_id, kind, owner, last_updated, status, artifacts, history, protocol_version)"
    " SELECT %s || g, 'c', 'task', 'alice', %s, json_build_object('state', %s::text), '[]', '[]', '1.0'"
    " FROM generate_series(1, %s) g"
)


def test_the_sweep_of_stale_rows_reads_the_running_ones_through_their_own_index() -> None:
    with fresh_database("a2a_sweep") as url:
        engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
        long_ago = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
        sent: list[tuple[str, Any]] = []

        def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
            sent.append((statement, parameters))

        async def main() -> None:
            try:
                await check()
            finally:
                await engine.dispose()

        async def check() -> None:
            replicas = [WriteBehindTaskStore(DatabaseTaskStore(engine)) for _ in range(2)]
            await asyncio.gather(*(replica.initialize() for replica in replicas))  # two replicas starting at once
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(ROW, ("done", long_ago, "TASK_STATE_COMPLETED", 20_000))
                conn.execute(ROW, ("left", long_ago, "TASK_STATE_WORKING", 2))
                conn.execute(ROW, ("new", datetime.now(UTC).replace(tzinfo=None), "TASK_STATE_SUBMITTED", 1))
                conn.execute("ANALYZE tasks")
            event.listen(engine.sync_engine, "before_cursor_execute", seen)
            stale = await replicas[0].stale_running(datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=1))
            event.remove(engine.sync_engine, "before_cursor_execute", seen)
            assert sorted(stale) == [("left1", "alice", True), ("left2", "alice", True)]
            [(statement, parameters)] = [(s, p) for s, p in sent if "FROM tasks" in s]
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                plan = await raw.driver_connection.fetch("EXPLAIN " + statement, *parameters)  # type: ignore[union-attr]
            shown = "\n".join(row[0] for row in plan)
            assert "ca_tasks_running" in shown and "Seq Scan" not in shown, shown

        asyncio.run(main())
