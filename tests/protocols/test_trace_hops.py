"""One trace across the hops that are not A2A over HTTP, in real `ca` processes exporting over
OTLP/HTTP to a receiver in the test (decoded with opentelemetry-proto).

* A2A over stdio: the message's ``metadata.traceparent`` (a stdio caller has no headers).
* ACP: the prompt's ``_meta.traceparent`` (ACP reserves the W3C keys at the root of ``_meta``).
* MCP: our client sends ``_meta.traceparent`` (MCP SEP-414) from the calling ``execute_tool``
  span, and ``ca mcp serve`` continues it: the served agent's run is in the caller's trace.
* A run paused by `ca run` and approved by `ca approve` in another process: two traces, the
  resumed run linked to the run that paused.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_peers import StdioPeer, result_of, user_message
from tests.conftest import SIDE_EFFECT, run_ca, write_project
from tests.otlp import Exported, ancestors, otlp_receiver, traced_env, wait_for_spans

CALLER_TRACE = secrets.token_hex(16)
CALLER_SPAN = secrets.token_hex(8)
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
"""The span of a caller that is not ours (its spans are not exported here)."""


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Exported]]]:
    with otlp_receiver() as received:
        yield received


def _runs(spans: list[Exported], agent: str) -> list[Exported]:
    return [s for s in spans if s.name == f"invoke_agent {agent}"]


def _assert_continues_caller(run: Exported, spans: list[Exported]) -> None:
    """``run`` is in the caller's trace, and its topmost received ancestor's parent is the caller's span."""
    assert run.trace_id == CALLER_TRACE
    chain = [run, *ancestors(run, spans)]
    assert chain[-1].parent_id == CALLER_SPAN, [(s.name, s.parent_id) for s in chain]


