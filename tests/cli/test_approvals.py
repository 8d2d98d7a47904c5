"""Durable approvals through real processes: pause, SIGKILL, decide from another process."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import CA, REPO, ProjectFactory, events, read_rest, run_ca

SIDE_EFFECT = '''
from pathlib import Path


def append(text: str) -> str:
    """Append a line to effects.log (a side effect that must happen exactly once)."""
    with Path("effects.log").open("a") as f:
        f.write(text + "\\n")
    return "appended"
'''

WRITER = """
name: writer
profile: manual
model:
  provider: scripted
  replies:
    - tool_calls: [{name: append, args: {text: hello}}]
    - done
tools:
  - python: tools/side.py:append
"""


def _project(make_project: ProjectFactory) -> Path:
    return make_project({"tools/side.py": SIDE_EFFECT, "agents/writer.yaml": WRITER})


def _pause_then_signal(root: Path, sig: signal.Signals) -> tuple[int, str]:
    """Start `ca run` on a terminal, wait for the approval prompt, send it ``sig``; its exit code
    and what it wrote to the terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CA, "run", "writer", "go"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"[a]pprove" not in seen:
            assert time.monotonic() < deadline, f"no approval prompt; saw {seen!r}"
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                seen += os.read(master, 4096)
        assert b"writer wants to run append" in seen
        proc.send_signal(sig)
        proc.wait(timeout=10)
        seen += read_rest(master)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, seen.decode(errors="replace")


def _pending_task(root: Path) -> str:
    """The id of the one task waiting for a decision (a pending tool approval of writer)."""
    listed = run_ca("tasks", "list", "--pending", "--json", cwd=root)
    assert listed.returncode == 0, listed.stderr
    [task] = json.loads(listed.stdout)
    assert task["state"] == "input-required" and task["agent"] == "writer"
    assert task["pending"][0]["payload"]["tool"] == "append"
    return str(task["id"])


def _pause_then_kill(root: Path) -> str:
    """Start `ca run` on a terminal, wait for the approval prompt, SIGKILL it; the paused task's id."""
    code, _ = _pause_then_signal(root, signal.SIGKILL)
    assert code == -signal.SIGKILL
    return _pending_task(root)


