"""``ca run --stdio [AGENT] [--protocol acp|a2a] [-p PROJECT]``: one agent on stdin/stdout.

The protocol is chosen from the first JSON-RPC request: ``initialize`` means an IDE speaking
the Agent Client Protocol, anything else A2A JSON-RPC. Blank lines are skipped; a line before
it that is not a JSON-RPC request is answered (-32700 or -32600, id null) and decides nothing.
Input is read as bytes, each line decoded on its own, so invalid UTF-8 is an error answer,
never the end of the process, whatever the locale. This module imports only the
standard library (and ``framework.protocols.jsontext``, which does too), so ``initialize`` is answered within milliseconds of start-up; the
runtime loads in the background meanwhile. Everything the process prints other than
protocol goes to stderr: file descriptor 1 is re-pointed at stderr and the protocol
writes to a private duplicate of the original stdout. Likewise the protocol reads a private
duplicate of the original stdin, and fd 0 reads the null device.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal, TextIO

from framework.protocols.jsontext import JsonTextError, decode, read_line

Protocol = Literal["auto", "acp", "a2a"]
LOG_FORMATS = ("human", "json")
FIRST_LINE_LIMIT = 4 * 1024 * 1024
"""Bytes a line may have before the protocol is chosen (then: server.max_request_bytes for A2A)."""


@dataclass
class StdioOptions:
    project: Path | None
    """``-p``; None: the project at or above the current folder (for ACP: at or above the session's cwd)."""
    agent: str | None
    protocol: Protocol = "auto"
    reload: bool = False
    log_format: Literal["human", "json"] | None = None
    """``--log-format``; None: ``CA_LOG_FORMAT``, else human."""


def parse_stdio_args(args: list[str]) -> StdioOptions | None:
    """Our own tiny parser (typer costs ~100 ms); None lets the Typer app report any mistake."""
    project: Path | None = None
    agent, protocol, reload = None, "auto", False
    log_format: str | None = None
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--stdio":
            continue
        if arg == "--reload":
            reload = True
        elif arg in ("-p", "--project") and rest:
            project = Path(rest.pop(0))
        elif arg.startswith("--project="):
            project = Path(arg.split("=", 1)[1])
        elif arg == "--protocol" and rest and rest[0] in ("acp", "a2a", "auto"):
            protocol = rest.pop(0)
        elif arg.startswith("--protocol=") and arg.split("=", 1)[1] in ("acp", "a2a", "auto"):
            protocol = arg.split("=", 1)[1]
        elif arg == "--log-format" and rest and rest[0] in LOG_FORMATS:
            log_format = rest.pop(0)
        elif arg.startswith("--log-format=") and arg.split("=", 1)[1] in LOG_FORMATS:
            log_format = arg.split("=", 1)[1]
        elif not arg.startswith("-") and agent is None:
            agent = arg
        else:
            return None
    return StdioOptions(project, agent, protocol, reload, log_format)  # type: ignore[arg-type]


def protocol_stream() -> TextIO:
    """A private stdout for protocol messages; fd 1 (and ``sys.stdout``) now lead to stderr."""
    # backslashreplace: a lone surrogate can only sit inside a JSON string, where "\\udXXX" is its escape.
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="backslashreplace")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def protocol_input() -> BinaryIO:
    """A private reader of the original stdin for protocol messages; fd 0 (and ``sys.stdin``) now
    read the null device, so nothing else in the process, or started by it, takes a request's bytes.

    ``sys.stdin`` is never the protocol's: the thread that reads requests may still block in a read
    of this stream when the process ends (:mod:`framework.protocols.stdio_loop`), and the
    interpreter never touches a stream it does not know.
    """
    wire = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return wire


def main(options: StdioOptions) -> int:
    out = protocol_stream()
    stdin = protocol_input()
    from framework.spec.root import project_root

    root = project_root(options.project)
    if (unknown := _unknown_agent(options, root)) is not None:
        return unknown
    found = _first_request(stdin, out, chosen=options.protocol != "auto")
    if found is None:
        return 0
    first, message = found
    protocol = options.protocol
    if protocol == "auto":
        protocol = "acp" if isinstance(message, dict) and message.get("method") == "initialize" else "a2a"
    if protocol == "acp":
        from framework.protocols.acp.hello import answer_first

        first_answered = answer_first(message, out, root, options.agent)
        if (failed := _logging(options)) is not None:  # after the answer: its imports cost ~100 ms
            return failed
        from framework.protocols.acp.server import run_acp

        return run_acp(
            root,
            options.agent,
            stdin,
            out,
            first_answered=first_answered,
            first=first,
            reload=options.reload,
            pinned=options.project is not None,
        )
    if (failed := _logging(options)) is not None:
        return failed
    return _run_a2a(options, root, first, stdin, out)


