"""A replica SIGKILLed mid-run: another replica settles its task, and every view of it says so.

Two `ca serve` processes on separate project folders share one PostgreSQL database, each under a
host name of its own (:func:`tests.serving.on_host`: as on two machines, so neither can see the
other's pids and only the lease tells). ``CA_TASK_LEASE=3s``: leases renewed, and expired ones looked
for, every second. A is killed while its task's tool naps; B must end the task ``failed`` with the
lease reason within the lease and a third (docs/a2a.md), in the task record, in a2a-sdk's own row
and on GetTask, and audit it in the one chain that ``ca audit --verify`` checks.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from framework.runtime.task_record import Task
from framework.runtime.tasks import TaskStore
from tests.conftest import NAP, NAPPER, run_ca, write_project
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

LEASE_S = 3.0
SETTLED_WITHIN = LEASE_S * 4 / 3
"""The documented bound: the lease, plus at most a third of it until the next look."""
SLACK_S = 3.0
"""For a loaded machine: the kill itself, B's query, the GetTask polling."""


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess, str]]:
    with fresh_database("failover") as url:
        started: list[ServerProcess] = []
        try:
            for name in ("a", "b"):
                root = write_project(
                    tmp_path / name,
                    {
                        "ca.yaml": f"default_agent: napper\nstore: {{url: {url!r}}}\n",
                        "agents/napper.yaml": NAPPER,
                        "tools/nap.py": NAP,
                    },
                )
                env = {"CA_TASK_LEASE": f"{LEASE_S:g}s"}
                started.append(start_serve(root, env=env, host=f"replica-{name}"))
            yield started[0], started[1], url
        finally:
            for served in started:
                served.stop()


def _message(text: str) -> dict[str, Any]:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}}


def _insert_row(url: str, task_id: str, context: str, status: dict[str, Any], last_updated: str | None) -> None:
    """An a2a-sdk row of the anonymous caller's new task, as its server wrote it (``last_updated`` None:
    as servers did before they stamped every row)."""
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO public.tasks (id, context_id, kind, owner, last_updated, status, artifacts, history,"
            " protocol_version) VALUES (%s, %s, 'task', 'anonymous', %s, %s, '[]', '[]', '1.0')",
            (task_id, context, last_updated, json.dumps(status)),
        )


