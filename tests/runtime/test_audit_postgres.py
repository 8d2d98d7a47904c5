"""The audit chain in PostgreSQL: processes appending at the same time still make one valid chain.

Each append reads the ``audit_head`` row ``FOR UPDATE`` in the transaction that inserts the
record, so the database, not a lock of the process, puts the appends in order. Real processes
race here, several rounds, on the real server in a database of this module's own
(:mod:`tests.postgres_db`); the module skips saying why where none answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from framework.runtime.audit import AuditLog
from tests.conftest import REPO
from tests.postgres_db import fresh_database

APPENDS = 60
"""Records each process appends per round."""

APPENDER = textwrap.dedent(
    """
    import sys, time
    from framework.runtime.audit import AuditLog

    url, name, count, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    with AuditLog.open(url) as log:
        log.query(limit=1)  # connected and set up before the start line
        time.sleep(max(0.0, start - time.time()))
        for i in range(count):
            log.append("task.state", source="a2a-http", task_id=f"{name}-{i}", data={"by": name, "i": i})
    """
)


@pytest.fixture(scope="module")
def audit_url() -> Iterator[str]:
    with fresh_database("audit") as url:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)


def _race(url: str, names: list[str], tmp_path: Path) -> None:
    """Start one appending process per name; they all begin appending at the same instant."""
    import time

    start = time.time() + 3.0  # long enough for every process to import and connect
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, url, name, str(APPENDS), str(start)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stderr=(tmp_path / f"{name}.err").open("wb"),
        )
        for name in names
    ]
    for proc, name in zip(procs, names, strict=True):
        assert proc.wait(timeout=120) == 0, (tmp_path / f"{name}.err").read_text()


def test_appends_racing_from_two_processes_form_one_valid_chain(audit_url: str, tmp_path: Path) -> None:
    rounds = 3
    for n in range(rounds):
        _race(audit_url, [f"a{n}", f"b{n}"], tmp_path)
        with AuditLog.open(audit_url) as log:
            result = log.verify()
            assert result.ok, result.problems
            assert result.checked == 2 * APPENDS * (n + 1)
            records = log.query(limit=10_000)
    assert [r.seq for r in records] == list(range(1, 2 * APPENDS * rounds + 1))
    assert all(later.prev_hash == earlier.hash for earlier, later in pairwise(records))
    interleaved = sum(1 for a, b in pairwise(records) if a.data["by"] != b.data["by"])
    assert interleaved > rounds, "the processes never overlapped: the race was not run"
    by_process = {r.data["by"]: sorted(x.data["i"] for x in records if x.data["by"] == r.data["by"]) for r in records}
    assert all(seen == list(range(APPENDS)) for seen in by_process.values())  # nothing lost, nothing twice
