"""``ca call URL_OR_NAME [MESSAGE]``: a general A2A client (any A2A v1.0 or v0.3 server).

It discovers the card, streams the reply to stdout, shows task states on stderr,
answers input-required at a terminal, and with ``--json`` prints every event as
one JSON line for scripts. Exit codes as for ``ca run``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.errors import UsageError

if TYPE_CHECKING:
    from framework.spec.project import Project

EXIT_OK, EXIT_FAILED, EXIT_PAUSED = 0, 1, 3


@dataclass
class CallOptions:
    target: str
    message: str | None
    context: str | None
    as_json: bool
    timeout: float
    project: Path
    task: str | None = None


def resolve_target(target: str, project_dir: Path) -> tuple[str, Project | None]:
    """A URL as given, or an agent of the local project (or of a registry) by name; and the project
    when one was read (its registries' credentials then go to their origins)."""
    if target.startswith(("http://", "https://")):
        return target, None
    from framework.spec import load_project

    project = load_project(project_dir)
    if target in project.agents:
        server = project.config.server
        base = server.public_url or f"http://{server.host}:{server.port}"
        return f"{base.rstrip('/')}/agents/{target}/", project
    for registry in project.config.registries:
        if registry.name == target:
            return registry.url + "/", project
    known = ", ".join(sorted(project.agents)) or "none"
    raise UsageError(f"{target!r} is neither a URL nor an agent of this project (agents: {known})")


async def call(options: CallOptions) -> int:
    """Run ``ca call``: the exit code of its conversation (0 completed, 1 failed, 3 waiting for input)."""
    from framework.protocols.a2a.console import COMPLETED, WAITING, converse

    url, project = resolve_target(options.target, options.project)
    text = options.message if options.message is not None else sys.stdin.read()
    if not text.strip():
        raise UsageError("no message: pass one as an argument or on standard input")
    outcome = await converse(
        url,
        text,
        project=project,
        ask=_ask,
        as_json=options.as_json,
        timeout=options.timeout,
        task=options.task,
        context=options.context,
    )
    return EXIT_OK if outcome == COMPLETED else EXIT_PAUSED if outcome == WAITING else EXIT_FAILED


def _ask(pending: str) -> dict[str, Any] | None:
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    sys.stderr.write(f"\n{pending}\n[a]pprove or [r]eject? ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer.startswith("a") or answer.startswith("y"):
        return {"decision": "approve"}
    sys.stderr.write("reason: ")
    sys.stderr.flush()
    return {"decision": "reject", "reason": sys.stdin.readline().strip() or None}
