"""``ca mcp list`` and ``ca mcp lock``: the tools of a project's MCP servers, and pinning them.

Both start the servers declared in ``ca.yaml`` (``ca validate`` never does) and stop them
before returning. Only the typer app is defined at import; the rest loads when a command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer

from framework.cli.options import ProjectArg, ProjectOpt, project_dir

mcp_app = typer.Typer(
    help="The project's MCP servers: list their tools, pin them in ca.mcp.lock.", no_args_is_help=True
)


@mcp_app.command("list")
def list_command(
    server: Annotated[str | None, typer.Argument(help="Only this server (default: every one in ca.yaml).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tools as JSON.")] = False,
    project: ProjectOpt = None,
) -> None:
    """Start each server and print each tool's name, description and annotations, and its pin.

    Exit 0 when every server answered, 1 when one could not be listed, 2 for an unknown server.
    """
    import asyncio

    listed, problems = asyncio.run(_list(project_dir(project), server))
    if as_json:
        typer.echo(json.dumps({"servers": listed, "errors": problems}, indent=2))
    else:
        for name, tools in listed.items():
            typer.echo(f"{name}: {len(tools)} tool{'' if len(tools) == 1 else 's'}")
            for tool in tools:
                hints = ", ".join(f"{k}={str(v).lower()}" for k, v in tool["annotations"].items()) or "no annotations"
                typer.echo(f"  {tool['name']:<28} [{hints}; {tool['pin']}]")
                if tool["description"]:
                    typer.echo(f"      {tool['description'].splitlines()[0]}")
        for problem in problems.values():
            typer.echo(f"error: {problem}", err=True)
    if problems:
        raise typer.Exit(1)


@mcp_app.command("lock")
def lock_command(project: ProjectOpt = None) -> None:
    """Record the digest of every tool of each MCP server the agents use in ca.mcp.lock (commit it).

    Run it after reviewing a server's tools (``ca mcp list``); a tool that changes later is refused
    until this runs again. Exit 1 when a server could not be listed (the lock is then not written).
    """
    import asyncio

    raise typer.Exit(asyncio.run(_lock(project_dir(project))))


@mcp_app.command("serve")
def serve_command(project: ProjectArg = None, project_option: ProjectOpt = None) -> None:
    """Serve the project's agents as an MCP server over stdio: each agent a tool, its skills prompts.

    For an MCP client's config (Claude Desktop, Cursor, VS Code): command `ca`, args
    `["mcp", "serve", "/path/to/project"]`. Protocol on stdout only; logs go to stderr.
    """
    from framework.cli.stdio import protocol_input
    from framework.protocols.stdio_loop import run

    raise typer.Exit(run(_serve(project_dir(project_option, project), protocol_input())))


async def _serve(project_dir: Path, stdin: BinaryIO) -> int:
    from contextlib import AsyncExitStack

    from framework.protocols.a2a import open_remote
    from framework.protocols.mcp import open_mcp
    from framework.protocols.mcp.server import serve_stdio
    from framework.runtime.runtime import Runtime
    from framework.spec import load_project

    project = load_project(project_dir)
    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(project, source="mcp", stack=stack, remote=open_remote, mcp=open_mcp)
        await serve_stdio(runtime, stdin)
    return 0


async def _open(project_dir: Path) -> tuple[Any, Any]:
    import os

    from framework.protocols.mcp import open_mcp
    from framework.runtime.governance.secrets import KNOWN, project_secrets
    from framework.spec import load_project
    from framework.spec.interpolate import load_dotenv

    project = load_project(project_dir)
    dotenv = load_dotenv(project.root)
    environ = {**dotenv, **os.environ}
    KNOWN.add(project_secrets(project, environ, dotenv))
    return project, open_mcp(project, environ)


def _unknown(project: Any, server: str) -> None:
    from framework.errors import UsageError
    from framework.spec.common import did_you_mean

    names = sorted(project.config.mcp_servers)
    hint = did_you_mean(server, names) or f"servers in ca.yaml: {', '.join(names) or 'none'}"
    raise UsageError(f"unknown MCP server {server!r}; {hint}")


async def _list(project_dir: Path, only: str | None) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    from framework.errors import CAError
    from framework.runtime.governance.secrets import KNOWN
    from framework.spec.mcp_lock import read_lock

    project, hub = await _open(project_dir)
    if only is not None and only not in project.config.mcp_servers:
        _unknown(project, only)
    lock = read_lock(project.root)
    listed: dict[str, list[dict[str, Any]]] = {}
    problems: dict[str, str] = {}
    try:
        for name in [only] if only else sorted(project.config.mcp_servers):
            try:
                tools = await hub.list_fresh(name)
            except CAError as exc:
                problems[name] = KNOWN.text(str(exc))
                continue
            listed[name] = [
                {
                    "name": t.name,
                    "tool": t.ca_name,
                    "description": t.description,
                    "annotations": dict(t.annotations),
                    "input_schema": dict(t.input_schema),
                    "digest": t.digest,
                    "pin": lock.pin(name, t.name, t.digest),
                }
                for t in tools
            ]
    finally:
        await hub.close()
    return listed, problems


async def _lock(project_dir: Path) -> int:
    from framework.compiler.mcp_tools import mcp_refs
    from framework.errors import CAError
    from framework.runtime.governance.secrets import KNOWN
    from framework.spec.agent import LlmAgent
    from framework.spec.mcp_lock import LOCK_FILE, read_lock, write_lock

    project, hub = await _open(project_dir)
    used = sorted(
        {r.mcp for a in project.agents.values() if isinstance(a, LlmAgent) for r in mcp_refs(a)}
        & set(project.config.mcp_servers)
    )
    old = read_lock(project.root)
    servers: dict[str, dict[str, str]] = {}
    failed = False
    try:
        for name in used:
            try:
                servers[name] = {t.name: t.digest for t in await hub.list_fresh(name)}
            except CAError as exc:
                typer.echo(f"error: {KNOWN.text(str(exc))}", err=True)
                failed = True
    finally:
        await hub.close()
    if failed:
        typer.echo(f"{LOCK_FILE} not written: every server must answer", err=True)
        return 1
    for name, tools in servers.items():
        before = old.servers.get(name, {})
        added = sorted(set(tools) - set(before))
        changed = sorted(t for t in tools if t in before and before[t] != tools[t])
        removed = sorted(set(before) - set(tools))
        notes = [f"{len(added)} new" if added else "", f"{len(changed)} changed" if changed else ""]
        notes.append(f"{len(removed)} removed" if removed else "")
        detail = ", ".join(n for n in notes if n) if old.present else "first lock"
        typer.echo(f"{name}: {len(tools)} tool{'' if len(tools) == 1 else 's'} pinned ({detail or 'unchanged'})")
        for tool in changed:
            typer.echo(f"  changed: {name}.{tool}")
    path = write_lock(project.root, servers)
    typer.echo(f"wrote {path.name}" + ("" if used else " (no agent uses an MCP server)"))
    return 0
