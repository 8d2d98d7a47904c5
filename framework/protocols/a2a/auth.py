"""``server.auth``: bearer tokens and API keys from the environment, required on every call.

Only the exact paths the server names public skip it (``/healthz`` and the cards, see
``framework.protocols.a2a.http.public_path``; the public card is minimal,
``GetExtendedAgentCard`` gives authenticated callers the full one). Credentials are read once
at start-up, compared in constant time and never logged. Websocket connections are refused:
no route speaks it. In-process callers (``ca run --stdio``) mark the scope with ``LOCAL_CALLER``
and need none.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Callable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from framework.errors import UsageError
from framework.protocols.a2a.gate import is_rest_path, rest_error
from framework.protocols.jsonrpc import Code
from framework.spec.project import AuthConfig

LOCAL_CALLER = "cleveragents.local_caller"
"""ASGI scope key set by in-process transports (``ca run --stdio``): the caller is the process
that started us, already the local user. Network servers never set it."""


def _values(environ: Mapping[str, str], name: str | None, what: str) -> list[str]:
    if name is None:
        return []
    raw = environ.get(name, "")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not values:
        raise UsageError(
            f"server.auth.{what} names {name}, which is not set (or empty): set it to a comma-separated list"
        )
    return values


class Credentials:
    """The accepted tokens and keys, read once at start-up."""

    def __init__(self, auth: AuthConfig, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.tokens = [t.encode() for t in _values(env, auth.bearer_tokens_env, "bearer_tokens_env")]
        self.keys = [k.encode() for k in _values(env, auth.api_keys_env, "api_keys_env")]
        self.header = auth.api_key_header.lower().encode()

    def check(self, headers: list[tuple[bytes, bytes]]) -> bool | None:
        """True when valid credentials are present, False when wrong ones are, None when there are none."""
        seen = None
        for name, value in headers:
            if name == b"authorization" and value[:7].lower() == b"bearer " and self.tokens:
                seen = False
                if any(hmac.compare_digest(value[7:].strip(), t) for t in self.tokens):
                    return True
            elif name == self.header and self.keys:
                seen = False
                if any(hmac.compare_digest(value.strip(), k) for k in self.keys):
                    return True
        return seen


class AuthMiddleware:
    """Refuses every non-public request without valid credentials: HTTP 401, JSON-RPC -32086.

    It is the outermost layer of ``ca serve``: a request is refused from its headers alone, before
    anything reads (and buffers) its body. ``public`` says whether a path is one of the exact paths
    anyone may fetch (the server's routes own that list; it changes with the agents on reload).
    """

    def __init__(self, app: ASGIApp, credentials: Credentials, *, public: Callable[[str], bool]) -> None:
        self.app = app
        self.credentials = credentials
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            # Websocket (the only other ASGI scope): closing before accepting answers HTTP 403.
            await send({"type": "websocket.close", "code": 1008, "reason": "websocket is not served"})
            return
        if self.public(scope["path"]):
            await self.app(scope, receive, send)
            return
        refusal = refuse(self.credentials, scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        await send_refusal(send, refusal, rest=is_rest_path(scope["path"]))


def refuse(credentials: Credentials, scope: Scope) -> str | None:
    """Why the request may not pass (a message for the caller), or None when it may."""
    if scope.get(LOCAL_CALLER):
        return None
    verdict = credentials.check(scope.get("headers", []))
    if verdict:
        return None
    if verdict is False:
        return "invalid credentials"
    return "authentication required: send Authorization: Bearer TOKEN or an API key header"


async def send_refusal(send: Send, message: str, *, rest: bool = False) -> None:
    """HTTP 401 with a JSON-RPC -32086 error, or on the REST binding a REST error body."""
    if rest:
        body = json.dumps(rest_error(401, "UNAUTHENTICATED", "UNAUTHENTICATED", message)).encode()
    else:
        error = {"code": int(Code.AUTHENTICATION_REQUIRED), "message": message}
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="cleveragents"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
