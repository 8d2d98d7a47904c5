"""Hot reload in the IDE: ``ca run --stdio --reload`` driven by the official ACP SDK client.

Real file edits in a temporary project while a session is open: the session goes on with the
new version, a new skill is re-announced as a slash command, and a bad edit is shown to the user
at the start of their next prompt while the last good version keeps answering. Every message the
agent sends is recorded in wire order by an SDK stream observer; waits poll it with a deadline.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.helpers import text_block
from acp.interfaces import Client as ClientProtocol
from acp.meta import PROTOCOL_VERSION
from acp.schema import ClientCapabilities, DeniedOutcome, Implementation, RequestPermissionResponse
from acp.stdio import spawn_agent_process

from tests.conftest import CA, REPO, ProjectFactory

pytestmark = pytest.mark.e2e

T = TypeVar("T")

DEADLINE = 20.0


def scripted(replies: list[str], skills: str = "[explain]") -> str:
    quoted = ", ".join(f'"{r}"' for r in replies)
    return f"""
        name: helper
        description: Helps
        skills: {skills}
        model:
          provider: scripted
          replies: [{quoted}]
    """


EXPLAIN = """
    id: explain
    name: Explain a file
    description: Explain what a file does
"""

TIDY = """
    id: tidy
    name: Tidy up
    description: Tidy the project
"""


def save(path: Path, text: str, *, atomic: bool = True) -> None:
    """Save like an editor: a new file renamed over the old one, or a plain write in place."""
    content = textwrap.dedent(text).lstrip("\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    if atomic:
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        temp.write_text(content, encoding="utf-8")
        os.replace(temp, path)
    else:
        path.write_text(content, encoding="utf-8")


@pytest.fixture
def project(make_project: ProjectFactory) -> Path:
    return make_project(
        {
            "ca.yaml": "default_agent: helper\n",
            "agents/helper.yaml": scripted(["one v1", "two v1", "three v1"]),
            "skills/explain.yaml": EXPLAIN,
        }
    )


def run(coro: Coroutine[Any, Any, T], timeout: float = 90) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Client:
    """Answers any permission request with "cancelled"; updates are read from the wire log."""

    async def request_permission(self, *args: Any, **kwargs: Any) -> RequestPermissionResponse:
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Agent:
    conn: ClientSideConnection
    root: Path
    events: list[dict[str, Any]] = field(default_factory=list)

    def observe(self, event: StreamEvent) -> None:
        if event.direction == StreamDirection.INCOMING:
            self.events.append(event.message)

    def updates(self, session: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.events
            if m.get("method") == "session/update"
            and m["params"]["sessionId"] == session
            and (kind is None or m["params"]["update"]["sessionUpdate"] == kind)
        ]

    def commands(self, session: str) -> list[list[str]]:
        """Every available_commands_update of the session, as lists of command names."""
        return [[c["name"] for c in u["availableCommands"]] for u in self.updates(session, "available_commands_update")]

    async def wait_for(self, predicate: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; last messages: {self.events[-3:]}")
            await asyncio.sleep(0.01)

    async def start(self) -> str:
        await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="tests", version="0"),
        )
        session = str((await self.conn.new_session(cwd=str(self.root), mcp_servers=[])).session_id)
        await self.wait_for(lambda: bool(self.commands(session)), "the first available_commands_update")
        return session

    async def prompt(self, session: str, text: str) -> tuple[str, list[dict[str, Any]]]:
        """The stop reason and the updates of this turn, in order."""
        before = len(self.updates(session))
        response = await self.conn.prompt(session_id=session, prompt=[text_block(text)])
        return str(response.stop_reason), self.updates(session)[before:]


def said(turn: list[dict[str, Any]]) -> str:
    return "".join(u["content"]["text"] for u in turn if u["sessionUpdate"] == "agent_message_chunk")


@asynccontextmanager
async def agent(root: Path) -> AsyncIterator[Agent]:
    """``ca run --stdio --reload`` in ``root`` with the SDK client; stderr goes to a file."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryFile() as stderr:
        recorder: list[Agent] = []
        try:
            async with (
                spawn_agent_process(
                    cast(ClientProtocol, Client()),  # implements what these tests need of the Protocol
                    CA[0],
                    *CA[1:],
                    "run",
                    "--stdio",
                    "--reload",
                    cwd=root,
                    env=env,
                    transport_kwargs={"stderr": stderr},
                    observers=[lambda event: recorder[0].observe(event) if recorder else None],
                ) as (conn, _process)
            ):
                recorder.append(Agent(conn, root))
                yield recorder[0]
        except BaseException:
            stderr.seek(0)
            sys.stdout.write("agent stderr (tail):\n" + stderr.read().decode(errors="replace")[-4000:])
            raise


