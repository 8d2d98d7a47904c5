"""``ca mcp serve``: the project's agents as an MCP server over stdio, driven by the official
``mcp`` SDK client against the real ``ca`` process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult

from tests.conftest import NAP, NAPPER, REPO, SIDE_EFFECT, ProjectFactory, run_ca, writer_agent
from tests.serving import start_serve

CHATTY = """
name: chatty
description: Answers twice, then says which turn it is
model: {provider: scripted, replies: [first answer, second answer]}
skills:
  - {id: greet, name: Greet, description: Say hello, examples: ["Say hello to Ada"]}
"""


def project(make_project: ProjectFactory) -> Path:
    return make_project(
        {
            "agents/chatty.yaml": CHATTY,
            "agents/writer.yaml": writer_agent(),
            "agents/napper.yaml": NAPPER,
            "tools/side.py": SIDE_EFFECT,
            "tools/nap.py": NAP,
        }
    )


def with_client(
    root: Path, body: Callable[[Client], Awaitable[None]], args: list[str] | None = None, cwd: Path | None = None
) -> None:
    """``args``: after ``ca mcp serve`` (default: ``root``); ``cwd``: where it starts (default: ``root``)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "framework", "mcp", "serve", *([str(root)] if args is None else args)],
        env={"PYTHONPATH": str(REPO)},
        cwd=cwd or root,
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60) as client:
            await body(client)

    asyncio.run(asyncio.wait_for(main(), 120))


def text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def test_agents_are_tools_and_a_conversation_continues_by_context_id(make_project: ProjectFactory) -> None:
    root = project(make_project)

    async def body(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(tools) == ["chatty", "napper", "writer"]
        assert tools["chatty"].description == "Answers twice, then says which turn it is"
        assert tools["chatty"].input_schema["required"] == ["message"]
        first = await client.call_tool("chatty", {"message": "hi"})
        assert not first.is_error and text(first) == "first answer"
        context = first.structured_content["context_id"]
        second = await client.call_tool("chatty", {"message": "again", "context_id": context})
        assert text(second) == "second answer" and second.structured_content["state"] == "completed"
        prompts = (await client.list_prompts()).prompts
        assert [(p.name, p.description) for p in prompts] == [("chatty.greet", "Say hello")]
        prompt = await client.get_prompt("chatty.greet")
        assert "Say hello to Ada" in prompt.messages[0].content.text

    with_client(root, body)
    listed = json.loads(run_ca("tasks", "list", "--json", cwd=root).stdout)
    assert [(t["agent"], t["state"], t["source"]) for t in listed] == [("chatty", "completed", "mcp")] * 2


def test_mcp_serve_finds_the_project_from_a_subfolder_or_takes_p(make_project: ProjectFactory) -> None:
    root = project(make_project)

    async def body(client: Client) -> None:
        assert sorted(t.name for t in (await client.list_tools()).tools) == ["chatty", "napper", "writer"]

    with_client(root, body, args=[], cwd=root / "tools")
    with_client(root, body, args=["-p", str(root)], cwd=root.parent)


def test_an_approval_is_decided_by_a_later_call_with_the_context_id(make_project: ProjectFactory) -> None:
    root = project(make_project)

    async def body(client: Client) -> None:
        waiting = await client.call_tool("writer", {"message": "write"})
        assert not waiting.is_error and waiting.structured_content["state"] == "input-required"
        said = text(waiting)
        assert "The task waits for a person: writer wants to run append" in said
        assert f"ca approve {waiting.structured_content['task_id'][:12]}" in said
        assert not (root / "effects.log").exists()
        context = waiting.structured_content["context_id"]
        pending = json.loads(run_ca("tasks", "list", "--pending", "--json", cwd=root).stdout)
        assert [t["id"] for t in pending] == [waiting.structured_content["task_id"]]  # one task, seen by all
        done = await client.call_tool("writer", {"message": "", "context_id": context, "decision": "approve"})
        assert text(done) == "done" and done.structured_content["state"] == "completed"
        again = await client.call_tool("writer", {"message": "", "context_id": context, "decision": "approve"})
        assert again.is_error and "waits for no decision" in text(again)

    with_client(root, body)
    assert (root / "effects.log").read_text() == "hello\n"


def test_progress_is_notified_and_cancelling_the_call_cancels_the_task(make_project: ProjectFactory) -> None:
    root = project(make_project)
    notes: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    async def body(client: Client) -> None:
        call = asyncio.create_task(client.call_tool("napper", {"message": "nap"}, progress_callback=progress))
        for _ in range(200):
            if notes:
                break
            await asyncio.sleep(0.1)
        assert notes == ["calling nap"]
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        for _ in range(100):
            if (root / "nap-interrupted").exists():
                break
            await asyncio.sleep(0.1)

    with_client(root, body)
    assert (root / "nap-interrupted").exists()
    [task] = json.loads(run_ca("tasks", "list", "--json", cwd=root).stdout)
    assert task["state"] == "canceled"


def test_an_unknown_agent_is_an_error_result(make_project: ProjectFactory) -> None:
    root = project(make_project)

    async def body(client: Client) -> None:
        result = await client.call_tool("nobody", {"message": "hi"})
        assert result.is_error and "no agent 'nobody'; agents: chatty, napper, writer" in text(result)

    with_client(root, body)


def test_ca_serve_answers_mcp_over_streamable_http_behind_its_auth(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    root = project(make_project)
    (root / "ca.yaml").write_text("server: {auth: {bearer_tokens_env: CA_TOKENS}}\n")
    server = start_serve(root, logs=tmp_path, env={"CA_TOKENS": "mcp-token-5150"})
    url = f"{server.url}/mcp"

    async def main() -> None:
        headers = {"Authorization": "Bearer mcp-token-5150"}
        async with Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers))) as client:
            assert sorted(t.name for t in (await client.list_tools()).tools) == ["chatty", "napper", "writer"]
            first = await client.call_tool("chatty", {"message": "hi"})
            assert text(first) == "first answer"
            context = first.structured_content["context_id"]
            second = await client.call_tool("chatty", {"message": "again", "context_id": context})
            assert text(second) == "second answer"

    try:
        asyncio.run(asyncio.wait_for(main(), 120))
        refused = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10)
        assert refused.status_code == 401
        server.assert_alive()
    finally:
        server.stop()
    server.assert_clean_exit()


