"""`ca run --stdio` as an ACP agent, end to end: the official ACP SDK client (tests/acp_client.py)
drives a real agent process; the hygiene tests speak raw JSON lines over pipes.

Ordering claims — updates before the answer, replay before the load answer — are checked on
the client's wire log.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from acp.core import RequestError
from acp.helpers import text_block

from tests.acp_client import Agent, Client, Raw, agent, agent_env, initialize_params, run, tool_line
from tests.conftest import ProjectFactory

pytestmark = pytest.mark.e2e

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
        assert caps.mcp_capabilities.http is True and caps.mcp_capabilities.sse is True  # stdio needs no flag
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
    # The cancelled prompt's answer (a busy prompt sent meanwhile was answered before it).
    answered = max(
        i for i, m in enumerate(a.wire.incoming) if "method" not in m and m.get("result") == {"stopReason": "cancelled"}
    )
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
