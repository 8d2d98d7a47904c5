"""``ca db upgrade``: bring the task database of a project to the current schema, and say what was done.

Every ``ca`` process migrates the database when it opens it (:mod:`framework.runtime.schema`);
this command does it explicitly, before replicas are started or rolled, and prints the versions
it applied. A missing driver, an unreachable server or a missing database is one line, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import typer

from framework.cli.options import ProjectOpt, project_dir


def upgrade_command(project_dir: Path) -> int:
    """Migrate the project's task database; the exit code."""
    from framework.runtime.database import SqliteDatabase, open_database
    from framework.runtime.schema import LATEST, migrate, version
    from framework.spec import load_project

    project = load_project(project_dir)
    db = open_database(project.root, project.config.store.url, lock_timeout=project.config.store.lock_timeout)
    try:
        before = version(db)
        applied = migrate(db)
    finally:
        db.close()
    where = str(db.path) if isinstance(db, SqliteDatabase) else db.name
    for migration in applied:
        print(f"applied {migration.version}: {migration.about}")
    if applied:
        print(f"task database {where}: schema version {before} -> {LATEST}")
    else:
        print(f"task database {where}: already at schema version {LATEST}; nothing to do")
    return 0


db_app = typer.Typer(
    help="The project's task database (.ca/tasks.db, or PostgreSQL with store.url).", no_args_is_help=True
)


@db_app.command("upgrade")
def db_upgrade(project: ProjectOpt = None) -> None:
    """Apply the task database's schema migrations that are missing, in order, and print them.

    Every ca process does this when it opens the database; run it before starting or rolling
    replicas. On PostgreSQL it runs under an advisory lock: replicas migrating at once wait for it.
    """
    raise typer.Exit(upgrade_command(project_dir(project)))
