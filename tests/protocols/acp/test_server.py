"""`ca run --stdio` as an ACP agent, end to end: the official ACP SDK client (agent-client-protocol)
drives a real agent process; the hygiene tests speak raw JSON lines over pipes.

Every message the agent sends is recorded in wire order by an SDK stream observer (the SDK
dispatches notifications as tasks, so a client's own callbacks do not see the wire order);
ordering claims — updates before the answer, replay before the load answer — are checked there.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar, cast

import pytest
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.core import RequestError
from acp.helpers import text_block
from acp.interfaces import Client as ClientProtocol
from acp.meta import PROTOCOL_VERSION
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)
from acp.stdio import spawn_agent_process

from tests.conftest import CA, REPO, ProjectFactory

pytestmark = pytest.mark.e2e

T = TypeVar("T")

CA_YAML = """
version: 1
name: acp-tests
default_agent: helper
defaults:
  model: offline
"""

HELPER = """
version: 1
name: helper
description: Lists, writes and naps
profile: supervised
skills:
  - id: explain
    name: Explain a file
    description: Explain what a file does
    examples: ["Explain README.md"]
  - id: tidy
    name: Tidy up
    description: Tidy the project
tools:
  - fs.list
  - fs.read
  - fs.write
  - python: tools/nap.py:nap
  - python: tools/noisy.py:noisy
capabilities:
  fs: {read: ["**"], write: ["**"]}
"""

NAP = '''
import asyncio


async def nap(seconds: float) -> str:
    """Sleep, then say so."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"
'''

NOISY = '''
import logging
import os
import sys



def noisy(text: str) -> str:
    """Print, log and write to file descriptor 1 (all of it must stay off the protocol stream).
    From here on the whole process logs at DEBUG, to what it believes is standard output."""
    logging.basicConfig(level=logging.DEBUG, stream=sys.__stdout__, force=True)
    print("print:", text)
    sys.stdout.write("sys.stdout: " + text + "\\n")
    sys.__stdout__.write("sys.__stdout__: " + text + "\\n")
    sys.__stdout__.flush()
    os.write(1, ("fd 1: " + text + "\\n").encode())
    logging.getLogger("noisy").debug("debug log: %s", text)
    logging.getLogger("noisy").warning("warning log: %s", text)
    return "made noise"
