"""Redirects stay on the network allowlist: every hop of ``http.get`` is checked like a direct call.

Two real loopback servers: ``allowed`` (its ``127.0.0.1:PORT`` is the agent's only network
entry) answers redirects as asked, ``internal`` (another port of 127.0.0.1, like a metadata
service or an admin port) holds a secret and records every request it gets. An offline agent
fetches what its message's ``@tool http.get`` line says, through the real Runtime.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from framework.runtime.events import ToolCallFinished
from framework.runtime.governance import ToolCall, check_capabilities
from framework.spec import load_project
from tests.conftest import ProjectFactory, run_ca
from tests.driving import drive, results

SECRET = "INTERNAL-SECRET-7f3a"


@dataclass
class Server:
    """A loopback server and the paths it was asked for."""

    httpd: ThreadingHTTPServer
    seen: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _serve(body: str) -> Server:
    """A server answering ``/to?code=C&location=L`` with that redirect, ``/loop`` with a redirect to
    itself, any other path with ``body``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            server.seen.append(self.path)
            parts = urlsplit(self.path)
            if parts.path == "/loop":
                self.send_response(302)
                self.send_header("Location", "/loop")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if parts.path == "/to":
                query = parse_qs(parts.query)
                self.send_response(int(query["code"][0]))
                self.send_header("Location", query["location"][0])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = f"{body} at {parts.path}".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    server = Server(ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    threading.Thread(target=server.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, Server]]:
    """(allowed, internal), both on 127.0.0.1, no proxy in between."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    pair = _serve("public page"), _serve(SECRET)
    yield pair
    for server in pair:
        server.httpd.shutdown()
        server.httpd.server_close()


def fetcher(port: int) -> str:
    return f"""
        name: fetcher
        model: offline
        profile: autonomous
        tools: [http.get]
        capabilities: {{network: {{allow: ["127.0.0.1:{port}"]}}}}
    """


def query(code: int, location: str) -> str:
    return urlencode({"code": code, "location": location})


def redirect(server: Server, code: int, location: str) -> str:
    """The URL on ``server`` that answers ``code`` with ``Location: location``."""
    return f"{server.url}/to?{query(code, location)}"


def get(make_project: ProjectFactory, allowed: Server, url: str) -> ToolCallFinished:
    """The result of one ``http.get`` of ``url`` by the fetcher, through the Runtime."""
    root = make_project({"agents/fetcher.yaml": fetcher(allowed.port)})
    [run] = drive(root, "fetcher", ("c1", "@tool http.get " + json.dumps({"url": url})))
    [result] = [r for r in results(run) if r.tool == "http.get"]
    return result


def direct_denial(root: Path, url: str) -> str:
    """What the fetcher is told when it asks for ``url`` directly."""
    caps = load_project(root).agents["fetcher"].capabilities  # type: ignore[union-attr]
    decision = check_capabilities(ToolCall.builtin("http.get", url=url), caps, root=root)
    assert decision.denied
    return f"denied: {decision.reason}"


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_to_a_port_not_on_the_allowlist_is_refused(
    make_project: ProjectFactory, servers: tuple[Server, Server], code: int
) -> None:
    allowed, internal = servers
    target = f"{internal.url}/latest/meta-data"
    result = get(make_project, allowed, redirect(allowed, code, target))
    assert result.is_error
    assert SECRET not in result.result
    assert internal.seen == []


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_refused_hop_gets_the_denial_a_direct_call_gets_and_names_the_hop(
    make_project: ProjectFactory, servers: tuple[Server, Server], code: int
) -> None:
    allowed, internal = servers
    target = f"{internal.url}/admin"
    start = redirect(allowed, code, target)
    result = get(make_project, allowed, start)
    root = make_project({})
    assert result.result.startswith(direct_denial(root, target))
    assert f"redirect 1 of GET {start}: {code} to {target}" in result.result


def test_a_relative_location_is_resolved_against_the_current_url_and_followed(
    make_project: ProjectFactory, servers: tuple[Server, Server]
) -> None:
    allowed, _ = servers
    result = get(make_project, allowed, redirect(allowed, 302, "../docs/page"))
    assert not result.is_error, result.result
    assert f"final URL: {allowed.url}/docs/page" in result.result
    assert result.result.endswith("public page at /docs/page")


def test_an_absolute_location_on_the_allowed_origin_is_followed(
    make_project: ProjectFactory, servers: tuple[Server, Server]
) -> None:
    allowed, _ = servers
    result = get(make_project, allowed, redirect(allowed, 308, f"{allowed.url}/next"))
    assert not result.is_error, result.result
    assert result.result.endswith("public page at /next")


def test_a_relative_location_cannot_reach_another_port(
    make_project: ProjectFactory, servers: tuple[Server, Server]
) -> None:
    allowed, internal = servers
    result = get(make_project, allowed, redirect(allowed, 302, f"//127.0.0.1:{internal.port}/x"))
    assert result.is_error
    assert f"port {internal.port} of host '127.0.0.1' is not allowed" in result.result
    assert internal.seen == []


@pytest.mark.parametrize(
    ("location", "said"),
    [
        ("http://169.254.169.254/latest/meta-data/", "host '169.254.169.254' is not allowed"),
        ("http://2130706433/", "is a numeric address in an unusual form"),
        ("http://[::1]/", "IPv6 literals are refused"),
        ("file:///etc/passwd", "only http:// and https:// URLs are allowed, got 'file:///etc/passwd'"),
        ("gopher://127.0.0.1/", "only http:// and https:// URLs are allowed"),
        ("http://user@127.0.0.1/", "URLs with credentials are refused"),
    ],
)
def test_a_redirect_to_a_literal_address_or_another_scheme_is_refused(
    make_project: ProjectFactory, servers: tuple[Server, Server], location: str, said: str
) -> None:
    allowed, _ = servers
    result = get(make_project, allowed, redirect(allowed, 302, location))
    assert result.is_error
    assert said in result.result
    assert "root:" not in result.result


def test_a_redirect_loop_on_the_allowed_host_stops(
    make_project: ProjectFactory, servers: tuple[Server, Server]
) -> None:
    allowed, _ = servers
    result = get(make_project, allowed, f"{allowed.url}/loop")
    assert result.is_error
    assert "more than 5 redirects" in result.result


def test_ca_run_never_shows_what_a_disallowed_redirect_target_holds(
    make_project: ProjectFactory, servers: tuple[Server, Server]
) -> None:
    allowed, internal = servers
    root = make_project({"agents/fetcher.yaml": fetcher(allowed.port)})
    line = "@tool http.get " + json.dumps({"url": redirect(allowed, 302, f"{internal.url}/admin")})
    done = run_ca("run", "fetcher", line, "--json", cwd=root)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    [result] = [e for e in map(json.loads, done.stdout.splitlines()) if e["kind"] == "tool_result"]
    assert result["is_error"]
    assert f"port {internal.port} of host '127.0.0.1' is not allowed" in result["result"]
    assert internal.seen == []
