"""The shell tool's environment is an allowlist: a real ``ca run`` whose command prints its environment.

The parent process holds credentials whose names do not look secret (``DATABASE_URL``,
``GITHUB_PAT``): none of them, nor anything else unlisted, may reach the command.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.conftest import REPO, ProjectFactory, run_ca

PARENT = {
    "DATABASE_URL": "postgres://u:hunter2@h/db",
    "GITHUB_PAT": "ghp_x",
    "CA_TEST_REGION": "eu-west-1",
    "LC_TIME": "C",
    "LC_NOT_A_CATEGORY": "x",
}
BASE = {"PATH", "HOME", "LANG", "TERM", "TZ"}
LOCALE = {
    *("LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_MONETARY", "LC_NUMERIC", "LC_TIME"),
    *("LC_ADDRESS", "LC_IDENTIFICATION", "LC_MEASUREMENT", "LC_NAME", "LC_PAPER", "LC_TELEPHONE"),
}
"""The documented allowlist: these and the names of ``capabilities.shell.env``, nothing else."""
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.MULTILINE)


def _agent(capabilities: str) -> dict[str, str]:
    return {
        "agents/a.yaml": f"""
            name: a
            tools: [shell]
            profile: autonomous
            capabilities: {capabilities}
        """
    }


def _command_env(root: Path) -> dict[str, str]:
    """What ``env`` printed when the agent ran it through the shell tool of a real ``ca run``."""
    result = run_ca("run", "a", '@tool shell {"command": "env"}', "--json", cwd=root, env=PARENT)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    [output] = [e["result"] for e in events if e["kind"] == "tool_result"]
    assert output.endswith("exit code 0"), output
    return dict(_ASSIGNMENT.findall(output))


def test_credentials_whose_names_do_not_look_secret_do_not_reach_a_command(make_project: ProjectFactory) -> None:
    env = _command_env(make_project(_agent('{shell: {allow: ["env"]}}')))
    for name, value in (("DATABASE_URL", "hunter2"), ("GITHUB_PAT", "ghp_x")):
        assert name not in env
        assert not any(value in v for v in env.values())


def test_only_the_base_names_reach_a_command_when_shell_env_is_empty(make_project: ProjectFactory) -> None:
    env = _command_env(make_project(_agent('{shell: {allow: ["env"]}}')))
    parent = {**os.environ, "PYTHONPATH": str(REPO), **PARENT}
    assert set(env) == {name for name in BASE | LOCALE if name in parent}


def test_path_reaches_a_command_unchanged(make_project: ProjectFactory) -> None:
    env = _command_env(make_project(_agent('{shell: {allow: ["env"]}}')))
    assert env["PATH"] == os.environ["PATH"]


def test_a_locale_category_reaches_a_command(make_project: ProjectFactory) -> None:
    env = _command_env(make_project(_agent('{shell: {allow: ["env"]}}')))
    assert env["LC_TIME"] == "C"


def test_a_name_listed_in_shell_env_reaches_a_command(make_project: ProjectFactory) -> None:
    env = _command_env(make_project(_agent('{shell: {allow: ["env"], env: [CA_TEST_REGION]}}')))
    assert env["CA_TEST_REGION"] == "eu-west-1"
    assert "DATABASE_URL" not in env


def test_a_listed_name_that_is_not_set_is_left_out(make_project: ProjectFactory) -> None:
    env = _command_env(make_project(_agent('{shell: {allow: ["env"], env: [CA_TEST_UNSET_XYZ]}}')))
    assert "CA_TEST_UNSET_XYZ" not in env