'''

COUNTER = """
version: 1
name: counter
profile: autonomous
tools: [fs.list]
capabilities:
  fs: {read: ["**"]}
budget: {max_turns: 2}
"""

THRIFTY = """
version: 1
name: thrifty
profile: autonomous
tools: [fs.list]
capabilities:
  fs: {read: ["**"]}
budget: {max_tokens: 20}
"""

CLAUDE = """
version: 1
name: claude
model: anthropic:claude-sonnet-4-0
"""

OPTIONS = ["allow_once", "allow_always", "reject_once", "reject_always"]


INTAKE = """
version: 1
name: intake
kind: workflow
steps:
  - {id: who, ask: {message: "Who is asking?"}}
  - id: card
    artifact:
      name: card
      parts:
        - {text: "Visitor: {{ steps.who.output }}"}
        - data: {visitor: "{{ steps.who.output }}"}
        - file: {name: badge.txt, media_type: text/plain, content: "{{ steps.who.output }}"}
        - file: {name: map.pdf, media_type: application/pdf, url: "https://example.com/map.pdf"}
output: "Welcome, {{ steps.who.output }}"
"""


@pytest.fixture
def project(make_project: ProjectFactory) -> Path:
    return make_project(
        {
            "ca.yaml": CA_YAML,
            "agents/helper.yaml": HELPER,
            "agents/counter.yaml": COUNTER,
            "agents/thrifty.yaml": THRIFTY,
            "agents/claude.yaml": CLAUDE,
            "agents/intake.yaml": INTAKE,
            "tools/nap.py": NAP,
            "tools/noisy.py": NOISY,
            "README.md": "# acp tests\n",
        }
    )


def run(coro: Coroutine[Any, Any, T], timeout: float = 90) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def agent_env(extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """A full environment (the SDK would pass a trimmed one), PYTHONPATH at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "PYTHONPATH": str(REPO), **(extra or {})}


def tool_line(tool: str, **args: Any) -> str:
    return f"@tool {tool} {json.dumps(args)}"


# -- the SDK client ------------------------------------------------------------------------


class Client:
    """An ACP client for tests. Permission requests are answered from ``answers`` in order: an
    option id, ``"cancelled"``, or ``"hold"`` (wait for :meth:`release`). With no answer left it
    answers ``cancelled``, so an unexpected question cannot hang a test (``asked`` records it)."""

    def __init__(self, answers: list[str] | None = None) -> None:
        self.answers = list(answers or [])
        self.asked: list[dict[str, Any]] = []
        self.held: asyncio.Future[str] | None = None
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.asked.append(
            {
                "session": session_id,
                "toolCall": tool_call.model_dump(by_alias=True, exclude_none=True),
                "options": [o.model_dump(by_alias=True, exclude_none=True) for o in options],
            }
        )
        answer = self.answers.pop(0) if self.answers else "cancelled"
        if answer == "hold":
            self.held = asyncio.get_running_loop().create_future()
            answer = await self.held
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=answer))

    def release(self, answer: str) -> None:
        assert self.held is not None and not self.held.done()
        self.held.set_result(answer)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None  # the wire log has every update, in order

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        return ReadTextFileResponse(content="unsaved editor buffer\n")

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        return WriteTextFileResponse()


@dataclass
class Wire:
    """Every JSON-RPC message in both directions, in the order the client saw them."""

    events: list[tuple[StreamDirection, dict[str, Any]]] = field(default_factory=list)

    def observe(self, event: StreamEvent) -> None:
        self.events.append((event.direction, event.message))

    @property
    def incoming(self) -> list[dict[str, Any]]:
        return [m for d, m in self.events if d == StreamDirection.INCOMING]

    def updates(self, session: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.incoming
            if m.get("method") == "session/update"
            and m["params"]["sessionId"] == session
            and (kind is None or m["params"]["update"]["sessionUpdate"] == kind)
        ]

    def request_id(self, method: str, session: str | None = None) -> int:
        """The id of the client's last ``method`` request (for ``session``)."""
        ids = [
            m["id"]
            for d, m in self.events
            if d == StreamDirection.OUTGOING
            and m.get("method") == method
            and "id" in m
            and (session is None or (m.get("params") or {}).get("sessionId") == session)
        ]
        assert ids, f"no {method} request was sent"
        return int(ids[-1])

    def position_of_answer(self, request_id: int) -> int:
        """Index in :attr:`incoming` of the agent's answer to our request ``request_id``."""
        for i, m in enumerate(self.incoming):
            if m.get("id") == request_id and "method" not in m:
                return i
        raise AssertionError(f"no answer to request {request_id}")

    def updates_after(self, position: int, session: str) -> list[dict[str, Any]]:
        return [
            m
            for m in self.incoming[position + 1 :]
            if m.get("method") == "session/update" and m["params"]["sessionId"] == session
        ]

    async def wait_for(self, predicate: Callable[[], object], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; wire: {self.incoming[-5:]}")
            await asyncio.sleep(0.01)


@dataclass
class Agent:
    conn: ClientSideConnection
    wire: Wire
    client: Client
    root: Path
    process: Any

    async def initialize(self, fs: bool = False) -> Any:
        caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs))
        return await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=caps,
            client_info=Implementation(name="tests", version="0"),
        )

    async def new_session(self) -> str:
        response = await self.conn.new_session(cwd=str(self.root), mcp_servers=[])
        return str(response.session_id)

    async def prompt(self, session: str, text: str) -> str:
        response = await self.conn.prompt(session_id=session, prompt=[text_block(text)])
        return str(response.stop_reason)

    def text(self, session: str, since: int = 0) -> str:
        """The agent's reply text in ``session`` (chunks joined), from update number ``since`` on."""
        return "".join(
            u["content"]["text"]
            for u in self.wire.updates(session)[since:]
            if u["sessionUpdate"] == "agent_message_chunk"
        )


@asynccontextmanager
async def agent(
    root: Path, *args: str, client: Client | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[Agent]:
    """``ca run --stdio [ARGS]`` in ``root`` with an SDK client connected; stderr goes to a file."""
    wire = Wire()
    client = client or Client()
    with tempfile.TemporaryFile() as stderr:
        try:
            async with spawn_agent_process(
                cast(ClientProtocol, client),  # not a subclass of the Protocol: see REFERENCE.md
                sys.executable,
                "-m",
                "framework",
                "run",
                "--stdio",
                *args,
                cwd=root,
                env=env if env is not None else agent_env(),
                transport_kwargs={"stderr": stderr},
                observers=[wire.observe],
            ) as (conn, process):
                yield Agent(conn, wire, client, root, process)
        except BaseException:
            stderr.seek(0)
            sys.stdout.write("agent stderr (tail):\n" + stderr.read().decode(errors="replace")[-4000:])
            raise


# -- initialize and sessions -------------------------------------------------------------------


def test_initialize_advertises_what_the_agent_supports(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            started = time.perf_counter()
            result = await a.initialize()
            assert time.perf_counter() - started < 5
            raw = a.wire.incoming[0]["result"]
        assert result.protocol_version == 1
        caps = result.agent_capabilities
        assert caps is not None and caps.load_session is True
        assert caps.prompt_capabilities is not None and caps.prompt_capabilities.embedded_context is True
        assert caps.prompt_capabilities.image is False and caps.prompt_capabilities.audio is False
        assert caps.mcp_capabilities is not None
        assert caps.mcp_capabilities.http is False and caps.mcp_capabilities.sse is False
        assert result.agent_info is not None and result.agent_info.name == "cleveragents" and result.agent_info.version
        assert result.auth_methods == []  # the offline model needs no key
        assert raw["authMethods"] == [] and "mcpCapabilities" in raw["agentCapabilities"]

    run(main())


def test_new_session_has_profiles_as_modes_then_skills_as_commands(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            await a.initialize()
            response = await a.conn.new_session(cwd=str(project), mcp_servers=[])
            session = response.session_id
            assert response.modes is not None
            assert response.modes.current_mode_id == "supervised"  # the agent's profile
            modes = {m.id for m in response.modes.available_modes}
            assert {"autonomous", "manual", "supervised"} <= modes
            await a.wire.wait_for(lambda: a.wire.updates(session, "available_commands_update"), "commands")
            answered = a.wire.position_of_answer(a.wire.request_id("session/new"))
            [announce] = a.wire.updates_after(answered, session)
            commands = announce["params"]["update"]["availableCommands"]
        assert [c["name"] for c in commands] == ["explain", "tidy"]
        assert commands[0]["description"] == "Explain what a file does"
        assert commands[0]["input"] == {"hint": "Explain README.md"}

    run(main())


def test_prompt_streams_the_reply_in_chunks_and_ends_the_turn(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            await a.initialize()
            session = await a.new_session()
            assert await a.prompt(session, "hello there, editor") == "end_turn"
            chunks = a.wire.updates(session, "agent_message_chunk")
            answered = a.wire.position_of_answer(a.wire.request_id("session/prompt", session))
            assert a.wire.updates_after(answered, session) == []
        assert len(chunks) > 1  # streamed, not one block
        assert "".join(c["content"]["text"] for c in chunks) == "[helper] You said: hello there, editor"

    run(main())


def test_a_read_tool_shows_as_tool_call_then_completed_update(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            await a.initialize()
            session = await a.new_session()
            stop = await a.prompt(session, "look\n" + tool_line("fs.list", path="."))
            assert stop == "end_turn"
            kinds = [u["sessionUpdate"] for u in a.wire.updates(session)]
            [call] = a.wire.updates(session, "tool_call")
            [done] = a.wire.updates(session, "tool_call_update")
            text = a.text(session)
        assert a.client.asked == []  # supervised: reads run freely
        assert kinds.index("tool_call") < kinds.index("tool_call_update") < kinds.index("agent_message_chunk")
        assert call["kind"] == "read" and call["status"] in ("pending", "in_progress")
        assert call["title"].startswith("fs.list") and call["rawInput"] == {"path": "."}
        assert call["locations"] == [{"path": str(project.resolve())}]
        assert done["toolCallId"] == call["toolCallId"] and done["status"] == "completed"
        listing = done["content"][0]["content"]["text"]
        assert done["content"][0]["type"] == "content" and "README.md" in listing and "agents/" in listing
        assert "fs.list: " in text and "README.md" in text

    run(main())


# -- approvals -------------------------------------------------------------------------------


def test_write_asks_permission_with_four_options_and_allow_once_runs_it(project: Path) -> None:
    async def main() -> None:
        async with agent(project, client=Client(["allow_once"])) as a:
            await a.initialize()
            session = await a.new_session()
            stop = await a.prompt(session, tool_line("fs.write", path="notes/a.txt", content="written\n"))
            assert stop == "end_turn"
            [asked] = a.client.asked
            [call] = a.wire.updates(session, "tool_call")
            updates = a.wire.updates(session, "tool_call_update")
        assert [o["optionId"] for o in asked["options"]] == OPTIONS
        assert [o["kind"] for o in asked["options"]] == OPTIONS
        assert asked["session"] == session
        assert asked["toolCall"]["toolCallId"] == call["toolCallId"]
        assert asked["toolCall"]["kind"] == "edit" and "fs.write" in asked["toolCall"]["title"]
        assert asked["toolCall"]["rawInput"] == {"path": "notes/a.txt", "content": "written\n"}
        assert call["kind"] == "edit" and call["locations"] == [{"path": str((project / "notes/a.txt").resolve())}]
        assert (project / "notes" / "a.txt").read_text() == "written\n"
        [done] = [u for u in updates if u.get("status") in ("completed", "failed")]
        assert done["status"] == "completed" and done["toolCallId"] == call["toolCallId"]
        [diff] = done["content"]
        assert diff["type"] == "diff" and diff["path"] == str((project / "notes/a.txt").resolve())
        assert diff["newText"] == "written\n" and diff.get("oldText") is None

    run(main())


def test_reject_once_does_not_write_and_the_call_fails(project: Path) -> None:
    async def main() -> None:
        async with agent(project, client=Client(["reject_once"])) as a:
            await a.initialize()
            session = await a.new_session()
            stop = await a.prompt(session, tool_line("fs.write", path="nope.txt", content="x"))
            assert stop == "end_turn"
            assert len(a.client.asked) == 1
            [done] = [u for u in a.wire.updates(session, "tool_call_update") if u.get("status") != "in_progress"]
            text = a.text(session)
        assert done["status"] == "failed" and "rejected" in done["content"][0]["content"]["text"]
        assert not (project / "nope.txt").exists()
        assert "fs.write failed: rejected by the user" in text

    run(main())


def test_allow_always_is_remembered_and_survives_session_load_in_a_new_process(project: Path) -> None:
    async def first() -> str:
        async with agent(project, client=Client(["allow_always"])) as a:
            await a.initialize()
            session = await a.new_session()
            assert await a.prompt(session, tool_line("fs.write", path="one.txt", content="1")) == "end_turn"
            assert len(a.client.asked) == 1
            assert await a.prompt(session, tool_line("fs.write", path="two.txt", content="2")) == "end_turn"
            assert len(a.client.asked) == 1  # nothing asked the second time
            return session

    session = run(first())
    assert (project / "one.txt").read_text() == "1" and (project / "two.txt").read_text() == "2"

    async def second() -> None:
        async with agent(project) as a:  # a client that would answer "cancelled"
            await a.initialize()
            await a.conn.load_session(cwd=str(project), session_id=session, mcp_servers=[])
            assert await a.prompt(session, tool_line("fs.write", path="three.txt", content="3")) == "end_turn"
            assert a.client.asked == []

    run(second())
    assert (project / "three.txt").read_text() == "3"


# -- cancel ------------------------------------------------------------------------------------


def _prompt_task(a: Agent, session: str, text: str) -> asyncio.Task[Any]:
    return asyncio.create_task(a.conn.prompt(session_id=session, prompt=[text_block(text)]))


async def _cancel_and_check(a: Agent, session: str, task: asyncio.Task[Any]) -> None:
    """Cancel; the prompt answers ``cancelled`` within 3 s, and no update of the session follows it."""
    started = time.perf_counter()
    await a.conn.cancel(session_id=session)
    response = await asyncio.wait_for(task, 10)
    assert response.stop_reason == "cancelled"
    assert time.perf_counter() - started < 3, "cancel was not prompt"
    await asyncio.sleep(0.5)  # anything still buffered in the agent would arrive now
    answered = a.wire.position_of_answer(a.wire.request_id("session/prompt", session))
    assert a.wire.updates_after(answered, session) == []


def test_cancel_while_updates_stream_answers_cancelled_after_every_update(project: Path) -> None:
    lines = [tool_line("nap", seconds=0.2) for _ in range(40)]

    async def main() -> None:
        async with agent(project) as a:
            await a.initialize()
            session = await a.new_session()
            task = _prompt_task(a, session, "\n".join(["many naps", *lines]))
            await a.wire.wait_for(lambda: len(a.wire.updates(session, "tool_call_update")) >= 3, "three naps")
            await _cancel_and_check(a, session, task)
            assert len(a.wire.updates(session, "tool_call")) < 40
            # the session goes on
            assert await a.prompt(session, "still there?") == "end_turn"
            assert a.text(session).endswith("You said: still there?")

    run(main())


def test_cancel_during_a_long_tool_is_prompt(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            await a.initialize()
            session = await a.new_session()
            task = _prompt_task(a, session, tool_line("nap", seconds=60))
            await a.wire.wait_for(lambda: a.wire.updates(session, "tool_call"), "the tool call")
            await _cancel_and_check(a, session, task)

    run(main())


def test_cancel_while_a_permission_is_pending_answers_cancelled(project: Path) -> None:
    async def main() -> None:
        async with agent(project, client=Client(["hold"])) as a:
            await a.initialize()
            session = await a.new_session()
            task = _prompt_task(a, session, tool_line("fs.write", path="pending.txt", content="x"))
            await a.wire.wait_for(lambda: a.client.held is not None, "the permission request")
            await _cancel_and_check(a, session, task)
            a.client.release("cancelled")  # what a client does on cancel; the agent has moved on
            await asyncio.sleep(0.2)
            assert not (project / "pending.txt").exists()

    run(main())


def test_the_session_goes_on_after_a_permission_was_cancelled(project: Path) -> None:
    async def main() -> None:
        async with agent(project, client=Client(["cancelled"])) as a:
            await a.initialize()
            session = await a.new_session()
            assert await a.prompt(session, tool_line("fs.write", path="pending.txt", content="x")) == "cancelled"
            assert await a.prompt(session, "after") == "end_turn"

    run(main())


def test_a_second_prompt_on_a_busy_session_gets_a_clear_error(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            await a.initialize()
            session = await a.new_session()
            task = _prompt_task(a, session, tool_line("nap", seconds=60))
            await a.wire.wait_for(lambda: a.wire.updates(session, "tool_call"), "the tool call")
            with pytest.raises(RequestError) as busy:
                await a.prompt(session, "me too")
            assert busy.value.code == -32600 and "busy" in str(busy.value)
            await _cancel_and_check(a, session, task)

    run(main())


def test_a_prompt_from_another_process_waits_for_the_session_s_running_turn(project: Path) -> None:
    opening = "from the first\n" + tool_line("nap", seconds=3)

    async def main() -> None:
        async with agent(project) as first, agent(project) as second:
            await first.initialize()
            await second.initialize()
            session = await first.new_session()
            task = _prompt_task(first, session, opening)
            await first.wire.wait_for(lambda: first.wire.updates(session, "tool_call"), "the tool call")
            await second.conn.load_session(cwd=str(project), session_id=session, mcp_servers=[])
            since = len(second.wire.updates(session))
            assert await second.prompt(session, "from the second") == "end_turn"
            assert (await task).stop_reason == "end_turn"
            assert "You said: from the first" in first.text(session)
            assert second.text(session, since).startswith("[helper] You said: from the second")
        async with agent(project) as third:  # the history holds both turns, one after the other
            await third.initialize()
            await third.conn.load_session(cwd=str(project), session_id=session, mcp_servers=[])
            users = [u["content"]["text"] for u in third.wire.updates(session, "user_message_chunk")]
            assert users == [opening, "from the second"]

    run(main())


# -- load, modes, budgets, auth ------------------------------------------------------------------


def test_session_load_in_a_new_process_replays_the_history_before_answering(project: Path) -> None:
    async def first() -> tuple[str, str, str]:
        async with agent(project) as a:
            await a.initialize()
            session = await a.new_session()
            assert await a.prompt(session, "first message") == "end_turn"
            assert await a.prompt(session, "second\n" + tool_line("fs.list", path=".")) == "end_turn"
            [call] = a.wire.updates(session, "tool_call")
            return session, a.text(session), call["toolCallId"]

    session, said, call_id = run(first())

    async def second() -> None:
        async with agent(project) as a:
            await a.initialize()
            await a.conn.load_session(cwd=str(project), session_id=session, mcp_servers=[])
            answered = a.wire.position_of_answer(a.wire.request_id("session/load"))
            replayed = [
                m["params"]["update"]
                for m in a.wire.incoming[:answered]
                if m.get("method") == "session/update" and m["params"]["sessionId"] == session
            ]
            after = [m["params"]["update"]["sessionUpdate"] for m in a.wire.updates_after(answered, session)]
            assert set(after) <= {"available_commands_update"}
            kinds = [u["sessionUpdate"] for u in replayed]
            users = [u["content"]["text"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"]
            agents = "".join(u["content"]["text"] for u in replayed if u["sessionUpdate"] == "agent_message_chunk")
            assert users == ["first message", "second\n" + tool_line("fs.list", path=".")]
            assert agents == said  # the same words as streamed
            [call] = [u for u in replayed if u["sessionUpdate"] == "tool_call"]
            [done] = [u for u in replayed if u["sessionUpdate"] == "tool_call_update"]
            assert call["toolCallId"] == call_id == done["toolCallId"] and call["kind"] == "read"
            assert done["status"] == "completed" and "README.md" in done["content"][0]["content"]["text"]
            assert kinds.index("user_message_chunk") < kinds.index("tool_call") < kinds.index("tool_call_update")
            # and the conversation goes on where it was
            assert await a.prompt(session, "third") == "end_turn"

    run(second())


def test_an_ask_ends_the_turn_with_its_question_and_the_next_prompt_answers_it(project: Path) -> None:
    async def ask() -> str:
        async with agent(project, "intake") as a:
            await a.initialize()
            session = await a.new_session()
            assert await a.prompt(session, "hello") == "end_turn"
            assert a.text(session) == "Who is asking?"
            return session

    session = run(ask())

    async def answer() -> None:  # a new process: the question waits in the task store
        async with agent(project, "intake") as a:
            await a.initialize()
            await a.conn.load_session(cwd=str(project), session_id=session, mcp_servers=[])
            since = len(a.wire.updates(session))
            assert await a.prompt(session, "Ada") == "end_turn"
            blocks = [
                u["content"] for u in a.wire.updates(session)[since:] if u["sessionUpdate"] == "agent_message_chunk"
            ]
            assert blocks[:4] == [
                {"type": "text", "text": "Visitor: Ada"},
                {
                    "type": "resource",
                    "resource": {
                        "uri": "artifact:card/1",
                        "mimeType": "application/json",
                        "text": '{\n  "visitor": "Ada"\n}',
                    },
                },
                {
                    "type": "resource",
                    "resource": {"uri": "artifact:card/2/badge.txt", "text": "Ada", "mimeType": "text/plain"},
                },
                {
                    "type": "resource_link",
                    "uri": "https://example.com/map.pdf",
                    "name": "map.pdf",
                    "mimeType": "application/pdf",
                },
            ]
            assert "".join(b["text"] for b in blocks[4:]) == "Welcome, Ada"

    run(answer())


def test_unknown_session_load_is_resource_not_found(project: Path) -> None:
    async def main() -> None:
        async with agent(project) as a:
            await a.initialize()
            with pytest.raises(RequestError) as missing:
                await a.conn.load_session(cwd=str(project), session_id="no-such-session", mcp_servers=[])
            assert missing.value.code == -32002

    run(main())


def test_set_mode_switches_the_profile_and_the_gate_follows(project: Path) -> None:
    async def main() -> None:
        async with agent(project, client=Client(["reject_once"])) as a:
            await a.initialize()
            session = await a.new_session()
            await a.conn.set_session_mode(session_id=session, mode_id="autonomous")
            await a.wire.wait_for(lambda: a.wire.updates(session, "current_mode_update"), "current_mode_update")
            assert a.wire.updates(session, "current_mode_update")[-1]["currentModeId"] == "autonomous"
            assert await a.prompt(session, tool_line("fs.write", path="free.txt", content="ok")) == "end_turn"
            assert a.client.asked == []
            assert (project / "free.txt").read_text() == "ok"

            await a.conn.set_session_mode(session_id=session, mode_id="manual")
            await a.wire.wait_for(lambda: len(a.wire.updates(session, "current_mode_update")) == 2, "second update")
            assert a.wire.updates(session, "current_mode_update")[-1]["currentModeId"] == "manual"
            assert await a.prompt(session, tool_line("fs.list", path=".")) == "end_turn"
            [asked] = a.client.asked  # manual asks even for a read
            assert asked["toolCall"]["kind"] == "read"

            with pytest.raises(RequestError) as unknown:
                await a.conn.set_session_mode(session_id=session, mode_id="reckless")
            assert unknown.value.code == -32602 and "autonomous" in str(unknown.value.data or unknown.value)

    run(main())


@pytest.mark.parametrize(("agent_name", "reason"), [("counter", "max_turn_requests"), ("thrifty", "max_tokens")])
def test_a_budget_stop_gives_its_stop_reason(project: Path, agent_name: str, reason: str) -> None:
    lines = [tool_line("fs.list", path=".") for _ in range(5)]

    async def main() -> None:
        async with agent(project, agent_name) as a:
            await a.initialize()
            session = await a.new_session()
            assert await a.prompt(session, "\n".join(["list a lot", *lines])) == reason
            assert len(a.wire.updates(session, "tool_call")) < 5
            assert "Stopped: task budget" in a.text(session)  # the user sees why

    run(main())


def test_a_model_without_its_key_advertises_auth_and_refuses_sessions(project: Path) -> None:
    env = agent_env(drop=("ANTHROPIC_API_KEY",))

    async def main() -> None:
        async with agent(project, "claude", env=env) as a:
            result = await a.initialize()
            [method] = result.auth_methods
            assert "ANTHROPIC_API_KEY" in method.id and "ANTHROPIC_API_KEY" in (method.description or "")
            with pytest.raises(RequestError) as refused:
                await a.new_session()
            assert refused.value.code == -32000
            assert "authentication required" in str(refused.value) and "set ANTHROPIC_API_KEY" in str(refused.value)

    run(main())


def test_a_key_left_empty_in_dotenv_is_missing_for_initialize_as_for_the_session(project: Path) -> None:
    # The editor must learn at initialize what session/new will refuse: both read .env alike.
    (project / ".env").write_text("ANTHROPIC_API_KEY= # paste yours here\n", encoding="utf-8")
    env = agent_env(drop=("ANTHROPIC_API_KEY",))

    async def main() -> None:
        async with agent(project, "claude", env=env) as a:
            result = await a.initialize()
            assert [m.id for m in result.auth_methods] == ["env:ANTHROPIC_API_KEY"]
            with pytest.raises(RequestError) as refused:
                await a.new_session()
            assert refused.value.code == -32000

    run(main())


def test_fs_tools_use_the_editors_files_when_it_offers_them(project: Path) -> None:
    client = Client(["allow_once"])

    async def main() -> None:
        async with agent(project, client=client) as a:
            await a.initialize(fs=True)
            session = await a.new_session()
            text = "\n".join(
                [
                    tool_line("fs.read", path="README.md"),
                    tool_line("fs.write", path="buffer.txt", content="from the agent"),
                    tool_line("fs.write", path="../escape.txt", content="out"),
                ]
            )
            assert await a.prompt(session, text) == "end_turn"
            reply = a.text(session)
        assert client.reads == [str((project / "README.md").resolve())]
        assert client.writes == [(str((project / "buffer.txt").resolve()), "from the agent")]
        assert len(client.asked) == 1  # the write inside the project; the escape is denied before asking
        assert "fs.read: unsaved editor buffer" in reply  # the editor's text, not the file on disk
        assert not (project / "buffer.txt").exists()  # the editor saves it, not the agent
        assert not (project.parent / "escape.txt").exists() and "fs.write failed: denied" in reply

    run(main())


# -- raw protocol hygiene ------------------------------------------------------------------------


class Raw:
    """``ca run --stdio`` on plain pipes, no SDK: JSON lines in and out; stderr to a file.
    ``with Raw(...) as raw``; :meth:`close` ends the session (stdin closed) and gives the exit code."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.root, self.args, self.env = root, args, env or agent_env()
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.next_id = 100
        self.code: int | None = None

    def __enter__(self) -> Raw:
        self.stack = ExitStack()
        self.stderr: IO[bytes] = self.stack.enter_context(tempfile.TemporaryFile())
        self.proc = subprocess.Popen(
            [*CA, "run", "--stdio", *self.args],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            encoding="utf-8",
        )
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            if error is not None:
                sys.stdout.write("agent stderr (tail):\n" + self.stderr_text()[-4000:])
            if self.code is None:
                self.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.stack.close()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, message: dict[str, Any] | str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: Any = None) -> int:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.next_id

    def read(self, timeout: float = 30) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        assert line is not None, "the agent closed stdout"
        self.seen.append(line)
        return dict(json.loads(line))

    def answer(
        self, request_id: Any, timeout: float = 30, on_request: Callable[[dict[str, Any]], Any] | None = None
    ) -> dict[str, Any]:
        """Read until the answer to ``request_id``; the agent's own requests go to ``on_request``."""
        while True:
            message = self.read(timeout)
            if "method" in message and "id" in message:
                assert on_request is not None, f"unexpected request from the agent: {message}"
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": on_request(message)})
            elif "method" not in message and message.get("id") == request_id:
                return message

    def close(self) -> int:
        """Close stdin, wait for the exit; every remaining stdout line goes to ``seen``."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.code = self.proc.wait(timeout=30)
        self.pump.join(timeout=10)
        while not self.lines.empty():
            line = self.lines.get_nowait()
            if line is not None:
                self.seen.append(line)
        return self.code

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")


def assert_json_rpc(line: str) -> None:
    """One stdout line is one JSON-RPC 2.0 request, notification or response."""
    assert line.endswith("\n") and "\n" not in line[:-1], f"not one line: {line!r}"
    message = json.loads(line)
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line
    if "method" in message:
        assert isinstance(message["method"], str), line
        assert "result" not in message and "error" not in message, line
        assert isinstance(message.get("params", {}), dict | list), line
        assert "id" not in message or isinstance(message["id"], int | str), line
    else:
        assert "id" in message, line
        assert ("result" in message) != ("error" in message), line
        if "error" in message:
            error = message["error"]
            assert isinstance(error["code"], int) and isinstance(error["message"], str), line


def initialize_params() -> dict[str, Any]:
    return {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


def test_protocol_errors_get_answers_and_the_session_goes_on(project: Path) -> None:
    with Raw(project) as raw:
        assert raw.answer(raw.request("initialize", initialize_params()))["result"]["protocolVersion"] == 1
        raw.send('{"jsonrpc": "2.0", "id": 7, "method": ')  # cut short
        parse = raw.read()
        assert parse["error"]["code"] == -32700 and parse["id"] is None
        raw.send("[1, 2]")
        assert raw.read()["error"]["code"] == -32600
        unknown = raw.answer(raw.request("session/teleport", {"sessionId": "x"}))
        assert unknown["error"]["code"] == -32601
        no_cwd = raw.answer(raw.request("session/new", {"mcpServers": []}))
        assert no_cwd["error"]["code"] == -32602 and "cwd" in no_cwd["error"]["message"]
        not_object = raw.answer(raw.request("session/new", ["cwd"]))
        assert not_object["error"]["code"] == -32602
        session = raw.answer(raw.request("session/new", {"cwd": str(project), "mcpServers": []}))["result"]["sessionId"]
        bad_prompt = raw.answer(raw.request("session/prompt", {"sessionId": session, "prompt": "not blocks"}))
        assert bad_prompt["error"]["code"] == -32602
        missing = raw.answer(raw.request("session/prompt", {"sessionId": "nope", "prompt": []}))
        assert missing["error"]["code"] == -32002
        raw.send({"jsonrpc": "2.0", "method": "session/unknown_notification", "params": {}})  # no answer
        prompt = [{"type": "text", "text": "still here"}]
        ok = raw.answer(raw.request("session/prompt", {"sessionId": session, "prompt": prompt}))
        assert ok["result"] == {"stopReason": "end_turn"}
        assert raw.close() == 0
    for line in raw.seen:
        assert_json_rpc(line)


def test_a_call_before_initialize_is_an_error_and_initialize_still_works(project: Path) -> None:
    with Raw(project, "--protocol", "acp") as raw:
        early = raw.answer(raw.request("session/new", {"cwd": str(project), "mcpServers": []}))
        assert "error" in early and "initialize" in early["error"]["message"]
        assert raw.answer(raw.request("initialize", initialize_params()))["result"]["agentCapabilities"]["loadSession"]
        assert "result" in raw.answer(raw.request("session/new", {"cwd": str(project), "mcpServers": []}))
        assert raw.close() == 0

    with Raw(project) as auto:  # without --protocol the first message decides; it is not initialize
        assert "error" in auto.answer(auto.request("session/new", {"cwd": str(project), "mcpServers": []}))


def test_invalid_json_as_the_first_line_of_a_forced_acp_session_is_answered(project: Path) -> None:
    with Raw(project, "--protocol", "acp") as raw:
        raw.send("this is not json")
        assert raw.read()["error"]["code"] == -32700
        assert raw.answer(raw.request("initialize", initialize_params()))["result"]["protocolVersion"] == 1
        assert raw.close() == 0


def test_a_full_debug_session_writes_nothing_but_json_rpc_on_stdout(project: Path) -> None:
    env = agent_env(
        {
            "CA_DEBUG": "1",
            "PYTHONVERBOSE": "1",
            "PYTHONDEVMODE": "1",
            "PYTHONASYNCIODEBUG": "1",
            "PYTHONWARNINGS": "always",
            "LANGCHAIN_VERBOSE": "true",
            "LANGCHAIN_DEBUG": "true",
            "LOG_LEVEL": "DEBUG",
            "LOGLEVEL": "DEBUG",
        }
    )
    permissions: list[str] = []

    def allow(message: dict[str, Any]) -> Any:
        assert message["method"] == "session/request_permission"
        permissions.append(message["params"]["toolCall"]["title"])
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}

    with Raw(project, env=env) as raw:
        raw.answer(raw.request("initialize", initialize_params()))
        session = raw.answer(raw.request("session/new", {"cwd": str(project), "mcpServers": []}))["result"]["sessionId"]
        text = "\n".join(
            [
                "make some noise",
                tool_line("noisy", text="NOISE"),
                tool_line("fs.list", path="."),
                tool_line("fs.write", path="debug.txt", content="debug"),
            ]
        )
        prompt = [{"type": "text", "text": text}]
        done = raw.answer(raw.request("session/prompt", {"sessionId": session, "prompt": prompt}), on_request=allow)
        assert done["result"] == {"stopReason": "end_turn"}
        assert len(permissions) == 1 and (project / "debug.txt").read_text() == "debug"
        raw.answer(raw.request("session/set_mode", {"sessionId": session, "modeId": "autonomous"}))
        nap = [{"type": "text", "text": tool_line("nap", seconds=30)}]
        cancelled = raw.request("session/prompt", {"sessionId": session, "prompt": nap})
        while raw.read().get("params", {}).get("update", {}).get("sessionUpdate") != "tool_call":
            pass
        raw.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})
        assert raw.answer(cancelled)["result"] == {"stopReason": "cancelled"}
        raw.send("{oops")
        assert raw.read()["error"]["code"] == -32700
        raw.answer(raw.request("session/load", {"sessionId": session, "cwd": str(project), "mcpServers": []}))
        assert raw.close() == 0
        noise = raw.stderr_text()
    assert len(raw.seen) > 20
    for line in raw.seen:
        assert_json_rpc(line)
    for said in ("print: NOISE", "sys.stdout: NOISE", "sys.__stdout__: NOISE", "fd 1: NOISE", "debug log: NOISE"):
        assert said in noise  # it all went to stderr
