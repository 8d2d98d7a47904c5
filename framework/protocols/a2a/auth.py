"""``server.auth``: named credentials (bearer tokens, API keys) from the environment, required on every call.

Each credential is a caller: a name and roles (``caller``, ``approver``; see ``framework.spec.project``).
:class:`AuthMiddleware` is the outermost layer: it refuses a request from its headers alone and
records which credential it carried; Starlette's ``AuthenticationMiddleware`` with
:class:`CallerBackend` then gives every request its user (a :class:`Caller`, with
``AuthCredentials(scopes=roles)``), which a2a-sdk makes ``ServerCallContext.user``: the owner of
the tasks it sends.

Only the exact paths the server names public skip it (``/healthz`` and the cards, see
``framework.protocols.a2a.http.public_path``; the public card is minimal,
``GetExtendedAgentCard`` gives authenticated callers the full one). Credentials are read once
at start-up, compared in constant time and never logged. Websocket connections are refused:
no route speaks it. In-process callers (``ca run --stdio``) mark the scope with ``LOCAL_CALLER``
and need none: they are the local user. A server without ``server.auth`` (loopback only) has one
caller, ``anonymous``, with both roles.
"""

from __future__ import annotations

import getpass
import hmac
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.authentication import AuthCredentials, AuthenticationBackend, BaseUser
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from framework.errors import UsageError
from framework.protocols.a2a.gate import is_rest_path, rest_error
from framework.protocols.jsonrpc import Code
from framework.spec.project import AuthConfig, Identity, Role

LOCAL_CALLER = "cleveragents.local_caller"
"""ASGI scope key set by in-process transports (``ca run --stdio``): the caller is the process
that started us, already the local user. Network servers never set it."""
IDENTIFIED = "cleveragents.identity"
"""ASGI scope key where :class:`AuthMiddleware` leaves the credential a request carried."""
DECIDED_BY = "cleveragents.decided_by"
"""``ServerCallContext.state`` key: the approver on whose behalf a decision is sent as the task's owner."""
BOTH_ROLES: tuple[Role, ...] = ("caller", "approver")


class Caller(BaseUser):
    """Who sent a request: the owner of the tasks it starts and the name the audit records."""

    def __init__(self, name: str, roles: tuple[Role, ...]) -> None:
        self.name = name
        self.roles = roles

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.name  # a2a-sdk's owner of a task (``StarletteUser.user_name``)

    @property
    def approver(self) -> bool:
        return "approver" in self.roles

    def __repr__(self) -> str:
        return f"Caller({self.name!r}, {self.roles!r})"


ANONYMOUS = Caller("anonymous", BOTH_ROLES)
"""The one caller of a server without ``server.auth`` (which serves loopback only)."""


def local_user() -> Caller:
    """The user who started an in-process transport (``ca run --stdio``): ``local:<os user>``."""
    return Caller(f"local:{getpass.getuser()}", BOTH_ROLES)


def _values(environ: Mapping[str, str], identity: Identity) -> list[str]:
    raw = environ.get(identity.env, "")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not values:
        raise UsageError(
            f"server.auth.{identity.declared} names {identity.env}, which is not set (or empty): set it"
            + (" to a comma-separated list" if identity.declared in ("bearer_tokens_env", "api_keys_env") else "")
        )
    return values


@dataclass(frozen=True)
class _Secret:
    value: bytes
    identity: Identity


class Credentials:
    """The accepted tokens and keys, each with the credential it belongs to, read once at start-up."""

    def __init__(self, auth: AuthConfig, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.tokens: list[_Secret] = []
        self.keys: list[_Secret] = []
        owners: dict[str, Identity] = {}
        for identity in auth.identities():
            for value in _values(env, identity):
                other = owners.setdefault(value, identity)
                if other.name != identity.name:
                    raise UsageError(
                        f"server.auth: credentials {other.name!r} and {identity.name!r} have the same secret"
                        f" ({other.env} and {identity.env}): give each credential its own"
                    )
                (self.tokens if identity.kind == "bearer" else self.keys).append(_Secret(value.encode(), identity))
        self.header = auth.api_key_header.lower().encode()

    def check(self, headers: list[tuple[bytes, bytes]]) -> Identity | bool | None:
        """The credential presented, False when wrong ones are, None when there are none.

        Every accepted value is compared (in constant time), whichever matches."""
        seen: bool | None = None
        for name, value in headers:
            if name == b"authorization" and value[:7].lower() == b"bearer " and self.tokens:
                seen, found = False, _match(value[7:].strip(), self.tokens)
            elif name == self.header and self.keys:
                seen, found = False, _match(value.strip(), self.keys)
            else:
                continue
            if found is not None:
                return found
        return seen


def _match(presented: bytes, secrets: list[_Secret]) -> Identity | None:
    found = None
    for secret in secrets:
        if hmac.compare_digest(presented, secret.value) and found is None:
            found = secret.identity
    return found


class CallerBackend(AuthenticationBackend):
    """Starlette's authentication backend of ``ca serve``: the :class:`Caller` of every request.

    ``credentials`` is None for a server without ``server.auth``: every caller is :data:`ANONYMOUS`.
    A public path fetched without credentials has no user (Starlette's ``UnauthenticatedUser``).
    """

    def __init__(self, credentials: Credentials | None) -> None:
        self.credentials = credentials
        self.local = local_user()

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, BaseUser] | None:
        scope = conn.scope
        if scope.get(LOCAL_CALLER):
            caller = self.local
        elif self.credentials is None:
            caller = ANONYMOUS
        else:
            identity = scope.get(IDENTIFIED)
            if not isinstance(identity, Identity):
                return None
            caller = Caller(identity.name, identity.roles)
        return AuthCredentials(list(caller.roles)), caller


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
        if scope.get(LOCAL_CALLER):
            await self.app(scope, receive, send)
            return
        verdict = self.credentials.check(scope.get("headers", []))
        if isinstance(verdict, Identity):
            scope[IDENTIFIED] = verdict
            await self.app(scope, receive, send)
            return
        if verdict is False:
            await send_refusal(send, "invalid credentials", rest=is_rest_path(scope["path"]))
            return
        await send_refusal(
            send,
            "authentication required: send Authorization: Bearer TOKEN or an API key header",
            rest=is_rest_path(scope["path"]),
        )


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
