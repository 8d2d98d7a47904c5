"""bench/slow_model.py, run tiny so it cannot silently break: `ca serve` and, with --floor, the
required stack's floor answer every task in both modes, each on the same slow provider."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.e2e
def test_ca_serve_and_the_floor_answer_every_task_in_both_modes() -> None:
    done = subprocess.run(
        [sys.executable, "bench/slow_model.py", "--tasks", "6", "--delay", "0.2", "--floor"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    heads = [line for line in lines if line.startswith("6 concurrent")]
    floor = "the stack's floor (a2a-sdk + LangGraph agent on ChatOpenAI, no ca code)"
    assert heads == [
        f"6 concurrent {mode}, model delay 0.2 s, a fresh server: {who}"
        for mode in ("SendMessage", "SendStreamingMessage")
        for who in ("ca serve", floor)
    ], done.stdout
    for head in heads:
        figures = lines[lines.index(head) + 1]
        assert figures.endswith("failures 0/6"), (head, figures)
    assert sum("peak model requests in flight 6 " in line for line in lines) == 4, done.stdout
