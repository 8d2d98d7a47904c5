"""Another process holds the project's SQLite write lock: the server's event loop never waits for it.

A helper process takes ``BEGIN IMMEDIATE`` on every database under ``.ca/`` (tasks, audit,
conversations, A2A tasks) and keeps it for a while. ``/healthz`` answers at once throughout;
a SendMessage sent meanwhile waits for the lock (off the event loop) and completes once it is
given back; held past ``store.lock_timeout`` the message fails with the retryable
``store_busy`` error and nothing of it was written.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ProjectFactory, run_ca
from tests.serving import ServerProcess, start_serve

DATABASES = ("tasks.db", "audit.db", "conversations.db", "state.db")
"""Every SQLite file a serving project writes under ``.ca/``."""

HOLDER = """
import sqlite3, sys, time
conns = []
for path in sys.argv[2:]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conns.append(conn)
print("held", flush=True)
time.sleep(float(sys.argv[1]))
for conn in conns:
    conn.execute("COMMIT")
print("released", flush=True)
"""

ECHO = """
name: echo
profile: autonomous
tools: [fs.list]
capabilities: {fs: {read: ["**"]}}
"""
TOOL_CALL = '@tool fs.list {"path": "."}'
"""A line that makes the offline model call a tool: governance audits the call while the lock is held."""


def _message(text: str, message_id: str) -> dict[str, Any]:
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}


def _hold(root: Path, seconds: float) -> subprocess.Popen[str]:
    """A process holding the write lock of every database of ``root`` for ``seconds``; returns once it holds."""
    paths = [str(root / ".ca" / name) for name in DATABASES]
    for path in paths:
        assert Path(path).exists(), path
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(seconds), *paths], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


def _send(server: ServerProcess, text: str, message_id: str, answers: list[Any]) -> None:
    started = time.monotonic()
    answer = server.rpc("SendMessage", _message(text, message_id))
    answers.append((answer, time.monotonic() - started))


def _probe(server: ServerProcess, count: int, spacing: float) -> list[float]:
    """``count`` GET /healthz, each timed (seconds), ``spacing`` apart."""
    timings = []
    with httpx.Client(timeout=30) as client:
        for _ in range(count):
            started = time.monotonic()
            assert client.get(server.url + "/healthz").status_code == 200
            timings.append(time.monotonic() - started)
            time.sleep(spacing)
    return timings


def test_health_answers_at_once_and_a_message_waits_while_another_process_holds_the_write_lock(
    make_project: ProjectFactory,
) -> None:
    root = make_project({"agents/echo.yaml": ECHO, "ca.yaml": "default_agent: echo\n"})
    server = start_serve(root)
    try:
        first = server.rpc("SendMessage", _message("warm up", "m-0"))
        assert first["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", first
        holder = _hold(root, 5)
        held_at = time.monotonic()
        answers: list[Any] = []
        sender = threading.Thread(target=_send, args=(server, f"during the hold\n{TOOL_CALL}", "m-1", answers))
        sender.start()
        timings = _probe(server, 8, 0.4)
        assert holder.wait(timeout=30) == 0
        released = time.monotonic() - held_at
        sender.join(timeout=60)
    finally:
        server.stop()
    print(json.dumps({"healthz_ms": [round(t * 1000, 1) for t in timings]}))
    assert max(timings) < 0.1, timings
    [(answer, took)] = answers
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
    assert "during the hold" in json.dumps(task["artifacts"])
    assert took >= released - 1.0, (took, released)  # it waited for the lock, then ran
    with sqlite3.connect(root / ".ca" / "audit.db") as audit:
        kinds = [k for (k,) in audit.execute("SELECT kind FROM audit WHERE task_id = ? ORDER BY seq", (task["id"],))]
    assert kinds.count("tool.call") == 1 and kinds.count("tool.result") == 1, kinds
    verified = run_ca("audit", "--verify", cwd=root)
    assert verified.returncode == 0, verified.stderr  # the records appended after the wait extend the chain
    server.assert_clean_exit()


def test_a_message_held_up_past_the_lock_timeout_fails_retryable_and_writes_nothing(
    make_project: ProjectFactory,
) -> None:
    ca_yaml = "default_agent: echo\nstore:\n  lock_timeout: 1s\n"
    root = make_project({"agents/echo.yaml": ECHO, "ca.yaml": ca_yaml})
    server = start_serve(root)
    try:
        server.rpc("SendMessage", _message("warm up", "m-0"))
        holder = _hold(root, 4)
        started = time.monotonic()
        answer = server.rpc("SendMessage", _message("too late", "m-1"))
        took = time.monotonic() - started
        assert holder.wait(timeout=30) == 0
        after = server.rpc("SendMessage", _message("after the hold", "m-2"))
        got = server.rpc("GetTask", {"id": answer["result"]["task"]["id"]})
    finally:
        server.stop()
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED", answer
    [error] = [p["data"]["error"] for p in task["status"]["message"]["parts"] if "data" in p]
    assert error["code"] == "store_busy", error
    assert "stayed locked by another process for 1 s" in error["reason"], error
    assert took < 3.5, took  # it gave up after the timeout, before the lock was released
    # Nothing of it was written: no task record, no audit record, no conversation checkpoint.
    with sqlite3.connect(root / ".ca" / "tasks.db") as tasks:
        assert tasks.execute("SELECT count(*) FROM tasks WHERE id = ?", (task["id"],)).fetchone() == (0,)
    with sqlite3.connect(root / ".ca" / "audit.db") as audit:
        assert audit.execute("SELECT count(*) FROM audit WHERE task_id = ?", (task["id"],)).fetchone() == (0,)
    with sqlite3.connect(root / ".ca" / "conversations.db") as conversations:
        found = conversations.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?", (task["contextId"],))
        assert found.fetchone() == (0,)
    # The A2A row caught up once the lock was free, and the server serves on.
    assert got["result"]["status"]["state"] == "TASK_STATE_FAILED", got
    assert after["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", after
    assert "Traceback" not in server.stderr(), server.output()
