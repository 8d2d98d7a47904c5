"""The first hour with `ca`, through the real process: the project found from a subfolder, `-p` on
every command, the default agent, `ca call` by a registry's name and with credentials, tool names
shown, budget stops, `ca audit --json/--limit/--since`, nested calls labelled by their callee."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ProjectFactory, events, run_ca, write_project
from tests.serving import SERVER_ENV, ServerProcess, launch_serve

pytestmark = pytest.mark.e2e

TOKEN = "s3cret-serve-token-1"
LISTER = """
name: {name}
profile: autonomous
tools: [fs.list]
capabilities:
  fs: {{read: ["**"]}}
"""


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`ca serve` of one agent, `echo`, behind a bearer token."""
    root = write_project(
        tmp_path_factory.mktemp("guarded"),
        {
            "ca.yaml": "server:\n  auth: {bearer_tokens_env: SERVE_TOKENS}\n",
            "agents/echo.yaml": "name: echo\n",
        },
    )
    server = launch_serve(root, env={**SERVER_ENV, "SERVE_TOKENS": TOKEN})
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
def two(make_project: ProjectFactory) -> Path:
    """Agents alpha and beta (the default), and a subfolder to run commands from."""
    return make_project(
        {
            "ca.yaml": "default_agent: beta\n",
            "agents/alpha.yaml": "name: alpha\nskills: [{id: tidy, name: Tidy}]\n",
            "agents/beta.yaml": "name: beta\n",
            "src/deep/keep.txt": "x",
        }
    )


# -- 14: the project root, -p, the default agent, unknown names ---------------------------------


def test_run_without_an_agent_runs_the_default_agent(two: Path) -> None:
    result = run_ca("run", cwd=two, stdin="hello there")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[beta] You said: hello there\n"


def test_every_command_finds_the_project_from_a_subfolder(two: Path) -> None:
    deep = two / "src" / "deep"
    assert run_ca("run", "alpha", "hi", cwd=deep).stdout == "[alpha] You said: hi\n"
    for command in (["validate"], ["agents", "show", "alpha"], ["tasks", "list"], ["audit"], ["card", "alpha"]):
        result = run_ca(*command, cwd=deep)
        assert result.returncode == 0, (command, result.stderr)
    assert run_ca("validate", cwd=deep).stdout == f"ok: 2 agents (2 llm), 3 profiles, 0 skills in {two}\n"
    assert not (deep / ".ca").exists() and (two / ".ca").is_dir()


def test_p_names_the_project_on_every_command(two: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("outside")
    commands = [
        ["validate"],
        ["run", "alpha", "hi"],
        ["card", "alpha"],
        ["graph", "alpha"],
        ["agents", "list"],
        ["agents", "show", "beta"],
        ["tasks", "list"],
        ["audit", "--json"],
    ]
    for command in commands:
        result = run_ca(*command, "-p", str(two), cwd=outside)
        assert result.returncode == 0, (command, result.stderr)
    assert run_ca("validate", "--project", str(two), cwd=outside).stdout.startswith("ok: 2 agents")


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["run", "gamma", "hi"], "error: agent 'gamma' not found; agents: alpha, beta\n"),
        (
            ["run", "alpha", "hi", "--skill", "tidi"],
            "error: agent 'alpha' has no skill 'tidi' (did you mean 'tidy'?); skills: tidy\n",
        ),
        (["agents", "show", "gamma"], "error: agent 'gamma' not found; agents: alpha, beta\n"),
    ],
)
def test_an_unknown_agent_or_skill_is_a_usage_error(two: Path, command: list[str], message: str) -> None:
    result = run_ca(*command, cwd=two)
    assert (result.returncode, result.stderr) == (2, message)


# -- 13: the names a model calls ------------------------------------------------------------------


