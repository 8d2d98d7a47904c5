"""When a governed run's audit records reach the disk: a model turn that asks for tools is held
(``AuditLog.hold``) and committed in the transaction of its first call's ``tool.call``, before
that tool runs; neither a sibling call, a callee's end nor a cancel in between comes before it,
and each ``tool.call`` is on disk before its tool runs."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from framework.runtime.audit import AuditLog
from framework.runtime.events import Paused, RunEvent, RunFinished, ToolCallFinished, ToolCallStarted
from framework.runtime.governance.middleware import GovernanceMiddleware
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import ProjectFactory

FINAL = ("completed", "failed", "canceled", "rejected")

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


def transactions(statements: list[str]) -> list[list[str]]:
    """The kinds of the records each audit transaction wrote, from its statements."""
    written: list[list[str]] = []
    for sql in statements:
        if sql == "BEGIN IMMEDIATE":
            written.append([])
        elif found := re.search(r"'(model\.call|tool\.call|tool\.result|task\.state)'", sql):
            written[-1].append(found.group(1))
    return [kinds for kinds in written if governed(kinds)]


def test_a_model_turn_that_asks_for_a_tool_commits_with_that_tools_call(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root = peeker(make_project, tmp_path)
    statements: list[str] = []
    run(root, "look\n@tool peek {}", statements=statements)
    assert transactions(statements) == [["model.call", "tool.call"], ["tool.result"], ["model.call"]]


def test_side_by_side_calls_of_one_turn_each_find_the_turn_on_disk_before_they_run(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    """Three calls of one model turn, run side by side: whichever is checked first takes the turn's
    record into its transaction, and no call's tool runs before that transaction committed."""
    calls = ", ".join(["{name: peek, args: {}}"] * 3)
    root = make_project(
        {
            "tools/peek.py": PEEK.format(path=str(tmp_path / ".ca" / "audit.db")),
            "agents/peeker.yaml": f"""
                name: peeker
                model: {{provider: scripted, replies: [{{tool_calls: [{calls}]}}, done]}}
                profile: autonomous
                tools: [{{python: "tools/peek.py:peek"}}]
            """,
        }
    )
    statements: list[str] = []
    events = run(root, "look three times", statements=statements)
    assert isinstance(events[-1], RunFinished) and events[-1].state == "completed"
    seen = [governed(json.loads(e.result)) for e in events if isinstance(e, ToolCallFinished)]
    assert len(seen) == 3
    for kinds in seen:
        assert kinds[0] == "model.call" and "tool.call" in kinds
    assert transactions(statements)[0][:2] == ["model.call", "tool.call"]
    assert AuditLog.open(root).verify().ok


def test_a_pause_for_approval_is_shown_after_the_turn_that_asked_for_the_tool_is_on_disk(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    """The call's checks audit nothing before they ask a person: the turn's held record is written
    then, before the pause leaves the run (ACP asks the person at once)."""
    root = make_project(
        {
            "tools/peek.py": PEEK.format(path=str(tmp_path / ".ca" / "audit.db")),
            "agents/peeker.yaml": PEEKER.replace("autonomous", "manual"),
        }
    )
    on_disk: list[list[str]] = []

    async def go() -> list[RunEvent]:
        events: list[RunEvent] = []
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)
            async for event in rt.send("peeker", "look\n@tool peek {}", conversation="c1"):
                if isinstance(event, Paused):
                    on_disk.append(governed(json.loads(_peek(tmp_path))))
                events.append(event)
        return events

    events = asyncio.run(go())
    assert isinstance(events[-1], RunFinished) and events[-1].state == "input-required"
    assert on_disk == [["model.call"]]


def _peek(root: Path) -> str:
    with sqlite3.connect(root / ".ca" / "audit.db") as conn:
        return json.dumps([kind for (kind,) in conn.execute("SELECT kind FROM audit ORDER BY seq")])


def test_a_run_canceled_after_its_model_asked_for_a_tool_still_writes_that_model_turn(
    make_project: ProjectFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool node never comes to its checks (here it waits forever): the turn is on disk already."""
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


def test_a_callee_canceled_after_its_model_asked_for_a_tool_has_that_turn_before_its_end(
    make_project: ProjectFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A callee's end is recorded by its caller's runtime, not by the callee's graph: the callee's model
    turn must be on disk before that record, whatever path writes it."""
    root = make_project(
        {
            "tools/noop.py": 'def noop() -> str:\n    """Nothing."""\n    return "ok"\n',
            "agents/helper.yaml": """
                name: helper
                profile: autonomous
                model: {provider: scripted, replies: [{tool_calls: [{name: noop, args: {}}]}, done]}
                tools: [{python: "tools/noop.py:noop"}]
            """,
            "agents/manager.yaml": """
                name: manager
                model: offline
                profile: autonomous
                tools: [{agent: helper}]
                capabilities: {agents: [helper]}
            """,
        }
    )
    reached = asyncio.Event()
    real = GovernanceMiddleware.awrap_tool_call

    async def stuck_in_helper(self: GovernanceMiddleware, request: Any, handler: Any) -> Any:
        if self.policy.agent.name == "helper":
            reached.set()
            await asyncio.Event().wait()
        return await real(self, request, handler)

    monkeypatch.setattr(GovernanceMiddleware, "awrap_tool_call", stuck_in_helper)

    async def go() -> None:
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)

            async def consume() -> None:
                async for _ in rt.send("manager", '@tool helper {"input": "hi"}', conversation="c1"):
                    pass

            task = asyncio.create_task(consume())
            await asyncio.wait_for(reached.wait(), 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(go())
    helper = [(r.kind, r.data.get("state")) for r in AuditLog.open(root).query() if r.agent == "helper"]
    assert ("model.call", None) in helper
    ended = next(i for i, (kind, state) in enumerate(helper) if kind == "task.state" and state in FINAL)
    assert helper.index(("model.call", None)) < ended


def test_a_tools_result_is_on_disk_before_any_client_is_shown_it(make_project: ProjectFactory, tmp_path: Path) -> None:
    """The result goes out (streamed, stored with the task) the moment the run reports it: its
    ``tool.result`` record must be on disk by then, not held for the next record."""
    root = peeker(make_project, tmp_path)
    on_disk: list[list[str]] = []

    async def go() -> None:
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)
            async for event in rt.send("peeker", "look\n@tool peek {}", conversation="c1"):
                if isinstance(event, ToolCallFinished):
                    with sqlite3.connect(tmp_path / ".ca" / "audit.db") as conn:
                        on_disk.append(
                            governed([kind for (kind,) in conn.execute("SELECT kind FROM audit ORDER BY seq")])
                        )

    asyncio.run(go())
    assert on_disk == [["model.call", "tool.call", "tool.result"]]
