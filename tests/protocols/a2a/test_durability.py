"""What is on disk when a SendMessage returns: a SIGKILL right after the answer loses nothing.

The answer of a blocking SendMessage is sent only once the task, the conversation and the
audit records of the turn are committed (docs/a2a.md, "What is durable when an answer
returns"): a `ca serve` killed the instant the answer arrives, and started again, shows the
completed task, continues its conversation where it ended, and has the turn's audit records
in a chain that verifies. The second test does it five times in one conversation, through the
official a2a-sdk client, killing the server before the client has even closed its connection.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from a2a.helpers.proto_helpers import get_artifact_text, get_text_parts, new_text_part
from a2a.types import GetTaskRequest, Message, Role, SendMessageRequest, Task, TaskState

from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.a2a_peers import Json, a2a_client, result_of, user_message
from tests.conftest import run_ca, write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

AGENT = """
name: echo
model:
  provider: scripted
  replies: ["first answer", "second answer"]
"""
"""The second reply is given only to a conversation whose checkpoint holds the first one."""


def _send(server_rpc: Json) -> Json:
    task: Json = result_of(server_rpc)["task"]
    return task


def test_a_sigkill_right_after_the_answer_loses_no_task_turn_or_audit_record(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents/echo.yaml": AGENT})
    context = uuid.uuid4().hex
    for round_ in range(2):  # the kill lands at a slightly different moment each time
        first = start_serve(tmp_path)
        try:
            task = _send(first.rpc("SendMessage", {"message": user_message("hello", contextId=f"{context}{round_}")}))
        finally:
            first.stop(signal.SIGKILL)  # at once: no drain, no flush
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"

        second = start_serve(tmp_path)
        try:
            after = result_of(second.rpc("GetTask", {"id": task["id"]}))
            again = _send(second.rpc("SendMessage", {"message": user_message("more", contextId=f"{context}{round_}")}))
            records = result_of(second.rpc("_cleveragents/audit/query", {"taskId": task["id"]}))["records"]
        finally:
            second.stop()
        assert after["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [p["text"] for a in after["artifacts"] for p in a["parts"]] == ["first answer"]
        # The conversation continued from the killed server's last turn: the model saw its answer.
        assert [p["text"] for a in again["artifacts"] for p in a["parts"]] == ["second answer"]
        said = [r["data"]["state"] if r["kind"] == "task.state" else r["kind"] for r in records]
        # The model call's record too, written before the answer left.
        assert said == ["submitted", "working", "model.call", "completed"]

    verified = run_ca("audit", "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


# -- five kills in one conversation, through the official a2a-sdk client -------------------------

KILLS = 5


async def _send_then_kill(server: ServerProcess, text: str, context: str) -> Task:
    """SendMessage through the official client; the server SIGKILLed the instant the answer is read,
    before the client even closes its connection."""
    async with a2a_client(server.url, "echo") as client:
        message = Message(
            message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[new_text_part(text)], context_id=context
        )
        answers = [a async for a in client.send_message(SendMessageRequest(message=message))]
        os.kill(server.proc.pid, signal.SIGKILL)
    [answer] = answers
    return answer.task


async def _get_tasks(server: ServerProcess, ids: list[str]) -> list[Task]:
    async with a2a_client(server.url, "echo") as client:
        return [await client.get_task(GetTaskRequest(id=task_id)) for task_id in ids]


async def _conversation(root: Path, context: str) -> list[tuple[str, str]]:
    """The conversation as its checkpoint holds it, read through the runtime: (message type, text)."""
    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(load_project(root), stack=stack)
        state = await runtime.bundle.graph("echo").aget_state({"configurable": {"thread_id": context}})
    return [(m.type, m.text) for m in state.values.get("messages", [])]


@pytest.mark.timeout(300)  # six `ca serve` starts: a minute on a loaded 2-core machine
def test_five_sigkills_each_the_instant_an_answer_arrives_lose_no_task_turn_or_audit_record(tmp_path: Path) -> None:
    write_project(tmp_path, {"ca.yaml": "default_agent: echo\n", "agents/echo.yaml": "name: echo\n"})  # offline
    context = uuid.uuid4().hex
    texts = [f"message number {n}" for n in range(KILLS)]
    ids: list[str] = []
    for n, text in enumerate(texts):
        server = start_serve(tmp_path)
        try:
            task = asyncio.run(_send_then_kill(server, text, context))
        finally:
            server.stop(signal.SIGKILL)  # already killed: this only reaps it
        assert server.proc.returncode == -signal.SIGKILL, server.output()
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        ids.append(task.id)
        # On disk, with no server running: every turn so far, each message and then its answer.
        turns = [(kind, said) for t in texts[: n + 1] for kind, said in (("human", t), ("ai", _echo(t)))]
        assert asyncio.run(_conversation(tmp_path, context)) == turns

    server = start_serve(tmp_path)
    try:
        found = asyncio.run(_get_tasks(server, ids))
    finally:
        server.stop()
    for task, text in zip(found, texts, strict=True):
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
        assert task.context_id == context
        assert [get_artifact_text(a) for a in task.artifacts] == [_echo(text)]
        assert get_text_parts(list(task.history[0].parts)) == [text]

    listed = run_ca("audit", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    states: dict[str, list[str]] = {task_id: [] for task_id in ids}
    for record in json.loads(listed.stdout):
        if record["kind"] == "task.state":
            states[record["task_id"]].append(record["data"]["state"])
    assert states == {task_id: ["submitted", "working", "completed"] for task_id in ids}
    verified = run_ca("audit", "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _echo(text: str) -> str:
    return f"[echo] You said: {text}"
