"""Registry credentials belong to one origin: scheme, host and port, normalised, compared exactly."""

from __future__ import annotations

import pytest
from a2a.types import AgentCard, AgentInterface

from framework.protocols.a2a.origins import Origin, OriginRefused, credentials_for, origin_of, pinned_card
from framework.spec.project import Registry

ENVIRON = {"TEAM_KEY": "k-123", "OTHER_KEY": "k-456"}


def registry(url: str, var: str = "TEAM_KEY", header: str = "X-API-Key") -> Registry:
    return Registry.model_validate({"name": "team", "url": url, "headers_env": {header: var}})


def credentials(url: str, *registries: Registry) -> dict[str, str]:
    return credentials_for(origin_of(url), registries or (registry("http://localhost:18083"),), ENVIRON)


@pytest.mark.parametrize(
    ("configured", "url"),
    [
        ("http://localhost:18083", "http://localhost:180839/"),  # the registry's URL is a prefix of the port
        ("http://localhost:18083", "http://localhost:1808/"),
        ("http://localhost", "http://localhost.attacker.example/"),  # ... of the host
        ("http://agents.example.com", "http://agents.example.com.attacker.example/"),
        ("http://localhost:18083", "https://localhost:18083/"),  # another scheme
        ("http://localhost:18083", "http://localhost/"),  # the default port, 80
        ("http://localhost:18083", "http://127.0.0.1:18083/"),  # the same machine by another name
        ("http://localhost:18083", "http://attacker.example/?next=http://localhost:18083/"),
        ("http://localhost:18083", "http://localhost:18083@attacker.example/"),  # user info: the host is after '@'
    ],
)
def test_registry_credentials_are_not_given_to_a_url_that_only_looks_like_the_registrys(
    configured: str, url: str
) -> None:
    assert credentials(url, registry(configured)) == {}


def test_a_url_whose_port_runs_into_a_host_name_has_no_origin_and_so_no_credentials() -> None:
    with pytest.raises(OriginRefused, match=r"^'http://localhost:18083.attacker.example/' is not a URL: Invalid port"):
        origin_of("http://localhost:18083.attacker.example/")  # no request is made to it at all


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:18083/",
        "http://localhost:18083",
        "http://LOCALHOST:18083/agents/x/",
        "HTTP://localhost.:18083/.well-known/agent-card.json",
        "http://user@localhost:18083/",  # user info is not part of the origin
    ],
)
def test_registry_credentials_go_to_every_url_of_the_registrys_origin(url: str) -> None:
    assert credentials(url) == {"X-API-Key": "k-123"}


@pytest.mark.parametrize(
    ("configured", "called"),
    [
        ("https://agents.example.com", "https://agents.example.com:443/x/"),
        ("https://agents.example.com:443", "https://agents.example.com/"),
        ("http://agents.example.com:80/team", "http://agents.example.com/other/"),
        ("https://bücher.example", "https://xn--bcher-kva.example/"),
    ],
)
def test_the_default_port_and_the_host_spelling_do_not_change_an_origin(configured: str, called: str) -> None:
    assert credentials(called, registry(configured)) == {"X-API-Key": "k-123"}


def test_every_registry_of_an_origin_adds_its_headers_and_an_unset_variable_adds_none() -> None:
    team = registry("http://localhost:18083/team")
    other = registry("http://localhost:18083/other", "OTHER_KEY", "X-Other")
    unset = registry("http://localhost:18083", "UNSET_KEY", "X-Unset")
    assert credentials("http://localhost:18083/x/", team, other, unset) == {"X-API-Key": "k-123", "X-Other": "k-456"}


def test_an_origin_is_printed_with_its_port() -> None:
    assert str(origin_of("https://Agents.Example.com/x")) == "https://agents.example.com:443"
    assert origin_of("http://[::1]:8080/") == Origin("http", "::1", 8080)
    assert str(origin_of("http://[::1]:8080/")) == "http://[::1]:8080"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/", "http:///x", "not a url"])
def test_a_url_without_an_http_origin_is_refused(url: str) -> None:
    with pytest.raises(OriginRefused, match=r"^'.*' is not an http:// or https:// URL with a host$"):
        origin_of(url)


def card(*urls: str) -> AgentCard:
    return AgentCard(name="c", supported_interfaces=[AgentInterface(url=u, protocol_binding="JSONRPC") for u in urls])


def test_a_card_keeps_only_the_interfaces_on_the_origin_it_was_read_from() -> None:
    read = card("http://evil.example/", "not a url", "http://localhost:18083/rpc", "http://LOCALHOST:18083/b")
    pinned = pinned_card(read, "http://localhost:18083/agents/a/")
    assert [i.url for i in pinned.supported_interfaces] == ["http://localhost:18083/rpc", "http://LOCALHOST:18083/b"]
    assert len(read.supported_interfaces) == 4  # the cached card is left as it was


def test_a_card_with_every_interface_elsewhere_is_refused_naming_them() -> None:
    with pytest.raises(OriginRefused) as refused:
        pinned_card(card("http://localhost:180839/", "https://localhost:18083/"), "http://localhost:18083/")
    assert str(refused.value).startswith(
        "the agent card at 'http://localhost:18083/' names its interfaces at 'http://localhost:180839/', "
        "'https://localhost:18083/', none on http://localhost:18083: a remote agent is called only on "
        "the origin (scheme, host and port) of its URL"
    )
