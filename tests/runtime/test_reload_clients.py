"""A rejected reload leaves the last good version whole, its A2A and MCP client sides included.

The runtime's A2A client (registry credentials) and MCP client (the servers of ``ca.yaml``) are
shared by every bundle. A reload that loads and builds but then fails to compile (here: a python
tool that no longer imports) is rejected, so the version still serving must keep calling
remote agents with its own credentials and start MCP servers from its own declarations, not
from the edit that was refused. Each test drives a Runtime in-process and reloads it by hand.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from framework.protocols.a2a import open_remote
from framework.protocols.mcp import open_mcp
from framework.runtime import reload
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import REPO, ProjectFactory
from tests.driving import finished, results
from tests.fake_agent import FakeAgent
from tests.serving import still_running

pytestmark = pytest.mark.e2e

SERVER = REPO / "tests" / "fixtures" / "mcp" / "server.py"
FINE = '''
def fine() -> str:
    """A tool that imports."""
    return "fine"
'''
BROKEN = "raise ImportError('an edit that does not import')\n" + FINE
"""Valid as a file (``ca validate`` passes it), but its import fails: the reload fails at compile."""
OTHER = {
    "agents/other.yaml": "name: other\ntools:\n  - python: tools/other.py:fine\n",
    "tools/other.py": FINE,
}


@pytest.fixture
def remote() -> Iterator[FakeAgent]:
    fake = FakeAgent()
    fake.card(fake.url + "/")
    fake.answers()
    yield fake
    fake.close()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing between this process and loopback; the values under test come from .env only."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name in ("TEAM_KEY", "NOTES_AT"):
            monkeypatch.delenv(name)


async def _rejected_then_run(
    root: Path, agent: str, edit: dict[str, str], rejected: Callable[[], object] = lambda: None
) -> list[object]:
    """Open a runtime on ``root``, apply ``edit`` with a tool that no longer imports, reload (which
    must be rejected; then ``rejected()``), and run ``agent`` on the version still serving; that run's events."""
    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(load_project(root), stack=stack, remote=open_remote, mcp=open_mcp)
        for path, text in {**edit, "tools/other.py": BROKEN}.items():
            (root / path).write_text(text)
        assert not await reload.apply(runtime), "the edit should have been rejected"
        assert any("an edit that does not import" in d.message for d in runtime.diagnostics), runtime.diagnostics
        rejected()
        return [event async for event in runtime.send(agent, "go", conversation="c1")]


ADD_MILK = [{"tool_calls": [{"name": "notes.add_note", "args": {"text": "milk"}}]}, "done"]


def notebook(make_project: ProjectFactory, notes: Path, *, replies: list[Any] = ADD_MILK, env: str = "") -> Path:
    """A project whose agent ``notebook`` (by default) adds the note "milk" through the test MCP
    server ``notes`` per run; the server writes its notes to ``$NOTES_AT`` (``.env``: ``notes``)."""
    return make_project(
        {
            **OTHER,
            "ca.yaml": f"""
                mcp_servers:
                  notes:
                    command: {sys.executable}
                    args: [{SERVER}]
                    env: {{MCP_NOTES_FILE: "${{NOTES_AT}}"{env}}}
            """,
            ".env": f"NOTES_AT={notes}\n",
            "agents/notebook.yaml": f"""
                name: notebook
                profile: autonomous
                model:
                  provider: scripted
                  replies: {json.dumps(replies)}
                tools:
                  - {{mcp: notes}}
                capabilities:
                  mcp: {{allow: ["notes.*"]}}
            """,
        }
    )


def test_a_rejected_reload_keeps_the_remote_calls_credentials(make_project: ProjectFactory, remote: FakeAgent) -> None:
    root = make_project(
        {
            **OTHER,
            "ca.yaml": f"registries:\n  - {{name: team, url: '{remote.url}', headers_env: {{X-API-Key: TEAM_KEY}}}}\n",
            ".env": "TEAM_KEY=served-key\n",
            "agents/caller.yaml": f"""
                name: caller
                profile: autonomous
                model:
                  provider: scripted
                  replies: [{{tool_calls: [{{name: remote, args: {{input: ping}}}}]}}, done]
                tools:
                  - {{agent: "{remote.url}/", name: remote}}
                capabilities: {{network: {{allow: ["127.0.0.1:{remote.port}"]}}}}
            """,
        }
    )
    # The rejected bundle read the remote card with its own key while it compiled; from then on,
    # every request is the serving version's.
    edit = {".env": "TEAM_KEY=refused-edit-key\n"}
    events = asyncio.run(_rejected_then_run(root, "caller", edit, remote.seen.clear))
    assert finished(events).state == "completed", finished(events)
    [answer] = results(events)
    assert (answer.result, answer.is_error) == (f"pong from {remote.port}", False)
    assert [seen.method for seen in remote.seen] == ["GET", "POST"]  # the card (revalidated), the message
    assert [seen.headers.get("x-api-key") for seen in remote.seen] == ["served-key", "served-key"]


