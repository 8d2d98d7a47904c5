"""Requests counted for ``/metrics``: by method and by answer, with their latency.

The method is the JSON-RPC ``method`` of the body (read from its first chunk, never the whole
body), or for REST and the other routes the HTTP method and the path below the agent
(``POST /message:send``, ``GET card``); the answer is the HTTP status, or the JSON-RPC error code
when an HTTP 200 carries one. Labels stay bounded whatever a client sends: only the methods
a2a-sdk and the platform define get a label of their own, a path refused before routing (401)
or not known (-32601, HTTP 404/405) is counted as ``unknown``, and task ids and the REST
tenant segment in paths as ``{id}`` and ``{tenant}``.
"""

from __future__ import annotations

import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from framework.protocols.a2a.probes import PATHS as PROBE_PATHS
from framework.runtime.metrics import Metrics

_METHOD = re.compile(rb'"method"\s*:\s*"([A-Za-z0-9_/.:-]{1,64})"')
_ERROR = re.compile(rb'"error"\s*:\s*\{[^{}]*?"code"\s*:\s*(-?\d{1,6})')
_AGENT = re.compile(r"^/agents/[^/]+")
_FIXED_ROUTES = frozenset({"GET /metrics", *(f"GET {path}" for path in PROBE_PATHS), "POST /", "GET card"})
_REST_TOP = frozenset({"message:send", "message:stream", "tasks", "extendedAgentCard", "v1", "card"})


def _known_methods() -> frozenset[str]:
    from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter
    from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher

    from framework.protocols.a2a.platform import METHODS, PREFIX
    from framework.protocols.a2a.stdio_shapes import BY_TASK_ID

    platform = {PREFIX + name for name in METHODS}
    return frozenset({*JsonRpcDispatcher.METHOD_TO_MODEL, *JSONRPC03Adapter.METHOD_TO_MODEL, *platform, *BY_TASK_ID})


class RequestMetrics:
    """ASGI middleware feeding ``ca_requests_total`` and ``ca_request_seconds``."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method: list[str] = []
        answer: dict[str, Any] = {"status": 500, "code": ""}

        async def peeking_receive() -> Message:
            message = await receive()
            if not method and message["type"] == "http.request":
                found = _METHOD.search(message.get("body", b"")[:65536])
                method.append(found.group(1).decode() if found else "")
            return message

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body" and not answer["code"]:
                found = _ERROR.search(message.get("body", b"")[:4096]) if answer["status"] == 200 else None
                answer["code"] = found.group(1).decode() if found else str(answer["status"])
            await send(message)

        try:
            await self.app(scope, peeking_receive, watching_send)
        finally:
            code = answer["code"] or str(answer["status"])
            name = method[0] if method else ""
            if name and name not in _KNOWN:
                name = "unknown"
            name = name or _route(scope)
            if code == "401" and name not in _FIXED_ROUTES:  # refused before routing: the client's path
                name = "unknown"
            if code in ("-32601", "404", "405"):  # not a method or route of ours: no label of its own
                name = "unknown"
            self.metrics.requests.labels(name, code).inc()
            self.metrics.request_seconds.labels(name).observe(time.perf_counter() - started)


def _route(scope: Scope) -> str:
    path = _AGENT.sub("", str(scope.get("path", ""))) or "/"
    if path.endswith("/.well-known/agent-card.json") or path.endswith("/.well-known/agent.json"):
        return "GET card"
    segments = path.split("/")
    if len(segments) > 2 and segments[1] == "rest" and segments[2] not in _REST_TOP:
        segments[2] = "{tenant}"  # the SDK's catch-all tenant mount
    for i in range(1, len(segments)):
        if segments[i - 1] == "tasks" and segments[i]:  # /v1/tasks/ID[:cancel]: the id is not a label
            _, colon, action = segments[i].partition(":")
            segments[i] = "{id}" + colon + action
    return f"{scope.get('method', 'GET')} {'/'.join(segments)[:80]}"


_KNOWN = _known_methods()
