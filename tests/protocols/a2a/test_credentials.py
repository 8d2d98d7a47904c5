"""``server.auth`` credentials as the server reads them: names, roles, the shared forms, start-up refusals.

The request path is checked in-process through the real middleware stack (the refusal, then
Starlette's AuthenticationMiddleware with CallerBackend) and once through a real `ca serve`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from framework.errors import UsageError
from framework.protocols.a2a.auth import AuthMiddleware, CallerBackend, Credentials
from framework.spec.project import AuthConfig
from tests.conftest import free_port, run_ca, write_project

NAMED = {
    "credentials": [
        {"name": "team-a", "token_env": "A_TOKEN"},
        {"name": "lead", "api_key_env": "LEAD_KEY", "roles": ["caller", "approver"]},
    ]
}
ENV = {"A_TOKEN": "token-of-team-a", "LEAD_KEY": "key-of-the-lead"}


def test_a_credential_is_a_caller_by_default_and_the_shared_forms_have_both_roles() -> None:
    auth = AuthConfig.model_validate({**NAMED, "bearer_tokens_env": "SHARED_TOKENS", "api_keys_env": "SHARED_KEYS"})
    assert [(i.name, i.env, i.kind, i.roles) for i in auth.identities()] == [
        ("team-a", "A_TOKEN", "bearer", ("caller",)),
        ("lead", "LEAD_KEY", "api_key", ("caller", "approver")),
        ("SHARED_TOKENS", "SHARED_TOKENS", "bearer", ("caller", "approver")),
        ("SHARED_KEYS", "SHARED_KEYS", "api_key", ("caller", "approver")),
    ]


def test_a_named_credential_whose_variable_is_unset_is_refused_by_its_place() -> None:
    with pytest.raises(UsageError) as refused:
        Credentials(AuthConfig.model_validate(NAMED), {"A_TOKEN": "token-of-team-a"})
    assert (
        str(refused.value)
        == "server.auth.credentials[1].api_key_env names LEAD_KEY, which is not set (or empty): set it"
    )


def test_two_credentials_with_one_secret_are_refused() -> None:
    auth = AuthConfig.model_validate(
        {"credentials": [{"name": "a", "token_env": "ONE"}, {"name": "b", "token_env": "TWO"}]}
    )
    with pytest.raises(UsageError, match="credentials 'a' and 'b' have the same secret \\(ONE and TWO\\)"):
        Credentials(auth, {"ONE": "same-token", "TWO": "x, same-token"})


def _app(auth: AuthConfig | None) -> Starlette:
    credentials = Credentials(auth, ENV) if auth is not None else None

    async def whoami(request: Request) -> JSONResponse:
        user = request.user
        return JSONResponse({"name": user.display_name, "roles": request.auth.scopes, "in": user.is_authenticated})

    layers = [Middleware(AuthenticationMiddleware, backend=CallerBackend(credentials))]
    if credentials is not None:
        layers.insert(0, Middleware(AuthMiddleware, credentials=credentials, public=lambda path: path == "/public"))
    return Starlette(routes=[Route("/me", whoami), Route("/public", whoami)], middleware=layers)


def _get(app: Starlette, path: str, headers: dict[str, str]) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get(path, headers=headers)

    return asyncio.run(main())


def test_every_request_has_the_user_of_its_credential() -> None:
    app = _app(AuthConfig.model_validate(NAMED))
    me = _get(app, "/me", {"Authorization": "Bearer token-of-team-a"}).json()
    assert me == {"name": "team-a", "roles": ["caller"], "in": True}
    lead = _get(app, "/me", {"X-API-Key": "key-of-the-lead"}).json()
    assert lead == {"name": "lead", "roles": ["caller", "approver"], "in": True}
    assert _get(app, "/me", {"Authorization": "Bearer key-of-the-lead"}).status_code == 401  # a key is no token
    assert _get(app, "/public", {}).json() == {"name": "", "roles": [], "in": False}


def test_a_server_without_auth_has_one_anonymous_caller_with_both_roles() -> None:
    assert _get(_app(None), "/me", {}).json() == {"name": "anonymous", "roles": ["caller", "approver"], "in": True}


def test_serve_with_an_unset_credential_variable_stops_with_its_place(tmp_path: Path) -> None:
    root = write_project(
        tmp_path,
        {
            "ca.yaml": "server:\n  auth:\n    credentials:\n      - {name: team-a, token_env: TEAM_A_TOKEN}\n",
            "agents/echo.yaml": "name: echo\n",
        },
    )
    result = run_ca("serve", "--port", str(free_port()), cwd=root, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "server.auth.credentials[0].token_env names TEAM_A_TOKEN, which is not set" in result.stderr
    assert "Traceback" not in result.stderr