def test_a_rejected_reload_keeps_the_mcp_servers_declarations(make_project: ProjectFactory, tmp_path: Path) -> None:
    served, refused = tmp_path / "served-notes.txt", tmp_path / "refused-notes.txt"
    root = notebook(make_project, served)
    events = asyncio.run(_rejected_then_run(root, "notebook", {".env": f"NOTES_AT={refused}\n"}))
    assert finished(events).state == "completed", finished(events)
    assert [(r.tool, r.is_error) for r in results(events)] == [("notes.add_note", False)]
    assert served.read_text() == "milk\n"
    assert not refused.exists()


def test_an_edited_mcp_declaration_runs_its_own_server_and_the_others_stop(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    """A reload decides which declaration serves: the server a rejected edit started stops with the
    rejection, and after an accepted edit the new declaration's server serves and the old one stops."""
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    pids = tmp_path / "pids"
    pids.mkdir()
    root = notebook(make_project, first, replies=ADD_MILK * 2, env=f', MCP_PID_DIR: "{pids}"')

    async def go() -> None:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack, remote=open_remote, mcp=open_mcp)
            await runtime.bundle.agraph("notebook")  # as ca serve warms up: the server starts
            [served] = still_running(pids)
            (root / ".env").write_text(f"NOTES_AT={second}\n")
            (root / "tools/other.py").write_text(BROKEN)
            assert not await reload.apply(runtime)
            assert runtime.settled is not None
            await runtime.settled
            assert still_running(pids) == {served}, "the rejected edit's server still runs"
            (root / "tools/other.py").write_text(FINE)
            assert await reload.apply(runtime), runtime.diagnostics
            await runtime.settled
            [edited] = still_running(pids)
            assert edited != served
            events = [event async for event in runtime.send("notebook", "go", conversation="c1")]
            assert finished(events).state == "completed", finished(events)

    asyncio.run(go())
    assert second.read_text() == "milk\n"
    assert not first.exists()
    assert still_running(pids) == set()


def test_an_agent_compiled_after_a_rejected_reload_runs_the_tool_as_validated(make_project: ProjectFactory) -> None:
    """The serving version compiles an agent it had not compiled yet (nothing ran it) from the tool
    file as that version validated it, not from an edit the rejected reload read."""
    version = '''
def version() -> str:
    """Which version of this file ran."""
    return "{V}"
'''
    replies = [{"tool_calls": [{"name": "version", "args": {}}]}, "done"]
    root = make_project(
        {
            **OTHER,
            "agents/tooly.yaml": f"""
                name: tooly
                profile: autonomous
                model: {{provider: scripted, replies: {json.dumps(replies)}}}
                tools:
                  - python: tools/version.py:version
            """,
            "tools/version.py": version.replace("{V}", "served"),
        }
    )
    edit = {"tools/version.py": version.replace("{V}", "refused")}
    events = asyncio.run(_rejected_then_run(root, "tooly", edit))
    assert [(r.result, r.is_error) for r in results(events)] == [("served", False)]


def test_a_reload_lets_an_mcp_call_in_progress_finish_on_its_server(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    """A task that started before the reload finishes on its version: the server it is in the middle
    of calling is stopped only once that call ends, not with the reload."""
    first = tmp_path / "first.txt"
    nap = [{"tool_calls": [{"name": "notes.nap", "args": {"seconds": 3}}]}, "rested"]
    root = notebook(make_project, first, replies=nap)

    async def go() -> list[object]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack, remote=open_remote, mcp=open_mcp)
            run = asyncio.ensure_future(_events(runtime.send("notebook", "go", conversation="c1")))
            await asyncio.sleep(1.5)  # the nap has started on the server
            (root / ".env").write_text(f"NOTES_AT={tmp_path / 'second.txt'}\n")
            assert await reload.apply(runtime), runtime.diagnostics
            return await run

    events = asyncio.run(go())
    assert [(r.tool, r.is_error) for r in results(events)] == [("notes.nap", False)], results(events)
    assert finished(events).state == "completed"


async def _events(stream: AsyncIterator[object]) -> list[object]:
    return [event async for event in stream]


def test_a_reload_abandoned_mid_compile_starts_no_mcp_server_afterwards(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    """A newer change cancels a reload whose compile is still importing a slow tool; that compile
    goes on in its thread, and when it reaches the agent's MCP server it must not start it (the
    version it would serve is gone; nothing would stop the server before the next reload)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    root = notebook(make_project, tmp_path / "first.txt", env=f', MCP_PID_DIR: "{pids}"')
    agent = (root / "agents/notebook.yaml").read_text()
    (root / "agents/notebook.yaml").write_text(agent.replace("tools:\n", "tools:\n  - python: tools/other.py:fine\n"))
    slow = "import time\ntime.sleep(3)\n" + FINE

    async def go() -> None:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack, remote=open_remote, mcp=open_mcp)
            await runtime.bundle.agraph("notebook")
            [served] = still_running(pids)
            (root / ".env").write_text(f"NOTES_AT={tmp_path / 'second.txt'}\n")  # another declaration
            (root / "tools/other.py").write_text(slow)
            reloading = asyncio.ensure_future(reload.apply(runtime))
            await asyncio.sleep(1.0)  # its compile is in the slow import
            reloading.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reloading
            await asyncio.sleep(3.5)  # the import has ended; the compile went on to the MCP server
            assert still_running(pids) == {served}

    asyncio.run(go())
