"""A remote call stays on the origin its URL names, and registry credentials go to their own origin only.

Every test drives the real ``ca run`` (or ``ca call``) against fake remote agents: stdlib HTTP
servers on loopback that record every request and its headers (:mod:`tests.fake_agent`). The agent
under test may reach only the first server (``capabilities.network.allow``); the second one
stands for the host an attacker would like the call, or the key, to go to.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from framework.protocols.a2a.client import Peers
from framework.protocols.a2a.origins import OriginRefused
from framework.runtime.tasks import TaskStore
from framework.spec import load_project
from tests.conftest import ProjectFactory, events, run_ca
from tests.fake_agent import CARD, FakeAgent

pytestmark = pytest.mark.e2e

KEY = "k-origin-7f3a"
"""The registry credential (``X-API-Key``, from the variable TEAM_KEY)."""

ASK = '@tool remote {"input": "ping"}'
PINNED = "a remote agent is called only on the origin (scheme, host and port) of its URL"
FOLLOW = "use a URL on it as the agent's URL"


@pytest.fixture
def agent() -> Iterator[Callable[[], FakeAgent]]:
    """Start fake remote agents; all are stopped after the test."""
    started: list[FakeAgent] = []

    def start() -> FakeAgent:
        started.append(FakeAgent())
        return started[-1]

    yield start
    for fake in started:
        fake.close()


def caller(make_project: ProjectFactory, url: str, *, allow: str, registry: str | None = None) -> Path:
    """A project whose agent ``caller`` has the remote agent at ``url`` as its tool ``remote``."""
    files = {
        "agents/caller.yaml": f"""
            name: caller
            profile: autonomous
            tools:
              - {{agent: "{url}", name: remote}}
            capabilities: {{network: {{allow: ["{allow}"]}}}}
        """
    }
    if registry is not None:
        files["ca.yaml"] = f"""
            registries:
              - {{name: team, url: "{registry}", headers_env: {{X-API-Key: TEAM_KEY}}}}
        """
    return make_project(files)


def environment() -> dict[str, str]:
    """The registry key, and no proxy between the ``ca`` process and loopback."""
    proxies = {name: "" for name in os.environ if name.lower().endswith("_proxy")}
    return {**proxies, "TEAM_KEY": KEY, "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "false"}


def call_remote(root: Path) -> dict[str, Any]:
    """``ca run caller`` asking its tool ``remote`` once; the tool's result event."""
    result = run_ca("run", "caller", ASK, "--json", cwd=root, env=environment())
    assert result.returncode == 0, result.stderr
    [answer] = [e for e in events(result.stdout) if e["kind"] == "tool_result" and not e["source"]]
    assert answer["tool"] == "remote"
    return answer


# -- the card's interfaces ---------------------------------------------------------------------


