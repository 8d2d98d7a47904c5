"""Every kind of failure reaches every transport with its documented code, from its type, never its text.

One project has an agent per failure kind. Each case drives the real processes: ``ca serve``
(A2A JSON-RPC over HTTP: the task ends FAILED with ``{"error": {"code", "reason"}}``),
``ca run --stdio AGENT --protocol acp`` on plain pipes (a stopReason, or the JSON-RPC error of
the code) and ``ca run --json`` (the exit code and the ``failure`` of the finished event).
The provider is a stdlib HTTP server on loopback that refuses every chat completion with
HTTP 403 "Access denied": a provider error, whatever its words say.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.conftest import CA, NAP, REPO, run_ca
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

Json = dict[str, Any]
TOOL_LIST = '@tool fs.list {"path": "."}'
KEY = {"FAKE_PROVIDER_KEY": "sk-test-failures"}


@dataclass(frozen=True)
class Case:
    agent: str
    prompt: str
    kind: str
    code: str
    rpc: int
    """The JSON-RPC error number ACP answers with (0: a stopReason instead)."""
    stop_reason: str = ""


CASES = {
    "budget": Case("spent", TOOL_LIST, "BudgetExceeded", "budget_exceeded", -32080),
    "contract": Case("bound", "tell me", "ContractViolation", "contract_violation", 0, "refusal"),
    "policy": Case("guarded", "go", "PolicyDenied", "policy_denied", -32081),
    "tool": Case("reader", "go", "ToolError", "tool_failed", -32090),
    "run": Case("exhausted", "hi", "ModelError", "run_failed", -32091),
}
PROVIDER = Case("remote", "hi", "ProviderError", "provider_error", -32089)


def project_files(provider_url: str) -> dict[str, str]:
    return {
        "ca.yaml": "version: 1\nname: failures\ndefault_agent: spent\ndefaults:\n  model: offline\n",
        "agents/spent.yaml": (
            "name: spent\nprofile: autonomous\ntools: [fs.list]\ncapabilities: {fs: {read: ['**']}}\n"
            "budget: {max_turns: 1, on_exceed: fail}\n"
        ),
        "agents/bound.yaml": "name: bound\nprofile: autonomous\ncontract: {must_not: [{output_matches: 'You said'}]}\n",
        "agents/guarded.yaml": (
            "name: guarded\nkind: workflow\nprofile: autonomous\ncapabilities: {fs: {read: ['docs/**']}}\n"
            "steps:\n  - {id: peek, tool: fs.read, args: {path: secret.txt}}\n"
        ),
        "agents/reader.yaml": (
            "name: reader\nkind: workflow\nprofile: autonomous\ncapabilities: {fs: {read: ['**']}}\n"
            "steps:\n  - {id: load, tool: fs.read, args: {path: missing.txt}}\n"
        ),
        "agents/exhausted.yaml": (  # its scripted model has no reply for the second model call
            "name: exhausted\nprofile: autonomous\ntools: [fs.list]\ncapabilities: {fs: {read: ['**']}}\n"
            "model:\n  provider: scripted\n  replies:\n    - tool_calls: [{name: fs.list, args: {path: .}}]\n"
        ),
        "agents/remote.yaml": (
            "name: remote\nmodel:\n  provider: openai\n  name: fake-model\n"
            f"  base_url: {provider_url}\n  api_key_env: FAKE_PROVIDER_KEY\n  params: {{max_retries: 0, timeout: 10}}\n"
        ),
        "agents/hasty.yaml": (
            "name: hasty\nprofile: hasty\ntools: [fs.write]\ncapabilities: {fs: {write: ['out/**']}}\n"
        ),
        "profiles/hasty.yaml": "name: hasty\ndefault: ask\napproval: {timeout: 300ms, on_timeout: fail}\n",
        "agents/sleepy.yaml": "name: sleepy\nprofile: autonomous\ntools:\n  - python: tools/nap.py:nap\n",
        "tools/nap.py": textwrap.dedent(NAP),
        "secret.txt": "not for the workflow\n",
    }


WRITE = '@tool fs.write {"path": "out/x.txt", "content": "x"}'
NAP_LONG = '@tool nap {"seconds": 60}'


# -- a provider that refuses -----------------------------------------------------------------------


class _Refusing(BaseHTTPRequestHandler):
    """Answers every request as OpenAI does when the key may not use the model: 403 "Access denied"."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps(
            {"error": {"message": "Access denied", "type": "permission_error", "param": None, "code": None}}
        ).encode()
        self.send_response(403)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None  # keep the test output clean


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def project(tmp_path: Path, provider: str) -> Path:
    for name, text in project_files(provider).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, provider: str) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("failures-serve")
    for name, text in project_files(provider).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    server = start_serve(root, logs=tmp_path_factory.mktemp("failures-logs"), env=KEY)
    try:
        yield server
    finally:
        server.stop()


