"""`ca serve` with its A2A tasks in PostgreSQL (``store.url: postgresql://...``), end to end.

Needs a real PostgreSQL server (:mod:`tests.postgres_db`: ``CA_TEST_POSTGRES_URL``, a database
of this module's own on it). Where none answers, the tests skip and say so: a shared database
cannot be faked with SQLite.

Two `ca serve` processes of two projects share the database: a task one of them started is
visible to the other, and a task waiting for approval when its server was SIGKILLed is still
waiting after the restart and can be approved to completion.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SIDE_EFFECT, write_project, writer_agent
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A database of this module's own (its tasks, conversations and audit), dropped after."""
    with fresh_database("a2a_store") as url:
        yield url


def _project(root: Path, url: str) -> Path:
    return write_project(
        root,
        {
            "ca.yaml": f"default_agent: echo\nstore: {{url: {url!r}}}\n",
            "agents/echo.yaml": "name: echo\n",
            "agents/writer.yaml": writer_agent(),
            "tools/side.py": SIDE_EFFECT,
        },
    )


@pytest.fixture
def servers(postgres: str) -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for served in started:
        served.stop()


def _send(served: ServerProcess, agent: str, text: str, **ids: str) -> dict:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **ids}
    answer = served.rpc("SendMessage", {"message": message}, agent=agent)
    assert "result" in answer, answer
    task: dict = answer["result"]["task"]
    return task


def test_two_servers_share_tasks_and_a_paused_task_survives_sigkill(
    tmp_path: Path, postgres: str, servers: list[ServerProcess]
) -> None:
    first_root, other_root = _project(tmp_path / "first", postgres), _project(tmp_path / "other", postgres)
    first = start_serve(first_root)
    servers.append(first)
    other = start_serve(other_root)
    servers.append(other)

    done = _send(first, "echo", "kept in postgres")
    seen = other.rpc("GetTask", {"id": done["id"]})["result"]  # another server, another project
    assert seen["status"]["state"] == "TASK_STATE_COMPLETED"
    assert seen["artifacts"][0]["parts"] == [{"text": "[echo] You said: kept in postgres"}]
    listed = other.rpc("ListTasks", {"contextId": done["contextId"]})["result"]["tasks"]
    assert [t["id"] for t in listed] == [done["id"]]

    paused = _send(first, "writer", "go")
    assert paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)

    restarted = start_serve(first_root)
    servers.append(restarted)
    waiting = restarted.rpc("GetTask", {"id": paused["id"]}, agent="writer")["result"]
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert not (first_root / "effects.log").exists()
    approved = _send(restarted, "writer", "approve", taskId=paused["id"], contextId=paused["contextId"])
    assert approved["status"]["state"] == "TASK_STATE_COMPLETED", approved
    assert (first_root / "effects.log").read_text() == "hello\n"
    done_elsewhere = other.rpc("GetTask", {"id": paused["id"]}, agent="writer")["result"]
    assert done_elsewhere["status"]["state"] == "TASK_STATE_COMPLETED"