def test_a_card_naming_an_interface_on_another_port_is_refused_and_that_port_gets_nothing(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    allowed, other = agent(), agent()
    allowed.card(other.url + "/")
    other.answers()
    root = caller(make_project, allowed.url + "/", allow=f"127.0.0.1:{allowed.port}", registry=allowed.url)
    answer = call_remote(root)
    assert answer["is_error"]
    assert answer["result"].startswith(
        f"the agent card at '{allowed.url}/' names its interface at '{other.url}/', "
        f"which is not on http://127.0.0.1:{allowed.port}: {PINNED}"
    )
    assert other.seen == []  # neither the message nor the key


def test_of_a_cards_interfaces_only_one_on_its_own_origin_is_used(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    allowed, other = agent(), agent()
    allowed.card(other.url + "/", allowed.url + "/rpc")  # the foreign one first: a2a-sdk would take it
    allowed.answers("/rpc")
    other.answers()
    root = caller(make_project, allowed.url + "/", allow=f"127.0.0.1:{allowed.port}")
    answer = call_remote(root)
    assert (answer["result"], answer["is_error"]) == (f"pong from {allowed.port}", False)
    assert other.seen == []


def test_ca_call_refuses_a_card_naming_an_interface_on_another_origin(agent: Callable[[], FakeAgent]) -> None:
    asked, other = agent(), agent()
    asked.card(other.url + "/")
    other.answers()
    result = run_ca("call", asked.url + "/", "hello", env=environment())
    assert result.returncode == 1
    assert f"names its interface at '{other.url}/', which is not on http://127.0.0.1:{asked.port}" in result.stderr
    assert other.seen == []


# -- redirects -------------------------------------------------------------------------------------


def test_a_card_redirect_to_another_origin_is_refused_and_carries_no_credentials(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    allowed, other = agent(), agent()
    allowed.redirect("GET", CARD, other.url + CARD, status=302)
    other.card(other.url + "/")
    other.answers()
    root = caller(make_project, allowed.url + "/", allow=f"127.0.0.1:{allowed.port}", registry=allowed.url)
    answer = call_remote(root)
    assert answer["is_error"]
    assert answer["result"].startswith(
        f"refused a request to '{other.url}{CARD}': a call to a remote agent stays on "
        f"http://127.0.0.1:{allowed.port}, the origin of its URL, and does not follow a redirect to another origin"
    )
    assert FOLLOW in answer["result"]
    assert other.seen == []
    assert [s.path for s in allowed.with_header("X-API-Key")] != []  # the key went to its own origin only


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("form", ["absolute", "scheme-relative", "file"])
def test_no_kind_of_card_redirect_leaves_the_origin(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent], status: int, form: str
) -> None:
    allowed, other = agent(), agent()
    location = {
        "absolute": f"{other.url}{CARD}",
        "scheme-relative": f"//127.0.0.1:{other.port}{CARD}",
        "file": "file:///etc/passwd",
    }[form]
    allowed.redirect("GET", CARD, location, status=status)
    other.card(other.url + "/")
    root = caller(make_project, allowed.url + "/", allow=f"127.0.0.1:{allowed.port}", registry=allowed.url)
    refused = (
        f"refused a request to '{other.url}{CARD}'"
        if form != "file"
        else "refused a request to 'file://127.0.0.1/etc/passwd'"  # httpx gives it the host it redirects from
    )

    async def fetch() -> None:
        tasks = TaskStore.open(root)
        peers = Peers(load_project(root), tasks, {"TEAM_KEY": KEY})
        try:
            with pytest.raises(OriginRefused) as raised:
                await peers.card(allowed.url + "/")
            assert str(raised.value).startswith(refused)
        finally:
            await peers.close()
            tasks.close()

    asyncio.run(fetch())
    assert other.seen == []


def test_a_json_rpc_post_redirected_to_another_origin_is_refused(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    allowed, other = agent(), agent()
    allowed.card(allowed.url + "/rpc")
    allowed.redirect("POST", "/rpc", other.url + "/rpc", status=307)  # 307 keeps the method and the body
    other.answers("/rpc")
    root = caller(make_project, allowed.url + "/", allow=f"127.0.0.1:{allowed.port}", registry=allowed.url)
    answer = call_remote(root)
    assert answer["is_error"]
    assert answer["result"].startswith(f"refused a request to '{other.url}/rpc'")
    assert other.seen == []


def test_a_card_redirect_within_the_origin_is_followed_with_the_credentials(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    allowed = agent()
    allowed.redirect("GET", "/old" + CARD, "/new" + CARD)
    allowed.card(allowed.url + "/new/", path="/new")
    allowed.answers("/new/")
    root = caller(make_project, allowed.url + "/old/", allow=f"127.0.0.1:{allowed.port}", registry=allowed.url)
    answer = call_remote(root)
    assert (answer["result"], answer["is_error"]) == (f"pong from {allowed.port}", False)
    keyed = {(s.method, s.path) for s in allowed.with_header("X-API-Key")}
    assert {("GET", "/new" + CARD), ("POST", "/new/")} <= keyed
    assert all(s.headers["x-api-key"] == KEY for s in allowed.with_header("X-API-Key"))


# -- credentials by origin -------------------------------------------------------------------------


def test_registry_credentials_are_not_sent_to_a_port_whose_number_extends_theirs(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    target = agent()
    target.card(target.url + "/")
    target.answers()
    registry = f"http://127.0.0.1:{str(target.port)[:-1]}"  # a string prefix of the target's origin
    root = caller(make_project, target.url + "/", allow=f"127.0.0.1:{target.port}", registry=registry)
    answer = call_remote(root)
    assert (answer["result"], answer["is_error"]) == (f"pong from {target.port}", False)
    assert [(s.method, s.path) for s in target.seen] == [("GET", CARD), ("POST", "/")]
    assert target.with_header("X-API-Key") == []


def test_registry_credentials_reach_their_own_origin(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    target = agent()
    target.card(target.url + "/agents/x/", path="/agents/x")
    target.answers("/agents/x/")
    root = caller(make_project, target.url + "/agents/x/", allow=f"127.0.0.1:{target.port}", registry=target.url + "/")
    answer = call_remote(root)
    assert (answer["result"], answer["is_error"]) == (f"pong from {target.port}", False)
    calls = [s for s in target.seen if s.path.startswith("/agents/x/")]
    assert [(s.method, s.headers.get("x-api-key")) for s in calls] == [("GET", KEY), ("POST", KEY)]


def test_the_recorded_requests_are_the_ones_the_fake_agent_answered(agent: Callable[[], FakeAgent]) -> None:
    """Guard the guard: a request to the fake agent is recorded with its headers."""
    fake = agent()
    fake.card(fake.url + "/")
    response = httpx.get(fake.url + CARD, headers={"X-API-Key": "probe"}, timeout=10)
    assert json.loads(response.text)["supportedInterfaces"][0]["url"] == fake.url + "/"
    assert [(s.method, s.path, s.headers["x-api-key"]) for s in fake.seen] == [("GET", CARD, "probe")]


def test_a_reload_that_changes_a_registry_variable_changes_the_next_requests_header(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    target = agent()
    target.card(target.url + "/")
    root = caller(make_project, target.url + "/", allow=f"127.0.0.1:{target.port}", registry=target.url)

    async def fetch_twice() -> None:
        tasks = TaskStore.open(root)
        project = load_project(root)
        peers = Peers(project, tasks, {"TEAM_KEY": "old"})
        try:
            await peers.card(target.url + "/")
            with peers.bundle(project, {"TEAM_KEY": "new"}):  # how the reloaded bundle's calls run
                await peers.card(target.url + "/")
        finally:
            await peers.close()
            tasks.close()

    asyncio.run(fetch_twice())
    assert [s.headers.get("x-api-key") for s in target.seen] == ["old", "new"]


def test_a_cookie_a_remote_agent_sets_is_never_sent_back(
    make_project: ProjectFactory, agent: Callable[[], FakeAgent]
) -> None:
    """One HTTP client serves every call to an origin: every caller's tasks and every version of the
    project. A cookie it kept would carry one caller's session (or a rejected reload's) into the
    next caller's requests, so none is kept."""
    target = agent()
    target.card(target.url + "/")
    card = target.routes["GET", CARD]

    def with_cookie(body: bytes) -> tuple[int, dict[str, str], bytes]:
        status, headers, payload = card(body)
        return status, {**headers, "Set-Cookie": "session=caller-a; Path=/"}, payload

    target.routes["GET", CARD] = with_cookie
    root = caller(make_project, target.url + "/", allow=f"127.0.0.1:{target.port}")

    async def fetch_three_times() -> None:
        tasks = TaskStore.open(root)
        project = load_project(root)
        peers = Peers(project, tasks, {})
        try:
            await peers.card(target.url + "/")
            with peers.bundle(project, {}):
                await peers.card(target.url + "/")
            await peers.card(target.url + "/")
        finally:
            await peers.close()
            tasks.close()

    asyncio.run(fetch_three_times())
    assert len(target.seen) == 3
    assert target.with_header("cookie") == []
