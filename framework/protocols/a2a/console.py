"""``ca call``'s A2A side: one conversation with any A2A agent (v1.0 or v0.3) at a terminal.

It reads the card, streams the reply to stdout and task states to stderr, asks the caller's
``ask`` when the task waits for input, and with ``as_json`` prints every event as one JSON
line. Like an agent tool's call, every request stays on the origin of the URL the user named.
The command itself (finding the URL, the exit codes) is :mod:`framework.cli.call`.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import httpx
from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types import Message, Role, SendMessageRequest, TaskState
from google.protobuf import json_format

from framework.errors import UsageError
from framework.protocols.a2a.client import Peers
from framework.protocols.a2a.origins import OriginRefused, credentials_for, origin_of

if TYPE_CHECKING:
    from framework.spec.project import Project

Outcome = Literal["completed", "failed", "input-required"]
COMPLETED: Outcome = "completed"
FAILED: Outcome = "failed"
WAITING: Outcome = "input-required"

Ask = Callable[[str], dict[str, Any] | None]
"""What the task waits for (its status text) -> the decision to send, or None to stop and wait."""


async def converse(
    url: str,
    text: str,
    *,
    ask: Ask,
    as_json: bool = False,
    timeout: float = 300.0,
    task: str | None = None,
    context: str | None = None,
    project: Project | None = None,
    headers: Mapping[str, str] | None = None,
) -> Outcome:
    """Send ``text`` to the agent at ``url`` (to ``task`` in ``context`` when given) and follow it to its end.

    Raises :class:`UsageError` when ``url`` is not one an agent can be called at; every other
    failure is written to stderr and returned as ``"failed"``.
    """
    try:
        origin = origin_of(url)  # a URL no agent can be called at is a usage error, before any request
    except OriginRefused as exc:
        raise UsageError(str(exc)) from exc
    # The one A2A client, as for an agent tool's call: every request stays on the URL's origin, and
    # carries the credentials of a registry of ``project`` on that origin, and ``headers``.
    peers = Peers(project, None, os.environ, timeout=timeout, headers={origin: headers or {}})
    try:
        registry = credentials_for(origin, project.config.registries, os.environ) if project is not None else {}
        given = bool(headers) or bool(registry)
        return await _follow(
            peers, url, text, ask=ask, as_json=as_json, timeout=timeout, task=task, context=context, credentials=given
        )
    finally:
        await peers.close()


async def _follow(
    peers: Peers,
    url: str,
    text: str,
    *,
    ask: Ask,
    as_json: bool,
    timeout: float,
    task: str | None,
    context: str | None,
    credentials: bool,
) -> Outcome:
    """``credentials``: whether the requests carry any (a 401 then means they were refused)."""
    try:
        await peers.card(url)
    except Exception as exc:
        said = _explained(exc, url, credentials) or f"cannot read the agent card at {url}: {exc}"
        sys.stderr.write(f"error: {said}\n")
        return FAILED
    try:
        card, client = await peers.open(url)
    except Exception as exc:  # no interface on the card's own origin, or none a2a-sdk can use
        sys.stderr.write(f"error: {exc}\n")
        return FAILED
    if not as_json:
        sys.stderr.write(f"→ {card.name}: {card.description}\n")
    parts = [new_text_part(text)]
    # --task answers a task that waits for input (e.g. "approve"); it needs its --context too.
    task_id, context_id = task or "", context or ""
    while True:
        message = Message(
            message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts, task_id=task_id, context_id=context_id
        )
        state, pending, shown = "", "", ""
        try:
            async with asyncio.timeout(timeout):
                async for event in client.send_message(SendMessageRequest(message=message)):
                    if as_json:
                        print(json.dumps(_counts_as_integers(json_format.MessageToDict(event))), flush=True)
                    if event.HasField("task"):
                        current = event.task
                        task_id, context_id = current.id, current.context_id
                        state = TaskState.Name(current.status.state)
                        reply = "\n".join("".join(get_text_parts(list(a.parts))) for a in current.artifacts)
                        if reply and not as_json and not shown:
                            sys.stdout.write(reply)
                            shown = reply
                        status_message = current.status.message if current.status.HasField("message") else None
                    elif event.HasField("status_update"):
                        update = event.status_update
                        task_id, context_id = update.task_id, update.context_id
                        state = TaskState.Name(update.status.state)
                        status_message = update.status.message if update.status.HasField("message") else None
                        if not as_json and state != "TASK_STATE_WORKING":
                            sys.stderr.write(f"[{state.removeprefix('TASK_STATE_').lower()}]\n")
                    elif event.HasField("artifact_update"):
                        update = event.artifact_update
                        chunk = "".join(get_text_parts(list(update.artifact.parts)))
                        # A whole replacement after streamed chunks repeats them: show it only if new.
                        repeat = update.last_chunk and not update.append and shown
                        if not as_json and not repeat:
                            sys.stdout.write(chunk)
                            sys.stdout.flush()
                            shown += chunk
                        status_message = None
                    elif event.HasField("message"):
                        reply = "".join(get_text_parts(list(event.message.parts)))
                        if not as_json:
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
            sys.stderr.write(f"\nerror: no answer within {timeout:g} s\n")
            return FAILED
        except Exception as exc:
            said = _explained(exc, url, credentials) or f"{type(exc).__name__}: {exc}"
            sys.stderr.write(("\n" if shown else "") + f"error: {said}\n")  # after a reply cut off mid-line
            return FAILED
        if not as_json and shown and not shown.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()
        if state == "TASK_STATE_INPUT_REQUIRED":
            decision = ask(pending) if not as_json else None
            if decision is None:
                sys.stderr.write(
                    f"{pending}\ntask {task_id} is waiting for input; answer it with:\n"
                    f"  ca call {url} approve --task {task_id} --context {context_id}\n"
                )
                return WAITING
            parts = [new_data_part(decision)]
            continue
        if state in ("TASK_STATE_COMPLETED", "MESSAGE"):
            return COMPLETED
        if pending and not as_json:
            sys.stderr.write(f"error: {pending}\n")
        return FAILED


def _explained(exc: BaseException, url: str, credentials: bool) -> str | None:
    """What a failure to reach or be let in by the agent means for the person calling, and what to
    do, read from the exceptions' types and the HTTP status (a2a-sdk's errors wrap httpx's); None
    for any other failure, whose own message is then shown."""
    origin = origin_of(url)
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, httpx.HTTPStatusError) and cause.response.status_code in (401, 403):
            status = cause.response.status_code
            if credentials:
                return (
                    f"{origin} refused the credentials sent (HTTP {status}): check the --token (or CA_CALL_TOKEN) "
                    "or --header given, or the registry's headers_env in ca.yaml"
                )
            return (
                f"{origin} wants credentials (HTTP {status}): pass --token TOKEN (or set CA_CALL_TOKEN),"
                " or --header 'X-API-Key: KEY' for an API key"
            )
        if isinstance(cause, ConnectionRefusedError):
            return f"nothing is listening at {origin} (is `ca serve` running, on that port?)"
        if isinstance(cause, socket.gaierror):
            return f"cannot find the host of {origin}: is the URL right?"
        cause = cause.__cause__ or cause.__context__
    return None


def _counts_as_integers(value: Any) -> Any:
    """``value`` with the whole numbers of every ``usage`` mapping as integers: protobuf's Struct
    (A2A metadata) holds only doubles, so a token count of 23 arrives as 23.0."""
    if isinstance(value, list):
        return [_counts_as_integers(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _counts_as_integers(v) for k, v in value.items()}
    usage = out.get("usage")
    if isinstance(usage, dict):
        out["usage"] = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in usage.items()}
    return out