def _unknown_agent(options: StdioOptions, root: Path) -> int | None:
    """Exit 2 at start, before any request, when AGENT is not an agent of the project (as ``ca run``
    does): else the process would serve nothing, or exit 0 at the end of its input.

    Only where the project is settled at start: the one ``-p`` names, or, for ``--protocol a2a``,
    the one the current folder is in. Otherwise an editor's ACP session ``cwd`` may choose another
    project (docs/ide.md: an editor that starts ``ca`` from its own folder still gets the project
    it has open), and ``session/new`` answers an unknown agent then. A light scan
    of ``agents/`` (what ``initialize`` reads anyway) clears a known name, keeping ``initialize``
    fast; only a name it does not find is confirmed by loading the project.
    """
    from framework.protocols.acp.hello import may_have_agent
    from framework.spec.root import find_root

    settled = options.project is not None or (options.protocol == "a2a" and find_root(root) is not None)
    if options.agent is None or not settled:
        return None
    if may_have_agent(root, options.agent):
        return None
    from framework.errors import AgentNotFound, SpecError
    from framework.spec import load_project

    try:
        project = load_project(root)
    except SpecError:
        return None  # an invalid project is reported while serving: A2A at start, ACP at session/new
    if options.agent in project.agents:
        return None
    error = AgentNotFound.among(options.agent, project.agents)
    sys.stderr.write(f"error: {error}\n")
    return error.exit_code


def _logging(options: StdioOptions) -> int | None:
    """Set up logging (``--log-format``, ``CA_LOG_FORMAT``); the exit code of a bad ``CA_LOG_FORMAT``."""
    from framework.errors import SpecError
    from framework.runtime.logs import chosen, configure

    try:
        configure(chosen(options.log_format, os.environ))
    except SpecError as exc:
        for diagnostic in exc.diagnostics:
            sys.stderr.write(diagnostic.render() + "\n")
        return exc.exit_code
    return None


def _first_request(stdin: BinaryIO, out: TextIO, *, chosen: bool) -> tuple[bytes, Any] | None:
    """The first JSON-RPC request and its value; lines before it get their error answer here.

    With the protocol ``chosen`` (``--protocol``), the first non-blank line, whatever it holds
    (None as its value when it is not JSON): that protocol's loop answers it.
    """
    while True:
        line = read_line(stdin, FIRST_LINE_LIMIT)
        if not line:
            return None
        if isinstance(line, int):
            _refuse(out, -32600, f"a line of {line} bytes is longer than {FIRST_LINE_LIMIT} bytes")
            continue
        if not line.strip():
            continue
        try:
            message = decode(line)
        except JsonTextError as exc:
            if chosen:
                return line, None
            _refuse(out, -32700, f"parse error: {exc}")
            continue
        if chosen or (
            isinstance(message, dict) and message.get("jsonrpc") == "2.0" and isinstance(message.get("method"), str)
        ):
            return line, message
        _refuse(out, -32600, "not a JSON-RPC 2.0 request: need jsonrpc '2.0' and a method name")


def _refuse(out: TextIO, code: int, message: str) -> None:
    sys.stderr.write(f"refused a line: {code} {message}\n")
    out.write(json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}) + "\n")
    out.flush()


def _run_a2a(options: StdioOptions, root: Path, first: bytes, stdin: BinaryIO, out: TextIO) -> int:
    from framework.errors import CAError, SpecError
    from framework.protocols.stdio_loop import run

    try:
        return run(_a2a(options, root, first, stdin, out))
    except SpecError as exc:
        for diagnostic in exc.diagnostics:
            sys.stderr.write(diagnostic.render() + "\n")
        return exc.exit_code
    except CAError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return exc.exit_code


async def _a2a(options: StdioOptions, root: Path, first: bytes, stdin: BinaryIO, out: TextIO) -> int:
    import asyncio
    from contextlib import AsyncExitStack

    from framework.runtime.heap import starting_up

    async with AsyncExitStack() as stack:
        with starting_up():
            from framework.errors import UsageError
            from framework.protocols.a2a import open_remote
            from framework.protocols.a2a.stdio import serve_stdio
            from framework.protocols.mcp import open_mcp
            from framework.runtime.runtime import Runtime
            from framework.spec import load_project

            project = load_project(root)
            name = options.agent or project.default_agent
            if name is None:
                raise UsageError("the project has no agents to serve")
            runtime = await Runtime.open(project, source="a2a-stdio", stack=stack, remote=open_remote, mcp=open_mcp)
        watcher = None
        if options.reload:
            from framework.runtime.reload import watch

            watcher = asyncio.create_task(watch(runtime))
        try:
            await serve_stdio(runtime, name, stdin, out, first)
        finally:
            if watcher is not None:
                watcher.cancel()
    return 0
