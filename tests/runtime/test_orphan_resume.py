"""Which orphans a server runs again, through the real Runtime (offline models, SQLite): the rules of
``Runtime.settle_orphans``. Each orphan is a task recorded as a server records one, owned by a
process that has exited (a real pid, gone); tests/protocols/a2a/test_resume.py kills real servers."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from framework.runtime.audit import Source
from framework.runtime.events import RunEvent, RunFinished
from framework.runtime.resumes import RESUMES
from framework.runtime.runtime import Runtime
from framework.runtime.task_record import Task
from framework.spec import load_project
from tests.conftest import ProjectFactory

AGENTS = {
    "agents/echo.yaml": "name: echo\nprofile: autonomous\n",
    "agents/flow.yaml": "name: flow\nkind: workflow\nsteps:\n  - {id: pass, agent: echo}\n",
}


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


async def _orphan(
    runtime: Runtime, agent: str, *records: dict[str, Any], source: Source = "a2a-http", masked: bool = False
) -> str:
    """A task of ``agent`` that a process now gone was running, with these ``task.state`` records."""
    task = await runtime.tasks.acreate(agent=agent, conversation=f"c-{agent}-{len(records)}", source=source, input="hi")
    await runtime.tasks.db.aexecute(
        "UPDATE tasks SET state = 'working', owner_pid = ? WHERE id = ?", (_dead_pid(), task.id)
    )
    submitted = {"state": "submitted", **({"masked": True} if masked else {})}
    for data in (submitted, {"state": "working"}, *records):
        await runtime.audit.aappend("task.state", source=source, task_id=task.id, conversation_id=task.conversation,
                                    agent=agent, data=data)  # fmt: skip
    return task.id


class Resumed:
    """A server's resumer: drives each run it is given to its end."""

    def __init__(self) -> None:
        self.runs: dict[str, asyncio.Task[list[RunEvent]]] = {}

    def __call__(self, task: Task, events: AsyncIterator[RunEvent]) -> None:
        async def drive() -> list[RunEvent]:
            return [event async for event in events]

        self.runs[task.id] = asyncio.create_task(drive())


def settle(root: Path, build: Any, *, resumer: Resumed | None) -> dict[str, Task]:
    """Open the project as a server would, make the orphans ``build`` makes, settle them; every task after."""

    async def go() -> dict[str, Task]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), source="a2a-http", stack=stack)
            ids = await build(runtime)
            runtime.resumer = resumer
            await runtime.settle_orphans()
            if resumer is not None and resumer.runs:
                await asyncio.gather(*resumer.runs.values())
            return {name: await runtime.tasks.aget(task_id) for name, task_id in ids.items()}

    return asyncio.run(go())


@pytest.fixture
def root(make_project: ProjectFactory) -> Path:
    return make_project(AGENTS)


def test_an_orphan_that_called_no_tool_runs_again_and_completes(root: Path) -> None:
    resumer = Resumed()

    async def build(runtime: Runtime) -> dict[str, str]:
        return {"echo": await _orphan(runtime, "echo")}

    task = settle(root, build, resumer=resumer)["echo"]
    assert (task.state, task.output) == ("completed", "[echo] You said: hi"), task
    [run] = resumer.runs.values()
    last = run.result()[-1]
    assert isinstance(last, RunFinished) and last.state == "completed", last


def test_orphans_that_may_have_had_an_effect_end_failed_saying_why(root: Path) -> None:
    async def build(runtime: Runtime) -> dict[str, str]:
        tool = await _orphan(runtime, "echo")
        await runtime.audit.aappend(
            "tool.call", source="a2a-http", task_id=tool, agent="echo", data={"tool": "fs.write"}
        )
        resumed = [{"state": "working", "resumed_from": "pid 1 on elsewhere"}] * RESUMES
        return {
            "tool": tool,
            "flow": await _orphan(runtime, "flow"),
            "paused": await _orphan(runtime, "echo", {"state": "input-required"}, {"state": "working"}),
            "resumed": await _orphan(runtime, "echo", *resumed),
            "cli": await _orphan(runtime, "echo", source="cli"),
            "secret": await _orphan(runtime, "echo", masked=True),
        }

    tasks = settle(root, build, resumer=Resumed())
    assert {name: task.state for name, task in tasks.items()} == dict.fromkeys(tasks, "failed")
    why = {name: task.error.split("it was not resumed because ", 1)[1] for name, task in tasks.items()}
    assert why == {
        "tool": "a tool call (fs.write) had started: send the message again",
        "flow": "a workflow is not run again once it started: send the message again",
        "paused": "it had paused for a decision, and what was decided may have run: send the message again",
        "resumed": f"it was resumed {RESUMES} times already and its process stopped each time: send the message again",
        "cli": "a tool may have run halfway: send the message again",
        "secret": "its message held a secret value, which the task record keeps masked: send the message again",
    }


def test_a_runtime_that_is_not_a_server_leaves_a_resumable_orphan_to_one(root: Path) -> None:
    async def build(runtime: Runtime) -> dict[str, str]:
        return {"echo": await _orphan(runtime, "echo"), "flow": await _orphan(runtime, "flow")}

    tasks = settle(root, build, resumer=None)
    assert (tasks["echo"].state, tasks["flow"].state) == ("working", "failed")
    assert settle(root, lambda runtime: _same(tasks), resumer=Resumed())["echo"].state == "completed"


async def _same(tasks: dict[str, Task]) -> dict[str, str]:
    return {name: task.id for name, task in tasks.items()}
