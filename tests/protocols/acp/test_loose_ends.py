"""ACP turns that end badly end clearly: a malformed permission answer, a cancel while a tool
runs, the replay of such a cancel, and the fs.write diff preview of a path it must not read.

Each test drives a real ``ca run --stdio`` process (tests/acp_client.py); the task's state is
read back with the real ``ca tasks list --json``.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.acp_client import Agent, Client, Raw, agent, initialize_params, run, tool_line
from tests.conftest import NAP, ProjectFactory, run_ca

pytestmark = pytest.mark.e2e

CA_YAML = """
version: 1
name: acp-loose-ends
default_agent: helper
defaults:
  model: offline
"""

HELPER = """
version: 1
name: helper
profile: supervised
tools:
  - fs.write
  - python: tools/nap.py:nap
capabilities:
  fs: {read: ["**"], write: ["**"]}
"""

SECRET = "the neighbour's secret\n"
PREVIEW_CAP = 256 * 1024


@pytest.fixture
def project(make_project: ProjectFactory) -> Path:
    return make_project({"ca.yaml": CA_YAML, "agents/helper.yaml": HELPER, "tools/nap.py": NAP})


def task_states(root: Path) -> list[str]:
    """The state of every task of the project (``ca tasks list --json``), newest first."""
    listed = run_ca("tasks", "list", "--json", "-p", str(root), cwd=root)
    assert listed.returncode == 0, listed.stderr
    return [task["state"] for task in json.loads(listed.stdout)]


# -- a malformed answer to session/request_permission ------------------------------------------

GARBAGE = {
    "an error that is not an object": {"error": "nope"},
    "a result without outcome": {"result": {"decision": "yes"}},
    "an unknown option": {"result": {"outcome": {"outcome": "selected", "optionId": "allow_forever"}}},
}


def _prompt_answered_with(raw: Raw, reply: dict[str, Any]) -> dict[str, Any]:
    """Ask for a write; answer the permission request with ``reply``; the prompt's answer."""
    raw.answer(raw.request("initialize", initialize_params()))
    session = raw.answer(raw.request("session/new", {"cwd": str(raw.root), "mcpServers": []}))["result"]["sessionId"]
    text = tool_line("fs.write", path="asked.txt", content="x")
    prompt = raw.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    while True:
        message = raw.read(timeout=30)
        if message.get("method") == "session/request_permission":
            raw.send({"jsonrpc": "2.0", "id": message["id"], **reply})
        elif "method" not in message and message.get("id") == prompt:
            return message


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_a_malformed_permission_answer_ends_the_prompt_with_an_error_naming_it(project: Path, kind: str) -> None:
    with Raw(project) as raw:
        answer = _prompt_answered_with(raw, GARBAGE[kind])
        assert raw.close() == 0
    error = answer["error"]
    assert error["code"] == -32602
    assert "session/request_permission" in error["message"]
    assert not (project / "asked.txt").exists()


def test_a_malformed_permission_answer_leaves_the_task_canceled(project: Path) -> None:
    with Raw(project) as raw:
        _prompt_answered_with(raw, GARBAGE["an error that is not an object"])
        assert raw.close() == 0
    assert task_states(project) == ["canceled"]


# -- cancel while a tool runs, and its replay ------------------------------------------------------


async def _cancel_a_nap(a: Agent) -> tuple[str, str]:
    """Start a 20-s nap, cancel it once it runs; (session, tool call id)."""
    await a.initialize()
    session = await a.new_session()
    await a.conn.set_session_mode(session_id=session, mode_id="autonomous")
    task = asyncio.create_task(a.prompt(session, tool_line("nap", seconds=20)))
    await a.wire.wait_for(lambda: a.wire.updates(session, "tool_call"), "the tool call")
    await a.conn.cancel(session_id=session)
    assert await asyncio.wait_for(task, 10) == "cancelled"
    [call] = a.wire.updates(session, "tool_call")
    return session, str(call["toolCallId"])


