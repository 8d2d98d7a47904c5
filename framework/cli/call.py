"""``ca call URL_OR_NAME [MESSAGE]``: a general A2A client (any A2A v1.0 or v0.3 server).

It discovers the card, streams the reply to stdout, shows task states on stderr,
answers input-required at a terminal, and with ``--json`` prints every event as
one JSON line for scripts. Exit codes as for ``ca run``.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.cli import terminal
from framework.errors import UsageError

if TYPE_CHECKING:
    from framework.spec.project import Project

EXIT_OK, EXIT_FAILED, EXIT_PAUSED = 0, 1, 3
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")


@dataclass
class CallOptions:
    target: str
    message: str | None
    context: str | None
    as_json: bool
    timeout: float
    project: Path
    task: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def parse_headers(given: list[str], token: str | None) -> dict[str, str]:
    """``--header 'Name: value'`` (repeatable) and ``--token T`` (``Authorization: Bearer T``) as headers."""
    headers: dict[str, str] = {}
    for item in given:
        name, colon, value = item.partition(":")
        if not colon or not _HEADER_NAME.fullmatch(name.strip()) or not value.strip():
            raise UsageError(f"--header {item!r}: write it as 'Name: value', e.g. --header 'X-API-Key: ...'")
        headers[name.strip()] = value.strip()
    if token is not None:
        if not token.strip():
            raise UsageError("--token is empty: give the bearer token (or set CA_CALL_TOKEN)")
        if any(k.lower() == "authorization" for k in headers):
            raise UsageError("--token and --header 'Authorization: ...' both set Authorization: give one")
        headers["Authorization"] = f"Bearer {token.strip()}"
    return headers


def _project_at(project_dir: Path) -> Project | None:
    """The project at ``project_dir`` when there is one there (its registries' credentials apply to
    URLs too); None when the folder is no project, or one that does not load: a URL needs the
    project only for those credentials, so YAML caught mid-edit (under ``ca serve --reload``)
    does not stop the call; a one-line warning says it goes on without them."""
    from framework.errors import SpecError
    from framework.spec import load_project
    from framework.spec.root import is_project

    if not is_project(project_dir):
        return None
    try:
        return load_project(project_dir)
    except SpecError as exc:
        errors = len(exc.errors)
        sys.stderr.write(
            f"warning: the project in {project_dir} does not load ({errors} error{'' if errors == 1 else 's'}:"
            " run `ca validate`); calling without its registries' credentials\n"
        )
        return None


async def resolve_target(target: str, project_dir: Path) -> tuple[str, Project | None]:
    """A URL as given, or by name an agent of the local project, a registry, or an agent a registry
    lists; and the project (its registries' credentials then go to their origins)."""
    if target.startswith(("http://", "https://")):
        return target, _project_at(project_dir)
    from framework.spec import load_project

    project = load_project(project_dir)
    if target in project.agents:
        server = project.config.server
        base = server.public_url or f"http://{server.host}:{server.port}"
        return f"{base.rstrip('/')}/agents/{target}/", project
    for registry in project.config.registries:
        if registry.name == target:
            return registry.url + "/", project
    listed: list[str] = []
    if project.config.registries:
        from framework.protocols.a2a.client import Peers

        peers = Peers(project, None, os.environ, timeout=project.config.remote.timeout)
        try:
            found = await peers.discover()
        finally:
            await peers.close()
        for problem in found.problems:
            sys.stderr.write(f"warning: {problem}\n")
        for remote in found.agents:
            if remote.name == target:
                return remote.url, project
        listed = sorted(remote.name for remote in found.agents)
    from framework.spec.common import did_you_mean

    names = sorted({*project.agents, *listed})
    hint = did_you_mean(target, names)
    raise UsageError(
        f"{target!r} is neither a URL nor an agent of this project or its registries"
        f"{f' ({hint})' if hint else ''}; agents: {', '.join(names) or 'none'}"
    )


async def call(options: CallOptions) -> int:
    """Run ``ca call``: the exit code of its conversation (0 completed, 1 failed, 3 waiting for input)."""
    from framework.protocols.a2a.console import COMPLETED, WAITING, converse
    from framework.runtime.governance.secrets import KNOWN

    values = options.headers.values()
    KNOWN.add(values)  # a token never shows in what ca prints (a "Bearer TOKEN" masks TOKEN too: secrets.forms)
    url, project = await resolve_target(options.target, options.project)
    text = options.message if options.message is not None else sys.stdin.read()
    if not text.strip():
        raise UsageError("no message: pass one as an argument or on standard input")
    outcome = await converse(
        url,
        text,
        project=project,
        headers=options.headers,
        ask=_ask,
        as_json=options.as_json,
        timeout=options.timeout,
        task=options.task,
        context=options.context,
    )
    return EXIT_OK if outcome == COMPLETED else EXIT_PAUSED if outcome == WAITING else EXIT_FAILED


def _ask(pending: str) -> dict[str, Any] | None:
    """The decision typed at the terminal; None without a terminal, or when Ctrl-C or the end of input
    (Ctrl-D) answers: nothing is decided, the task waits."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    try:
        with terminal.ctrl_c_interrupts_reads():
            sys.stderr.write(f"\n{pending}\n")
            while True:
                sys.stderr.write("[a]pprove or [r]eject? ")
                sys.stderr.flush()
                answer = terminal.line()
                if not answer:
                    sys.stderr.write("\n")
                    return None
                key = answer.strip().lower()[:1]
                if key in ("a", "y"):
                    return {"decision": "approve"}
                if key in ("r", "n"):
                    sys.stderr.write("reason: ")
                    sys.stderr.flush()
                    return {"decision": "reject", "reason": terminal.line().strip() or None}
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return None
