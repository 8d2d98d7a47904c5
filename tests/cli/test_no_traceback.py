"""`ca validate` on every invalid fixture, through the real process: exit 2, the expected
errors on stderr, a well-formed ``--json`` list, and never a traceback or an internal error.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CA, REPO, free_port, run_ca, write_project
from tests.corpus import CASES, expected_lines

JSON_KEYS = {"file", "line", "column", "key_path", "message", "hint", "severity"}
_EXPECTED = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<column>\d+): (?P<message>.*)$")


def _start(case: Path, *options: str) -> subprocess.Popen[str]:
    """``ca validate CASE`` from inside the case folder, without the caller's CA_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CA_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [*CA, "validate", str(case), *options],
        cwd=case,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _rendered(expected: str) -> str:
    """``file:line:col: message`` as `ca validate` prints it: ``file:line:col: error: message``."""
    m = _EXPECTED.match(expected)
    assert m, f"malformed expectation {expected!r}"
    location = m["file"] if m["line"] == "0" else f"{m['file']}:{m['line']}:{m['column']}"
    return f"{location}: error: {m['message']}"


@pytest.mark.e2e
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_ca_validate_reports_the_errors_without_a_traceback(case: Path) -> None:
    text, as_json = _start(case), _start(case, "--json")  # both at once: the test costs one start-up
    stdout, stderr = text.communicate(timeout=60)
    json_out, json_err = as_json.communicate(timeout=60)
    expected = expected_lines(case / "expected.txt")

    for output in (stderr, json_err):
        assert "Traceback" not in output
        assert "internal error" not in output
    assert text.returncode == 2, stderr
    assert stdout == ""
    for line in expected:
        assert _rendered(line) in stderr
    assert f"invalid: {len(expected)} error{'s' if len(expected) != 1 else ''}" in stderr

    assert as_json.returncode == 2, json_err
    problems = json.loads(json_out)
    assert isinstance(problems, list)
    for problem in problems:
        assert set(problem) == JSON_KEYS
    errors = [p for p in problems if p["severity"] == "error"]
    assert [f"{p['file']}:{p['line']}:{p['column']}: {p['message']}" for p in errors] == expected


# -- user mistakes outside the YAML (issue 15, item 15) ---------------------------------------------

ECHO = {"agents/echo.yaml": "name: echo\n"}


def _init_under_a_file(root: Path) -> tuple[list[str], str]:
    (root / "afile").write_text("x")
    return ["init", "afile/project"], "error: afile is a file, not a folder (in the way of afile/project)"


def _schema_out_a_file(root: Path) -> tuple[list[str], str]:
    (root / "schemas.json").write_text("{}")
    return ["schema", "--out", "schemas.json"], "error: --out schemas.json is a file; --out takes a folder"


def _state_folder_is_a_file(root: Path) -> tuple[list[str], str]:
    write_project(root, ECHO)
    (root / ".ca").write_text("not a folder")
    return ["run", "echo", "hi"], f"error: {root / '.ca'} is not a folder: ca keeps the project's state there"


def _database_is_not_one(root: Path) -> tuple[list[str], str]:
    write_project(root, ECHO)
    (root / ".ca").mkdir()
    (root / ".ca" / "tasks.db").write_bytes(b"garbage, not SQLite" * 100)
    return [
        "run",
        "echo",
        "hi",
    ], f"error: {root / '.ca' / 'tasks.db'} is not a usable database (file is not a database)"


def _task_rows_database_is_not_one(root: Path) -> tuple[list[str], str]:
    write_project(root, ECHO)
    (root / ".ca").mkdir()
    (root / ".ca" / "state.db").write_bytes(b"garbage, not SQLite" * 100)
    return ["serve", "--port", str(free_port())], f"error: {root / '.ca' / 'state.db'} is not a usable database"


def _postgres_unreachable(root: Path) -> tuple[list[str], str]:
    write_project(root, {**ECHO, "ca.yaml": "store:\n  url: postgresql://127.0.0.1:1/x\n"})
    return ["serve", "--port", str(free_port())], "error: cannot use the store postgresql://127.0.0.1:1/x ("


def _port_in_use(root: Path) -> tuple[list[str], str]:
    write_project(root, ECHO)
    return ["serve", "--port", "{busy}"], "error: port {busy} on 127.0.0.1 is already in use"


MISTAKES = [
    _init_under_a_file,
    _schema_out_a_file,
    _state_folder_is_a_file,
    _database_is_not_one,
    _task_rows_database_is_not_one,
    _postgres_unreachable,
    _port_in_use,
]


@pytest.mark.e2e
@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.__name__.strip("_") for m in MISTAKES])
def test_a_user_mistake_is_one_line_and_exit_2(
    mistake: Callable[[Path], tuple[list[str], str]], tmp_path: Path
) -> None:
    args, expected = mistake(tmp_path)
    with socket.socket() as busy:  # held while the command runs: the port it is told to use is taken
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        args = [a.replace("{busy}", port) for a in args]
        result = run_ca(*args, cwd=tmp_path, timeout=90)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(expected.replace("{busy}", port)), result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.e2e
def test_a_task_rows_file_that_is_not_a_database_is_one_line_over_a2a_stdio_too(tmp_path: Path) -> None:
    write_project(tmp_path, ECHO)
    (tmp_path / ".ca").mkdir()
    (tmp_path / ".ca" / "state.db").write_bytes(b"garbage, not SQLite" * 100)
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
    result = run_ca("run", "--stdio", "--protocol", "a2a", cwd=tmp_path, stdin=request + "\n", timeout=90)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {tmp_path / '.ca' / 'state.db'} is not a usable database"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
