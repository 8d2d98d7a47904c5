"""The usage report over an audit log in PostgreSQL: the same records, read through the audit
store's own API (``AuditLog.records``), give the same sums, ``since`` included.

Needs a real PostgreSQL server: ``CA_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/test``); the test makes its own database and drops it.
Where none answers, it skips and says so.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from framework.runtime.audit import AuditLog
from framework.runtime.usage import usage_report

URL = os.environ.get("CA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh database of its own on the server at ``URL`` (dropped after), as a SQLAlchemy URL."""
    psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (the 'postgres' extra)")
    name = f"ca_test_usage_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {URL} ({exc}); set CA_TEST_POSTGRES_URL to a server this test may use")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            base, _, _ = URL.rpartition("/")
            yield f"{base.replace('postgresql://', 'postgresql+psycopg://', 1)}/{name}"
        finally:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def call(log: AuditLog, task: str, agent: str, model: str, tokens: tuple[int, int], cost: float | None) -> None:
    data = {"model": model, "input_tokens": tokens[0], "output_tokens": tokens[1], "cost_usd": cost, "caller": "ci"}
    log.append("model.call", source="a2a-http", task_id=task, agent=agent, data=data)


def test_the_report_reads_a_postgresql_audit_as_it_reads_sqlite(database: str) -> None:
    with AuditLog.open(database) as log:
        call(log, "t1", "writer", "openai:gpt-4o-mini", (1000, 200), 0.00027)
        log.append(
            "tool.call", source="a2a-http", task_id="t1", agent="writer", data={"tool": "fs.read", "caller": "ci"}
        )
        log.append("denial", source="a2a-http", task_id="t1", agent="writer", data={"tool": "shell", "caller": "ci"})
        mark = datetime.now(UTC).isoformat(timespec="microseconds")
        call(log, "t2", "writer", "openai:my-finetune", (10, 5), None)
        call(log, "t3", "critic", "offline", (7, 3), 0.0)
        everything = usage_report(log.records(), "agent")
        recent = usage_report(log.records(since_ts=mark), "model", since=mark)
    writer, critic = (row.to_json() for row in everything.rows[::-1])
    assert (writer["group"], writer["runs"], writer["model_calls"]) == ("writer", 2, 2)
    assert (writer["input_tokens"], writer["output_tokens"], writer["tool_calls"]) == (1010, 205, 2)
    assert writer["cost_usd"] is None and writer["unknown_prices"] == ["openai:my-finetune"]
    assert writer["tools"] == {"fs.read": {"allowed": 1}, "shell": {"denied": 1}}
    assert critic["cost_usd"] == 0
    assert [row.group for row in recent.rows] == ["offline", "openai:my-finetune"]  # t1 came before the mark
    assert recent.total.model_calls == 2