def test_ctrl_c_at_the_prompt_exits_130_and_leaves_the_task_waiting(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    code, terminal = _pause_then_signal(root, signal.SIGINT)
    assert code == 130, terminal
    assert "Traceback" not in terminal
    task_id = _pending_task(root)
    assert f"ca approve {task_id[:12]}" in terminal  # it says how to decide later


def test_a_task_left_at_the_prompt_by_ctrl_c_is_approved_later(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    _pause_then_signal(root, signal.SIGINT)
    approved = run_ca("approve", _pending_task(root)[:12], cwd=root)
    assert approved.returncode == 0, approved.stderr
    assert (root / "effects.log").read_text() == "hello\n"


def test_paused_run_survives_sigkill_and_is_approved_from_a_new_process(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    task_id = _pause_then_kill(root)
    assert not (root / "effects.log").exists()  # nothing ran before the decision

    approved = run_ca("approve", task_id[:12], "--json", cwd=root)
    assert approved.returncode == 0, approved.stderr
    evs = events(approved.stdout)
    assert [(e["tool"], e["result"]) for e in evs if e["kind"] == "tool_result"] == [("append", "appended")]
    assert evs[-1]["state"] == "completed" and evs[-1]["output"] == "done"
    assert (root / "effects.log").read_text() == "hello\n"  # the side effect ran exactly once

    again = run_ca("approve", task_id[:12], cwd=root)
    assert again.returncode == 1 and "not waiting for a decision" in again.stderr
    assert (root / "effects.log").read_text() == "hello\n"
    assert run_ca("tasks", "list", "--pending", cwd=root).stdout.strip() == "no tasks waiting for a decision"


def test_paused_run_survives_sigkill_and_is_rejected_with_a_reason(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    task_id = _pause_then_kill(root)
    rejected = run_ca("approve", task_id, "--reject", "--reason", "not on a Friday", "--json", cwd=root)
    assert rejected.returncode == 0, rejected.stderr
    evs = events(rejected.stdout)
    [result] = [e for e in evs if e["kind"] == "tool_result"]
    assert result["is_error"] and result["result"] == "rejected by the user: not on a Friday"
    assert evs[-1]["state"] == "completed"
    assert not (root / "effects.log").exists()


def test_without_a_terminal_the_run_stops_waiting_and_says_how_to_decide(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    result = run_ca("run", "writer", "go", cwd=root)
    assert result.returncode == 3
    assert "is waiting for a decision: ca approve " in result.stderr
    task = result.stderr.split("ca approve ")[1].split()[0]
    assert run_ca("approve", task, cwd=root).returncode == 0
    assert (root / "effects.log").read_text() == "hello\n"


ASKER = """
name: asker
kind: workflow
steps:
  - {id: who, ask: {message: "Who is asking?"}}
  - id: card
    artifact: {parts: [{data: {visitor: "{{ steps.who.output }}"}}]}
output: "Welcome, {{ steps.who.output }}"
"""


def test_an_ask_step_is_answered_from_another_process_with_answer(make_project: ProjectFactory) -> None:
    root = make_project({"agents/asker.yaml": ASKER})
    result = run_ca("run", "asker", "hi", cwd=root)
    assert result.returncode == 3, result.stderr
    assert "⏸ paused: Who is asking?" in result.stderr
    assert "is waiting for an answer: ca approve " in result.stderr
    task = result.stderr.split("ca approve ")[1].split()[0]

    wrong = run_ca("approve", task, cwd=root)  # an approval is not an answer: refused, nothing changes
    assert wrong.returncode == 1 and "asks a question: answer it with text" in wrong.stderr
    mixed = run_ca("approve", task, "--answer", "Ada", "--reject", cwd=root)
    assert mixed.returncode == 2 and "--answer" in mixed.stderr

    answered = run_ca("approve", task, "--answer", "Ada", cwd=root)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == "Welcome, Ada"
    assert 'artifact card: {"visitor": "Ada"}' in answered.stderr


def test_an_answer_to_an_approval_is_refused(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    result = run_ca("run", "writer", "go", cwd=root)
    task = result.stderr.split("ca approve ")[1].split()[0]
    refused = run_ca("approve", task, "--answer", "yes please", cwd=root)
    assert refused.returncode == 1 and "waits for an approval, not an answer" in refused.stderr
    assert not (root / "effects.log").exists()
    assert run_ca("approve", task, cwd=root).returncode == 0  # still waiting, and approvable
    assert (root / "effects.log").read_text() == "hello\n"


def test_audit_records_the_whole_story_and_verifies(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    paused = run_ca("run", "writer", "go", cwd=root)
    task = paused.stderr.split("ca approve ")[1].split()[0]
    assert run_ca("approve", task, cwd=root).returncode == 0
    log = run_ca("audit", "--task", task, cwd=root)
    assert log.returncode == 0, log.stderr
    kinds = [line.split()[3] for line in log.stdout.splitlines()]
    # submitted, working, the model's call that asked for the tool, input-required
    assert kinds[:4] == ["task.state", "task.state", "model.call", "task.state"]
    assert "approval" in kinds and "decision" in kinds and "tool.call" in kinds and "tool.result" in kinds
    assert kinds[-1] == "task.state" and "state=completed" in log.stdout.splitlines()[-1]
    verified = run_ca("audit", "--verify", cwd=root)
    assert verified.returncode == 0 and verified.stdout.startswith("audit log ok: ")


def test_audit_verify_detects_an_edited_record(make_project: ProjectFactory) -> None:
    import sqlite3

    root = _project(make_project)
    run_ca("run", "writer", "go", cwd=root)
    with sqlite3.connect(root / ".ca" / "audit.db") as db:
        db.execute('UPDATE audit SET data = \'{"state": "completed"}\' WHERE seq = 2')
    verified = run_ca("audit", "--verify", cwd=root)
    assert verified.returncode == 1
    assert "record 2 was edited" in verified.stderr


def test_a_reason_without_reject_is_a_usage_error_and_decides_nothing(make_project: ProjectFactory) -> None:
    root = _project(make_project)
    paused = run_ca("run", "writer", "go", "--json", cwd=root)
    task_id = json.loads(paused.stdout.splitlines()[-1])["task_id"]
    result = run_ca("approve", task_id, "--reason", "looks fine", cwd=root)
    assert result.returncode == 2
    assert "--reason goes with --reject" in result.stderr
    assert not (root / "effects.log").exists()
    assert run_ca("tasks", "list", "--pending", cwd=root).stdout.count(task_id[:12]) == 1


def test_approving_an_unknown_task_is_a_usage_error_as_cancelling_one_is(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\n"})
    approved = run_ca("approve", "nosuch", cwd=root)
    canceled = run_ca("tasks", "cancel", "nosuch", cwd=root)
    said = "error: task 'nosuch' not found; `ca tasks list` shows the tasks of this project\n"
    assert (approved.returncode, approved.stderr) == (2, said)
    assert (canceled.returncode, canceled.stderr) == (2, said)
    schema = run_ca("schema", "--help")
    assert "agent/profile/skill/project/eval .schema.json" in " ".join(schema.stdout.split())
