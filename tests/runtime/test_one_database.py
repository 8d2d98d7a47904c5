"""One task database per process: a runtime's task records and turns (and ACP's session rows) share
its connections, opened once by ``Runtime.open`` and closed with it.

On PostgreSQL this is what an operator sees per replica in ``pg_stat_activity``: two connections
of the task database (``application_name`` ``ca-tasks``, one blocking and one async), however many
stores use it. The database is this module's own (skipped with the reason where no server answers).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from framework.protocols.acp.sessions import SessionStore
from framework.runtime.database import APPLICATION_NAME
from framework.runtime.events import RunFinished
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import SIDE_EFFECT, write_project, writer_agent
from tests.postgres_db import SERVER_URL, fresh_database


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with fresh_database("onedb") as url:
        yield url


def _connections(url: str) -> int:
    import psycopg

    database = url.rsplit("/", 1)[1]
    with psycopg.connect(SERVER_URL, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            (database, APPLICATION_NAME),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_runtime_on_postgresql_holds_two_task_database_connections_for_all_its_stores(
    tmp_path: Path, postgres: str
) -> None:
    root = write_project(
        tmp_path,
        {
            "ca.yaml": f"default_agent: writer\nstore: {{url: {postgres!r}}}\n",
            "agents/writer.yaml": writer_agent(file=str(tmp_path / "effects.log")),
            "tools/side.py": SIDE_EFFECT,
        },
    )

    async def main() -> None:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack)
            paused = [e async for e in runtime.send("writer", "go", conversation="c1")][-1]
            assert isinstance(paused, RunFinished) and paused.state == "input-required", paused
            done = [e async for e in runtime.decide(paused.task_id, {"decision": "approve"})][-1]
            assert isinstance(done, RunFinished) and done.state == "completed", done
            sessions = SessionStore(runtime.database)  # ACP's rows, as its server opens them
            await sessions.asave("s1", "writer", "manual", str(root))
            assert sessions.get("s1") == {"agent": "writer", "mode": "manual", "cwd": str(root)}
            # Records, turns (taken twice, given back) and sessions, blocking and async: one connection each way.
            assert _connections(postgres) == 2

    asyncio.run(main())
    deadline = time.monotonic() + 5  # the server notices a closed connection a moment later
    while _connections(postgres) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _connections(postgres) == 0  # closed once, with the runtime
    assert (tmp_path / "effects.log").read_text() == "hello\n"
