"""SIGTERM (or Ctrl-C) to `ca serve` with a tool running: it waits ``server.shutdown_timeout``, then
cancels; a second Ctrl-C cancels at once.

No task is left ``working``, no tool's process outlives the server, and the client — blocking or
streaming — gets the task's final state (completed, or canceled with the reason) instead of a
dropped connection.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CA, ProjectFactory
from tests.serving import SERVER_ENV, ServerProcess, group_alive, sleeping_child, start_serve

SLEEPER = """
name: sleeper
tools: [shell]
profile: autonomous
capabilities: {shell: {allow: ["sleep *"], timeout: 1m}}
"""

CA_YAML = """
default_agent: sleeper
server:
  shutdown_timeout: 2s
"""

SLEEP = '@tool shell {"command": "sleep 30"}'


def _message(text: str, message_id: str) -> dict[str, Any]:
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}}


@pytest.fixture
def stopped(make_project: ProjectFactory) -> tuple[Path, ServerProcess, dict[str, Any], float, int]:
    """A server SIGTERMed while a blocking SendMessage runs ``sleep 30``: the project, the server, the
    blocking client's answer, how long the server took to exit, and the sleep's process group."""
    root = make_project({"ca.yaml": CA_YAML, "agents/sleeper.yaml": SLEEPER})
    server = start_serve(root)
    answers: list[dict[str, Any]] = []
    try:
        caller = threading.Thread(
            target=lambda: answers.append(server.rpc("SendMessage", _message(SLEEP, "m-1"), agent="sleeper"))
        )
        caller.start()
        child = sleeping_child(server.proc.pid, server.output)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=20)
        took = time.monotonic() - started
        caller.join(timeout=20)
    finally:
        server.stop(signal.SIGKILL)
    assert answers, f"the blocking client got no answer:\n{server.output()}"
    return root, server, answers[0], took, child


def test_sigterm_exits_within_the_shutdown_timeout(
    stopped: tuple[Path, ServerProcess, dict[str, Any], float, int],
) -> None:
    _, server, _, took, _ = stopped
    assert took < 2 + 5, f"took {took:.1f} s:\n{server.output()}"
    server.assert_clean_exit()
    assert server.proc.returncode == 0, f"a graceful stop exits 0:\n{server.output()}"


def test_sigterm_leaves_no_tool_process_behind(stopped: tuple[Path, ServerProcess, dict[str, Any], float, int]) -> None:
    _, _, _, _, child = stopped
    assert not group_alive(child), "the shell tool's sleep outlived the server"


def test_blocking_client_gets_the_canceled_task_with_the_reason(
    stopped: tuple[Path, ServerProcess, dict[str, Any], float, int],
) -> None:
    _, _, answer, _, _ = stopped
    status = answer["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_CANCELED", answer
    assert "server shut down" in str(status["message"]), answer


def test_task_reads_canceled_after_restart(stopped: tuple[Path, ServerProcess, dict[str, Any], float, int]) -> None:
    root, _, answer, _, _ = stopped
    got = _after_restart(root, answer["result"]["task"]["id"])
    assert got["result"]["status"]["state"] == "TASK_STATE_CANCELED", got


def _after_restart(root: Path, task_id: str) -> dict[str, Any]:
    """GetTask of ``task_id`` from a new server of ``root``."""
    again = start_serve(root)
    try:
        got: dict[str, Any] = again.rpc("GetTask", {"id": task_id}, agent="sleeper")
    finally:
        again.stop()
    return got


PATIENT = """
default_agent: sleeper
server:
  shutdown_timeout: 30s
"""


def _streaming_call(server: ServerProcess, text: str) -> subprocess.Popen[str]:
    """`ca call --json` (the real client, which streams) sending ``text`` to the sleeper: every A2A
    event a JSON line on its stdout."""
    return subprocess.Popen(
        [*CA, "call", f"{server.url}/agents/sleeper/", text, "--json", "--timeout", "60"],
        cwd=server.root,
        env={**os.environ, **SERVER_ENV},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _final_status(out: str, err: str) -> dict[str, Any]:
    """The status of the last task or status event a streaming `ca call --json` printed."""
    statuses = []
    for line in out.splitlines():
        event = json.loads(line)
        found = event.get("task") or event.get("statusUpdate")
        if found:
            statuses.append(found["status"])
    assert statuses, f"the client got no task state:\n{out}\n{err}"
    status: dict[str, Any] = statuses[-1]
    return status


def test_one_ctrl_c_lets_a_streaming_call_finish_and_get_its_completed_task(make_project: ProjectFactory) -> None:
    """Ctrl-C while a streamed task runs a tool: the run finishes within ``server.shutdown_timeout`` and
    the client reads the completed task on its stream (sse-starlette used to cut every stream at the
    signal: the client got a truncated body). The server says what it waits for, as a JSON line too."""
    root = make_project({"ca.yaml": PATIENT, "agents/sleeper.yaml": SLEEPER})
    server = start_serve(root, "--log-format", "json")
    call = _streaming_call(server, '@tool shell {"command": "sleep 3"}')
    try:
        sleeping_child(server.proc.pid, server.output)
        server.proc.send_signal(signal.SIGINT)
        out, err = call.communicate(timeout=30)
        server.proc.wait(timeout=30)
    finally:
        call.kill()
        server.stop(signal.SIGKILL)
    assert call.returncode == 0, f"{out}\n{err}\n{server.output()}"
    assert _final_status(out, err)["state"] == "TASK_STATE_COMPLETED", out
    stderr = server.stderr()
    assert "Traceback" not in stderr and "without completing response" not in stderr, server.output()
    logged = [json.loads(line) for line in stderr.splitlines()]  # --log-format json: JSON lines only
    said = [r["message"] for r in logged if r["message"].startswith("stopping:")]
    assert said == ["stopping: waiting up to 30s for 1 running task(s); Ctrl-C again cancels them now"], logged
    assert server.proc.returncode == 130, f"Ctrl-C exits 130, as every ca command:\n{server.output()}"


def test_a_second_ctrl_c_cancels_the_running_tasks_at_once(make_project: ProjectFactory) -> None:
    """A second Ctrl-C while the server waits for a tool: the task is canceled now, as when
    ``server.shutdown_timeout`` runs out (its shell tool's process group killed, the streaming client
    told), the stores are closed in order, and no traceback is printed."""
    root = make_project({"ca.yaml": PATIENT, "agents/sleeper.yaml": SLEEPER})
    server = start_serve(root)
    call = _streaming_call(server, '@tool shell {"command": "sleep 20"}')
    try:
        child = sleeping_child(server.proc.pid, server.output)
        server.proc.send_signal(signal.SIGINT)
        time.sleep(1)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        server.proc.wait(timeout=20)
        took = time.monotonic() - started
        out, err = call.communicate(timeout=20)
    finally:
        call.kill()
        server.stop(signal.SIGKILL)
    assert took < 5, f"the second Ctrl-C took {took:.1f} s to stop the server:\n{server.output()}"
    assert not group_alive(child), "the shell tool's sleep outlived the server"
    status = _final_status(out, err)
    assert status["state"] == "TASK_STATE_CANCELED", out
    assert "server shut down" in str(status["message"]), out
    assert "Traceback" not in server.stderr(), server.output()
    assert server.proc.returncode == 130, server.output()
    got = _after_restart(root, json.loads(out.splitlines()[0])["task"]["id"])
    assert got["result"]["status"]["state"] == "TASK_STATE_CANCELED", got
    assert "server shut down" in str(got["result"]["status"]["message"]), got
