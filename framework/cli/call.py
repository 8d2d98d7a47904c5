"""``ca call URL_OR_NAME [MESSAGE]``: a general A2A client (any A2A v1.0 or v0.3 server).

It discovers the card, streams the reply to stdout, shows task states on stderr,
answers input-required at a terminal, and with ``--json`` prints every event as
one JSON line for scripts. Exit codes as for ``ca run``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from framework.errors import UsageError

if TYPE_CHECKING:
    from framework.spec.loader import Project

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
    import os

    from framework.protocols.a2a.client import Peers
    from framework.protocols.a2a.origins import OriginRefused, origin_of

    url, project = resolve_target(options.target, options.project)
    text = options.message if options.message is not None else sys.stdin.read()
    if not text.strip():
        raise UsageError("no message: pass one as an argument or on standard input")
    try:
        origin_of(url)
    except OriginRefused as exc:
        raise UsageError(str(exc)) from exc
    # The one A2A client, as an agent tool's call: every request stays on the origin of the URL named.
    peers = Peers(project, None, os.environ, timeout=options.timeout)
    try:
        try:
            card = await peers.card(url)
        except Exception as exc:
            sys.stderr.write(f"error: cannot read the agent card at {url}: {exc}\n")
            return EXIT_FAILED
        try:
            card, client = await peers.open(url)
        except Exception as exc:  # no interface on the card's own origin, or none a2a-sdk can use
            sys.stderr.write(f"error: {exc}\n")
            return EXIT_FAILED
        return await _converse(options, url, card, client, text)
    finally:
        await peers.close()


async def _converse(options: CallOptions, url: str, card: Any, client: Any, text: str) -> int:
    """Send ``text``, print what comes back, answer input-required at a terminal; the exit code."""
    from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
    from a2a.types import Message, Role, SendMessageRequest, TaskState
    from google.protobuf import json_format

    if not options.as_json:
        sys.stderr.write(f"→ {card.name}: {card.description}\n")
    parts = [new_text_part(text)]
    # --task answers a task that waits for input (e.g. "approve"); it needs its --context too.
    task_id, context_id = options.task or "", options.context or ""
    while True:
        message = Message(
            message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts, task_id=task_id, context_id=context_id
        )
        state, pending, shown = "", "", ""
        try:
            async with asyncio.timeout(options.timeout):
                async for event in client.send_message(SendMessageRequest(message=message)):
                    if options.as_json:
                        print(json.dumps(json_format.MessageToDict(event)), flush=True)
                    if event.HasField("task"):
                        task = event.task
                        task_id, context_id = task.id, task.context_id
                        state = TaskState.Name(task.status.state)
                        reply = "\n".join("".join(get_text_parts(list(a.parts))) for a in task.artifacts)
                        if reply and not options.as_json and not shown:
                            sys.stdout.write(reply)
                            shown = reply
                        status_message = task.status.message if task.status.HasField("message") else None
                    elif event.HasField("status_update"):
                        update = event.status_update
                        task_id, context_id = update.task_id, update.context_id
                        state = TaskState.Name(update.status.state)
                        status_message = update.status.message if update.status.HasField("message") else None
                        if not options.as_json and state != "TASK_STATE_WORKING":
                            sys.stderr.write(f"[{state.removeprefix('TASK_STATE_').lower()}]\n")
                    elif event.HasField("artifact_update"):
                        update = event.artifact_update
                        chunk = "".join(get_text_parts(list(update.artifact.parts)))
                        # A whole replacement after streamed chunks repeats them: show it only if new.
                        repeat = update.last_chunk and not update.append and shown
                        if not options.as_json and not repeat:
                            sys.stdout.write(chunk)
                            sys.stdout.flush()
                            shown += chunk
                        status_message = None
                    elif event.HasField("message"):
                        reply = "".join(get_text_parts(list(event.message.parts)))
                        if not options.as_json:
                            sys.stdout.write(reply)
                            shown = reply
                        state = "MESSAGE"
                        status_message = None
                    if status_message is not None:
                        pending = "".join(get_text_parts(list(status_message.parts)))
                        for data in get_data_parts(list(status_message.parts)):
                            if isinstance(data, dict) and data.get("error"):
                                pending = str(data["error"].get("reason", pending))
        except TimeoutError:
            sys.stderr.write(f"\nerror: no answer within {options.timeout:g} s\n")
            return EXIT_FAILED
        except Exception as exc:
            sys.stderr.write(f"\nerror: {type(exc).__name__}: {exc}\n")
            return EXIT_FAILED
        if not options.as_json and shown and not shown.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
        if state == "TASK_STATE_INPUT_REQUIRED":
            decision = _ask(pending) if not options.as_json else None
            if decision is None:
                sys.stderr.write(
                    f"{pending}\ntask {task_id} is waiting for input; answer it with:\n"
                    f"  ca call {url} approve --task {task_id} --context {context_id}\n"
                )
                return EXIT_PAUSED
            parts = [new_data_part(decision)]
            continue
        if state in ("TASK_STATE_COMPLETED", "MESSAGE"):
            return EXIT_OK
        if pending and not options.as_json:
            sys.stderr.write(f"error: {pending}\n")
        return EXIT_FAILED


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
