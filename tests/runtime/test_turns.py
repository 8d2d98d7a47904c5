"""The turns of a conversation, in-process: the wait limit's clear, retryable refusal, and a turn
left behind by a killed process that does not hold its conversation."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from framework.runtime.events import RunEvent, RunFinished
from framework.runtime.runtime import Runtime
from framework.runtime.stores import state_dir
from framework.spec import load_project
from tests.conftest import NAP, SIDE_EFFECT, ProjectFactory, writer_agent

ECHO = """
name: echo
profile: autonomous
tools:
  - python: tools/nap.py:nap
"""


@pytest.fixture
def root(make_project: ProjectFactory) -> Path:
    return make_project(
        {
            "agents/echo.yaml": ECHO,
            "tools/nap.py": NAP,
            "agents/writer.yaml": writer_agent(),
            "tools/side.py": SIDE_EFFECT,
        }
    )


async def _last(events: list[RunEvent]) -> RunFinished:
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last


def test_a_message_that_outwaits_the_limit_fails_retryable_and_runs_when_sent_again(root: Path) -> None:
    async def main() -> None:
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)
            rt.turns.wait = 0.3

            async def send(text: str) -> RunFinished:
                return await _last([e async for e in rt.send("echo", text, conversation="c1")])

            first = asyncio.create_task(send('@tool nap {"seconds": 2}\nthe long one'))
            await asyncio.sleep(0.2)
            busy = await send("the impatient one")
            assert busy.state == "failed"
            assert busy.failure is not None and busy.failure.code == "conversation_busy"
            assert "busy" in busy.error and "send it again later" in busy.error
            assert rt.tasks.get(busy.task_id).state == "failed"
            assert "You said: the long one" in (await first).output
            again = await send("the impatient one")
            assert again.state == "completed" and "You said: the impatient one" in again.output

    asyncio.run(main())


def test_a_turn_left_by_a_killed_process_does_not_hold_its_conversation(root: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)
            rt.turns.wait = 2
            with sqlite3.connect(state_dir(root) / "tasks.db") as db:
                db.execute(
                    "INSERT INTO turns (conversation, task_id, pid, started_at) VALUES ('c1', 'lost', ?, 'then')",
                    (dead_pid,),
                )
            done = await _last([e async for e in rt.send("echo", "after the crash", conversation="c1")])
            assert done.state == "completed" and "You said: after the crash" in done.output

    asyncio.run(main())


def test_a_new_message_to_a_conversation_waiting_for_a_decision_is_still_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(root)  # the python tool appends to a path relative to the working directory

    async def main() -> None:
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)
            paused = await _last([e async for e in rt.send("writer", "go", conversation="c1")])
            assert paused.state == "input-required"
            refused = await _last([e async for e in rt.send("writer", "again", conversation="c1")])
            assert refused.state == "failed" and "answer it before sending a new message" in refused.error
            done = await _last([e async for e in rt.decide(paused.task_id, {"decision": "approve"})])
            assert done.state == "completed"
            assert (root / "effects.log").read_text() == "hello\n"

    asyncio.run(main())


def test_a_decision_whose_conversation_stays_busy_fails_the_task_without_running_it(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(root)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    async def main() -> None:
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)
            rt.turns.wait = 0.3
            paused = await _last([e async for e in rt.send("writer", "go", conversation="c1")])
            with sqlite3.connect(state_dir(root) / "tasks.db") as db:  # another live process's turn
                db.execute(
                    "INSERT INTO turns (conversation, task_id, pid, started_at) VALUES ('c1', 'theirs', ?, 'now')",
                    (holder.pid,),
                )
            done = await _last([e async for e in rt.decide(paused.task_id, {"decision": "approve"})])
            assert done.state == "failed" and done.failure is not None
            assert done.failure.code == "conversation_busy"
            assert rt.tasks.get(paused.task_id).state == "failed"
            assert not (root / "effects.log").exists()

    try:
        asyncio.run(main())
    finally:
        holder.kill()
        holder.wait()
