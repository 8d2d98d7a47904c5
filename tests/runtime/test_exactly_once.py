"""A pending approval is decided exactly once, however many deciders race for it.

Real processes race: eight `ca approve` at the same instant (and, against a real `ca serve`,
`ca approve` processes and A2A decisions together). Exactly one resumes the run — the side
effect's file gets one line, the audit one ``tool.call`` — and every other decider is told who
decided first.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import CA, REPO, SIDE_EFFECT, ProjectFactory, run_ca, writer_agent
from tests.serving import start_serve

DECIDERS = 8
ROUNDS = 20


def _tool_calls(root: Path) -> int:
    with sqlite3.connect(root / ".ca" / "audit.db") as db:
        return int(db.execute("SELECT count(*) FROM audit WHERE kind = 'tool.call'").fetchone()[0])


def _paused(root: Path, file: str) -> str:
    result = run_ca("run", "writer", "go", "--json", cwd=root)
    assert result.returncode == 3, result.stderr
    finished = json.loads(result.stdout.splitlines()[-1])
    assert finished["state"] == "input-required"
    return str(finished["task_id"])


def _race(root: Path, task_id: str, count: int) -> list[subprocess.CompletedProcess[str]]:
    """``count`` `ca approve` processes started together; their results."""
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen(
            [*CA, "approve", task_id], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(count)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


@pytest.mark.timeout(900)  # 20 rounds of 9 processes: about two minutes on two cores
def test_eight_processes_deciding_one_approval_run_the_side_effect_once(make_project: ProjectFactory) -> None:
    root = make_project({"tools/side.py": SIDE_EFFECT, "agents/writer.yaml": writer_agent()})
    for round_ in range(1, ROUNDS + 1):
        task_id = _paused(root, "effects.log")
        results = _race(root, task_id, DECIDERS)
        winners = [r for r in results if r.returncode == 0]
        assert len(winners) == 1, [(r.returncode, r.stderr) for r in results]
        for loser in results:
            if loser.returncode != 0:
                assert loser.returncode == 1 and "already decided by cli:" in loser.stderr, loser.stderr
                assert "Traceback" not in loser.stderr
        assert (root / "effects.log").read_text().splitlines() == ["hello"] * round_
        assert _tool_calls(root) == round_


def test_processes_and_a2a_decisions_racing_on_a_server_decide_once(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root = make_project({"tools/side.py": SIDE_EFFECT, "agents/writer.yaml": writer_agent()})
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, logs=logs)
    url = f"{server.url}/agents/writer/"
    headers = {"A2A-Version": "1.0"}
    try:
        for round_ in range(1, 6):
            message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "go"}]}
            request = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
            task = httpx.post(url, json=request, headers=headers, timeout=60).json()["result"]["task"]
            answers: list[dict[str, Any]] = []

            def decide(task: dict[str, Any] = task, answers: list[dict[str, Any]] = answers) -> None:
                reply = {
                    "messageId": uuid.uuid4().hex,
                    "role": "ROLE_USER",
                    "taskId": task["id"],
                    "contextId": task["contextId"],
                    "parts": [{"data": {"decision": "approve"}}],
                }
                body = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": reply}}
                answers.append(httpx.post(url, json=body, headers=headers, timeout=120).json())

            threads = [threading.Thread(target=decide) for _ in range(DECIDERS // 2)]
            for thread in threads:
                thread.start()
            processes = _race(root, task["id"], DECIDERS // 2)
            for thread in threads:
                thread.join(timeout=120)
            # a2a-sdk queues messages to one task: a decision that arrives while another is applied
            # gets the task's outcome, one that arrives after it an error that the task has ended
            # (-32004). Processes that lose are told who decided.
            for answer in answers:
                assert "result" in answer or "terminal state" in answer["error"]["message"], answer
            lost = [p for p in processes if p.returncode != 0]
            assert all("already decided by" in p.stderr for p in lost), [p.stderr for p in lost]
            assert (root / "effects.log").read_text().splitlines() == ["hello"] * round_
            assert _tool_calls(root) == round_
    finally:
        server.stop()
