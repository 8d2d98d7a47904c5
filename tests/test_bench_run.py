"""bench/run.py, run tiny so it cannot silently break: a cold `ca run` and, with --floor, the
required stack's floor each print a time to their first token."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

TIMES = re.compile(r"  median \d+\.\d{3} s   min \d+\.\d{3} s   max \d+\.\d{3} s")


@pytest.mark.e2e
def test_a_cold_ca_run_and_the_floor_each_reach_their_first_token() -> None:
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--runs", "1", "--turns", "5", "--floor"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for head in (
        "cold `ca run` to first token (offline model, whole process, 1 runs)",
        "the required stack's floor to first token (LangGraph's prebuilt agent on SQLite, no ca code)",
    ):
        assert TIMES.fullmatch(lines[lines.index(head) + 1]), done.stdout