def test_a_message_over_stdio_continues_the_trace_its_metadata_carries(
    tmp_path: Path, receiver: tuple[str, list[Exported]]
) -> None:
    endpoint, spans = receiver
    root = write_project(tmp_path, {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})
    peer = StdioPeer(root, "echo", env=traced_env(endpoint, "stdio"))
    try:
        traced = {**user_message("traced"), "metadata": {"traceparent": TRACEPARENT, "tracestate": "ca=1"}}
        first = peer.request("SendMessage", {"message": traced})
        second = peer.request("SendMessage", {"message": user_message("untraced")})
        code, _ = peer.close()
    finally:
        peer.kill()
    assert code == 0
    for answer in (first, second):
        assert result_of(answer)["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    wait_for_spans(spans, lambda got: len(_runs(got, "echo")) == 2)
    runs = {str(s.attributes["ca.task.id"]): s for s in _runs(spans, "echo")}
    traced_run, untraced_run = runs[result_of(first)["task"]["id"]], runs[result_of(second)["task"]["id"]]
    _assert_continues_caller(traced_run, spans)
    assert traced_run.attributes["gen_ai.agent.name"] == "echo" and traced_run.attributes["ca.state"] == "completed"
    assert untraced_run.trace_id != CALLER_TRACE  # no trace context: a trace of its own
    assert not any(s.parent_id == CALLER_SPAN for s in [untraced_run, *ancestors(untraced_run, spans)])


def test_an_acp_prompt_continues_the_trace_its_meta_carries(
    tmp_path: Path, receiver: tuple[str, list[Exported]]
) -> None:
    endpoint, spans = receiver
    root = write_project(tmp_path, {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})
    peer = StdioPeer(root, "echo", env=traced_env(endpoint, "acp"))
    try:
        assert "result" in peer.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        session = peer.request("session/new", {"cwd": str(root), "mcpServers": []})["result"]["sessionId"]
        prompt = [{"type": "text", "text": "hello"}]
        answer = peer.request(
            "session/prompt", {"sessionId": session, "prompt": prompt, "_meta": {"traceparent": TRACEPARENT}}
        )
        code, _ = peer.close()
    finally:
        peer.kill()
    assert answer["result"]["stopReason"] == "end_turn", answer
    assert code == 0
    wait_for_spans(spans, lambda got: bool(_runs(got, "echo")))
    [run] = _runs(spans, "echo")
    _assert_continues_caller(run, spans)
    assert run.attributes["gen_ai.conversation.id"] == session


def test_an_agent_served_over_mcp_continues_its_callers_trace(
    tmp_path: Path, receiver: tuple[str, list[Exported]]
) -> None:
    endpoint, spans = receiver
    served = write_project(tmp_path / "served", {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})
    env = traced_env(endpoint, "mcp-server")
    server_env = {
        k: env[k] for k in ("PYTHONPATH", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_BSP_SCHEDULE_DELAY")
    }
    replies = [{"tool_calls": [{"name": "team.echo", "args": {"message": "hello over MCP"}}]}, "done"]
    caller = write_project(
        tmp_path / "caller",
        {
            "ca.yaml": f"""
                mcp_servers:
                  team:
                    command: {sys.executable}
                    args: ["-m", "framework", "mcp", "serve", "{served}"]
                    env: {json.dumps(server_env)}
                    timeout: 60s
            """,
            "agents/boss.yaml": f"""
                name: boss
                profile: autonomous
                model: {{provider: scripted, replies: {json.dumps(replies)}}}
                tools: [{{mcp: team}}]
                capabilities: {{mcp: {{allow: ["team.*"]}}}}
            """,
        },
    )
    done = run_ca("run", "boss", "go", cwd=caller, env=traced_env(endpoint, "mcp-client"), timeout=120)
    assert done.returncode == 0, done.stderr
    wait_for_spans(spans, lambda got: bool(_runs(got, "echo")) and bool(_runs(got, "boss")))
    [boss] = _runs(spans, "boss")
    [tool] = [s for s in spans if s.name == "execute_tool team.echo"]
    [echo] = _runs(spans, "echo")
    assert boss.service == tool.service == "mcp-client" and echo.service == "mcp-server"
    assert boss.trace_id == tool.trace_id == echo.trace_id
    above = ancestors(echo, spans)
    assert tool in above and boss in above, [(s.service, s.name) for s in above]
    # Between the tool call and the served run: the MCP SDK's client and server spans of the call.
    hop = [s.name for s in above[: above.index(tool)]]
    assert "tools/call echo" in hop and "MCP send tools/call echo" in hop, hop
    assert echo.attributes["gen_ai.agent.name"] == "echo" and echo.attributes["ca.state"] == "completed"


def test_a_run_approved_in_another_process_is_linked_to_the_run_that_paused(
    tmp_path: Path, receiver: tuple[str, list[Exported]]
) -> None:
    endpoint, spans = receiver
    effects = tmp_path / "effects.log"
    root = write_project(
        tmp_path / "project",
        {
            "tools/side.py": SIDE_EFFECT,
            "agents/writer.yaml": f"""
                name: writer
                profile: manual
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{{name: append, args: {{file: "{effects}", text: hello}}}}]
                    - done
                tools:
                  - python: tools/side.py:append
            """,
        },
    )
    paused = run_ca("run", "writer", "write it", cwd=root, env=traced_env(endpoint, "pauser"))
    assert paused.returncode == 3, paused.stderr  # waiting for a decision; nobody at a terminal to ask
    wait_for_spans(spans, lambda got: bool(_runs(got, "writer")))
    [first] = _runs(spans, "writer")
    assert first.attributes["ca.state"] == "input-required"
    task = str(first.attributes["ca.task.id"])

    approved = run_ca("approve", task, cwd=root, env=traced_env(endpoint, "approver"))
    assert approved.returncode == 0, approved.stderr
    wait_for_spans(spans, lambda got: len(_runs(got, "writer")) == 2)
    [second] = [s for s in _runs(spans, "writer") if s.service == "approver"]
    assert second.attributes["ca.task.id"] == task and second.attributes["ca.state"] == "completed"
    assert second.attributes["ca.resumed"] is True
    assert second.links == ((first.trace_id, first.span_id),)  # the run that paused, in its own trace
    assert effects.read_text() == "hello\n"
