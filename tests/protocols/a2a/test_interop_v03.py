"""A2A v0.3 interop, through real processes on loopback: v0.3 clients against `ca serve`, and a
v0.3-only server (built with a2a-sdk's v0.3 compatibility, :data:`tests.a2a_peers.V03_ECHO`)
called from a project as an ``agent: URL`` tool, a registry and a tag selector.

Processes: the v0.3-only agent; `ca serve` of project S (no auth; its registry is the v0.3 agent);
`ca serve` of project T (``server.auth``); project B is only run with `ca` commands.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.client.transports.jsonrpc import JsonRpcTransport
from a2a.compat.v0_3 import types as v03
from a2a.compat.v0_3.conversions import to_core_agent_card
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.compat.v0_3.rest_transport import CompatRestTransport
from a2a.helpers.proto_helpers import get_text_parts, new_text_part
from a2a.types import Message, Role, SendMessageRequest, TaskState

from framework.protocols.a2a.platform import METHODS, PREFIX
from tests.a2a_peers import V03_ECHO, Json, result_of
from tests.conftest import events, free_ports, run_ca, write_project
from tests.serving import SERVER_ENV, ServerProcess, launch_script, launch_serve

pytestmark = pytest.mark.e2e

ECHO = """
    name: echo
    skills:
      - {id: parrot, name: Parrot, description: Says it back, tags: [echo], examples: ["say hi"]}