# -- A2A over HTTP ------------------------------------------------------------------------------------


def a2a(server: ServerProcess, agent: str, method: str, params: Json) -> Json:
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    headers = {"content-type": "application/json", "A2A-Version": "1.0"}
    response = httpx.post(f"{server.url}/agents/{agent}/", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    answer: Json = response.json()
    assert "result" in answer, answer
    return answer["result"]


def message(text: str | None = None, data: Json | None = None, **ids: str) -> Json:
    part: Json = {"text": text} if data is None else {"data": data}
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [part], **ids}


def failed_error(task: Json) -> Json:
    """The ``error`` of a FAILED task's status data."""
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    [data] = [p["data"] for p in task["status"]["message"]["parts"] if "data" in p]
    error: Json = data["error"]
    return error


def test_a_provider_saying_access_denied_is_a_provider_error_over_a2a(served: ServerProcess) -> None:
    task = a2a(served, "remote", "SendMessage", {"message": message("hi")})["task"]
    error = failed_error(task)
    assert error["code"] == "provider_error"
    assert "Access denied" in error["reason"] and "model call failed for agent 'remote'" in error["reason"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_failed_run_ends_its_a2a_task_failed_with_its_code(served: ServerProcess, name: str) -> None:
    case = CASES[name]
    task = a2a(served, case.agent, "SendMessage", {"message": message(case.prompt)})["task"]
    assert failed_error(task)["code"] == case.code


def test_an_approval_answered_after_its_timeout_fails_the_a2a_task_approval_rejected(served: ServerProcess) -> None:
    paused = a2a(served, "hasty", "SendMessage", {"message": message(WRITE)})["task"]
    assert paused["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    time.sleep(0.6)  # the profile lets an approval wait 300 ms
    answer = message(data={"decision": "approve"}, taskId=paused["id"], contextId=paused["contextId"])
    task = a2a(served, "hasty", "SendMessage", {"message": answer})["task"]
    error = failed_error(task)
    assert error["code"] == "approval_rejected" and "on_timeout: fail" in error["reason"]
    assert not (served.root / "out" / "x.txt").exists()


def test_a_canceled_a2a_task_ends_canceled(served: ServerProcess) -> None:
    params = {"message": message(NAP_LONG), "configuration": {"returnImmediately": True}}
    started = a2a(served, "sleepy", "SendMessage", params)["task"]
    deadline = time.monotonic() + 30
    while a2a(served, "sleepy", "GetTask", {"id": started["id"]})["status"]["state"] != "TASK_STATE_WORKING":
        assert time.monotonic() < deadline, "the task never started working"
        time.sleep(0.05)
    canceled = a2a(served, "sleepy", "CancelTask", {"id": started["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


# -- ACP on plain pipes -----------------------------------------------------------------------------


class AcpPeer:
    """``ca run --stdio AGENT --protocol acp``: JSON lines in and out, the agent's requests answered
    by ``on_request``; a session is opened on entry."""

    def __init__(
        self, root: Path, agent: str, on_request: Callable[[Json], Any] | None = None, start: Path | None = None
    ) -> None:
        """``start``: the folder the process starts in (default: ``root``, the sessions' cwd)."""
        self.root, self.on_request = root, on_request
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in __exit__
        self.proc = subprocess.Popen(
            [*CA, "run", "--stdio", agent, "--protocol", "acp"],
            cwd=start or root,
            env={**os.environ, "PYTHONPATH": str(REPO), **KEY},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            encoding="utf-8",
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.next_id = 0

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def __enter__(self) -> AcpPeer:
        init = {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "tests", "version": "0"}}
        assert "result" in self.call("initialize", init)
        return self

    def new_session(self) -> Json:
        return self.call("session/new", {"cwd": str(self.root), "mcpServers": []})

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.stderr.close()

    def send(self, obj: Json) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def call(self, method: str, params: Json) -> Json:
        """The answer to one request (result or error), answering the agent's requests meanwhile."""
        self.next_id += 1
        request_id = self.next_id
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            line = self.lines.get(timeout=60)
            if line is None:
                self.stderr.seek(0)
                raise AssertionError("the agent closed stdout: " + self.stderr.read().decode(errors="replace"))
            got: Json = json.loads(line)
            if "method" in got and "id" in got:
                assert self.on_request is not None, f"unexpected request from the agent: {got}"
                self.send({"jsonrpc": "2.0", "id": got["id"], "result": self.on_request(got)})
            elif "method" not in got and got.get("id") == request_id:
                return got

    def prompt(self, text: str) -> Json:
        """A new session's answer to one prompt."""
        session = self.new_session()["result"]["sessionId"]
        return self.call("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": text}]})


def test_a_provider_saying_access_denied_is_a_provider_error_over_acp(project: Path) -> None:
    with AcpPeer(project, "remote") as peer:
        answer = peer.prompt("hi")
    error = answer["error"]
    assert (error["code"], error["data"]["code"], error["data"]["kind"]) == (-32089, "provider_error", "ProviderError")
    assert "Access denied" in error["message"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_failed_run_answers_the_acp_prompt_with_its_code(project: Path, name: str) -> None:
    case = CASES[name]
    with AcpPeer(project, case.agent) as peer:
        answer = peer.prompt(case.prompt)
    if case.stop_reason:
        assert answer["result"] == {"stopReason": case.stop_reason}
    else:
        assert answer["error"]["code"] == case.rpc
        assert (answer["error"]["data"]["kind"], answer["error"]["data"]["code"]) == (case.kind, case.code)


def test_an_acp_permission_granted_after_its_timeout_answers_approval_rejected(project: Path) -> None:
    def late(request: Json) -> Json:
        assert request["method"] == "session/request_permission"
        time.sleep(0.6)  # the profile lets an approval wait 300 ms
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}

    with AcpPeer(project, "hasty", late) as peer:
        answer = peer.prompt(WRITE)
    assert answer["error"]["code"] == -32083
    assert answer["error"]["data"] == {"kind": "ApprovalTimedOut", "code": "approval_rejected", **_timeout_data(answer)}
    assert not (project / "out" / "x.txt").exists()


def _timeout_data(answer: Json) -> Json:
    data: Json = answer["error"]["data"]
    assert set(data) == {"kind", "code", "interrupt", "expired_at"}, data
    return {k: data[k] for k in ("interrupt", "expired_at")}


def test_an_acp_permission_request_cancelled_by_the_user_stops_the_turn_cancelled(project: Path) -> None:
    with AcpPeer(project, "hasty", lambda request: {"outcome": {"outcome": "cancelled"}}) as peer:
        answer = peer.prompt(WRITE)
    assert answer["result"] == {"stopReason": "cancelled"}


def test_an_invalid_project_answers_acp_session_new_with_spec_invalid_and_its_diagnostics(project: Path) -> None:
    (project / "agents" / "bound.yaml").write_text("name: bound\nprofile: [not, a, name]\n", encoding="utf-8")
    with AcpPeer(project, "spent") as peer:
        error = peer.new_session()["error"]
    assert (error["code"], error["data"]["kind"], error["data"]["code"]) == (-32085, "SpecError", "spec_invalid")
    [diagnostic] = error["data"]["diagnostics"]
    assert diagnostic["file"].endswith("bound.yaml") and diagnostic["line"] == 2


def test_an_unknown_agent_answers_acp_session_new_with_agent_not_found(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Started in no project, the session's cwd chooses it: session/new is where the name is checked
    (started in a project, an unknown agent stops the process at start: tests/cli/test_run.py)."""
    with AcpPeer(project, "nobody", start=tmp_path_factory.mktemp("elsewhere")) as peer:
        error = peer.new_session()["error"]
    assert (error["code"], error["data"]["code"]) == (-32084, "agent_not_found")
    assert "agent 'nobody' not found" in error["message"]


# -- the CLI --------------------------------------------------------------------------------------------


def events(stdout: str) -> list[Json]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def cli_failure(project: Path, *args: str) -> tuple[int, Json]:
    """Exit code and the finished event's ``failure`` of ``ca ARGS --json``."""
    result = run_ca(*args, "--json", cwd=project, env=KEY)
    assert "Traceback" not in result.stderr, result.stderr
    finished = events(result.stdout)[-1]
    assert finished["kind"] == "finished", finished
    assert finished["error"] == (finished["failure"] or {}).get("message", "")
    return result.returncode, finished["failure"]


def test_a_provider_saying_access_denied_is_a_provider_error_in_ca_run(project: Path) -> None:
    code, failure = cli_failure(project, "run", "remote", "hi")
    assert code == 1
    assert (failure["kind"], failure["code"]) == ("ProviderError", "provider_error")
    assert "Access denied" in failure["message"]
    assert failure["data"]["model"] == "openai:fake-model"


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_failed_ca_run_exits_1_with_its_failure_in_the_finished_event(project: Path, name: str) -> None:
    case = CASES[name]
    code, failure = cli_failure(project, "run", case.agent, case.prompt)
    assert code == 1
    assert (failure["kind"], failure["code"]) == (case.kind, case.code)


def test_ca_approve_after_the_timeout_fails_the_task_approval_rejected(project: Path) -> None:
    paused = run_ca("run", "hasty", WRITE, "--json", cwd=project)
    assert paused.returncode == 3, paused.stderr
    task_id = events(paused.stdout)[-1]["task_id"]
    time.sleep(0.6)  # the profile lets an approval wait 300 ms
    code, failure = cli_failure(project, "approve", task_id)
    assert code == 1
    assert (failure["kind"], failure["code"]) == ("ApprovalTimedOut", "approval_rejected")
    assert not (project / "out" / "x.txt").exists()
    listed = json.loads(run_ca("tasks", "list", "--json", cwd=project).stdout)
    assert {t["id"]: t["state"] for t in listed}[task_id] == "failed"


def test_ctrl_c_ends_ca_run_canceled_with_exit_130(project: Path) -> None:
    proc = subprocess.Popen(
        [*CA, "run", "sleepy", NAP_LONG, "--json"],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seen = [json.loads(proc.stdout.readline())]
        while seen[-1]["kind"] != "tool_call":  # the nap has started
            seen.append(json.loads(proc.stdout.readline()))
        proc.send_signal(signal.SIGINT)
        rest, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    finished = events(rest)[-1]
    assert (finished["kind"], finished["state"]) == ("finished", "canceled")
    assert (finished["failure"]["kind"], finished["failure"]["code"]) == ("Cancelled", "cancelled")
    listed = json.loads(run_ca("tasks", "list", "--json", cwd=project).stdout)
    assert {t["id"]: t["state"] for t in listed}[finished["task_id"]] == "canceled"