def test_cancel_during_a_tool_sends_its_final_update_before_the_answer(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            session, call_id = await _cancel_a_nap(a)
            answered = a.wire.position_of_answer(a.wire.request_id("session/prompt", session))
            before = [
                m["params"]["update"]
                for m in a.wire.incoming[:answered]
                if m.get("method") == "session/update" and m["params"]["sessionId"] == session
            ]
        [closed] = [u for u in before if u["sessionUpdate"] == "tool_call_update"]
        assert closed["toolCallId"] == call_id and closed["status"] == "failed"
        assert "cancelled" in closed["content"][0]["content"]["text"]

    run(main())


def test_cancel_during_a_tool_leaves_the_task_canceled(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            await _cancel_a_nap(a)

    run(main())
    assert task_states(project) == ["canceled"]


def test_session_load_replays_a_cancelled_tool_call_as_closed(project: Path) -> None:
    async def cancel() -> tuple[str, str]:
        async with agent(project) as a:
            return await _cancel_a_nap(a)

    session, call_id = run(cancel())

    async def load() -> list[dict[str, Any]]:
        async with agent(project) as a:
            await a.initialize()
            await a.conn.load_session(cwd=str(project), session_id=session, mcp_servers=[])
            return [u for u in a.wire.updates(session) if u.get("toolCallId") == call_id]

    replayed = run(load())
    assert [u["sessionUpdate"] for u in replayed] == ["tool_call", "tool_call_update"]
    assert replayed[-1]["status"] == "failed"


# -- the fs.write diff preview ---------------------------------------------------------------------


def _write_updates(root: Path, path: str) -> list[dict[str, Any]]:
    """Every tool call update of an allowed ``fs.write`` of ``path``."""

    async def main() -> list[dict[str, Any]]:
        async with agent(root, client=Client(["allow_once"])) as a:
            await a.initialize()
            session = await a.new_session()
            assert await a.prompt(session, tool_line("fs.write", path=path, content="new\n")) == "end_turn"
            return [u for u in a.wire.updates(session) if u["sessionUpdate"].startswith("tool_call")]

    return run(main())


def test_a_big_file_is_overwritten_without_sending_its_old_text(project: Path) -> None:
    (project / "big.txt").write_text("x" * (PREVIEW_CAP + 1), encoding="utf-8")
    updates = _write_updates(project, "big.txt")
    assert (project / "big.txt").read_text(encoding="utf-8") == "new\n"
    [done] = [u for u in updates if u.get("status") == "completed"]
    assert all(block["type"] != "diff" for block in done["content"])
    assert "x" * 1000 not in json.dumps(updates)


def test_a_small_file_is_overwritten_with_a_diff_of_its_old_text(project: Path) -> None:
    (project / "small.txt").write_text("old\n", encoding="utf-8")
    [done] = [u for u in _write_updates(project, "small.txt") if u.get("status") == "completed"]
    [diff] = done["content"]
    assert diff["type"] == "diff" and diff["oldText"] == "old\n" and diff["newText"] == "new\n"


class Opens:
    """Whether a file gets opened, by anyone (Linux inotify through libc)."""

    IN_OPEN = 0x20
    IN_NONBLOCK = 0o4000

    def __init__(self, path: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        watch = self.libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN)
        assert watch >= 0, os.strerror(ctypes.get_errno())

    def seen(self) -> bool:
        try:
            return bool(os.read(self.fd, 4096))
        except BlockingIOError:
            return False
        finally:
            os.close(self.fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
@pytest.mark.parametrize("how", ["dot-dot", "symlink"])
def test_a_write_leaving_the_project_opens_nothing_outside_for_its_preview(project: Path, how: str) -> None:
    outside = project.parent / "outside.txt"
    outside.write_text(SECRET, encoding="utf-8")
    if how == "symlink":
        (project / "link.txt").symlink_to(outside)
    path = "../outside.txt" if how == "dot-dot" else "link.txt"

    async def main() -> None:
        async with agent(project) as a:
            await a.initialize()
            session = await a.new_session()
            opens = Opens(outside)
            assert await a.prompt(session, tool_line("fs.write", path=path, content="x")) == "end_turn"
            assert "fs.write failed: denied" in a.text(session)
            assert not opens.seen(), f"the agent opened {outside} for the preview"

    run(main())
    assert outside.read_text(encoding="utf-8") == SECRET


SLOW_TOOL = '''
    import time

    time.sleep(4)  # an import that takes a while (a big library, a model loaded at import)


    def slow(text: str) -> str:
        """Say the text back."""
        return text
'''


def test_session_new_compiles_the_agent_without_stopping_the_other_requests(make_project: ProjectFactory) -> None:
    """session/new compiles the agent (a key unset is the editor's authentication error there), off
    the event loop: while its python tool takes 4 s to import, another request is answered at once."""
    agent_yaml = """
        name: slow
        model: {provider: scripted, replies: [done]}
        tools: [{python: tools/slow.py:slow}]
    """
    root = make_project({"agents/slow.yaml": agent_yaml, "tools/slow.py": SLOW_TOOL})
    with Raw(root, "--protocol", "acp") as raw:
        raw.answer(raw.request("initialize", initialize_params()))
        creating = raw.request("session/new", {"cwd": str(root), "mcpServers": []})
        other = raw.request("no/such/method")
        first = raw.read(timeout=60)
        assert first.get("id") == other and first["error"]["code"] == -32601, first  # before the session
        created = raw.answer(creating, timeout=60)
        assert created["result"]["sessionId"], created
