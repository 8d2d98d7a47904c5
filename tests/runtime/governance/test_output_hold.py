"""An answer judged by output rules leaves the process only once it passed them, on every channel.

The forbidden text is a scripted model's reply; each test reads every byte a real client got — `ca run` on a terminal and with
``--json``, A2A streaming over HTTP, ACP chunks and ``session/load`` — and looks for it.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import CA, REPO, ProjectFactory, events, run_ca
from tests.serving import start_serve

SECRETISH = "hunter2-ZETA"
RULE = "contract:\n  must_not:\n    - {output_matches: '(?i)password\\s*[:=]'}\n"
LEAKY = f"""name: leaky
model:
  provider: scripted
  replies: ["the password: {SECRETISH}"]
{RULE}"""
RETRY = f"""name: retry
model:
  provider: scripted
  replies:
    - "the password: {SECRETISH}"
    - "password= {SECRETISH}-2"
    - "all good now"
{RULE}  on_violation: {{action: retry, max_retries: 2}}
"""
CALLER = """name: caller
model:
  provider: scripted
  replies:
    - tool_calls: [{name: leaky, args: {input: "tell me"}}]
tools: [{agent: leaky}]
capabilities: {agents: [leaky]}
profile: autonomous
"""
FILES = {"agents/leaky.yaml": LEAKY, "agents/retry.yaml": RETRY, "agents/plain.yaml": "name: plain\n"}


def test_the_terminal_never_shows_a_forbidden_answer(make_project: ProjectFactory) -> None:
    root = make_project(FILES)
    result = run_ca("run", "leaky", "go", cwd=root)
    assert result.returncode == 1
    assert SECRETISH not in result.stdout + result.stderr
    assert "contract violated" in result.stderr


def test_json_events_carry_no_forbidden_text(make_project: ProjectFactory) -> None:
    root = make_project(FILES)
    result = run_ca("run", "leaky", "go", "--json", cwd=root)
    assert SECRETISH not in result.stdout
    evs = events(result.stdout)
    assert [e for e in evs if e["kind"] == "text"] == []
    assert evs[-1]["state"] == "failed" and evs[-1]["error"].startswith("contract violated: ")


def test_retried_attempts_are_never_shown_only_the_answer_that_passed(make_project: ProjectFactory) -> None:
    root = make_project(FILES)
    result = run_ca("run", "retry", "go", "--json", cwd=root)
    assert SECRETISH not in result.stdout
    evs = events(result.stdout)
    assert [e["text"] for e in evs if e["kind"] == "text"] == ["all good now"]
    assert evs[-1]["state"] == "completed" and evs[-1]["output"] == "all good now"


def test_an_agent_without_output_rules_still_streams_word_by_word(make_project: ProjectFactory) -> None:
    root = make_project(FILES)
    evs = events(run_ca("run", "plain", "one two three four", "--json", cwd=root).stdout)
    assert len([e for e in evs if e["kind"] == "text"]) > 3


def test_a_callee_s_forbidden_answer_does_not_stream_through_its_caller(make_project: ProjectFactory) -> None:
    root = make_project({**FILES, "agents/caller.yaml": CALLER})
    result = run_ca("run", "caller", "go", "--json", cwd=root)
    assert SECRETISH not in result.stdout
    end = events(result.stdout)[-1]
    assert end["state"] == "failed" and end["error"].startswith("contract violated: ")


def _a2a_stream(url: str, text: str, method: str = "SendStreamingMessage") -> str:
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}},
    }
    body = ""
    headers = {"A2A-Version": "1.0"}
    with httpx.stream("POST", url, json=request, headers=headers, timeout=60) as response:
        for chunk in response.iter_text():
            body += chunk
    return body


def test_a_blocking_a2a_answer_carries_no_forbidden_text(make_project: ProjectFactory, tmp_path: Path) -> None:
    """A blocking SendMessage runs without token streaming: each model turn's text comes whole, and
    is held and judged the same way."""
    root = make_project(FILES)
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, logs=logs)
    try:
        leaked = _a2a_stream(f"{server.url}/agents/leaky/", "go", "SendMessage")
        retried = _a2a_stream(f"{server.url}/agents/retry/", "go", "SendMessage")
    finally:
        server.stop()
    assert SECRETISH not in leaked and "TASK_STATE_FAILED" in leaked
    assert SECRETISH not in retried and "all good now" in retried and "TASK_STATE_COMPLETED" in retried


def test_a2a_streaming_sends_no_forbidden_chunk(make_project: ProjectFactory, tmp_path: Path) -> None:
    root = make_project(FILES)
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, logs=logs)
    try:
        leaked = _a2a_stream(f"{server.url}/agents/leaky/", "go")
        retried = _a2a_stream(f"{server.url}/agents/retry/", "go")
    finally:
        server.stop()
    assert SECRETISH not in leaked and "TASK_STATE_FAILED" in leaked
    assert SECRETISH not in retried and "all good now" in retried


class _AcpPeer:
    """``ca run --stdio`` spoken to line by line (ACP v1 JSON-RPC), every byte it writes kept."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [*CA, "run", "--stdio"],
            cwd=root,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.seen = ""
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}))
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            assert line, "the agent closed its output"
            self.seen += line
            message = json.loads(line)
            if message.get("id") == self.next_id and "method" not in message:
                return message

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_acp_chunks_and_session_load_never_show_a_withheld_answer(make_project: ProjectFactory) -> None:
    root = make_project({**FILES, "ca.yaml": "default_agent: retry\n"})
    first = _AcpPeer(root)
    try:
        first.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session = first.request("session/new", {"cwd": str(root), "mcpServers": []})["result"]["sessionId"]
        answer = first.request("session/prompt", {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]})
        assert answer["result"]["stopReason"] == "end_turn"
    finally:
        first.close()
    assert SECRETISH not in first.seen and "all good now" in first.seen
    second = _AcpPeer(root)
    try:
        second.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        second.request("session/load", {"sessionId": session, "cwd": str(root), "mcpServers": []})
    finally:
        second.close()
    assert "all good now" in second.seen
    assert SECRETISH not in second.seen and "breaks the agent's contract" not in second.seen


def test_a_workflow_s_answer_is_judged_by_its_contract_and_held_until_it_passes(make_project: ProjectFactory) -> None:
    flow = f"name: flow\nkind: workflow\nsteps:\n  - {{id: ask, agent: plain}}\n{RULE}"
    root = make_project({**FILES, "agents/flow.yaml": flow})
    bad = run_ca("run", "flow", f"my password: {SECRETISH}", "--json", cwd=root)
    evs = events(bad.stdout)
    assert [e for e in evs if e["kind"] == "text"] == []
    assert evs[-1]["state"] == "failed" and evs[-1]["error"].startswith("contract violated: ")
    good = events(run_ca("run", "flow", "all fine", "--json", cwd=root).stdout)
    answer = [e["text"] for e in good if e["kind"] == "text" and not e["source"]]
    assert answer == ["[plain] You said: all fine"]
    assert good[-1]["state"] == "completed"
