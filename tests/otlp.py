"""An OTLP/HTTP trace receiver for the tests: a real uvicorn server that decodes each export with
opentelemetry-proto, and the environment that points a `ca serve` at it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.conftest import free_ports
from tests.serving import SERVER_ENV


@dataclass(frozen=True)
class Exported:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, object]
    links: tuple[tuple[str, str], ...] = ()
    """(trace id, span id) of each span this one links to (a resumed run: the run that paused)."""


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[Exported]]]:
    """(endpoint URL, the spans received so far) while the receiver runs."""
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
                            tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
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


def ancestors(span: Exported, spans: list[Exported]) -> list[Exported]:
    """``span``'s parent, its parent's parent, ... as far as the received spans go."""
    by_id = {s.span_id: s for s in spans}
    found, current = [], span
    while current.parent_id in by_id:
        current = by_id[current.parent_id]
        found.append(current)
    return found


def wait_for_spans(spans: list[Exported], done: Callable[[list[Exported]], bool], timeout: float = 15) -> None:
    """Wait until the spans received satisfy ``done`` (an exporter flushes at exit; the receiver may
    still be decoding), or the timeout passes (the test's assertions then say what is missing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done(list(spans)):
        time.sleep(0.05)


def traced_env(endpoint: str, service: str) -> dict[str, str]:
    """The environment of a `ca serve` exporting its traces (a2a-sdk's spans too) to ``endpoint``."""
    return {
        **SERVER_ENV,
        "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "true",  # a2a-sdk's spans are switched on with ours
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": service,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
