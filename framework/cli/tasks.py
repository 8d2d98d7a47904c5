"""``ca tasks list`` and ``ca tasks cancel``: what ran and what waits for a decision, and ending a task.

Only the typer app is defined at import; the stores load when a command runs.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from framework.cli.options import ProjectOpt, project_dir

tasks_app = typer.Typer(help="Tasks of a project: what ran, what waits for a decision; end one.", no_args_is_help=True)


@tasks_app.command("list")
def tasks_list(
    pending: Annotated[bool, typer.Option("--pending", help="Only tasks waiting for a decision.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tasks as JSON.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10000, help="At most this many, newest first.")] = 50,
    project: ProjectOpt = None,
) -> None:
    """List tasks, newest first, with what each paused task is waiting for."""
    import dataclasses

    from framework.runtime.tasks import TaskStore
    from framework.spec import load_project

    loaded = load_project(project_dir(project))
    store = TaskStore.open(loaded.root, url=loaded.config.store.url)
    try:
        tasks = store.list(pending_only=pending, limit=limit)
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(t) for t in tasks], indent=2))
        return
    if not tasks:
        typer.echo("no tasks waiting for a decision" if pending else "no tasks yet")
        return
    for task in tasks:
        called = f"  (called by {task.parent[:12]})" if task.parent else ""
        typer.echo(
            f"{task.id[:12]}  {task.state:<15} {task.agent:<16} {task.updated_at[:19]}  "
            f"session {task.conversation}{called}"
        )
        for waiting in task.pending:
            expired = " (expired)" if waiting.expired() else ""
            typer.echo(f"    waiting: {waiting.pause.message or waiting.pause.kind}{expired}")


@tasks_app.command("cancel")
def tasks_cancel(
    task: Annotated[str, typer.Argument(help="The task id (or a unique prefix), from `ca tasks list`.")],
    wait: Annotated[
        float, typer.Option("--wait", min=0, help="Seconds to wait for another process to stop a running task.")
    ] = 5.0,
    project: ProjectOpt = None,
) -> None:
    """End a task: one waiting for a decision, or one running in any process of the project
    (a `ca serve`, `ca run`, `ca approve`: that process stops it and kills its tools).

    Exit codes: 0 canceled; 1 already final, ended otherwise before the request reached it,
    or still running after --wait; 2 unknown task.
    """
    import asyncio

    from framework.cli.cancel import cancel_command, describe

    typer.echo(describe(asyncio.run(cancel_command(project_dir(project), task, wait))))
