"""The ``ca`` console script. ``ca run --stdio`` takes a fast path that answers an IDE's
``initialize`` before any heavy library (typer, pydantic, langgraph, a2a) is imported;
every other command goes through the Typer app."""

from __future__ import annotations

import os
import sys

from framework.runtime.otel_switch import wanted

SDK_TRACING = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"
"""a2a-sdk wraps its server and client in OpenTelemetry spans unless this is ``false``. With no
tracer configured the spans go nowhere, cost time on every request, and log "Failed to detach
context" tracebacks when a stream is dropped; ``ca`` turns them on only with its own tracing
(docs/observability.md), unless the variable is set."""


def main() -> None:
    os.environ.setdefault(SDK_TRACING, "true" if wanted(os.environ) else "false")
    argv = sys.argv[1:]
    if argv[:1] == ["run"] and "--stdio" in argv:
        from framework.cli.stdio import parse_stdio_args

        options = parse_stdio_args(argv[1:])
        if options is not None:
            from framework.cli.stdio import main as stdio_main

            sys.exit(stdio_main(options))
    from framework.cli.app import main as app_main

    app_main()
