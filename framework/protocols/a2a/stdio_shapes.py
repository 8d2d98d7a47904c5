"""What ``ca run --stdio`` takes and gives beyond ``ca serve``'s JSON-RPC: the older request shapes
scripts still send, and the card it discovers.

The seed's shapes are aliases, each translated into its A2A v0.3 request before dispatch (so it
gets exactly what the v0.3 method gets):

    {"method": "tasks/send", "params": {"task": TEXT, "priority": P?}}
        -> message/send with a user message of TEXT (``priority``, when given, in its metadata)
    {"method": "tasks/get",    "params": {"task_id": ID}}   -> tasks/get    {"id": ID}
    {"method": "tasks/cancel", "params": {"task_id": ID}}   -> tasks/cancel {"id": ID}

The A2A shapes of those methods (``tasks/send {"message": ...}``, ``tasks/get {"id": ...}``) pass
as they are. Over stdio every card (``agent/discover``, the extended card) leaves out its interfaces:
they name HTTP endpoints of a ``ca serve`` that may not be running, while this process answers on
its stdin and stdout only.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from framework.protocols.jsonrpc import Code, JsonRpcError

BY_TASK_ID = ("tasks/get", "tasks/cancel")
CARD_METHODS = ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard")
"""Methods that answer with a card: over stdio it leaves out the interfaces, as ``agent/discover``'s."""
INTERFACE_FIELDS = ("supportedInterfaces", "url", "preferredTransport", "protocolVersion", "additionalInterfaces")
"""The card fields that say where (over HTTP) the agent answers: none of them is true over stdio."""


def translate(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` with a seed-shaped ``tasks/send``, ``tasks/get`` or ``tasks/cancel`` rewritten as
    its A2A request; any other request as it is. A seed shape with wrong params: -32602 saying what to send."""
    method, params = request.get("method"), request.get("params")
    if not isinstance(params, Mapping):
        return dict(request)
    if method == "tasks/send" and "task" in params and "message" not in params:
        return {**request, "method": "message/send", "params": _send(params)}
    if method in BY_TASK_ID and "task_id" in params and "id" not in params:
        task_id = params["task_id"]
        _only(str(method), params, {"task_id"})
        if not isinstance(task_id, str) or not task_id:
            raise _invalid(f"{method}: task_id must be a task's id (a non-empty string), got {task_id!r}")
        return {**request, "params": {"id": task_id}}
    return dict(request)


def _send(params: Mapping[str, Any]) -> dict[str, Any]:
    _only("tasks/send", params, {"task", "priority"})
    text, priority = params["task"], params.get("priority")
    if not isinstance(text, str) or not text.strip():
        raise _invalid(f"tasks/send: task must be the text of the task (a non-empty string), got {text!r}")
    message: dict[str, Any] = {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, str | int):
            raise _invalid(f"tasks/send: priority must be a string or an integer, got {priority!r}")
        message["metadata"] = {"priority": priority}
    return {"message": message}


def _only(method: str, params: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed))
        raise _invalid(f"{method}: unknown params {', '.join(map(repr, unknown))}; this shape takes {takes}")


def _invalid(message: str) -> JsonRpcError:
    return JsonRpcError(Code.INVALID_PARAMS, message)


def stdio_card(card: Mapping[str, Any]) -> dict[str, Any]:
    """A card as it is answered over stdio: everything but the HTTP interfaces."""
    return {key: value for key, value in card.items() if key not in INTERFACE_FIELDS}
