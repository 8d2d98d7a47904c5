"""``server.auth``: bearer tokens and API keys from the environment, against a real ``ca serve``.

One authenticated server serves the module. The start-up refusals run ``ca serve`` to its exit
(they never bind: the 0.0.0.0 case is refused before the socket is opened).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from framework.protocols.a2a.auth import AuthMiddleware, Credentials
from framework.spec.project import AuthConfig
from tests.a2a_peers import Json, StdioPeer, reply_text, result_of, user_message
from tests.conftest import free_port, run_ca, write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

TOKENS = {"T_TOKENS": "token-one, token-two", "T_KEYS": "key-one"}
AUTH_YAML = """
    default_agent: echo
    server:
      auth: {bearer_tokens_env: T_TOKENS, api_keys_env: T_KEYS}
"""
PROJECT = {
    "ca.yaml": AUTH_YAML,
    "agents/echo.yaml": """
        name: echo
        skills:
          - {id: parrot, name: Parrot, description: Says it back, tags: [echo], examples: ["say hi"]}
    """,
}
RPC_METHODS: list[tuple[str, Json | None]] = [
    ("SendMessage", {"message": user_message("hi")}),
    ("SendStreamingMessage", {"message": user_message("hi")}),
    ("GetTask", {"id": "x"}),
    ("ListTasks", {}),
    ("CancelTask", {"id": "x"}),
    ("GetExtendedAgentCard", {}),
    ("message/send", {"message": {"kind": "message", "messageId": "m", "role": "user", "parts": []}}),
    ("tasks/get", {"id": "x"}),
    ("_cleveragents/registry/list", None),
    ("_cleveragents/approvals/list", {}),
    ("_cleveragents/approvals/decide", {"taskId": "x", "decision": "approve"}),
    ("_cleveragents/audit/query", {}),
    ("_cleveragents/usage", {}),
    ("_cleveragents/diagnostics", None),
]
BEARER = {"Authorization": "Bearer token-two"}
API_KEY = {"X-API-Key": "key-one"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("auth"), PROJECT)


@pytest.fixture(scope="module")
def server(project: Path) -> Iterator[ServerProcess]:
    served = start_serve(project, env=TOKENS)
    try:
        yield served
    finally:
        served.stop()


def refused(response: httpx.Response) -> str:
    """The message of a 401 answer (after checking its shape: REST-shaped under the REST binding)."""
    assert response.status_code == 401, (response.status_code, response.text)
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = response.json()
    if "/rest" in response.request.url.path:
        assert (body["error"]["code"], body["error"]["status"]) == (401, "UNAUTHENTICATED"), body
    else:
        assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32086
    message: str = body["error"]["message"]
    return message


def rpc(method: str, params: Json | None) -> Json:
    body: Json = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        body["params"] = params
    return body


# -- start-up ---------------------------------------------------------------------------------------


def test_serve_without_the_variables_fails_at_start_with_a_clear_message(project: Path) -> None:
    result = run_ca("serve", "--port", str(free_port()), cwd=project, timeout=60)
    assert result.returncode != 0
    assert "server.auth.bearer_tokens_env names T_TOKENS, which is not set" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_public_address_without_auth_is_refused(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"ca.yaml": "default_agent: echo\n", "agents/echo.yaml": "name: echo\n"})
    result = run_ca("serve", "--host", "0.0.0.0", "--port", str(free_port()), cwd=root, timeout=60)
    assert result.returncode == 2
    assert "refusing to serve on 0.0.0.0 without authentication" in result.stderr
    assert "server.auth" in result.stderr and "--insecure" in result.stderr
    assert "Traceback" not in result.stderr


# -- the card ----------------------------------------------------------------------------------------


def test_the_card_is_public_minimal_and_declares_the_schemes(server: ServerProcess) -> None:
    for path in ("/.well-known/agent-card.json", "/agents/echo/.well-known/agent-card.json"):
        response = httpx.get(server.url + path)
        assert response.status_code == 200, path
        card = response.json()
        schemes = card["securitySchemes"]
        assert schemes["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
        assert schemes["apiKey"]["apiKeySecurityScheme"] == {
            "location": "header",
            "name": "X-API-Key",
            "description": "An API key",
        }
        assert {name for r in card["securityRequirements"] for name in r["schemes"]} == {"bearer", "apiKey"}
        assert [s["id"] for s in card["skills"]] == ["parrot"]
        assert all("examples" not in s for s in card["skills"])
        assert all("params" not in e for e in card["capabilities"]["extensions"])
        assert card["capabilities"]["extendedAgentCard"] is True
    assert httpx.get(server.url + "/healthz").status_code == 200


def test_the_extended_card_is_full_for_authenticated_callers(server: ServerProcess) -> None:
    for credentials in (BEARER, API_KEY):
        card = result_of(server.rpc("GetExtendedAgentCard", {}, headers=credentials))
        assert card["skills"][0]["examples"] == ["say hi"]
        assert card["capabilities"]["extensions"][0]["params"]["kind"] == "llm"
        assert "bearer" in card["securitySchemes"]


# -- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "params"), RPC_METHODS, ids=[m for m, _ in RPC_METHODS])
def test_every_rpc_without_credentials_is_refused(server: ServerProcess, method: str, params: Json | None) -> None:
    for path in ("/agents/echo/", "/"):
        message = refused(server.post(rpc(method, params), path=path))
        assert message.startswith("authentication required")


def test_the_rest_binding_is_refused_too_with_a_rest_shaped_body(server: ServerProcess) -> None:
    response = httpx.get(f"{server.url}/agents/echo/rest/tasks", headers={"A2A-Version": "1.0"})
    assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
    error = response.json()["error"]  # as a2a-sdk's REST errors: google.rpc.Status with an ErrorInfo
    assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
    assert error["message"].startswith("authentication required")
    assert error["details"][0]["reason"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    "credentials",
    [{"Authorization": "Bearer token-three"}, {"Authorization": "Bearer token-on"}, {"X-API-Key": "key-two"}],
    ids=["wrong-token", "prefix-of-a-token", "wrong-key"],
)
def test_wrong_credentials_are_invalid(server: ServerProcess, credentials: dict[str, str]) -> None:
    for method, params in (RPC_METHODS[0], RPC_METHODS[-1]):
        assert refused(server.post(rpc(method, params), headers=credentials)) == "invalid credentials"


NOT_PUBLIC = [
    "/agents/x/healthz",
    "/agents/echo/healthz",
    "/foo/.well-known/agent.json",
    "/foo/.well-known/agent-card.json",
    "/agents/echo/.well-known/agent.json",
    "/agents/nobody/.well-known/agent-card.json",
    "/agents/echo/rest/healthz",
    "/agents/echo/rest/tasks/healthz",
    "/agents/echo/rest/.well-known/agent-card.json",
    "//healthz",
]


@pytest.mark.parametrize("path", NOT_PUBLIC)
def test_a_path_that_only_ends_like_a_public_one_needs_credentials(server: ServerProcess, path: str) -> None:
    assert refused(httpx.get(server.url + path)).startswith("authentication required")
    assert refused(httpx.post(server.url + path, json=rpc("ListTasks", {}))).startswith("authentication required")


PUBLIC = [
    "/healthz",
    "/.well-known/agent-card.json",
    "/.well-known/agent.json",
    "/agents/echo/.well-known/agent-card.json",
]


@pytest.mark.parametrize("path", PUBLIC)
def test_the_exact_public_paths_answer_without_credentials(server: ServerProcess, path: str) -> None:
    assert httpx.get(server.url + path).status_code == 200


def test_an_anonymous_5_mib_post_is_refused_before_its_body_is_read(server: ServerProcess) -> None:
    """The client announces 5 MiB and sends 1 KiB: the 401 comes back without the server waiting for the rest."""
    head = (
        "POST /agents/echo/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {5 * 1024 * 1024}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.encode() + b"[" * 1024)
        answer = b""
        while b"authentication required" not in answer and (chunk := sock.recv(4096)):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
    assert b"authentication required" in answer


def test_an_authenticated_oversized_post_still_gets_413(server: ServerProcess) -> None:
    response = server.post(b"[" + b" " * (5 * 1024 * 1024) + b"]", headers=BEARER)
    assert response.status_code == 413, response.text
    assert "larger than 4194304 bytes" in response.json()["error"]["message"]


def test_a_websocket_is_refused_before_it_reaches_the_app() -> None:
    """No route of ours speaks websocket: the scope is closed (HTTP 403) whatever the path, credentials or not."""
    reached: list[str] = []

    async def accepting(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope["type"])
        await send({"type": "websocket.accept"})

    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    credentials = Credentials(AuthConfig(bearer_tokens_env="T_TOKENS"), {"T_TOKENS": "token-one"})
    middleware = AuthMiddleware(accepting, credentials, public=lambda path: path == "/healthz")
    scope: Scope = {"type": "websocket", "path": "/healthz", "headers": [(b"authorization", b"Bearer token-one")]}
    asyncio.run(middleware(scope, receive, send))
    assert reached == []
    assert [m["type"] for m in sent] == ["websocket.close"]


def test_lifespan_passes_through_authentication() -> None:
    reached: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope["type"])

    async def nothing() -> Message:
        return {"type": "lifespan.startup"}

    async def ignore(message: Message) -> None:
        return None

    credentials = Credentials(AuthConfig(bearer_tokens_env="T_TOKENS"), {"T_TOKENS": "token-one"})
    asyncio.run(
        AuthMiddleware(app, credentials, public=lambda path: path == "/healthz")({"type": "lifespan"}, nothing, ignore)
    )
    assert reached == ["lifespan"]


def test_another_authorization_scheme_counts_as_none(server: ServerProcess) -> None:
    response = server.post(rpc("ListTasks", {}), headers={"Authorization": "Basic dG9rZW4tb25lOg=="})
    assert refused(response).startswith("authentication required")


# -- acceptance -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "credentials",
    [
        {"Authorization": "Bearer token-one"},
        BEARER,
        {"authorization": "bearer token-one"},
        API_KEY,
        {"x-api-key": "key-one"},
    ],
    ids=["first-token", "second-token", "lowercase-bearer", "api-key", "lowercase-header"],
)
def test_valid_credentials_work(server: ServerProcess, credentials: dict[str, str]) -> None:
    task = result_of(server.rpc("SendMessage", {"message": user_message("let me in")}, headers=credentials))["task"]
    assert reply_text(task) == "[echo] You said: let me in"
    assert result_of(server.rpc("_cleveragents/diagnostics", headers=credentials))["agents"] == ["echo"]


def test_stdio_needs_no_credentials(project: Path) -> None:
    """``ca run --stdio`` answers the local user who started it: auth does not apply to it."""
    peer = StdioPeer(project, "echo", env=TOKENS)
    try:
        assert "examples" not in result_of(peer.request("agent/discover"))["skills"][0]
        task = result_of(peer.request("SendMessage", {"message": user_message("local")}))["task"]
        assert reply_text(task) == "[echo] You said: local"
        assert result_of(peer.request("_cleveragents/registry/list"))["agents"][0]["name"] == "echo"
        assert result_of(peer.request("GetExtendedAgentCard", {}))["skills"][0]["examples"] == ["say hi"]
        code, _ = peer.close()
        assert code == 0
    finally:
        peer.kill()


def test_the_shared_forms_are_one_caller_named_after_the_variable(server: ServerProcess) -> None:
    """Every token of ``bearer_tokens_env`` is the caller ``T_TOKENS`` (they share their tasks); the keys
    of ``api_keys_env`` are another caller, ``T_KEYS``, who does not see them."""
    task = result_of(server.rpc("SendMessage", {"message": user_message("shared")}, headers=BEARER))["task"]
    other_token = {"Authorization": "Bearer token-one"}
    assert result_of(server.rpc("GetTask", {"id": task["id"]}, headers=other_token))["id"] == task["id"]
    assert server.rpc("GetTask", {"id": task["id"]}, headers=API_KEY)["error"]["code"] == -32001
    query = {"taskId": task["id"], "kind": "task.state"}
    records = result_of(server.rpc("_cleveragents/audit/query", query, headers=other_token))["records"]
    assert [r["data"]["by"] for r in records if r["data"]["state"] == "submitted"] == ["T_TOKENS"]
