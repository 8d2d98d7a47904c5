"""One trace across two real `ca serve` processes, exported over OTLP/HTTP to a receiver in the test.

Server A serves ``boss``, whose tool is the agent ``echo`` of server B. Both export to the
receiver (the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``); it decodes each request with
opentelemetry-proto. A's ``execute_tool echo`` span is the ancestor of B's ``invoke_agent echo``:
one trace id from the first caller to the callee, across the HTTP hop.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_peers import result_of, user_message
from tests.conftest import run_ca, write_project
from tests.otlp import Exported, ancestors, otlp_receiver, traced_env, wait_for_spans
from tests.serving import start_serve


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Exported]]]:
    with otlp_receiver() as received:
        yield received


def test_a_call_between_two_servers_is_one_trace(tmp_path: Path, receiver: tuple[str, list[Exported]]) -> None:
    endpoint, spans = receiver
    b_root = write_project(tmp_path / "b", {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})
    b = start_serve(b_root, env=traced_env(endpoint, "server-b"))
    try:
        a_root = write_project(
            tmp_path / "a",
            {
                "agents/boss.yaml": f"""
                    name: boss
                    profile: autonomous
                    tools: [{{agent: "{b.url}/agents/echo/"}}]
                    capabilities: {{network: {{allow: ["127.0.0.1:{b.port}"]}}}}
                """
            },
        )
        a = start_serve(a_root, env=traced_env(endpoint, "server-a"))
        try:
            text = "@tool echo " + json.dumps({"input": "hello from A"})
            answer = result_of(a.rpc("SendMessage", {"message": user_message(text)}, agent="boss"))
        finally:
            a.stop()
    finally:
        b.stop()
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer

    wait_for_spans(spans, lambda got: {"server-a", "server-b"} <= {s.service for s in got})
    [boss] = [s for s in spans if s.name == "invoke_agent boss" and s.service == "server-a"]
    [tool] = [s for s in spans if s.name == "execute_tool echo" and s.service == "server-a"]
    [echo] = [s for s in spans if s.name == "invoke_agent echo" and s.service == "server-b"]
    assert boss.trace_id == tool.trace_id == echo.trace_id
    assert echo.attributes["gen_ai.agent.name"] == "echo" and echo.attributes["ca.state"] == "completed"
    assert tool.attributes["gen_ai.tool.name"] == "echo"
    above = ancestors(echo, spans)
    assert tool in above and boss in above, [(s.service, s.name) for s in above]
    hop = above[: above.index(tool)]
    assert hop and all(s.service == "server-b" for s in hop)  # a2a-sdk's server spans on B, below A's tool call
    assert any(s.service == "server-b" and s.name.startswith("a2a.") for s in spans)


def test_a_wrong_exporter_name_is_one_clear_error(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    result = run_ca("run", "echo", "hi", cwd=tmp_path, env={"OTEL_TRACES_EXPORTER": "jaeger"})
    assert result.returncode == 2, result.stderr
    assert "OTEL_TRACES_EXPORTER names 'jaeger': ca knows 'otlp', 'console' and 'none'" in result.stderr
    assert "Traceback" not in result.stderr
