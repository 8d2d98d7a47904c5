"""`ca validate` through the real process: summary, exit codes, --json, and a light start-up."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import REPO, ProjectFactory, run_ca

BROKEN = {
    "agents/a.yaml": """
        name: a
        instuctions: hi
        budget: {max_tokens: -5}
    """,
    "agents/b.yaml": """
        name: b
        tools: [fs.reed]
    """,
}


def test_valid_project_prints_one_line_summary_and_exits_0() -> None:
    result = run_ca("validate", str(REPO))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok: 5 agents (4 llm, 1 workflow), 3 profiles, 0 skills in ."


def test_invalid_project_prints_every_error_with_source_and_caret(make_project: ProjectFactory) -> None:
    root = make_project(BROKEN)
    result = run_ca("validate", ".", cwd=root)
    assert result.returncode == 2
    assert result.stdout == ""
    err = result.stderr
    assert "agents/a.yaml:2:1: error: unknown key 'instuctions'\n    instuctions: hi\n    ^\n" in err
    assert "    at: instuctions\n    hint: did you mean 'instructions'?" in err
    assert "agents/a.yaml:3:22: error: value -5 is out of range: must be >= 1" in err
    assert (
        "agents/b.yaml:2:9: error: unknown builtin tool 'fs.reed'; "
        "builtins are fs.read, fs.write, fs.list, fs.search, shell, http.get\n    tools: [fs.reed]\n            ^\n"
        "    at: tools[0]\n    hint: did you mean 'fs.read'?\n"
    ) in err
    assert err.rstrip().endswith("invalid: 3 errors")


def test_json_output_lists_the_same_problems(make_project: ProjectFactory) -> None:
    root = make_project(BROKEN)
    result = run_ca("validate", str(root), "--json", cwd=root)
    assert result.returncode == 2
    problems = json.loads(result.stdout)
    assert [(p["file"], p["line"], p["column"], p["key_path"]) for p in problems] == [
        ("agents/a.yaml", 2, 1, "instuctions"),
        ("agents/a.yaml", 3, 22, "budget.max_tokens"),
        ("agents/b.yaml", 2, 9, "tools[0]"),
    ]
    assert problems[0]["hint"] == "did you mean 'instructions'?"
    assert {p["severity"] for p in problems} == {"error"}


def test_warnings_do_not_fail_validation(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\nmodel: openai:gpt-4o-mini\n"})
    result = run_ca("validate", ".", cwd=root, env={"OPENAI_API_KEY": ""})
    assert result.returncode == 0
    assert "agents/a.yaml:2:8: warning: OPENAI_API_KEY is not set" in result.stderr
    assert result.stdout.startswith("ok: 1 agent (1 llm), 3 profiles, 0 skills, 1 warning")


def test_missing_project_folder_is_a_clear_error(tmp_path: Path) -> None:
    result = run_ca("validate", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "project folder does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_option_is_a_usage_error_with_suggestion() -> None:
    result = run_ca("validate", "--jsn")
    assert result.returncode == 2
    assert "No such option: --jsn" in result.stderr
    assert "--json" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_imports_neither_langgraph_nor_starlette() -> None:
    result = run_ca("validate", str(REPO), env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0
    imported = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+([\w.]+)$", result.stderr, re.MULTILINE))
    assert "framework.spec.loader" in imported  # the check sees real import lines
    heavy = sorted(m for m in imported if m.split(".")[0] in {"langgraph", "langchain_core", "starlette", "a2a"})
    assert heavy == []


def test_cross_file_errors_come_in_the_same_run_as_the_errors_of_each_file(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "default_agent: asistant\nserver: {port: 0}\n",
            "agents/writer.yaml": """
                name: writer
                instuctions: Draft the notes
                tools: [fs.reed, {agent: editor}, {python: tools/lint.py:lnt}]
            """,
            "agents/editor.yaml": "name: editor\nbudget: {max_turns: none}\ntools: [{agent: writer}]\n",
            "agents/release.yaml": """
                name: release
                kind: workflow
                steps:
                  - {id: check, gate: {mesage: Publish}}
                  - {id: draft, agent: writter}
            """,
            "tools/lint.py": "def lint(path: str) -> str:\n    return path\n",
        }
    )
    result = run_ca("validate", "--json", cwd=root)
    assert result.returncode == 2
    errors = [(p["file"], p["key_path"], p["message"]) for p in json.loads(result.stdout) if p["severity"] == "error"]
    assert errors == [
        ("agents/editor.yaml", "budget.max_turns", "expected an integer, got 'none'"),
        ("agents/release.yaml", "steps[0].gate.message", "missing required key 'message'"),
        ("agents/release.yaml", "steps[0].gate.mesage", "unknown key 'mesage'"),
        ("agents/release.yaml", "steps[1].agent", "unknown agent 'writter'"),
        ("agents/writer.yaml", "instuctions", "unknown key 'instuctions'"),
        (
            "agents/writer.yaml",
            "tools[0]",
            "unknown builtin tool 'fs.reed'; builtins are fs.read, fs.write, fs.list, fs.search, shell, http.get",
        ),
        ("agents/writer.yaml", "tools[1].agent", "agent call cycle: editor -> writer -> editor"),
        ("agents/writer.yaml", "tools[2].python", "function 'lnt' not found in tools/lint.py"),
        ("ca.yaml", "default_agent", "unknown agent 'asistant'"),
        ("ca.yaml", "server.port", "value 0 is out of range: must be >= 1"),
    ]


def test_warnings_about_ca_yaml_settings_point_at_ca_yaml(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "defaults:\n  model: openai:gpt-4o-mini\nserver:\n  auth: {bearer_tokens_env: CA_TOKENS}\n",
            "agents/a.yaml": "name: a\ntools: [shell]\ncapabilities: {fs: {read: ['**']}}\n",
            "agents/b.yaml": "name: b\n",
        }
    )
    result = run_ca("validate", cwd=root, env={"OPENAI_API_KEY": "", "CA_TOKENS": ""})
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if ": warning: " in line]
    assert warnings == [
        "agents/a.yaml:2:9: warning: tool 'shell' can never run: the agent's capabilities allow no commands",
        "ca.yaml:2:10: warning: OPENAI_API_KEY is not set; model 'openai:gpt-4o-mini' will fail at run time",
        "ca.yaml:4:29: warning: CA_TOKENS is not set; `ca serve` refuses to start until it holds the credentials",
    ]
    assert result.stdout.startswith("ok: 2 agents (2 llm), 3 profiles, 0 skills, 3 warnings")


def test_a_secret_interpolated_into_an_invalid_value_is_masked_by_validate_and_run(
    make_project: ProjectFactory,
) -> None:
    root = make_project({"agents/a.yaml": 'name: a\nmodel: {provider: openai, name: x, base_url: "${FAKE_KEY}"}\n'})
    env = {"FAKE_KEY": "sk-supersecret-123456"}
    for command in (["validate"], ["validate", "--json"], ["run", "a", "hi"]):
        result = run_ca(*command, cwd=root, env=env)
        assert result.returncode == 2, result.stderr
        assert "sk-supersecret-123456" not in result.stdout + result.stderr
        assert "***" in result.stdout + result.stderr
    assert "agents/a.yaml:2:8: error: base_url must be an http(s) URL, got '***'\n" in result.stderr
