"""`ca validate` warns about shell allow patterns that let a program run others or leave the project.

A pattern matches the command line; it does not confine what the program then does. A
wildcard in the arguments of ``find``, ``git``, ``env`` or ``ls`` lets the agent choose
options such as ``-exec`` and paths such as ``/etc``: a warning (never an error) points at
that wildcard.
"""

from __future__ import annotations

import pytest

from framework.spec import load_project
from tests.conftest import ProjectFactory, run_ca

HINT = (
    "    hint: allow the exact command lines the agent needs, without a wildcard after {program!r}; "
    "a pattern only matches the command line, it does not confine what the program does"
)


def _agent(*patterns: str) -> dict[str, str]:
    listed = ", ".join(f'"{p}"' for p in patterns)
    return {"agents/a.yaml": f"name: a\ntools: [shell]\ncapabilities:\n  shell:\n    allow: [{listed}]\n"}


@pytest.mark.parametrize(
    ("pattern", "column", "reason"),
    [
        ("find *", 19, "-exec, -execdir and -ok run any program, and it reads any path such as '/' or '..'"),
        ("env *", 18, "it runs whatever program its arguments name"),
        (
            "git *",
            18,
            "-c, -C, aliases and options such as 'difftool -x' or 'grep -O' run any program; "
            "--no-index and --output reach paths outside the project",
        ),
        ("ls *", 17, "it reads any path it is given, such as '/etc' or '..'"),
    ],
)
def test_validate_warns_at_the_wildcard_of_a_risky_pattern(
    make_project: ProjectFactory, pattern: str, column: int, reason: str
) -> None:
    root = make_project(_agent(pattern))
    result = run_ca("validate", ".", cwd=root)
    assert result.returncode == 0, result.stderr
    program = pattern.split()[0]
    assert result.stderr.splitlines()[0] == (
        f"agents/a.yaml:5:{column}: warning: shell pattern {pattern!r} lets {program!r} run with "
        f"arguments the agent chooses: {reason}"
    )
    assert HINT.format(program=program) in result.stderr.splitlines()
    assert result.stdout.startswith("ok: 1 agent (1 llm), 3 profiles, 0 skills, 1 warning")


def test_validate_does_not_warn_about_pytest(make_project: ProjectFactory) -> None:
    root = make_project(_agent("pytest *"))
    result = run_ca("validate", ".", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("ok: 1 agent (1 llm), 3 profiles, 0 skills in ")


def _warnings(make_project: ProjectFactory, files: dict[str, str]) -> list[str]:
    project = load_project(make_project(files), environ={})
    return [f"{d.line}:{d.column}: {d.message}" for d in project.warnings]


def test_a_pattern_without_wildcards_is_not_a_risk(make_project: ProjectFactory) -> None:
    assert _warnings(make_project, _agent("git status", "find src -name test_x.py", "env")) == []


def test_each_risky_pattern_of_a_list_gets_its_own_warning(make_project: ProjectFactory) -> None:
    warnings = _warnings(make_project, _agent("pytest *", "cat *", "xargs *"))
    assert [w.split(": ", 1)[0] for w in warnings] == ["5:30", "5:41"]
    assert "'cat' run with arguments the agent chooses: it reads any path it is given" in warnings[0]
    assert "'xargs' run with arguments the agent chooses: it runs whatever program its arguments name" in warnings[1]


def test_a_wildcard_glued_to_a_subcommand_is_still_a_risk(make_project: ProjectFactory) -> None:
    """'git diff*' also matches 'git difftool -x sh ...', which runs any program."""
    [warning] = _warnings(make_project, _agent("git diff*"))
    assert warning.startswith("5:22: shell pattern 'git diff*' lets 'git' run with arguments the agent chooses")


def test_an_interpreter_is_known_under_its_versioned_name_and_full_path(make_project: ProjectFactory) -> None:
    warnings = _warnings(make_project, _agent("python3.12 *", "/usr/bin/bash *"))
    assert warnings == [
        "5:25: shell pattern 'python3.12 *' lets 'python3.12' run with arguments the agent chooses: "
        "it is an interpreter: -c or a script path runs any code",
        "5:44: shell pattern '/usr/bin/bash *' lets '/usr/bin/bash' run with arguments the agent chooses: "
        "it is a shell: -c runs any command line",
    ]


def test_a_wildcard_program_name_lets_any_program_run(make_project: ProjectFactory) -> None:
    project = load_project(make_project(_agent("py* -q")), environ={})
    [warning] = project.warnings
    assert (warning.line, warning.column) == (5, 16)
    assert warning.message == "shell pattern 'py* -q' lets any program run: its first word is a wildcard"
    assert warning.hint == "start the pattern with the program's name, such as 'pytest *'"


def test_default_capabilities_in_the_project_file_are_checked_once(make_project: ProjectFactory) -> None:
    files = {
        "ca.yaml": 'version: 1\ndefaults:\n  capabilities: {shell: {allow: ["find *"]}}\n',
        "agents/a.yaml": "name: a\ntools: [shell]\n",
        "agents/b.yaml": "name: b\ntools: [shell]\n",
    }
    project = load_project(make_project(files), environ={})
    assert [(w.file.rsplit("/", 1)[-1], w.line, w.column, w.key_path) for w in project.warnings] == [
        ("ca.yaml", 3, 40, "defaults.capabilities.shell.allow[0]")
    ]