def test_tool_names_show_in_agents_show_and_validate_verbose(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/scout.yaml": """
                name: scout
                tools:
                  - fs.read
                  - python: tools/lint.py:lint
                    name: check.style
                  - agent: http://127.0.0.1:18903/
                capabilities:
                  fs: {read: ["**"]}
                  network: {allow: ["127.0.0.1:18903"]}
            """,
            "tools/lint.py": "def lint(path: str) -> str:\n    '''Lint.'''\n    return path\n",
        }
    )
    shown = run_ca("agents", "show", "scout", "--json", cwd=root)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tools"] == [
        {"name": "fs_read", "tool": "fs.read", "kind": "builtin"},
        {"name": "check_style", "tool": "tools/lint.py:lint", "kind": "python"},
        {"name": "127_0_0_1_18903", "tool": "http://127.0.0.1:18903/", "kind": "agent"},
    ]
    verbose = run_ca("validate", "--verbose", cwd=root)
    assert verbose.returncode == 0, verbose.stderr
    assert "  tool 127_0_0_1_18903" in verbose.stdout and "  tool fs_read " in verbose.stdout


# -- 12: ca call by a registry's name, with credentials ---------------------------------------------


def test_call_by_the_name_a_registry_lists_sends_the_registrys_headers(guarded: ServerProcess, tmp_path: Path) -> None:
    client = write_project(
        tmp_path,
        {
            "ca.yaml": f"registries:\n  - name: team\n    url: {guarded.url}\n    headers_env: {{Authorization: TEAM_AUTH}}\n",
            "agents/me.yaml": "name: me\n",
        },
    )
    env = {"TEAM_AUTH": f"Bearer {TOKEN}"}
    result = run_ca("call", "echo", "hello", cwd=client, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[echo] You said: hello\n"
    # A URL on the registry's origin carries its headers too.
    by_url = run_ca("call", f"{guarded.url}/agents/echo/", "again", cwd=client, env=env)
    assert (by_url.returncode, by_url.stdout) == (0, "[echo] You said: again\n"), by_url.stderr


def test_call_of_a_url_takes_a_token_or_a_header(guarded: ServerProcess, tmp_path: Path) -> None:
    url = f"{guarded.url}/agents/echo/"
    refused = run_ca("call", url, "hi", cwd=tmp_path)
    assert refused.returncode == 1
    with_token = run_ca("call", url, "hi", "--token", TOKEN, cwd=tmp_path)
    assert (with_token.returncode, with_token.stdout) == (0, "[echo] You said: hi\n"), with_token.stderr
    from_env = run_ca("call", url, "hi", cwd=tmp_path, env={"CA_CALL_TOKEN": TOKEN})
    assert from_env.returncode == 0, from_env.stderr
    with_header = run_ca("call", url, "hi", "-H", f"Authorization: Bearer {TOKEN}", cwd=tmp_path)
    assert with_header.returncode == 0, with_header.stderr
    bad = run_ca("call", url, "hi", "--header", "no colon here", cwd=tmp_path)
    assert bad.returncode == 2 and "write it as 'Name: value'" in bad.stderr


def test_serve_says_1_agent(guarded: ServerProcess) -> None:
    assert "serving 1 agent at " in guarded.out.read_text()


# -- 16: budget stops, audit, nested labels, tool names, integers -------------------------------------


def test_a_budget_stop_has_its_own_exit_code_and_label(make_project: ProjectFactory) -> None:
    root = make_project({"agents/counter.yaml": LISTER.format(name="counter") + "budget: {max_turns: 1}\n"})
    result = run_ca("run", "counter", 'go\n@tool fs.list {"path": "."}', cwd=root)
    assert result.returncode == 4, result.stderr
    assert "[stopped by budget: max_turn_requests]" in result.stderr and "[completed]" not in result.stderr


def test_audit_json_limit_shows_the_newest_and_since_filters(make_project: ProjectFactory) -> None:
    root = make_project({"agents/echo.yaml": "name: echo\n"})
    for text in ("one", "two"):
        assert run_ca("run", "echo", text, cwd=root).returncode == 0
    everything = json.loads(run_ca("audit", "--json", cwd=root).stdout)
    assert len(everything) >= 6 and [r["seq"] for r in everything] == sorted(r["seq"] for r in everything)
    newest = json.loads(run_ca("audit", "--json", "--limit", "2", cwd=root).stdout)
    assert newest == everything[-2:]
    assert json.loads(run_ca("audit", "--json", "--since", "1d", cwd=root).stdout) == everything
    assert json.loads(run_ca("audit", "--json", "--since", "2999-01-01", cwd=root).stdout) == []
    lines = run_ca("audit", "-n", "1", cwd=root).stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{everything[-1]['seq']} ")
    bad = run_ca("audit", "--since", "yesterday", cwd=root)
    assert bad.returncode == 2 and "--since 'yesterday' is neither an ISO time" in bad.stderr


def test_a_nested_calls_output_is_labelled_with_the_callee(make_project: ProjectFactory) -> None:
    boss = "name: boss\nprofile: autonomous\ntools:\n  - agent: helper\ncapabilities:\n  agents: [helper]\n"
    root = make_project({"agents/boss.yaml": boss, "agents/helper.yaml": LISTER.format(name="helper")})
    inner = json.dumps({"input": '@tool fs.list {"path": "."}'})
    result = run_ca("run", "boss", f"go\n@tool helper {inner}", cwd=root)
    assert result.returncode == 0, result.stderr
    assert '→ [helper] fs.list {"path": "."}' in result.stderr and "[tools]" not in result.stderr
    nested = events(run_ca("run", "boss", f"go\n@tool helper {inner}", "--json", cwd=root).stdout)
    assert {tuple(e["source"]) for e in nested if e.get("tool") == "fs.list"} == {("helper",)}


def test_the_tools_an_agent_lists_have_their_spec_names(make_project: ProjectFactory) -> None:
    root = make_project({"agents/lister.yaml": LISTER.format(name="lister")})
    result = run_ca("run", "lister", "@tool fs.lst {}", cwd=root)
    assert result.stdout == "[lister] I cannot call 'fs.lst': this agent has no such tool (its tools: fs.list)\n"


def _usages(value: Any) -> list[dict[str, Any]]:
    """Every ``usage`` mapping anywhere in ``value``."""
    if isinstance(value, list):
        return [u for v in value for u in _usages(v)]
    if not isinstance(value, dict):
        return []
    own = [value["usage"]] if isinstance(value.get("usage"), dict) else []
    return own + [u for v in value.values() for u in _usages(v)]


def test_usage_counts_printed_by_call_json_are_integers(guarded: ServerProcess, tmp_path: Path) -> None:
    result = run_ca("call", f"{guarded.url}/agents/echo/", "hi", "--json", "--token", TOKEN, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    usages = _usages(events(result.stdout))
    assert usages and all(type(v) is int for u in usages for v in u.values()), usages