"""
TOKEN = {"T_TOKENS": "token-one"}
BEARER = {"Authorization": "Bearer token-one"}


@dataclass
class Net:
    old: ServerProcess
    """The v0.3-only agent."""
    s: ServerProcess
    """`ca serve` without auth; its ca.yaml lists the v0.3 agent as a registry."""
    t: ServerProcess
    """`ca serve` with server.auth (bearer token ``token-one``)."""
    b: Path
    """A project that calls the v0.3 agent (a URL tool, a registry, a tag selector) and lists S as a registry."""


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    logs = tmp_path_factory.mktemp("logs")
    po, ps, pt = free_ports(3)
    old_url = f"http://127.0.0.1:{po}"
    old = launch_script("v03_echo", V03_ECHO, tmp_path_factory.mktemp("scripts"), logs, po)
    old.wait_ready()  # S and B read it as a registry when they open
    s = write_project(
        tmp_path_factory.mktemp("s"),
        {
            "ca.yaml": f'default_agent: echo\nregistries:\n  - {{name: old, url: "{old_url}"}}\n',
            "agents/echo.yaml": ECHO,
        },
    )
    t = write_project(
        tmp_path_factory.mktemp("t"),
        {"ca.yaml": "default_agent: echo\nserver:\n  auth: {bearer_tokens_env: T_TOKENS}\n", "agents/echo.yaml": ECHO},
    )
    allow = f'capabilities: {{network: {{allow: ["127.0.0.1:{po}"]}}}}'
    b = write_project(
        tmp_path_factory.mktemp("b"),
        {
            "ca.yaml": f"""
                registries:
                  - {{name: old, url: "{old_url}"}}
                  - {{name: team, url: "http://127.0.0.1:{ps}"}}
            """,
            "agents/mixer.yaml": f"""
                name: mixer
                profile: autonomous
                tools: [{{agent: "{old_url}/", name: old}}]
                {allow}
            """,
            "agents/picker.yaml": f"""
                name: picker
                profile: autonomous
                tools: [{{agents: {{tags: [legacy]}}}}]
                {allow}
            """,
        },
    )
    servers = [
        launch_serve(s, logs=logs, port=ps, name="serve-s", env=SERVER_ENV),
        launch_serve(t, logs=logs, port=pt, name="serve-t", env={**SERVER_ENV, **TOKEN}),
    ]
    try:
        for server in servers:
            server.wait_ready()
        yield Net(old, servers[0], servers[1], b)
    finally:
        for proc in [*servers, old]:
            proc.stop()
    for server in servers:
        server.assert_clean_exit()


def seen(net: Net) -> list[str]:
    """The JSON-RPC methods the v0.3-only agent was asked, in order."""
    methods: list[str] = httpx.get(f"{net.old.url}/seen", timeout=10).json()
    return methods


def v03_message(text: str) -> Json:
    return {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "parts": [{"kind": "text", "text": text}]}


# -- our cards, read by v0.3 and v1.0 clients ----------------------------------------------------

CARD_PATHS = ["/agents/echo/.well-known/agent-card.json", "/.well-known/agent-card.json", "/.well-known/agent.json"]


@pytest.mark.parametrize("path", CARD_PATHS)
@pytest.mark.parametrize("which", ["s", "t"])
def test_every_served_card_parses_as_v03_and_as_v1(net: Net, which: str, path: str) -> None:
    server: ServerProcess = getattr(net, which)
    data = httpx.get(server.url + path, timeout=10).json()
    old = v03.AgentCard.model_validate(data)  # what an a2a-sdk 0.3 (ADK 1.x) client does with it
    rpc = f"{server.url}/agents/echo/"
    assert (old.url, old.preferred_transport, old.protocol_version) == (rpc, "JSONRPC", "0.3.0")
    assert [(i.url, i.transport) for i in old.additional_interfaces or []] == [(f"{rpc}rest", "HTTP+JSON")]
    assert [s.id for s in old.skills] == ["parrot"]
    new = parse_agent_card(data)  # and a v1.0 client: it prefers the 1.0 interfaces
    assert [(i.protocol_binding, i.protocol_version) for i in new.supported_interfaces][:2] == [
        ("JSONRPC", "1.0"),
        ("HTTP+JSON", "1.0"),
    ]
    assert new.supported_interfaces[0].url == rpc
    chosen = ClientFactory(ClientConfig()).create(new)._transport  # type: ignore[attr-defined]
    assert type(chosen) is JsonRpcTransport  # v1.0, not the v0.3 compat transport
    if which == "t":  # the v0.3 security shape too, and the extended card announced the v0.3 way
        assert old.security_schemes is not None and old.security_schemes["bearer"].root.type == "http"
        assert old.supports_authenticated_extended_card is True


def test_the_cards_of_registry_get_and_ca_card_parse_as_v03(net: Net) -> None:
    card = result_of(net.s.rpc("_cleveragents/registry/get", {"name": "echo"}, agent="echo"))["card"]
    assert v03.AgentCard.model_validate(card).url == f"{net.s.url}/agents/echo/"
    printed = run_ca("card", "echo", "--base-url", "http://127.0.0.1:9999", cwd=net.s.root)
    assert printed.returncode == 0, printed.stderr
    assert v03.AgentCard.model_validate(json.loads(printed.stdout)).url == "http://127.0.0.1:9999/agents/echo/"


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_a_v03_client_turn_completes(net: Net, binding: str) -> None:
    """a2a-sdk's v0.3 client transports, given the card as a v0.3 client reads it (its v0.3 fields only):
    the main interface (JSON-RPC) and the additional one (HTTP+JSON)."""
    data = httpx.get(f"{net.s.url}/agents/echo/.well-known/agent-card.json", timeout=10).json()
    card = to_core_agent_card(v03.AgentCard.model_validate(data))
    assert all(i.protocol_version.startswith("0.3") for i in card.supported_interfaces)

    async def go() -> tuple[Any, list[str]]:
        async with httpx.AsyncClient(timeout=60) as http:
            config = ClientConfig(httpx_client=http, streaming=False, supported_protocol_bindings=[binding])
            client = ClientFactory(config).create(card)
            transport = client._transport  # type: ignore[attr-defined]  # which wire the SDK chose
            message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[new_text_part("old times")])
            out: list[str] = []
            async for event in client.send_message(SendMessageRequest(message=message)):
                if event.HasField("task"):
                    out.append(TaskState.Name(event.task.status.state))
                    out += ["".join(get_text_parts(list(a.parts))) for a in event.task.artifacts]
            return transport, out

    transport, out = asyncio.run(go())
    assert isinstance(transport, {"JSONRPC": CompatJsonRpcTransport, "HTTP+JSON": CompatRestTransport}[binding])
    assert out == ["TASK_STATE_COMPLETED", "[echo] You said: old times"]


def test_a_raw_v03_json_rpc_turn_completes(net: Net) -> None:
    task = result_of(net.s.rpc("message/send", {"message": v03_message("by hand")}))
    assert (task["kind"], task["status"]["state"]) == ("task", "completed")
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "[echo] You said: by hand"}]


def test_the_v03_extended_card_answers_authenticated_callers(net: Net) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard"}
    refused = httpx.post(f"{net.t.url}/agents/echo/", json=request, timeout=10)
    assert refused.status_code == 401
    answer = httpx.post(f"{net.t.url}/agents/echo/", json=request, headers=BEARER, timeout=10).json()
    card = v03.AgentCard.model_validate(result_of(answer))
    assert card.url == f"{net.t.url}/agents/echo/" and card.skills[0].examples == ["say hi"]
    [extension] = card.capabilities.extensions or []
    assert extension.params is not None and {m["method"] for m in extension.params["methods"]} >= {
        "_cleveragents/registry/list"
    }


# -- the platform methods, declared in the card ----------------------------------------------------


def test_the_card_lists_every_platform_method_with_its_params(net: Net) -> None:
    card = httpx.get(f"{net.s.url}/agents/echo/.well-known/agent-card.json", timeout=10).json()
    [extension] = card["capabilities"]["extensions"]
    listed = {m["method"]: m["params"] for m in extension["params"]["methods"]}
    assert sorted(listed) == sorted(PREFIX + name for name in METHODS)  # the dispatcher's own table
    assert listed["_cleveragents/approvals/decide"]["required"] == ["taskId", "decision"]
    assert listed["_cleveragents/audit/query"]["properties"]["limit"]["maximum"] == 1000
    for method, schema in listed.items():  # each one exists: called with its listed params, never -32601
        params = {key: "x" for key in schema.get("required", [])}
        answer = net.s.rpc(method, params or None)
        assert answer.get("error", {}).get("code") != -32601, (method, answer)


def test_the_public_card_under_auth_lists_no_methods_the_extended_one_does(net: Net) -> None:
    public = httpx.get(f"{net.t.url}/agents/echo/.well-known/agent-card.json", timeout=10).json()
    assert "params" not in public["capabilities"]["extensions"][0]
    full = result_of(net.t.rpc("GetExtendedAgentCard", {}, headers=BEARER))
    assert len(full["capabilities"]["extensions"][0]["params"]["methods"]) == len(METHODS)


# -- a v0.3-only server, called and discovered ---------------------------------------------------


def test_an_agent_url_tool_calls_a_v03_only_server(net: Net) -> None:
    before = len(seen(net))
    result = run_ca("run", "mixer", '@tool old {"input": "ping"}', "--json", cwd=net.b, env=SERVER_ENV)
    assert result.returncode == 0, result.stderr
    [answer] = [e for e in events(result.stdout) if e["kind"] == "tool_result"]
    assert (answer["tool"], answer["result"], answer["is_error"]) == ("old", "v0.3 echo: ping", False)
    asked = seen(net)[before:]
    assert "message/send" in asked and "SendMessage" not in asked  # it spoke v0.3, as the card says


def test_a_registry_and_a_tag_selector_reach_a_v03_only_server_with_its_skills(net: Net) -> None:
    listed = run_ca("agents", "list", "--json", cwd=net.b, env=SERVER_ENV)
    assert listed.returncode == 0, listed.stderr
    agents = {(a["name"], a["source"]): a for a in json.loads(listed.stdout)}
    old = agents["old-echo", "registry:old"]
    assert (old["kind"], old["url"]) == ("remote", f"{net.old.url}/")
    assert old["skills"] == [
        {"id": "echo", "name": "Echo", "tags": ["echo", "legacy"]},
        {"id": "shout", "name": "Shout", "tags": ["echo"]},
    ]
    assert old["tags"] == ["echo", "legacy"]
    # A CleverAgents registry's agents keep their skills too.
    assert agents["echo", "registry:team"]["skills"] == [{"id": "parrot", "name": "Parrot", "tags": ["echo"]}]
    text = run_ca("agents", "list", cwd=net.b, env=SERVER_ENV)
    assert "skills: echo, shout" in text.stdout and "skills: parrot" in text.stdout

    result = run_ca("run", "picker", '@tool old-echo {"input": "by tag"}', "--json", cwd=net.b, env=SERVER_ENV)
    assert result.returncode == 0, result.stderr
    [answer] = [e for e in events(result.stdout) if e["kind"] == "tool_result"]
    assert (answer["tool"], answer["result"]) == ("old-echo", "v0.3 echo: by tag")


def test_registry_list_over_http_shows_the_remote_cards_skills(net: Net) -> None:
    agents = result_of(net.s.rpc("_cleveragents/registry/list"))["agents"]
    [old] = [a for a in agents if a["source"] == "registry:old"]
    assert [s["id"] for s in old["skills"]] == ["echo", "shout"]
