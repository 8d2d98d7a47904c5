"""The gate every POST to ``ca serve`` passes (``ca run --stdio`` feeds its lines through it too).

One place reads a request body and decides whether it may go further, so no malformed input
reaches a2a-sdk, the platform methods or the stores:

* the body size limit (``server.max_request_bytes``): HTTP 413;
* JSON-RPC endpoints (``/``, ``/agents/NAME/``; ``POST /agents/NAME`` is the same endpoint):
  the text is decoded strictly and the envelope checked (``framework.protocols.jsonrpc``):
  -32700, -32600 (id null when the id is invalid), -32602 for values that could not be stored; a v0.3 method under
  ``A2A-Version: 1.x`` (or a v1.0 method without it) gets -32009 naming the header; a v0.3
  request is validated against the SDK's v0.3 types here, so a bad one gets -32602 with a
  one-line reason; a notification (no ``id``) is run and answered HTTP 204 with no body;
* REST endpoints (``.../rest/...``): the same text checks, answered in the REST error shape
  (``{"error": {"code", "status", "message", "details"}}``, as a2a-sdk's REST errors are); a
  call without ``A2A-Version`` is taken as 1.0, the version of the card's HTTP+JSON interface.

A message that passes (JSON-RPC ``SendMessage``, ``SendStreamingMessage`` and their 0.3 names; REST
``message:send``, ``message:stream``) then waits for its place in the server's intake
(:mod:`framework.protocols.a2a.intake`): a burst of messages starts in the order it came.

Every refusal is logged on one line (logger ``framework.protocols.a2a.gate``), never with a traceback.
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import nullcontext
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from framework.protocols.a2a.intake import MESSAGE_METHODS, MESSAGE_PATHS, Intake
from framework.protocols.jsonrpc import Code, JsonRpcError, Request, answer_id, error, parse_request, read_message
from framework.protocols.jsontext import JsonTextError, decode, unrepresentable

logger = logging.getLogger(__name__)

JSONRPC_PATH = re.compile(r"(/agents/[^/]+)?/")
AGENT_WITHOUT_SLASH = re.compile(r"/agents/[^/]+")
REST_PATH = re.compile(r"(/agents/[^/]+)?/rest(/.*)?")
VERSION_HEADER = b"a2a-version"
V1 = "1.0"

V03_TO_V1 = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
    "tasks/pushNotificationConfig/set": "CreateTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/get": "GetTaskPushNotificationConfig",
    "tasks/pushNotificationConfig/list": "ListTaskPushNotificationConfigs",
    "tasks/pushNotificationConfig/delete": "DeleteTaskPushNotificationConfig",
    "agent/getAuthenticatedExtendedCard": "GetExtendedAgentCard",
}
"""The v0.3 JSON-RPC methods a2a-sdk answers (with ``enable_v0_3_compat``) and their v1.0 names."""
V1_METHODS = frozenset(V03_TO_V1.values()) | {"ListTasks"}


def is_rest_path(path: str) -> bool:
    """Whether ``path`` is under an agent's HTTP+JSON (REST) binding."""
    return REST_PATH.fullmatch(path) is not None


def rest_error(status: int, grpc_status: str, reason: str, message: str) -> dict[str, Any]:
    """An error body as a2a-sdk's REST binding writes them (google.rpc.Status with an ErrorInfo)."""
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org"}
    return {"error": {"code": status, "status": grpc_status, "message": message, "details": [{**info, "metadata": {}}]}}


