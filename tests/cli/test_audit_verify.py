"""A damaged audit.db through the real process: one line naming the file and what to do, for
`ca audit`, `ca audit --verify` and `ca run` alike."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from framework.runtime.audit import AuditLog
from tests.conftest import ProjectFactory, run_ca

AGENT = "name: helper\nmodel: offline\n"


def project(make_project: ProjectFactory) -> Path:
    return make_project({"agents/helper.yaml": AGENT})


def fill(root: Path, n: int) -> None:
    """Append ``n`` records to the project's log and close it."""
    with AuditLog.open(root) as log:
        for i in range(n):
            log.append("tool.call", source="cli", task_id="t", agent="helper", data={"i": i})


def db_file(root: Path) -> Path:
    return root / ".ca" / "audit.db"


# -- a damaged audit.db -------------------------------------------------------------------------


def random_bytes(db: Path) -> str:
    db.write_bytes(os.urandom(8192))
    return "file is not a database"


def truncated(db: Path) -> str:
    os.truncate(db, db.stat().st_size // 2)
    return "database disk image is malformed"


def table_missing(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE audit_head")
    return "its table 'audit_head' is missing"


VERIFY = ("audit", "--verify")
CASES = [(damage, VERIFY) for damage in (random_bytes, truncated, table_missing)]
CASES += [(random_bytes, ("audit",)), (random_bytes, ("run", "helper", "hello"))]  # every command that opens it


@pytest.mark.parametrize(("damage", "command"), CASES, ids=[f"{d.__name__}-{' '.join(c)}" for d, c in CASES])
def test_a_damaged_audit_db_is_one_line_naming_the_file_and_what_to_do(
    make_project: ProjectFactory, damage: Callable[[Path], str], command: tuple[str, ...]
) -> None:
    root = project(make_project)
    fill(root, 300)  # several pages, so that half of the file is missing some
    db = db_file(root)
    assert not Path(f"{db}-wal").exists()  # closing folded the WAL into the file
    detail = damage(db)
    result = run_ca(*command, cwd=root)
    assert result.returncode == 1
    assert result.stderr == (
        f"error: the audit log {db} is corrupt ({detail}): move {db} and its -wal and -shm files aside"
        " (keep them as evidence); ca then starts a new log\n"
    )
