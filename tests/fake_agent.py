"""A fake remote A2A agent: a stdlib HTTP server on a free loopback port that records every request.

Each test sets the routes it needs: :meth:`FakeAgent.card` serves an agent card naming the
interface URLs it is given, :meth:`FakeAgent.answers` answers JSON-RPC ``SendMessage`` with a
message, :meth:`FakeAgent.redirect` answers a path with a redirect. Anything else is a 404.
Every request that reaches the server is in :attr:`FakeAgent.seen`, with its headers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CARD = "/.well-known/agent-card.json"

Reply = tuple[int, dict[str, str], bytes]


@dataclass(frozen=True)
class Seen:
    """One request as the server received it; header names are lowercased."""

    method: str
    path: str
    headers: dict[str, str]


class FakeAgent:
    """A loopback HTTP server in a thread, answering from :attr:`routes` and recording every request."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.routes: dict[tuple[str, str], Callable[[bytes], Reply]] = {}
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.port = int(self._httpd.server_address[1])
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        """The server's origin, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def card(self, *interfaces: str, path: str = "/") -> None:
        """Serve, under ``path``, an agent card whose JSON-RPC interfaces are ``interfaces`` (in that order)."""
        card = {
            "name": f"fake-{self.port}",
            "description": "a fake remote agent",
            "version": "1",
            "supportedInterfaces": [
                {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"} for url in interfaces
            ],
            "capabilities": {"streaming": False},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [],
        }
        body = json.dumps(card).encode()
        self.routes["GET", path.rstrip("/") + CARD] = lambda _: (200, {"Content-Type": "application/json"}, body)

    def answers(self, path: str = "/") -> None:
        """Answer JSON-RPC ``SendMessage`` at ``path`` with the message ``pong from PORT``."""

        def reply(body: bytes) -> Reply:
            request: dict[str, Any] = json.loads(body)
            message = {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": f"pong from {self.port}"}]}
            answer = {"jsonrpc": "2.0", "id": request.get("id"), "result": {"message": message}}
            return 200, {"Content-Type": "application/json"}, json.dumps(answer).encode()

        self.routes["POST", path] = reply

    def redirect(self, method: str, path: str, location: str, status: int = 307) -> None:
        """Answer ``method path`` with ``status`` and ``Location: location``."""
        self.routes[method, path] = lambda _: (status, {"Location": location}, b"")

    def with_header(self, name: str) -> list[Seen]:
        """The requests that carried header ``name``."""
        return [seen for seen in self.seen if name.lower() in seen.headers]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler(agent: FakeAgent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._answer("GET")

        def do_POST(self) -> None:
            self._answer("POST")

        def _answer(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            agent.seen.append(Seen(method, self.path, {k.lower(): v for k, v in self.headers.items()}))
            route = agent.routes.get((method, self.path))
            status, headers, payload = route(body) if route else (404, {}, b"no such route")
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    return Handler