def test_a_session_continues_across_a_reload_with_the_new_version(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            session = await a.start()
            stop, turn = await a.prompt(session, "first")
            assert (stop, said(turn)) == ("end_turn", "one v1")

            announced = len(a.commands(session))
            save(project / "agents/helper.yaml", scripted(["one v2", "two v2", "three v2"]))
            await a.wait_for(lambda: len(a.commands(session)) > announced, "the reload's commands update")

            stop, turn = await a.prompt(session, "second")  # the same conversation: its second reply
            assert (stop, said(turn)) == ("end_turn", "two v2")

    run(main())


def test_adding_a_skill_re_sends_available_commands(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            session = await a.start()
            assert a.commands(session) == [["explain"]]

            save(project / "skills/tidy.yaml", TIDY, atomic=False)
            save(project / "agents/helper.yaml", scripted(["one v1"], skills="[explain, tidy]"))
            await a.wait_for(lambda: a.commands(session)[-1] == ["explain", "tidy"], "tidy among the commands")

            stop, turn = await a.prompt(session, "/tidy")
            assert (stop, said(turn)) == ("end_turn", "one v1")

    run(main())


def test_a_bad_edit_is_shown_on_the_next_prompt_and_the_session_still_answers(project: Path) -> None:
    path = project / "agents/helper.yaml"
    save(path, "name: helper\nskills: [explain]\nmodel: offline\n", atomic=False)  # echoes every prompt

    async def main() -> None:
        async with agent(project) as a:
            session = await a.start()
            stop, turn = await a.prompt(session, "before")
            assert (stop, said(turn)) == ("end_turn", "[helper] You said: before")

            save(path, "name: helper\nskills: [explain\nmodel: offline\n", atomic=False)
            # Nothing tells the IDE a reload failed until it prompts: prompt until the warning shows.
            deadline = time.monotonic() + DEADLINE
            while True:
                stop, turn = await a.prompt(session, "still there?")
                assert stop == "end_turn"
                if "[ca]" in said(turn) or time.monotonic() > deadline:
                    break
                assert said(turn) == "[helper] You said: still there?"
                await asyncio.sleep(0.01)
            first, *rest = turn
            assert first["sessionUpdate"] == "agent_message_chunk"
            warning = first["content"]["text"]
            assert warning.startswith("[ca] the project has errors; still using the last good version")
            assert "agents/helper.yaml:2:9: error:" in warning, warning
            assert said(rest) == "[helper] You said: still there?"  # the last good version answered

            stop, turn = await a.prompt(session, "and again")  # shown before every prompt until fixed
            assert said(turn).startswith("[ca] the project has errors") and said(turn).endswith("You said: and again")

            # The fix: a scripted model whose every reply says so (the conversation has 3+ replies).
            announced = len(a.commands(session))
            save(path, scripted(["fixed"] * 60))
            await a.wait_for(lambda: len(a.commands(session)) > announced, "the reload of the fix")
            stop, turn = await a.prompt(session, "fixed?")
            assert (stop, said(turn)) == ("end_turn", "fixed")

    run(main())
