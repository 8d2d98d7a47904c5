"""`ca run --stdio` as editors really start it, through the official ACP SDK client: the model set
in ca.yaml's defaults (initialize's authMethods), an agent process started outside the project
(session/new's cwd), a permission request's title, and a write through the editor's files into a
folder that does not exist yet."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp.core import RequestError

from tests.acp_client import Client, agent, agent_env, run, tool_line
from tests.conftest import ProjectFactory, write_project

pytestmark = pytest.mark.e2e

WRITER = """
name: writer
profile: supervised
tools: [fs.write]
capabilities:
  fs: {write: ["**"]}
"""


def test_a_model_set_in_ca_yaml_defaults_is_found_at_initialize(make_project: ProjectFactory) -> None:
    # As the basic template's README says to set it: the agent file names no model.
    root = make_project(
        {
            "ca.yaml": "default_agent: helper\ndefaults:\n  # the model of every agent\n  model: openai:gpt-4o-mini\n",
            "agents/sub/any-file-name.yaml": "name: helper\n",
        }
    )
    env = agent_env(drop=("OPENAI_API_KEY",))

    async def main() -> None:
        async with agent(root, env=env) as a:
            result = await a.initialize()
            assert [m.id for m in result.auth_methods] == ["env:OPENAI_API_KEY"]
            with pytest.raises(RequestError) as refused:
                await a.new_session()
            assert refused.value.code == -32000 and "OPENAI_API_KEY" in str(refused.value)

    run(main())


def test_a_model_an_agent_inherits_through_extends_is_found_at_initialize(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "defaults:\n  model: offline\n",
            "agents/_base.yaml": "model:\n  provider: anthropic\n  name: claude-sonnet-4-0\n",
            "agents/critic.yaml": "name: critic\nextends: _base.yaml\n",
        }
    )

    async def main() -> None:
        async with agent(root, "critic", env=agent_env(drop=("ANTHROPIC_API_KEY",))) as a:
            assert [m.id for m in (await a.initialize()).auth_methods] == ["env:ANTHROPIC_API_KEY"]
        async with agent(root, "critic", env=agent_env({"ANTHROPIC_API_KEY": "sk-test"})) as a:
            assert (await a.initialize()).auth_methods == []

    run(main())


def test_an_agent_started_outside_the_project_uses_the_sessions_cwd(tmp_path: Path) -> None:
    project = write_project(tmp_path / "project", {"agents/echo.yaml": "name: echo\n", "src/deep/x.txt": "x"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    async def main() -> None:
        async with agent(elsewhere) as a:  # the editor's own folder: no project there
            await a.initialize()
            response = await a.conn.new_session(cwd=str(project / "src" / "deep"), mcp_servers=[])
            session = str(response.session_id)
            assert await a.prompt(session, "hi") == "end_turn"
            assert a.text(session) == "[echo] You said: hi"

    run(main())
    assert (project / ".ca").is_dir() and not (elsewhere / ".ca").exists()


def test_a_cwd_in_no_project_gets_an_error_saying_what_to_configure(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()

    async def main() -> None:
        async with agent(nowhere) as a:
            await a.initialize()
            with pytest.raises(RequestError) as refused:
                await a.conn.new_session(cwd=str(nowhere), mcp_servers=[])
            assert refused.value.code == -32085
            assert "no CleverAgents project here or in a folder above" in str(refused.value.data)
            assert "-p /path/to/project" in str(refused.value.data)

    run(main())


def test_with_p_the_project_is_the_one_named_whatever_the_cwd(tmp_path: Path) -> None:
    named = write_project(tmp_path / "named", {"agents/named.yaml": "name: named\n"})
    other = write_project(tmp_path / "other", {"agents/other.yaml": "name: other\n"})

    async def main() -> None:
        async with agent(tmp_path, "-p", str(named)) as a:
            await a.initialize()
            session = str((await a.conn.new_session(cwd=str(other), mcp_servers=[])).session_id)
            await a.prompt(session, "hi")
            assert a.text(session) == "[named] You said: hi"

    run(main())


def test_a_permission_request_keeps_the_tools_own_title_and_puts_the_question_in_meta(
    make_project: ProjectFactory,
) -> None:
    root = make_project({"agents/writer.yaml": WRITER})
    client = Client(["allow_once"])

    async def main() -> None:
        async with agent(root, client=client) as a:
            await a.initialize()
            session = await a.new_session()
            await a.prompt(session, tool_line("fs.write", path="notes/hi.txt", content="hi\n"))
            [call] = a.wire.updates(session, "tool_call")
            [request] = [m for m in a.wire.incoming if m.get("method") == "session/request_permission"]
        asked = request["params"]
        assert asked["toolCall"]["title"] == "fs.write notes/hi.txt" == call["title"]
        assert asked["toolCall"]["toolCallId"] == call["toolCallId"]
        meta = asked["_meta"]["cleveragents"]
        assert meta["pause"] == "approval" and "wants to run fs.write" in meta["question"]

    run(main())
    assert (root / "notes" / "hi.txt").read_text() == "hi\n"


def test_a_write_through_the_editors_files_into_a_new_folder_works_as_on_disk(make_project: ProjectFactory) -> None:
    root = make_project({"agents/writer.yaml": WRITER})
    client = Client(["allow_once"])

    async def main() -> None:
        async with agent(root, client=client) as a:
            await a.initialize(fs=True)
            session = await a.new_session()
            await a.prompt(session, tool_line("fs.write", path="notes/new/hi.txt", content="hi\n"))
            [done] = [u for u in a.wire.updates(session, "tool_call_update") if u.get("status")]
            assert done["status"] == "completed"

    run(main())
    # The editor writes the file (an editor may refuse a missing folder); the folder is made first.
    assert client.writes == [(str((root / "notes/new/hi.txt").resolve()), "hi\n")]
    assert (root / "notes" / "new").is_dir()


def test_a_config_error_sent_to_the_editor_masks_the_secret_interpolated_into_it(
    make_project: ProjectFactory,
) -> None:
    root = make_project({"agents/a.yaml": 'name: a\nmodel: {provider: openai, name: x, base_url: "${FAKE_KEY}"}\n'})
    env = agent_env({"FAKE_KEY": "sk-supersecret-123456"})

    async def main() -> None:
        async with agent(root, env=env) as a:
            await a.initialize()
            with pytest.raises(RequestError) as refused:
                await a.new_session()
            assert refused.value.code == -32085
            assert "sk-supersecret-123456" not in str(refused.value) + repr(refused.value.data)
            [diagnostic] = refused.value.data["diagnostics"]
            assert diagnostic["message"] == "base_url must be an http(s) URL, got '***'"
            assert (diagnostic["line"], diagnostic["column"]) == (2, 8)
            assert "got '***'" in str(refused.value)

    run(main())
