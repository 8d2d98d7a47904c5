"""The MCP servers an editor passes in ACP ``session/new``: the official ACP SDK client drives a real
``ca run --stdio``; the server is the mcp-SDK test server over stdio. Its tools are the agent's
(``client.notes.TOOL``) only when ``capabilities.mcp.from_client`` is true."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from acp.schema import EnvVariable, McpServerStdio, SseMcpServer

from tests.acp_client import Client, agent, run, tool_line
from tests.conftest import REPO, ProjectFactory, free_port

SERVER = REPO / "tests" / "fixtures" / "mcp" / "server.py"


def project(make_project: ProjectFactory, from_client: bool) -> Path:
    return make_project(
        {
            "agents/helper.yaml": f"""
                name: helper
                profile: supervised
                capabilities: {{mcp: {{from_client: {str(from_client).lower()}}}}}
            """
        }
    )


def notes(pids: Path) -> McpServerStdio:
    return McpServerStdio(
        name="notes",
        command=sys.executable,
        args=[str(SERVER)],
        env=[EnvVariable(name="MCP_PID_DIR", value=str(pids))],
    )


def test_an_editor_server_is_used_when_the_agent_takes_client_servers(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root = project(make_project, True)
    pids = tmp_path / "pids"
    pids.mkdir()

    async def main() -> None:
        async with agent(root, "helper", client=Client(["reject_once"])) as a:
            await a.initialize()
            response = await a.conn.new_session(cwd=str(root), mcp_servers=[notes(pids)])
            session = str(response.session_id)
            text = "go\n" + tool_line("client.notes.echo", text="from the editor") + "\n"
            text += tool_line("client.notes.add_note", text="x")
            assert await a.prompt(session, text) == "end_turn"
            updates = a.wire.updates(session, "tool_call_update")
            results = [u["content"][0]["content"]["text"] for u in updates if u.get("content")]
            assert "echo: from the editor" in results, a.text(session)  # read-only: ran without asking
            [asked] = a.client.asked  # add_note has no hints: supervised asks
            assert "wants to run client.notes.add_note" in asked["toolCall"]["title"]

    run(main())
    assert len(list(pids.iterdir())) == 1


def test_an_editor_server_is_not_used_without_from_client(make_project: ProjectFactory, tmp_path: Path) -> None:
    root = project(make_project, False)
    pids = tmp_path / "pids"
    pids.mkdir()

    async def main() -> None:
        async with agent(root, "helper") as a:
            await a.initialize()
            response = await a.conn.new_session(cwd=str(root), mcp_servers=[notes(pids)])
            session = str(response.session_id)
            assert await a.prompt(session, tool_line("client.notes.echo", text="hi")) == "end_turn"
            assert a.wire.updates(session, "tool_call") == []
            assert "cannot call 'client.notes.echo': this agent has no such tool" in a.text(session)

    run(main())
    assert list(pids.iterdir()) == []  # never started


def test_an_editor_sse_server_is_used(make_project: ProjectFactory, tmp_path: Path) -> None:
    root = project(make_project, True)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--sse", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the SSE MCP server did not start"
                time.sleep(0.1)

        async def main() -> None:
            async with agent(root, "helper") as a:
                await a.initialize()
                sse = SseMcpServer(name="notes", url=f"http://127.0.0.1:{port}/sse", headers=[], type="sse")
                response = await a.conn.new_session(cwd=str(root), mcp_servers=[sse])
                session = str(response.session_id)
                assert await a.prompt(session, tool_line("client.notes.echo", text="over sse")) == "end_turn"
                updates = a.wire.updates(session, "tool_call_update")
                results = [u["content"][0]["content"]["text"] for u in updates if u.get("content")]
                assert results == ["echo: over sse"], a.text(session)

        run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_session_load_in_a_new_process_takes_the_editor_servers_it_passes(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root = project(make_project, True)
    pids = tmp_path / "pids"
    pids.mkdir()

    async def first() -> str:
        async with agent(root, "helper") as a:
            await a.initialize()
            response = await a.conn.new_session(cwd=str(root), mcp_servers=[])
            session = str(response.session_id)
            assert await a.prompt(session, "hello") == "end_turn"
            return session

    session = run(first())

    async def second() -> None:
        async with agent(root, "helper") as a:
            await a.initialize()
            await a.conn.load_session(cwd=str(root), session_id=session, mcp_servers=[notes(pids)])
            since = len(a.wire.updates(session))
            assert await a.prompt(session, tool_line("client.notes.echo", text="loaded")) == "end_turn"
            updates = [u for u in a.wire.updates(session)[since:] if u["sessionUpdate"] == "tool_call_update"]
            assert [u["content"][0]["content"]["text"] for u in updates] == ["echo: loaded"]

    run(second())
    assert len(list(pids.iterdir())) == 1
