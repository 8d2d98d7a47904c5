"""The versioned schema of the task database: its migrations, applied in order, each once.

The ``schema_version`` table holds one row per migration applied. Every opening of the database
reads the latest version (one query) and applies what is missing, in one transaction. On
PostgreSQL the migrations run under an advisory lock, so replicas that start together do not race:
one migrates, the others wait for the lock and then find nothing left to do. On SQLite the write
lock of the transaction (``BEGIN IMMEDIATE``) does the same between processes. On PostgreSQL the
tables are in a schema of their own (:data:`~framework.runtime.database.PG_SCHEMA`), apart from
a2a-sdk's ``tasks`` table in the same database. ``ca db upgrade``
runs them explicitly and says what it did.

A ``tasks.db`` written before versions were kept has the tables of migration 1, perhaps without its
later columns: migration 1 creates what is missing and adds the missing columns, so it too ends at
the current version with nothing lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from framework.errors import StoreError
from framework.runtime.database import PG_SCHEMA, Database, PostgresDatabase, Run, open_database
from framework.runtime.store_locks import LOCK_TIMEOUT_S


@dataclass(frozen=True)
class Migration:
    version: int
    about: str
    statements: tuple[str, ...] = ()
    columns: tuple[tuple[str, str, str], ...] = ()
    """(table, column, definition) added where the table lacks the column."""


MIGRATIONS = (
    Migration(
        1,
        "the tasks, remote_calls, turns and sessions tables",
        (
            """CREATE TABLE IF NOT EXISTS tasks (
                id TEXT PRIMARY KEY,
                agent TEXT NOT NULL,
                conversation TEXT NOT NULL,
                source TEXT NOT NULL,
                state TEXT NOT NULL,
                input TEXT NOT NULL DEFAULT '',
                output TEXT NOT NULL DEFAULT '',
                error TEXT NOT NULL DEFAULT '',
                pending TEXT NOT NULL DEFAULT '[]',
                usage TEXT NOT NULL DEFAULT '{}',
                parent TEXT NOT NULL DEFAULT '',
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state)",
            "CREATE INDEX IF NOT EXISTS tasks_conversation ON tasks(conversation)",
            """CREATE TABLE IF NOT EXISTS remote_calls (
                key TEXT PRIMARY KEY,
                url TEXT NOT NULL,
                task_id TEXT NOT NULL,
                context_id TEXT NOT NULL,
                created_at TEXT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS turns (
                conversation TEXT PRIMARY KEY,
                task_id TEXT NOT NULL,
                pid INTEGER NOT NULL,
                started_at TEXT NOT NULL
            )""",
            """CREATE TABLE IF NOT EXISTS sessions (
                id TEXT PRIMARY KEY,
                agent TEXT NOT NULL,
                mode TEXT NOT NULL DEFAULT '',
                cwd TEXT NOT NULL DEFAULT '',
                updated_at TEXT NOT NULL
            )""",
        ),
        (
            ("tasks", "decided_by", "TEXT NOT NULL DEFAULT ''"),
            ("tasks", "decided_at", "TEXT NOT NULL DEFAULT ''"),
            ("tasks", "failure", "TEXT NOT NULL DEFAULT ''"),
            ("tasks", "owner_pid", "INTEGER NOT NULL DEFAULT 0"),
            ("tasks", "owner_host", "TEXT NOT NULL DEFAULT ''"),
            ("tasks", "cancel_requested", "TEXT NOT NULL DEFAULT ''"),
            ("tasks", "caller", "TEXT NOT NULL DEFAULT ''"),
        ),
    ),
    Migration(
        2,
        "the host of each turn's process (a turn held on another host is not judged by a pid of this one)",
        columns=(("turns", "host", "TEXT NOT NULL DEFAULT ''"),),
    ),
    Migration(
        3,
        "the lease of each running task (renewed by the process running it; expired: an orphan on any host)",
        columns=(("tasks", "lease_until", "TEXT NOT NULL DEFAULT ''"),),
    ),
    Migration(
        4,
        "the message_claims table: the task each new-task message (agent, caller, messageId) started, and what it said",
        (
            """CREATE TABLE IF NOT EXISTS message_claims (
                key TEXT PRIMARY KEY,
                task_id TEXT NOT NULL,
                digest TEXT NOT NULL,
                created_at TEXT NOT NULL
            )""",
        ),
    ),
)
LATEST = MIGRATIONS[-1].version
_LOCK_KEY = 0x6361_7461_736B  # "catask": the advisory lock the migrations of the task database run under


def version(db: Database) -> int:
    """The schema version of ``db`` (0: a new database, or one written before versions were kept)."""
    if db.dialect == "postgresql":
        if db.execute("SELECT to_regclass('schema_version')").rows[0][0] is None:
            return 0
    elif not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").rows:
        return 0
    return int(db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").rows[0][0])


def migrate(db: Database) -> list[Migration]:
    """Bring ``db`` to :data:`LATEST`; the migrations this call applied (none when it was current)."""
    if _checked(db, version(db)) == LATEST:  # the common case: one query, no lock
        return []
    if isinstance(db, PostgresDatabase):
        with db.advisory(_LOCK_KEY):  # replicas starting together: one migrates, the others wait here
            return _upgrade(db)
    return _upgrade(db)


def _checked(db: Database, at: int) -> int:
    if at > LATEST:
        raise StoreError(
            f"the task database {db.name} is at schema version {at}, newer than this ca knows ({LATEST}): "
            "upgrade ca to the version the other servers run"
        )
    return at


def _upgrade(db: Database) -> list[Migration]:
    applied = []
    with db.transaction() as run:
        if db.dialect == "postgresql":  # the connections read it first (search_path): created, it holds the tables
            run(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}")
        run(
            "CREATE TABLE IF NOT EXISTS schema_version"
            " (version INTEGER PRIMARY KEY, about TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        at = _checked(db, int(run("SELECT COALESCE(MAX(version), 0) FROM schema_version").rows[0][0]))
        for migration in MIGRATIONS[at:]:
            for statement in migration.statements:
                run(statement)
            for table, column, definition in migration.columns:
                if column not in _columns(db, run, table):
                    run(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            run(
                "INSERT INTO schema_version (version, about, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.about, datetime.now(UTC).isoformat()),
            )
            applied.append(migration)
    return applied


def _columns(db: Database, run: Run, table: str) -> set[str]:
    if db.dialect == "postgresql":
        found = run(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = ?",
            (table,),
        )
        return {row[0] for row in found.rows}
    return {row[1] for row in run(f"PRAGMA table_info({table})").rows}


def connect(root: Path, url: str = "", *, lock_timeout: float = LOCK_TIMEOUT_S) -> Database:
    """The task database of the project at ``root`` (:func:`~framework.runtime.database.open_database`:
    PostgreSQL when ``url`` names it, else ``.ca/tasks.db``), migrated to the current schema."""
    db = open_database(root, url, lock_timeout=lock_timeout)
    try:
        migrate(db)
    except BaseException:
        db.close()
        raise
    return db.ready()
