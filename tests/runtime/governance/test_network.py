"""Network capability: the host a request really goes to must be on the allowlist."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.runtime.governance import ToolCall, check_capabilities
from framework.spec.capabilities import Capabilities

CAPS = Capabilities.model_validate(
    {"network": {"allow": ["api.github.com", "*.example.com", "localhost:8080", "10.0.0.5", "xn--bcher-kva.example"]}}
)
ROOT = Path(".")
RULE = "capabilities.network.allow"


def get(url: object, caps: Capabilities | None = CAPS) -> tuple[str, str]:
    decision = check_capabilities(ToolCall("http.get", "network", {"url": url}), caps, root=ROOT)
    assert decision.rule == RULE
    return decision.action, decision.reason


@pytest.mark.parametrize(
    ("url", "entry"),
    [
        ("https://api.github.com/repos", "api.github.com"),
        ("http://API.GitHub.com/", "api.github.com"),
        ("https://api.github.com.:443/x", "api.github.com"),
        ("https://docs.example.com/", "*.example.com"),
        ("https://a.b.example.com/", "*.example.com"),
        ("http://localhost:8080/health", "localhost:8080"),
        ("http://10.0.0.5/", "10.0.0.5"),
        ("https://bücher.example/", "xn--bcher-kva.example"),
    ],
)
def test_an_allowed_host_passes(url: str, entry: str) -> None:
    action, reason = get(url)
    assert action == "allow"
    assert f"matches {entry!r} in {RULE}" in reason


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "https://evil.com/",
            "host 'evil.com' is not allowed: it is not in capabilities.network.allow; add 'evil.com'",
        ),
        (
            "https://example.com/",
            "add 'example.com' to capabilities.network.allow (or '*.example.com' for its subdomains)",
        ),
        ("https://evilexample.com/", "host 'evilexample.com' is not allowed"),
        ("https://api.github.com.evil.com/", "host 'api.github.com.evil.com' is not allowed"),
        ("http://api.github.com@evil.com/", "has a user name or password before '@' (its host is 'evil.com')"),
        ("http://api.github.com\\@evil.com/", "has a user name or password before '@' (its host is 'evil.com')"),
        ("http://user:pw@api.github.com/", "URLs with credentials are refused, remove the part before '@'"),
        ("http://evil.com#@api.github.com/", "host 'evil.com' is not allowed"),
        ("http://evil.com?@api.github.com/", "host 'evil.com' is not allowed"),
        (
            "http://127.0.0.1/",
            "host '127.0.0.1' is not allowed: it is not in capabilities.network.allow; add '127.0.0.1'",
        ),
        (
            "http://10.0.0.5:8000/",
            "port 8000 of host '10.0.0.5' is not allowed ('10.0.0.5' allows port 80); add '10.0.0.5:8000'",
        ),
        (
            "http://2130706433/",
            "is a numeric address in an unusual form; write an IPv4 address as four decimal numbers",
        ),
        ("http://127.1/", "is a numeric address in an unusual form"),
        ("http://0x7f.0.0.1/", "is a numeric address in an unusual form"),
        ("http://0177.0.0.1/", "invalid URL"),
        ("http://[::1]/", "IPv6 literals are refused, use a host name"),
        ("ftp://api.github.com/", "only http:// and https:// URLs are allowed"),
        ("file:///etc/passwd", "only http:// and https:// URLs are allowed"),
        ("javascript:alert(1)", "only http:// and https:// URLs are allowed"),
        (
            "https://api.github.com:8443/",
            "port 8443 of host 'api.github.com' is not allowed ('api.github.com' allows port 443); add 'api.github.com:8443'",
        ),
        (
            "http://localhost/",
            "port 80 of host 'localhost' is not allowed ('localhost:8080' allows port 8080); add 'localhost'",
        ),
        ("https://аpi.github.com/", "host 'аpi.github.com' (IDNA 'xn--pi-6kc.github.com') is not allowed"),
        ("https://ＡＰＩ.github.com/", "invalid URL"),
        ("https://api.github.com%00.evil.com/", "has characters a DNS name cannot have"),
        ("https://under_score.example.com/", "has characters a DNS name cannot have"),
        ("http:///path", "has no host"),
        ("not a url", "only http:// and https:// URLs are allowed"),
        (42, "the URL must be a string, got int"),
    ],
)
def test_a_host_not_on_the_allowlist_is_denied(url: object, said: str) -> None:
    action, reason = get(url)
    assert action == "deny"
    assert reason.startswith("http.get: ")
    assert said in reason


def test_a_look_alike_host_is_flagged() -> None:
    _, reason = get("https://аpi.github.com/")
    assert "make sure it is not a look-alike of the host you meant" in reason


def test_no_capabilities_reach_no_host() -> None:
    action, reason = get("https://api.github.com/", None)
    assert action == "deny"
    assert "the agent declares no capabilities; add capabilities: {network: {allow: ['api.github.com']}}" in reason
