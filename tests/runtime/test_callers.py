"""Who sent a task and who decided it, at each local entry point: the task record and the audit name them.

``ca run`` and ``ca approve`` are ``cli:<os user>``, ``ca run --stdio`` over A2A is the local user
``local:<os user>``, an editor over ACP is ``acp``. Each runs as a real process.
"""

from __future__ import annotations

import getpass
import json
import sqlite3
from pathlib import Path
from typing import Any

from framework.runtime.audit import AuditLog
from framework.runtime.task_record import Task
from framework.runtime.tasks import TaskStore
from tests.a2a_peers import StdioPeer, result_of, user_message
from tests.acp_client import Client, agent, run
from tests.conftest import SIDE_EFFECT, ProjectFactory, run_ca, writer_agent

USER = getpass.getuser()


def _project(make_project: ProjectFactory) -> Path:
    return make_project({"tools/side.py": SIDE_EFFECT, "agents/writer.yaml": writer_agent()})


def _task(root: Path, task_id: str) -> Task:
    tasks = TaskStore.open(root)
    try:
        return tasks.get(task_id)
    finally:
        tasks.close()


def _named_in_audit(root: Path, task_id: str) -> tuple[list[Any], list[Any]]:
    """Who the audit says submitted the task, and who decided its approvals."""
    with AuditLog.open(root) as audit:
        states = audit.query(task_id=task_id, kind="task.state")
        approvals = audit.query(task_id=task_id, kind="approval")
    submitted = [r.data.get("by") for r in states if r.data["state"] == "submitted"]
    return submitted, [r.data.get("by") for r in approvals]


def test_ca_run_and_ca_approve_are_the_cli_user(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    paused = run_ca("run", "writer", "go", "--json", cwd=root)
    assert paused.returncode == 3, paused.stderr
    task_id = json.loads(paused.stdout.splitlines()[-1])["task_id"]
    approved = run_ca("approve", task_id, cwd=root)
    assert approved.returncode == 0, approved.stderr
    task = _task(root, task_id)
    assert (task.caller, task.decided_by) == (f"cli:{USER}", f"cli:{USER}")
    assert _named_in_audit(root, task_id) == ([f"cli:{USER}"], [f"cli:{USER}"])


def test_stdio_a2a_is_the_local_user(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    peer = StdioPeer(root, "writer")
    try:
        paused = result_of(peer.request("SendMessage", {"message": user_message("go")}))["task"]
        assert paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        listed = result_of(peer.request("_cleveragents/approvals/list", {}))["approvals"]
        assert [(a["taskId"], a["caller"]) for a in listed] == [(paused["id"], f"local:{USER}")]
        reply = user_message("approve", taskId=paused["id"], contextId=paused["contextId"])
        done = result_of(peer.request("SendMessage", {"message": reply}))["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        code, _ = peer.close()
        assert code == 0
    finally:
        peer.kill()
    task = _task(root, paused["id"])
    assert (task.caller, task.decided_by) == (f"local:{USER}", f"local:{USER}")
    assert _named_in_audit(root, paused["id"]) == ([f"local:{USER}"], [f"local:{USER}"])


def test_acp_is_acp(make_project: ProjectFactory) -> None:
    root = _project(make_project)

    async def main() -> None:
        async with agent(root, "writer", client=Client(["allow_once"])) as a:
            await a.initialize()
            session = await a.new_session()
            assert await a.prompt(session, "go") == "end_turn"

    run(main())
    assert (root / "effects.log").read_text() == "hello\n"
    tasks = TaskStore.open(root)
    try:
        [task] = tasks.list()
    finally:
        tasks.close()
    assert (task.caller, task.decided_by) == ("acp", "acp")
    assert _named_in_audit(root, task.id) == (["acp"], ["acp"])


def test_a_task_table_from_before_callers_gains_the_column_and_keeps_its_rows(tmp_path: Path) -> None:
    """A ``.ca/tasks.db`` written by an older release (no caller, no decided_by): opening it adds the
    columns; its tasks have no caller (no named caller sees them; an approver does)."""
    path = tmp_path / ".ca" / "tasks.db"
    path.parent.mkdir()
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE tasks (id TEXT PRIMARY KEY, agent TEXT NOT NULL, conversation TEXT NOT NULL,"
            " source TEXT NOT NULL, state TEXT NOT NULL, input TEXT NOT NULL DEFAULT '', output TEXT NOT NULL"
            " DEFAULT '', error TEXT NOT NULL DEFAULT '', pending TEXT NOT NULL DEFAULT '[]', usage TEXT NOT NULL"
            " DEFAULT '{}', parent TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL, updated_at TEXT NOT NULL)"
        )
        db.execute(
            "INSERT INTO tasks (id, agent, conversation, source, state, created_at, updated_at)"
            " VALUES ('old', 'echo', 'c', 'a2a-http', 'completed', '2026-01-01', '2026-01-01')"
        )
    tasks = TaskStore.open(tmp_path)
    try:
        assert tasks.get("old").caller == ""
        tasks.create(agent="echo", conversation="c2", source="cli", input="hi", task_id="new", caller="team-a")
        assert [t.id for t in tasks.list(caller="team-a")] == ["new"]
        assert {t.id for t in tasks.list()} == {"old", "new"}
    finally:
        tasks.close()
