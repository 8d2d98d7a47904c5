"""One trace across two real `ca serve` processes, exported over OTLP/HTTP to a receiver in the test.

Server A serves ``boss``, whose tool is the agent ``echo`` of server B. Both export to the
receiver (the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``); it decodes each request with
opentelemetry-proto. A's ``execute_tool echo`` span is the ancestor of B's ``invoke_agent echo``:
one trace id from the first caller to the callee, across the HTTP hop.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.a2a_peers import result_of, user_message
from tests.conftest import free_ports, run_ca, write_project
from tests.serving import SERVER_ENV, start_serve


@dataclass(frozen=True)
class Exported:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, object]


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Exported]]]:
    spans: list[Exported] = []

    async def traces(request: Request) -> Response:
        body = ExportTraceServiceRequest.FromString(await request.body())
        for resource in body.resource_spans:
            service = next((a.value.string_value for a in resource.resource.attributes if a.key == "service.name"), "")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {
                        a.key: getattr(a.value, a.value.WhichOneof("value") or "string_value") for a in span.attributes
                    }
                    spans.append(
                        Exported(
                            service,
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            attributes,
                        )
                    )
        answer = ExportTraceServiceResponse().SerializeToString()
        return Response(answer, media_type="application/x-protobuf")

    [port] = free_ports(1)
    server = uvicorn.Server(
        uvicorn.Config(Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])]), port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", spans
    server.should_exit = True
    thread.join(timeout=5)


def _env(endpoint: str, service: str) -> dict[str, str]:
    return {
        **SERVER_ENV,
        "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "true",  # a2a-sdk's spans are switched on with ours
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


def test_a_call_between_two_servers_is_one_trace(tmp_path: Path, receiver: tuple[str, list[Exported]]) -> None:
    endpoint, spans = receiver
    b_root = write_project(tmp_path / "b", {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})
    b = start_serve(b_root, env=_env(endpoint, "server-b"))
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
        a = start_serve(a_root, env=_env(endpoint, "server-a"))
        try:
            text = "@tool echo " + json.dumps({"input": "hello from A"})
            answer = result_of(a.rpc("SendMessage", {"message": user_message(text)}, agent="boss"))
        finally:
            a.stop()
    finally:
        b.stop()
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer

    deadline = time.monotonic() + 10  # both flushed at shutdown; the receiver may still be decoding
    while time.monotonic() < deadline and not {"server-a", "server-b"} <= {s.service for s in spans}:
        time.sleep(0.05)
    by_id = {s.span_id: s for s in spans}
    [boss] = [s for s in spans if s.name == "invoke_agent boss" and s.service == "server-a"]
    [tool] = [s for s in spans if s.name == "execute_tool echo" and s.service == "server-a"]
    [echo] = [s for s in spans if s.name == "invoke_agent echo" and s.service == "server-b"]
    assert boss.trace_id == tool.trace_id == echo.trace_id
    assert echo.attributes["gen_ai.agent.name"] == "echo" and echo.attributes["ca.state"] == "completed"
    assert tool.attributes["gen_ai.tool.name"] == "echo"
    ancestors, current = [], echo
    while current.parent_id and current.parent_id in by_id:
        current = by_id[current.parent_id]
        ancestors.append(current)
    assert tool in ancestors and boss in ancestors, [(s.service, s.name) for s in ancestors]
    hop = ancestors[: ancestors.index(tool)]
    assert hop and all(s.service == "server-b" for s in hop)  # a2a-sdk's server spans on B, below A's tool call
    assert any(s.service == "server-b" and s.name.startswith("a2a.") for s in spans)


def test_a_wrong_exporter_name_is_one_clear_error(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    result = run_ca("run", "echo", "hi", cwd=tmp_path, env={"OTEL_TRACES_EXPORTER": "jaeger"})
    assert result.returncode == 2, result.stderr
    assert "OTEL_TRACES_EXPORTER names 'jaeger': ca knows 'otlp', 'console' and 'none'" in result.stderr
    assert "Traceback" not in result.stderr
