"""One trace across servers: a request's W3C trace context becomes the parent of what it runs.

Added to ``ca serve`` only when tracing is on (:mod:`framework.runtime.telemetry`): the
``traceparent`` a calling agent's server sent (its ``execute_tool`` span) is the current
context while the request is handled, so a2a-sdk's spans and the run's ``invoke_agent`` span
are its children — one trace id from the first caller to the last callee.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from framework.runtime import telemetry


class TraceContext:
    """ASGI middleware: the incoming trace context is current for the whole request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from opentelemetry import context

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        token = context.attach(telemetry.extracted(headers))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