def elicit_with(answer: ElicitResult, seen: list[str]) -> Any:
    async def callback(ctx: Any, params: Any) -> ElicitResult:
        seen.append(params.message)
        return answer

    return callback


def with_eliciting_client(
    root: Path, callback: Any, body: Callable[[Client], Awaitable[None]], mode: str = "auto"
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "framework", "mcp", "serve", str(root)],
        env={"PYTHONPATH": str(REPO)},
        cwd=root,
    )

    async def main() -> None:
        async with Client(params, read_timeout_seconds=60, elicitation_callback=callback, mode=mode) as client:  # type: ignore[arg-type]
            await body(client)

    asyncio.run(asyncio.wait_for(main(), 120))


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026 input-required round, and a 2025 session
def test_an_approval_is_asked_through_elicitation_when_the_client_answers_them(
    make_project: ProjectFactory, mode: str
) -> None:
    root = project(make_project)
    seen: list[str] = []

    async def body(client: Client) -> None:
        result = await client.call_tool("writer", {"message": "write"})
        assert text(result) == "done" and result.structured_content["state"] == "completed"

    approve = ElicitResult(action="accept", content={"decision": "approve"})
    with_eliciting_client(root, elicit_with(approve, seen), body, mode)
    assert seen == ['writer wants to run append {"file": "effects.log", "text": "hello"}']
    assert (root / "effects.log").read_text() == "hello\n"


def test_a_declined_elicitation_rejects_the_call(make_project: ProjectFactory) -> None:
    root = project(make_project)
    seen: list[str] = []

    async def body(client: Client) -> None:
        result = await client.call_tool("writer", {"message": "write"})
        assert result.structured_content["state"] == "completed"  # the model got the refusal and answered

    with_eliciting_client(root, elicit_with(ElicitResult(action="decline"), seen), body)
    assert len(seen) == 1 and not (root / "effects.log").exists()
    audit = run_ca("audit", cwd=root).stdout
    assert "decision=reject" in audit and "the MCP client answered decline" in audit
