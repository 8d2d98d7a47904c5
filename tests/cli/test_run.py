"""`ca run` end to end through the real process, with the offline and scripted models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import ProjectFactory, events, run_ca


def kinds(evs: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in evs]


SCRIPTED_LOOP = """
    name: worker
    model:
      provider: scripted
      replies:
        - tool_calls: [{name: fs.read, args: {path: notes.txt}}]
        - tool_calls: [{name: fs.list, args: {path: .}}]
        - text: "Read the notes and listed the folder."
    tools: [fs.read, fs.list]
    capabilities: {fs: {read: ["**"]}}
"""


def test_multi_step_tool_loop_streams_json_events(make_project: ProjectFactory) -> None:
    root = make_project({"agents/worker.yaml": SCRIPTED_LOOP, "notes.txt": "remember the milk\n"})
    result = run_ca("run", "worker", "go", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    calls = [(e["tool"], e["args"]) for e in evs if e["kind"] == "tool_call"]
    assert calls == [("fs.read", {"path": "notes.txt"}), ("fs.list", {"path": "."})]
    results = [e for e in evs if e["kind"] == "tool_result"]
    assert "remember the milk" in results[0]["result"] and not results[0]["is_error"]
    assert "notes.txt" in results[1]["result"]
    assert "".join(e["text"] for e in evs if e["kind"] == "text") == "Read the notes and listed the folder."
    final = evs[-1]
    assert final["kind"] == "finished" and final["state"] == "completed"
    assert final["output"] == "Read the notes and listed the folder."
    assert final["usage"]["model_calls"] == 3 and final["usage"]["tool_calls"] == 2
    assert final["usage"]["total_tokens"] > 0


def test_human_output_streams_reply_and_shows_tools(make_project: ProjectFactory) -> None:
    root = make_project({"agents/worker.yaml": SCRIPTED_LOOP, "notes.txt": "remember the milk\n"})
    result = run_ca("run", "worker", "go", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Read the notes and listed the folder.\n"
    assert '→ fs.read {"path": "notes.txt"}' in result.stderr
    assert "← fs.read: remember the milk" in result.stderr
    assert "[completed]" in result.stderr and "3 model calls, 2 tool calls" in result.stderr


def test_python_tool_and_a_failing_tool_reported_to_the_model(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "tools/mathy.py": '''
                def add(a: int, b: int) -> int:
                    """Add two numbers.

                    Args:
                        a: the first number
                        b: the second number
                    """
                    return a + b


                def explode(reason: str) -> str:
                    """Always fails."""
                    raise RuntimeError(f"boom: {reason}")
            ''',
            "agents/calc.yaml": """
                name: calc
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{name: add, args: {a: 2, b: 3}}]
                    - tool_calls: [{name: explode, args: {reason: testing}}]
                    - text: recovered
                tools:
                  - python: tools/mathy.py:add
                  - python: tools/mathy.py:explode
            """,
        }
    )
    result = run_ca("run", "calc", "sum", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    results = [e for e in events(result.stdout) if e["kind"] == "tool_result"]
    assert (results[0]["tool"], results[0]["result"], results[0]["is_error"]) == ("add", "5", False)
    assert results[1]["tool"] == "explode" and results[1]["is_error"]
    assert "boom: testing" in results[1]["result"]
    assert events(result.stdout)[-1]["output"] == "recovered"


def test_conversation_continues_in_a_second_process(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/chat.yaml": """
                name: chat
                model: {provider: scripted, replies: [first answer, second answer]}
            """
        }
    )
    one = run_ca("run", "chat", "hello", "--session", "s1", "--json", cwd=root)
    two = run_ca("run", "chat", "again", "--session", "s1", "--json", cwd=root)
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    assert events(one.stdout)[-1]["output"] == "first answer"
    assert events(two.stdout)[-1]["output"] == "second answer"  # the history came back from .ca/
    fresh = run_ca("run", "chat", "hello", "--session", "s2", "--json", cwd=root)
    assert events(fresh.stdout)[-1]["output"] == "first answer"


def test_a_conversation_belongs_to_its_agent(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\n", "agents/b.yaml": "name: b\n"})
    assert run_ca("run", "a", "hi", "--session", "s", cwd=root).returncode == 0
    other = run_ca("run", "b", "hi", "--session", "s", cwd=root)
    assert other.returncode == 1
    assert "conversation 's' belongs to agent 'a', not 'b'" in other.stderr


def test_offline_model_in_a_fresh_init_project(tmp_path: Path) -> None:
    assert run_ca("init", str(tmp_path)).returncode == 0
    message = 'What is here?\n@tool fs.list {"path": "."}'
    result = run_ca("run", "assistant", message, cwd=tmp_path, env={"CA_MODEL": "offline"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[assistant] You said: What is here?\nfs.list: ")
    assert "README.md" in result.stdout


def test_prompt_from_stdin(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\n"})
    result = run_ca("run", "a", cwd=root, stdin="from stdin\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[a] You said: from stdin\n"


def test_unknown_agent_and_skill_are_clear_errors(make_project: ProjectFactory) -> None:
    root = make_project({"agents/writer.yaml": "name: writer\nskills: [{id: draft}]\n"})
    result = run_ca("run", "writr", "hi", cwd=root)
    assert result.returncode == 2  # a usage error: the name is to change
    assert "agent 'writr' not found (did you mean 'writer'?)" in result.stderr
    skill = run_ca("run", "writer", "hi", "--skill", "drafts", cwd=root)
    assert skill.returncode == 2
    assert "agent 'writer' has no skill 'drafts' (did you mean 'draft'?)" in skill.stderr
    for r in (result, skill):
        assert "Traceback" not in r.stderr


def test_one_argument_that_is_no_agent_says_how_to_send_it_as_the_prompt(make_project: ProjectFactory) -> None:
    root = make_project({"agents/b.yaml": "name: b\n", "agents/a.yaml": "name: a\n"})
    for stdin in ("", "a message on stdin\n"):  # stdin is not read: the argument was no agent either way
        result = run_ca("run", "hello there", cwd=root, stdin=stdin)
        assert result.returncode == 2, result.stderr  # an unknown agent, as with a prompt argument
        assert result.stderr == (
            "error: agent 'hello there' not found; agents: a, b; to send 'hello there' as the prompt,"
            " name the agent first: ca run a 'hello there'\n"
        )
    two = run_ca("run", "c", "hi", cwd=root)
    assert (two.returncode, two.stderr) == (2, "error: agent 'c' not found; agents: a, b\n")


def test_an_unknown_agent_stops_ca_run_stdio_at_start_where_the_project_is_settled(
    make_project: ProjectFactory,
) -> None:
    root = make_project({"agents/writer.yaml": "name: writer\n", "agents/editor.yaml": "name: editor\n"})
    settled = [["--protocol", "a2a"], *(["--protocol", protocol, "-p", str(root)] for protocol in ("acp", "auto"))]
    for options in settled:
        result = run_ca("run", "--stdio", *options, "writr", cwd=root)
        assert result.returncode == 2, (options, result.stderr)  # a usage error, as `ca run writr hi`
        assert "agent 'writr' not found (did you mean 'writer'?); agents: editor, writer" in result.stderr
        assert result.stdout == ""
    # Without -p an editor's session cwd may choose another project (docs/ide.md): not refused at start.
    for protocol in ("acp", "auto"):
        unsettled = run_ca("run", "--stdio", "--protocol", protocol, "writr", cwd=root)
        assert (unsettled.returncode, unsettled.stderr) == (0, ""), protocol
    for agent in (["writer"], []):  # a known agent, or the default one: served until the input ends
        served = run_ca("run", "--stdio", "--protocol", "a2a", *agent, cwd=root)
        assert (served.returncode, served.stderr) == (0, "")
    named_elsewhere = run_ca("run", "--stdio", "--protocol", "a2a", "writer", "-p", str(root), cwd=root.parent)
    assert named_elsewhere.returncode == 0, named_elsewhere.stderr


def test_missing_provider_key_is_one_clear_message(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\nmodel: anthropic:claude-sonnet-4-0\n"})
    result = run_ca("run", "a", "hi", cwd=root, env={"ANTHROPIC_API_KEY": ""})
    assert result.returncode == 1
    assert "needs an API key: set ANTHROPIC_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr


def test_tool_timeout_goes_back_to_the_model_clearly(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/a.yaml": """
                name: a
                tools: [shell]
                profile: autonomous
                capabilities: {shell: {allow: ["sleep *"], timeout: 500ms}}
            """
        }
    )
    result = run_ca("run", "a", '@tool shell {"command": "sleep 5"}', cwd=root, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "✗ shell: " in result.stderr and "timed out" in result.stderr
    assert "shell failed: " in result.stdout
    assert "Traceback" not in result.stderr
