"""`ca validate` on every invalid fixture, through the real process: exit 2, the expected
errors on stderr, a well-formed ``--json`` list, and never a traceback or an internal error.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CA, REPO
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
