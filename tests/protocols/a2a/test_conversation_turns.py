"""One conversation, one turn at a time: messages sent at once in one ``contextId`` take turns.

A real `ca serve` with an offline agent that naps (a tool call of 0.5 s) before it echoes the
user's text, so concurrent turns would overlap on the conversation's LangGraph thread. Each of
three concurrent SendMessage calls must get the answer to its own message, and the
conversation's history must hold each message followed by its own answer. A second process
(`ca run --session` on the same project) waits for the server's turn to end before its own runs.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NAP, ProjectFactory, run_ca
from tests.serving import ServerProcess, start_serve

Json = dict[str, Any]

ECHO = """
name: echo
profile: autonomous
tools:
  - python: tools/nap.py:nap
"""
"""The offline model: ``@tool nap {...}`` makes it nap, then it answers ``You said: TEXT``."""


def _napping(text: str, seconds: float = 0.5) -> str:
    return f'@tool nap {{"seconds": {seconds}}}\n{text}'


@pytest.fixture
def root(make_project: ProjectFactory) -> Path:
    return make_project({"agents/echo.yaml": ECHO, "tools/nap.py": NAP})


@pytest.fixture
def served(root: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    logs = tmp_path / "logs"
    logs.mkdir()
    server: ServerProcess = start_serve(root, logs=logs)
    yield server
    server.stop()


def _send(server: ServerProcess, context_id: str, text: str, *, blocking: bool = True) -> Json:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "contextId": context_id, "parts": [{"text": text}]}
    params: Json = {"message": message}
    if not blocking:
        params["configuration"] = {"returnImmediately": True}
    answer = server.rpc("SendMessage", params)
    assert "result" in answer, answer
    task: Json = answer["result"]["task"]
    return task


def _reply(task: Json) -> str:
    return "".join(part.get("text", "") for artifact in task.get("artifacts", []) for part in artifact["parts"])


def _history(root: Path, conversation: str) -> list[tuple[str, str]]:
    """The conversation's messages as (kind, text): what its LangGraph thread holds."""
    from framework.runtime.runtime import Runtime
    from framework.spec import load_project

    async def read() -> list[tuple[str, str]]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack)
            graph = runtime.bundle.graph("echo")
            state = await graph.aget_state({"configurable": {"thread_id": conversation}})
            return [(m.type, m.text) for m in state.values["messages"]]

    return asyncio.run(read())


def test_three_concurrent_sends_in_one_context_each_get_their_own_answer(served: ServerProcess) -> None:
    context_id = uuid.uuid4().hex
    texts = [f"message number {i}" for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        tasks = list(pool.map(lambda text: _send(served, context_id, _napping(text)), texts))
    for text, task in zip(texts, tasks, strict=True):
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        assert f"You said: {text}" in _reply(task), (text, _reply(task))


def test_concurrent_turns_leave_each_message_followed_by_its_own_answer(served: ServerProcess, root: Path) -> None:
    context_id = uuid.uuid4().hex
    texts = [f"message number {i}" for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda text: _send(served, context_id, _napping(text)), texts))
    served.stop()
    history = _history(root, context_id)
    asked = [text.splitlines()[-1] for kind, text in history if kind == "human"]
    assert sorted(asked) == texts
    # Each turn is whole: its message, the nap call and its result, then the answer to that message.
    turns = [history[i : i + 4] for i in range(0, len(history), 4)]
    for turn in turns:
        kinds = [kind for kind, _ in turn]
        assert kinds == ["human", "ai", "tool", "ai"], history
        assert f"You said: {turn[0][1].splitlines()[-1]}" in turn[3][1], history


def _state(server: ServerProcess, task_id: str) -> str:
    return str(server.rpc("GetTask", {"id": task_id})["result"]["status"]["state"])


def test_a_message_waiting_for_its_turn_reads_as_submitted_then_completes(served: ServerProcess) -> None:
    context_id = uuid.uuid4().hex
    running = _send(served, context_id, _napping("the first", seconds=3), blocking=False)
    deadline = time.monotonic() + 30
    while _state(served, running["id"]) != "TASK_STATE_WORKING" and time.monotonic() < deadline:
        time.sleep(0.1)
    queued = _send(served, context_id, "the second", blocking=False)
    time.sleep(0.5)
    assert _state(served, queued["id"]) == "TASK_STATE_SUBMITTED"
    deadline = time.monotonic() + 30
    while _state(served, queued["id"]) != "TASK_STATE_COMPLETED" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _state(served, running["id"]) == "TASK_STATE_COMPLETED"
    assert "You said: the second" in _reply(served.rpc("GetTask", {"id": queued["id"]})["result"])


def test_a_second_process_waits_for_the_running_turn_of_its_conversation(served: ServerProcess, root: Path) -> None:
    context_id = uuid.uuid4().hex
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(_send, served, context_id, _napping("from the server", seconds=3))
        time.sleep(1.0)  # the server's turn is napping now
        other = run_ca("run", "echo", "--session", context_id, "--json", "from the terminal", cwd=root)
        task = first.result()
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert "You said: from the server" in _reply(task)
    assert other.returncode == 0, other.stderr
    finished = [json.loads(line) for line in other.stdout.splitlines() if line.strip()][-1]
    assert "You said: from the terminal" in json.dumps(finished), other.stdout
    served.stop()
    kinds = [kind for kind, _ in _history(root, context_id)]
    assert kinds == ["human", "ai", "tool", "ai", "human", "ai"], "the terminal's turn ran inside the server's"
