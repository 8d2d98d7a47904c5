"""Two `ca serve` replicas on separate project folders, one PostgreSQL ``store.url``: the task records are shared.

Each replica is a real ``ca serve`` process (as on two hosts: nothing of ``.ca/`` is shared), the
database is this module's own (created and dropped; the tests skip with the reason when no
PostgreSQL answers). A task running on A is canceled through B and A's run really stops; a task
of A waiting for approval is decided on B exactly once.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.runtime.tasks import TaskStore
from tests.conftest import NAP, NAPPER, SIDE_EFFECT, write_project, writer_agent
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, serving

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with fresh_database("replicas") as url:
        yield url


@pytest.fixture
def replicas(tmp_path: Path, postgres: str) -> Iterator[list[ServerProcess]]:
    roots = [
        write_project(
            tmp_path / name,
            {
                "ca.yaml": f"default_agent: napper\nstore: {{url: {postgres!r}}}\n",
                "agents/napper.yaml": NAPPER,
                "tools/nap.py": NAP,
                "agents/writer.yaml": writer_agent(file=str(tmp_path / "effects.log")),
                "tools/side.py": SIDE_EFFECT,
            },
        )
        for name in ("a", "b")
    ]
    with serving(*roots) as started:
        yield started


def _message(text: str, **ids: str) -> dict[str, Any]:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **ids}}


def _running(store: TaskStore, agent: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        working = [t for t in store.list() if t.agent == agent and t.state == "working"]
        if working:
            return working[0].id
        time.sleep(0.1)
    pytest.fail(f"no {agent} task started running")


def test_a_task_running_on_a_is_canceled_through_b(replicas: list[ServerProcess], postgres: str) -> None:
    a, b = replicas
    store = TaskStore.open(a.root, url=postgres)
    answers: list[dict[str, Any]] = []
    try:
        caller = threading.Thread(target=lambda: answers.append(a.rpc("SendMessage", _message("nap"), agent="napper")))
        caller.start()
        task_id = _running(store, "napper")
        time.sleep(0.5)  # into the tool's nap
        asked = time.monotonic()
        canceled = b.rpc("CancelTask", {"id": task_id}, agent="napper")
        while not (a.root / "nap-interrupted").exists() and time.monotonic() - asked < 10:
            time.sleep(0.02)
        stopped_after = time.monotonic() - asked
        caller.join(timeout=30)
        record = store.get(task_id)
    finally:
        store.close()
    assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
    assert (a.root / "nap-interrupted").exists(), (
        f"A's run went on: the tool was never interrupted ({record})\n--- A\n{a.output()}\n--- B\n{b.output()}"
    )
    assert stopped_after < 2.0, stopped_after  # A polls the shared record: its run stops within about a second
    assert record.state == "canceled"
    [answer] = answers
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_CANCELED", answer
    a.assert_alive()
    b.assert_alive()


def test_a_task_of_a_waiting_for_approval_is_approved_on_b_exactly_once(
    replicas: list[ServerProcess], tmp_path: Path
) -> None:
    a, b = replicas
    paused = a.rpc("SendMessage", _message("go"), agent="writer")["result"]["task"]
    assert paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", paused
    ids = {"taskId": paused["id"], "contextId": paused["contextId"]}
    approved = b.rpc("SendMessage", _message("approve", **ids), agent="writer")
    assert approved["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", approved
    again = a.rpc("SendMessage", _message("approve", **ids), agent="writer")  # decided already, on the other replica
    assert "terminal state" in again["error"]["message"], again
    kept = b.rpc("GetTask", {"id": paused["id"]}, agent="writer")["result"]
    assert kept["status"]["state"] == "TASK_STATE_COMPLETED", kept  # the refused message changed nothing
    assert (tmp_path / "effects.log").read_text() == "hello\n"  # the side effect ran once