class RequestGate:
    """ASGI middleware: the size limit and the parse gate (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.intake = Intake()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope["method"] == "POST" and AGENT_WITHOUT_SLASH.fullmatch(path):
            # The endpoint itself, not a redirect: a 307 would make clients resend the body (or drop it).
            scope = {**scope, "path": path + "/", "raw_path": path.encode() + b"/"}
        rest = is_rest_path(scope["path"])
        if rest and not _header(scope, VERSION_HEADER):
            scope = {**scope, "headers": [*scope["headers"], (VERSION_HEADER, V1.encode())]}
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        raw = await self._body(receive)
        if raw is None:
            return  # the client went away
        if isinstance(raw, int):
            await self._too_large(scope, send, rest)
            return
        if JSONRPC_PATH.fullmatch(scope["path"]):
            await self._jsonrpc(scope, raw, receive, send)
        elif rest and raw.strip():
            await self._rest(scope, raw, receive, send)
        else:
            await self.app(scope, _replay(raw, receive), send)

    async def _body(self, receive: Receive) -> bytes | int | None:
        """The whole body; its size so far once it passes the limit; None on disconnect."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                return size
            chunks.append(body)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope: Scope, send: Send, rest: bool) -> None:
        message = f"request body is larger than {self.max_bytes} bytes (server.max_request_bytes)"
        logger.warning("refused %s %s: %s", scope["method"], scope["path"], message)
        if rest:
            await _json(send, 413, rest_error(413, "INVALID_ARGUMENT", "INVALID_REQUEST", message))
        else:
            await _json(send, 413, error(None, JsonRpcError(Code.INVALID_REQUEST, message)))

    async def _jsonrpc(self, scope: Scope, raw: bytes, receive: Receive, send: Send) -> None:
        try:
            obj = read_message(raw)
        except JsonRpcError as exc:
            await self._refuse(scope, send, None, exc)
            return
        try:
            request = parse_request(obj)
            _check_version(request, _header(scope, VERSION_HEADER))
            _check_v03(request, obj)
        except JsonRpcError as exc:
            notification = isinstance(obj, dict) and "id" not in obj and exc.code != Code.INVALID_REQUEST
            if notification:  # not answered, not even with an error
                logger.warning("dropped a JSON-RPC notification on %s: %s %s", scope["path"], exc.code, exc.message)
                await _no_content(send)
                return
            await self._refuse(scope, send, answer_id(obj), exc)  # null when the id is what is invalid
            return
        async with self.intake.place() if request.method in MESSAGE_METHODS else nullcontext():
            if request.notification:
                await self.app(scope, _replay(raw, receive), _discard)
                await _no_content(send)
                return
            await self.app(scope, _replay(raw, receive), send)

    async def _refuse(self, scope: Scope, send: Send, request_id: str | int | None, exc: JsonRpcError) -> None:
        logger.warning("refused a JSON-RPC request on %s: %s %s", scope["path"], exc.code, exc.message)
        await _json(send, 200, error(request_id, exc))

    async def _rest(self, scope: Scope, raw: bytes, receive: Receive, send: Send) -> None:
        try:
            problem = unrepresentable(decode(raw), "body")
        except JsonTextError as exc:
            problem = str(exc)
        if problem is None:
            async with self.intake.place() if scope["path"].endswith(MESSAGE_PATHS) else nullcontext():
                await self.app(scope, _replay(raw, receive), send)
            return
        logger.warning("refused %s %s: %s", scope["method"], scope["path"], problem)
        await _json(send, 400, rest_error(400, "INVALID_ARGUMENT", "INVALID_REQUEST", problem))


def _check_version(request: Request, version: str | None) -> None:
    """-32009 when the method's protocol version is not the one the header names (none means 0.3)."""
    major = (version or "0.3").split(".", 1)[0].strip()
    if request.method in V03_TO_V1 and major != "0":
        raise JsonRpcError(
            Code.VERSION_NOT_SUPPORTED,
            f"{request.method} is an A2A 0.3 method but the request has the header A2A-Version: {version}; "
            f"send A2A-Version: 0.3 (or no header), or call {V03_TO_V1[request.method]}",
        )
    if request.method in V1_METHODS and major != "1":
        sent = f"the header A2A-Version: {version}" if version else "no A2A-Version header (which means 0.3)"
        raise JsonRpcError(
            Code.VERSION_NOT_SUPPORTED,
            f"{request.method} is an A2A 1.0 method but the request has {sent}; send A2A-Version: 1.0",
        )


def _check_v03(request: Request, obj: dict[str, Any]) -> None:
    """Validate a v0.3 request with the SDK's own v0.3 types: a one-line -32602 instead of a dump."""
    if request.method not in V03_TO_V1:
        return
    # Imported here: importing it before a2a.server.routes is an import cycle inside a2a-sdk.
    from a2a.compat.v0_3.jsonrpc_adapter import JSONRPC03Adapter

    model = JSONRPC03Adapter.METHOD_TO_MODEL.get(request.method)
    if model is None:
        return
    try:
        model.model_validate(obj)
    except ValidationError as exc:
        problems = "; ".join(_problem(e) for e in exc.errors()[:3])
        more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
        raise JsonRpcError(Code.INVALID_PARAMS, f"invalid params for {request.method}: {problems}{more}") from None


def _problem(detail: Any) -> str:
    location = ".".join(str(part) for part in detail.get("loc", ())) or "params"
    return f"{location}: {detail.get('msg', 'invalid')}"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1").strip() or None
    return None


def _replay(raw: bytes, then: Receive) -> Receive:
    """A receive channel that gives the buffered body once, then waits on ``then``."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await then()
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return receive


async def _discard(message: Message) -> None:
    """The answer to a notification goes nowhere."""


async def _no_content(send: Send) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def _json(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
