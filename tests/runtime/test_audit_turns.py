"""When a governed run's audit records reach the disk: a model turn that asks for tools is written
together with the first call's ``tool.call``, before that tool runs; nothing a run held is lost
when the run ends in between."""

from __future__ import annotations

import asyncio
import json
import re
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from framework.runtime.audit import AuditLog
from framework.runtime.events import RunEvent, RunFinished, ToolCallFinished, ToolCallStarted
from framework.runtime.governance.middleware import GovernanceMiddleware
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import ProjectFactory

PEEK = '''
import json
import sqlite3


def peek() -> str:
    """The kinds of the audit records on disk now, oldest first."""
    with sqlite3.connect({path!r}) as conn:
        return json.dumps([kind for (kind,) in conn.execute("SELECT kind FROM audit ORDER BY seq")])
'''

PEEKER = """
    name: peeker
    model: offline
    profile: autonomous
    tools: [{python: "tools/peek.py:peek"}]
"""


def peeker(make_project: ProjectFactory, tmp_path: Path) -> Path:
    return make_project(
        {"tools/peek.py": PEEK.format(path=str(tmp_path / ".ca" / "audit.db")), "agents/peeker.yaml": PEEKER}
    )


def run(root: Path, text: str, *, statements: list[str] | None = None) -> list[RunEvent]:
    async def go() -> list[RunEvent]:
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)
            if statements is not None:
                rt.audit._store._sqlite.set_trace_callback(statements.append)  # type: ignore[union-attr]
            return [e async for e in rt.send("peeker", text, conversation="c1")]

    return asyncio.run(go())


def governed(kinds: list[str]) -> list[str]:
    """The records governance wrote, without the task's state changes."""
    return [kind for kind in kinds if kind != "task.state"]


def test_a_model_turn_asking_for_a_tool_is_on_disk_with_its_tool_call_before_the_tool_runs(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root = peeker(make_project, tmp_path)
    events = run(root, "look twice\n@tool peek {}\n@tool peek {}")
    assert isinstance(events[-1], RunFinished) and events[-1].state == "completed"
    seen = [governed(json.loads(e.result)) for e in events if isinstance(e, ToolCallFinished)]
    assert seen == [
        ["model.call", "tool.call"],
        ["model.call", "tool.call", "tool.result", "model.call", "tool.call"],
    ]
    kinds = [r.kind for r in AuditLog.open(root).query()]
    assert governed(kinds)[-3:] == ["tool.call", "tool.result", "model.call"]  # the answer's turn, after the end
    assert AuditLog.open(root).verify().ok


def test_a_model_turn_and_the_tool_call_it_asked_for_commit_in_one_transaction(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root = peeker(make_project, tmp_path)
    statements: list[str] = []
    run(root, "look\n@tool peek {}", statements=statements)
    transactions: list[list[str]] = []
    for sql in statements:
        if sql == "BEGIN IMMEDIATE":
            transactions.append([])
        elif found := re.search(r"'(model\.call|tool\.call|tool\.result|task\.state)'", sql):
            transactions[-1].append(found.group(1))
    written = [kinds for kinds in transactions if governed(kinds)]
    assert written == [["model.call", "tool.call"], ["tool.result"], ["model.call"]]


def test_a_run_canceled_after_its_model_asked_for_a_tool_still_writes_that_model_turn(
    make_project: ProjectFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool node never comes to write the turn (here it waits forever): the run's end does."""
    root = peeker(make_project, tmp_path)
    reached = asyncio.Event()

    async def stuck(self: GovernanceMiddleware, request: object, handler: object) -> object:
        reached.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(GovernanceMiddleware, "awrap_tool_call", stuck)

    async def go() -> list[RunEvent]:
        events: list[RunEvent] = []
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)

            async def consume() -> None:
                async for event in rt.send("peeker", "look\n@tool peek {}", conversation="c1"):
                    events.append(event)

            task = asyncio.create_task(consume())
            await asyncio.wait_for(reached.wait(), 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        return events

    events = asyncio.run(go())
    assert any(isinstance(e, ToolCallStarted) for e in events)
    kinds = governed([r.kind for r in AuditLog.open(root).query()])
    assert kinds == ["model.call"]
    assert AuditLog.open(root).verify().ok
