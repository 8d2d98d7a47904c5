"""The ``ca`` console script. ``ca run --stdio`` takes a fast path that answers an IDE's
``initialize`` before any heavy library (typer, pydantic, langgraph, a2a) is imported;
every other command goes through the Typer app."""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["run"] and "--stdio" in argv:
        from framework.cli.stdio import parse_stdio_args

        options = parse_stdio_args(argv[1:])
        if options is not None:
            from framework.cli.stdio import main as stdio_main

            sys.exit(stdio_main(options))
    from framework.cli.app import main as app_main

    app_main()
