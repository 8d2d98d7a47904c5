"""The benches' --floor, run tiny so it cannot silently break: beside ca, the required stack's floor
(a2a-sdk serving LangGraph's prebuilt agent, no ca code) answers every request of bench/serve.py and
bench/slow_model.py, and reaches its first token in bench/run.py; each prints its figures."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.bench_output import CA_ROW, blocks
from tests.conftest import REPO

FLOOR = (
    "a2a-sdk + LangGraph agent (create_agent, echo model), checkpoints in memory",
    "a2a-sdk + LangGraph agent (create_agent, echo model), checkpoints committed to SQLite",
)
TIMES = re.compile(r"  median \d+\.\d{3} s   min \d+\.\d{3} s   max \d+\.\d{3} s")


def _bench(script: str, *options: str) -> str:
    """What ``bench/SCRIPT OPTIONS --floor`` prints; it must succeed."""
    done = subprocess.run(
        [sys.executable, f"bench/{script}", *options, "--floor"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.e2e
def test_the_floor_runs_the_required_stack_beside_ca_serve_and_prints_each_ratio() -> None:
    out = _bench(
        "serve.py", "--requests", "8", "--concurrency", "2", "--rounds", "1", "--warmup", "2", "--ttfe-runs", "1"
    )
    found = blocks(out)  # it succeeded: the durable floor kept 10 conversations, one per request
    for row in (*FLOOR, CA_ROW):
        assert "failures     0/8" in found[row], (row, out)
    assert any(line.startswith("against the stack's durable floor: throughput ca/base") for line in found["ca serve"])
    floor = found["the required stack's floor (no task, audit or governance records; no ca code)"]
    assert [line.split(":")[0] for line in floor] == [
        "against the in-memory echo, checkpoints in memory",
        "against the in-memory echo, checkpoints in SQLite",
    ]
    assert all("throughput floor/base" in line for line in floor), floor


@pytest.mark.e2e
def test_ca_serve_and_the_floor_answer_every_task_on_a_slow_model_in_both_modes() -> None:
    lines = _bench("slow_model.py", "--tasks", "6", "--delay", "0.2").splitlines()
    heads = [line for line in lines if line.startswith("6 concurrent")]
    floor = "the stack's floor (a2a-sdk + LangGraph agent on ChatOpenAI, no ca code)"
    assert heads == [
        f"6 concurrent {mode}, model delay 0.2 s, a fresh server: {who}"
        for mode in ("SendMessage", "SendStreamingMessage")
        for who in ("ca serve", floor)
    ], lines
    for head in heads:
        figures = lines[lines.index(head) + 1]
        assert figures.endswith("failures 0/6"), (head, figures)
    assert sum("peak model requests in flight 6 " in line for line in lines) == 4, lines


@pytest.mark.e2e
def test_a_cold_ca_run_and_the_floor_each_reach_their_first_token() -> None:
    lines = _bench("run.py", "--runs", "1", "--turns", "5").splitlines()
    for head in (
        "cold `ca run` to first token (offline model, whole process, 1 runs)",
        "the required stack's floor to first token (LangGraph's prebuilt agent on SQLite, no ca code)",
    ):
        assert TIMES.fullmatch(lines[lines.index(head) + 1]), lines
