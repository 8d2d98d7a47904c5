"""What is on disk when a SendMessage returns: a SIGKILL right after the answer loses nothing.

The answer of a blocking SendMessage is sent only once the task, the conversation and the
audit records of the turn are committed (docs/a2a.md, "What is durable when an answer
returns"): a `ca serve` killed the instant the answer arrives, and started again, shows the
completed task, continues its conversation where it ended, and has the turn's audit records
in a chain that verifies.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

from tests.a2a_peers import Json, result_of, user_message
from tests.conftest import run_ca, write_project
from tests.serving import start_serve

AGENT = """
name: echo
model:
  provider: scripted
  replies: ["first answer", "second answer"]
"""
"""The second reply is given only to a conversation whose checkpoint holds the first one."""


def _send(server_rpc: Json) -> Json:
    task: Json = result_of(server_rpc)["task"]
    return task


def test_a_sigkill_right_after_the_answer_loses_no_task_turn_or_audit_record(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents/echo.yaml": AGENT})
    context = uuid.uuid4().hex
    for round_ in range(2):  # the kill lands at a slightly different moment each time
        first = start_serve(tmp_path)
        try:
            task = _send(first.rpc("SendMessage", {"message": user_message("hello", contextId=f"{context}{round_}")}))
        finally:
            first.stop(signal.SIGKILL)  # at once: no drain, no flush
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"

        second = start_serve(tmp_path)
        try:
            after = result_of(second.rpc("GetTask", {"id": task["id"]}))
            again = _send(second.rpc("SendMessage", {"message": user_message("more", contextId=f"{context}{round_}")}))
            records = result_of(second.rpc("_cleveragents/audit/query", {"taskId": task["id"]}))["records"]
        finally:
            second.stop()
        assert after["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [p["text"] for a in after["artifacts"] for p in a["parts"]] == ["first answer"]
        # The conversation continued from the killed server's last turn: the model saw its answer.
        assert [p["text"] for a in again["artifacts"] for p in a["parts"]] == ["second answer"]
        states = [r["data"]["state"] for r in records if r["kind"] == "task.state"]
        assert states == ["submitted", "working", "completed"]

    verified = run_ca("audit", "--verify", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
