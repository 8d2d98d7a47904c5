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


def drop_idle_spans() -> None:
    """Give a2a-sdk's traced classes their own methods back when its spans are off.

    a2a-sdk wraps the methods of its handler, event queues, dispatchers and task manager in
    ``trace_function`` at import. With ``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false`` (ca's default
    without tracing, :mod:`framework.cli.entry`) each wrapper still runs on every call — a no-op
    tracer, a span, a debug log — about 8% of the instructions of a served request, for nothing.
    Each wrapper keeps the method it wraps (``__wrapped__``), so the methods of every a2a-sdk class
    loaded now, and its module-level functions, are set back to it. Nothing changes when the spans
    are on.
    """
    import sys

    from a2a.utils import telemetry as sdk

    if sdk.otel_installed and sdk.otel_enabled:
        return

    async def _async() -> None: ...

    wrappers = {sdk.trace_function(lambda: None).__code__, sdk.trace_function(_async).__code__}

    def bare(value: object) -> object:
        while getattr(value, "__code__", None) in wrappers and hasattr(value, "__wrapped__"):
            value = value.__wrapped__  # a subclass may wrap the wrapper its base already has
        return value

    for name, module in list(sys.modules.items()):
        if not (name == "a2a" or name.startswith("a2a.")) or module is None:
            continue
        owners = [module, *(v for v in vars(module).values() if isinstance(v, type) and v.__module__ == name)]
        for owner in owners:
            for attr, value in list(vars(owner).items()):
                if (plain := bare(value)) is not value:
                    setattr(owner, attr, plain)
