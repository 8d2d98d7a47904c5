"""Review findings: ``ca serve`` trusts a client's W3C trace headers beyond the trace id.

1. Baggage relay: ``TraceContext`` extracts the request's headers with OpenTelemetry's global
   propagator (tracecontext *and* baggage) and ``origins._Pin`` injects the current context into
   every request to a remote agent, so a client's ``baggage`` header (any keys, up to 8 KiB) is
   forwarded verbatim to remote agents, on requests that carry the server's registry credentials.
   A remote that reads baggage (tenant, user, feature flags) acts on what the client chose.
2. Sampling off by request: the SDK's default sampler is ParentBased, so a client sending
   ``traceparent ...-00`` makes its run (invoke_agent, tool and model spans, and the audit
   records as span events) vanish from the traces, while other callers' runs are exported.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.a2a_peers import result_of, user_message
from tests.conftest import free_ports, write_project
from tests.otlp import Exported, otlp_receiver, traced_env
from tests.serving import SERVER_ENV, start_serve


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Exported]]]:
    with otlp_receiver() as received:
        yield received


pytestmark = pytest.mark.e2e

TRACEPARENT = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


@pytest.fixture
def remote() -> Iterator[tuple[int, list[dict[str, str]]]]:
    """An HTTP server standing in for a remote agent: it records each request's headers (and has no card)."""
    seen: list[dict[str, str]] = []

    async def anything(request: Request) -> Response:
        seen.append(dict(request.headers))
        return JSONResponse({}, status_code=404)

    [port] = free_ports(1)
    server = uvicorn.Server(
        uvicorn.Config(
            Starlette(routes=[Route("/{p:path}", anything, methods=["GET", "POST"])]), port=port, log_level="error"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield port, seen
    server.should_exit = True
    thread.join(timeout=5)


def test_a_client_s_baggage_is_not_forwarded_to_remote_agents(
    tmp_path: Path, remote: tuple[int, list[dict[str, str]]]
) -> None:
    port, seen = remote
    root = write_project(
        tmp_path,
        {
            "agents/boss.yaml": f"""
                name: boss
                profile: autonomous
                tools: [{{agent: "http://127.0.0.1:{port}/agents/echo/"}}]
                capabilities: {{network: {{allow: ["127.0.0.1:{port}"]}}}}
            """
        },
    )
    server = start_serve(root, env={**SERVER_ENV, "OTEL_TRACES_EXPORTER": "console"})
    try:
        text = "@tool echo " + json.dumps({"input": "hi"})
        answer = server.post(
            {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message(text)}},
            path="/agents/boss/",
            headers={"traceparent": TRACEPARENT, "baggage": "tenant=someone-else,role=admin"},
        )
        assert answer.status_code == 200, answer.text
    finally:
        server.stop()
    assert seen, "the remote agent was never called"
    assert all(h.get("traceparent", "").startswith("00-" + "a" * 32) for h in seen)  # one trace: as designed
    assert [h.get("baggage") for h in seen if "baggage" in h] == []


def test_a_client_s_unsampled_traceparent_does_not_hide_its_run(
    tmp_path: Path,
    receiver: tuple[str, list[Exported]],
) -> None:
    endpoint, spans = receiver
    root = write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    server = start_serve(root, env=traced_env(endpoint, "server"))
    try:
        hidden = "00-" + "c" * 32 + "-" + "d" * 16 + "-00"
        answer = server.post(
            {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message("hi")}},
            path="/agents/echo/",
            headers={"traceparent": hidden},
        )
        task_id = result_of(answer.json())["task"]["id"]
        visible = result_of(server.rpc("SendMessage", {"message": user_message("hi")}))["task"]["id"]
    finally:
        server.stop()
    deadline = time.monotonic() + 10
    runs: dict[object, Exported] = {}
    while time.monotonic() < deadline and visible not in runs:
        runs = {s.attributes.get("ca.task.id"): s for s in spans if s.name == "invoke_agent echo"}
        time.sleep(0.05)
    assert visible in runs  # the receiver works
    assert task_id in runs, "the run of a request with an unsampled traceparent was not traced"
