"""Replicas started at the same moment on an empty PostgreSQL database all come up.

Each creates the tables it needs — ours under one advisory lock (framework/runtime/schema.py),
a2a-sdk's ``tasks`` table under another (framework/protocols/a2a/task_store.py), LangGraph's
and the audit's under theirs — so of replicas racing to create one table, one creates it and
the others wait and find it. Without that, one of two replicas started together failed a third
of the time (a unique violation in ``pg_type`` from a2a-sdk's ``CREATE TABLE tasks``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_project
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, launch_serve

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("attempt", range(3))
def test_three_replicas_started_together_on_an_empty_database_all_serve(tmp_path: Path, attempt: int) -> None:
    with fresh_database(f"replica_start_{attempt}") as url:
        roots = [
            write_project(
                tmp_path / name,
                {"ca.yaml": f"default_agent: echo\nstore: {{url: {url!r}}}\n", "agents/echo.yaml": "name: echo\n"},
            )
            for name in ("a", "b", "c")
        ]
        started: list[ServerProcess] = [launch_serve(root) for root in roots]
        try:
            for served in started:
                served.wait_ready()
            for served in started:
                message = {"messageId": f"m-{served.port}", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
                answer = served.rpc("SendMessage", {"message": message})
                assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
        finally:
            for served in started:
                served.stop()
