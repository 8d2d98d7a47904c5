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
from tests.conftest import NAP, ProjectFactory

ECHO = """
name: echo
profile: autonomous
tools:
  - python: tools/nap.py:nap
"""


@pytest.fixture
def root(make_project: ProjectFactory) -> Path:
    return make_project({"agents/echo.yaml": ECHO, "tools/nap.py": NAP})


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