def _a2a_row(url: str, task_id: str) -> dict[str, Any]:
    """The status a2a-sdk's DatabaseTaskStore row holds (what its own GetTask would read)."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT status FROM public.tasks WHERE id = %s", (task_id,)).fetchone()
    assert row is not None, f"no A2A row for task {task_id}"
    status = row[0]
    return json.loads(status) if isinstance(status, str) else dict(status)


def test_a_task_of_a_killed_replica_ends_failed_on_the_other(
    replicas: tuple[ServerProcess, ServerProcess, str],
) -> None:
    a, b, url = replicas
    store = TaskStore.open(b.root, url=url)
    try:
        task, caller, dropped = _napping_on(a, store)
        assert task.owner_host == "replica-a", task  # A's own host name: B cannot look at its pid
        time.sleep(0.5)  # into the tool's 20 s nap
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        killed = time.monotonic()
        seen: list[str] = []
        while True:
            answer = b.rpc("GetTask", {"id": task.id}, agent="napper")["result"]
            seen.append(answer["status"]["state"])
            if seen[-1] != "TASK_STATE_WORKING" or time.monotonic() - killed > SETTLED_WITHIN + 30:
                break
            time.sleep(0.1)
        settled_after = time.monotonic() - killed
        caller.join(timeout=30)
        record = store.get(task.id)
    finally:
        store.close()
    assert seen[-1] == "TASK_STATE_FAILED", (seen[-1], b.output())
    assert set(seen) == {"TASK_STATE_WORKING", "TASK_STATE_FAILED"}, seen  # working, then failed: nothing else
    assert settled_after < SETTLED_WITHIN + SLACK_S, settled_after
    assert dropped, "A answered although it was killed"
    [text, data] = answer["status"]["message"]["parts"]
    assert "stopped renewing its lease (3 s)" in text["text"], text
    assert "not resumed because a tool call (nap) had started: send the message again" in text["text"], text
    assert data["data"]["error"]["code"] == "run_failed", data
    assert (record.state, record.error) == ("failed", text["text"])
    # a2a-sdk's own row, not only what GetTask derives: B writes it just after the record, within the same bound
    while (row := _a2a_row(url, task.id))["state"] != "TASK_STATE_FAILED" and time.monotonic() - killed < (
        SETTLED_WITHIN + SLACK_S
    ):
        time.sleep(0.1)
    assert row["state"] == "TASK_STATE_FAILED", (row, b.output())
    audit = run_ca("audit", "--json", "--limit", "10000", cwd=b.root)
    assert audit.returncode == 0, audit.stderr
    states = [r["data"].get("state") for r in json.loads(audit.stdout) if r["task_id"] == task.id]
    assert states[-1] == "failed", states
    verified = run_ca("audit", "--verify", cwd=b.root)
    assert verified.returncode == 0 and verified.stdout.startswith("audit log ok: "), verified.stdout + verified.stderr
    b.assert_alive()


def test_a_row_whose_server_died_before_recording_its_task_ends_failed(
    replicas: tuple[ServerProcess, ServerProcess, str],
) -> None:
    _, b, url = replicas
    task_id, context = str(uuid.uuid4()), str(uuid.uuid4())
    status = {"state": "TASK_STATE_SUBMITTED", "timestamp": "2026-01-01T00:00:00Z"}
    _insert_row(url, task_id, context, status, "2026-01-01 00:00:00")  # its server died before the record
    deadline = time.monotonic() + SETTLED_WITHIN + SLACK_S
    while (row := _a2a_row(url, task_id))["state"] == "TASK_STATE_SUBMITTED" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert row["state"] == "TASK_STATE_FAILED", (row, b.output())
    answer = b.rpc("GetTask", {"id": task_id}, agent="napper")["result"]
    assert answer["status"]["state"] == "TASK_STATE_FAILED", answer
    assert "send the message again" in answer["status"]["message"]["parts"][0]["text"], answer


def test_the_row_a_killed_blocking_send_left_follows_its_record_ended_elsewhere(
    replicas: tuple[ServerProcess, ServerProcess, str],
) -> None:
    # A blocking SendMessage shows no `working`: its row is the one a2a-sdk saved at the start, until the
    # end. A dies mid-run and the record is ended by someone else (here, directly, before the lease
    # runs out): B's sweep must still bring the row to the record's end once it is a lease old.
    # Beside it, a row without a time and without a record (as servers wrote rows before they stamped
    # them): its age is unknown, so it is left alone, and the sweep goes on past it.
    a, b, url = replicas
    undated = str(uuid.uuid4())
    _insert_row(url, undated, str(uuid.uuid4()), {"state": "TASK_STATE_SUBMITTED"}, None)
    store = TaskStore.open(b.root, url=url)
    try:
        task, caller, dropped = _napping_on(a, store)
        assert _a2a_row(url, task.id)["state"] == "TASK_STATE_SUBMITTED"
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        store.update(task.id, state="failed", error="ended by the test while its replica was down")
        ended = time.monotonic()
        caller.join(timeout=30)
    finally:
        store.close()
    while (row := _a2a_row(url, task.id))["state"] == "TASK_STATE_SUBMITTED" and time.monotonic() - ended < (
        SETTLED_WITHIN + SLACK_S
    ):
        time.sleep(0.1)
    assert row["state"] == "TASK_STATE_FAILED", (row, b.output())
    assert "ended by the test" in row["message"]["parts"][0]["text"], row
    assert dropped, "A answered although it was killed"
    assert _a2a_row(url, undated)["state"] == "TASK_STATE_SUBMITTED"
    assert "looking for orphaned tasks failed" not in b.output(), b.output()


def _napping_on(server: ServerProcess, store: TaskStore) -> tuple[Task, threading.Thread, list[BaseException]]:
    """A blocking SendMessage to the napper of ``server``, sent from a thread, once its task runs there:
    the task, the thread, and (once the thread is joined) what the connection gave when the server died."""
    dropped: list[BaseException] = []

    def send() -> None:
        try:
            server.rpc("SendMessage", _message("nap"), agent="napper")
        except (httpx.TransportError, AssertionError) as exc:  # killed under it: the connection drops
            dropped.append(exc)

    caller = threading.Thread(target=send)
    caller.start()
    deadline = time.monotonic() + 60
    while not (running := [t for t in store.list() if t.state == "working"]):
        assert time.monotonic() < deadline, f"the task never started running on {server.root.name}"
        time.sleep(0.05)
    [task] = running
    return task, caller, dropped
