"""A2A peers for the tests: JSON-RPC message helpers, a real ``ca run --stdio`` process, the
project the stdio and parity tests serve, and an agent written with the bare a2a-sdk.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from a2a.client import Client, ClientConfig, ClientFactory

from tests.conftest import CA, NAP, REPO, SIDE_EFFECT, writer_agent

Json = dict[str, Any]

STDIO_PROJECT = {
    "ca.yaml": "default_agent: echo\n",
    "agents/echo.yaml": "name: echo\n",
    "agents/twice.yaml": """
        name: twice
        model:
          provider: scripted
          replies: ["first answer", "second answer"]
    """,
    "agents/writer.yaml": writer_agent(),
    "agents/slow.yaml": """
        name: slow
        profile: autonomous
        model:
          provider: scripted
          replies:
            - tool_calls: [{name: nap, args: {seconds: 1}}]
            - rested enough
        tools:
          - python: tools/nap.py:nap
    """,
    "agents/desk.yaml": """
        name: desk
        kind: workflow
        steps:
          - id: kind
            router:
              on: "{{ request.metadata.kind }}"
              routes:
                - when: {regex: "^hello$"}
                  steps: [{id: hi, message: "Hello, {{ input }}"}]
                - when: {regex: "^files$"}
                  steps:
                    - id: bundle
                      artifact:
                        parts:
                          - data: {asked: "{{ input }}"}
                          - file: {name: notes.txt, media_type: text/plain, content: "notes on {{ input }}"}
              default:
                - {id: which, ask: {message: "Which one?"}}
    """,
    "agents/stingy.yaml": """
        name: stingy
        profile: autonomous
        budget: {max_turns: 1, on_exceed: fail}
        model:
          provider: scripted
          replies:
            - tool_calls: [{name: nap, args: {seconds: 0}}]
            - never said
        tools:
          - python: tools/nap.py:nap
    """,
    "tools/side.py": SIDE_EFFECT,
    "tools/nap.py": NAP,
}
"""Agents for `ca run --stdio` and `ca serve` alike (the parity tests serve it over both).

``echo`` answers with the offline model; ``twice`` has two scripted replies; ``writer`` waits for an
approval of its side effect; ``slow`` naps a second; ``desk`` is a workflow that routes on the
request metadata; ``stingy`` fails at its one-turn budget."""


def user_message(text: str, **ids: str) -> Json:
    """A v1.0 user message (``taskId``/``contextId`` as keyword arguments)."""
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **ids}


@asynccontextmanager
async def a2a_client(
    base: str, agent: str, *, streaming: bool = False, binding: str = "JSONRPC"
) -> AsyncIterator[Client]:
    """The official a2a-sdk client, from the card at ``base/agents/AGENT/.well-known/agent-card.json``."""
    async with httpx.AsyncClient(timeout=60) as http:
        config = ClientConfig(streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding])
        client = await ClientFactory(config).create_from_url(f"{base}/agents/{agent}")
        async with client:
            yield client


class StdioPeer:
    """A real ``ca run --stdio [AGENT]`` process (or another stdio server): request lines in, message lines out,
    with timeouts.

    A reader thread moves stdout lines into a queue, so nothing blocks on a full pipe and every
    read has a deadline. Messages read while waiting for another one are kept in an inbox.
    """

    def __init__(
        self,
        root: Path,
        agent: str | None = None,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = ("run", "--stdio"),
    ) -> None:
        """``command``: the ``ca`` arguments (another stdio server, such as ``mcp serve``), before ``agent``."""
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            [*CA, *command, *([agent] if agent else [])],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.lines: list[str] = []
        """Every line the process wrote to stdout, as read."""
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._inbox: list[Json] = []
        self._eof = False
        self._ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._queue.put(raw.decode("utf-8"))
        self._queue.put(None)

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", errors="replace")

    def send(self, message: Json | str) -> None:
        """Write one line (a dict is encoded as JSON)."""
        assert self.proc.stdin is not None
        line = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(line.encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (a test of hostile input adds the newline itself)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def rss_mib(self) -> float:
        """The process's resident memory."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS for the stdio process")

    def _pull(self, deadline: float) -> Json | None:
        """The next message, or None at end of output; fails at the deadline or on a non-JSON line."""
        if self._eof:
            return None
        try:
            line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.001))
        except queue.Empty:
            raise AssertionError(f"no message in time; stderr:\n{self.stderr()[-3000:]}") from None
        if line is None:
            self._eof = True
            return None
        self.lines.append(line)
        assert line.endswith("\n"), f"an unterminated line on stdout: {line!r}"
        try:
            message = json.loads(line)
        except ValueError:
            raise AssertionError(f"stdout carries something that is not JSON: {line!r}") from None
        assert isinstance(message, dict), line
        return message

    def wait_for(self, matches: Callable[[Json], bool], timeout: float = 60) -> Json:
        """The first message (kept or new) that ``matches``; the others stay in the inbox."""
        for kept in self._inbox:
            if matches(kept):
                self._inbox.remove(kept)
                return kept
        deadline = time.monotonic() + timeout
        while True:
            message = self._pull(deadline)
            if message is None:
                raise AssertionError(f"stdout ended before the message came; stderr:\n{self.stderr()[-3000:]}")
            if matches(message):
                return message
            self._inbox.append(message)

    def next_id(self) -> str:
        self._ids += 1
        return f"r{self._ids}"

    def answer(self, request_id: Any, timeout: float = 60) -> Json:
        """The response (not a notification) to ``request_id``."""
        return self.wait_for(lambda m: "method" not in m and m.get("id") == request_id, timeout)

    def request(self, method: str, params: Json | None = None, *, timeout: float = 60) -> Json:
        """Send a request and wait for its response."""
        request_id = self.next_id()
        message: Json = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.answer(request_id, timeout)

    def stream(self, method: str, params: Json, *, timeout: float = 60) -> tuple[list[Json], Json]:
        """A streaming request: its ``_cleveragents/stream`` notifications, then its response."""
        return self.exchange({"jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": params}, timeout)

    def exchange(self, request: Json, timeout: float = 60) -> tuple[list[Json], Json]:
        """Send a request (with an id); the stream notifications that came for it, and its response."""
        self.send(request)
        final = self.answer(request["id"], timeout)
        notes = [
            m for m in self._inbox if m.get("method") == "_cleveragents/stream" and m["params"]["id"] == request["id"]
        ]
        self._inbox = [m for m in self._inbox if m not in notes]
        return notes, final

    def close(self, timeout: float = 60) -> tuple[int, list[Json]]:
        """End of input: the exit code and every message not consumed yet."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        deadline = time.monotonic() + timeout
        rest = list(self._inbox)
        self._inbox.clear()
        while (message := self._pull(deadline)) is not None:
            rest.append(message)
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 1)), rest

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self._stderr.close()


def result_of(answer: Json) -> Any:
    assert "error" not in answer, answer
    return answer["result"]


def reply_text(task: Json) -> str:
    [artifact] = task["artifacts"]
    return "".join(part["text"] for part in artifact["parts"])


def is_v1(method: str) -> bool:
    """v1.0 method names are PascalCase (``SendMessage``); they need the ``A2A-Version: 1.0`` header."""
    return method[:1].isupper()


PLAIN_ECHO = '''
    """An echo agent written with the plain a2a-sdk: no CleverAgents code."""

    import sys
    import uuid

    import uvicorn
    from a2a.helpers.proto_helpers import new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message, Role
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    PORT = int(sys.argv[1])


    class Echo(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            await event_queue.enqueue_event(
                Message(
                    message_id=uuid.uuid4().hex,
                    role=Role.ROLE_AGENT,
                    parts=[new_text_part(f"plain echo: {context.get_user_input()}")],
                    context_id=context.context_id or "",
                )
            )

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError


    card = AgentCard(
        name="plain-echo",
        description="An echo agent written with the bare a2a-sdk",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"http://127.0.0.1:{PORT}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echoes the text", tags=["echo"])],
    )
    handler = DefaultRequestHandler(Echo(), InMemoryTaskStore(), card)
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
        Route("/ready", lambda request: PlainTextResponse("ok")),
    ]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=PORT, log_level="warning", timeout_graceful_shutdown=1)
'''


V03_ECHO = '''
    """A v0.3-only A2A agent (what an ADK 1.x / a2a-sdk 0.3 agent serves), built with a2a-sdk's v0.3
    compatibility: a v0.3 card (url, preferredTransport, protocolVersion; no supportedInterfaces) and
    v0.3 JSON-RPC only. A v1.0 request (the ``A2A-Version: 1.0`` header or a v1.0 method name) gets
    -32601, as from a server that predates v1.0. ``/seen`` lists the JSON-RPC methods it was asked."""

    import json
    import sys
    import uuid

    import uvicorn
    from a2a.compat.v0_3.conversions import to_compat_agent_card
    from a2a.helpers.proto_helpers import new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message, Role
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    PORT = int(sys.argv[1])
    seen = []


    class Echo(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            await event_queue.enqueue_event(
                Message(
                    message_id=uuid.uuid4().hex,
                    role=Role.ROLE_AGENT,
                    parts=[new_text_part(f"v0.3 echo: {context.get_user_input()}")],
                    context_id=context.context_id or "",
                )
            )

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            raise NotImplementedError


    card = AgentCard(
        name="old-echo",
        description="An echo agent that speaks A2A v0.3 only",
        version="0.3.0",
        supported_interfaces=[
            AgentInterface(url=f"http://127.0.0.1:{PORT}/", protocol_binding="JSONRPC", protocol_version="0.3.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="echo", name="Echo", description="Echoes the text", tags=["echo", "legacy"]),
            AgentSkill(id="shout", name="Shout", description="Echoes it louder", tags=["echo"]),
        ],
    )
    V03_CARD = to_compat_agent_card(card).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert "supportedInterfaces" not in V03_CARD and V03_CARD["protocolVersion"] == "0.3.0"
    handler = DefaultRequestHandler(Echo(), InMemoryTaskStore(), card)
    app = Starlette(
        routes=[
            Route("/.well-known/agent-card.json", lambda request: JSONResponse(V03_CARD)),
            *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
            Route("/seen", lambda request: JSONResponse(seen)),
            Route("/ready", lambda request: PlainTextResponse("ok")),
        ]
    )


    async def v03_only(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        method = request.get("method", "") if isinstance(request, dict) else ""
        seen.append(method)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if headers.get("a2a-version", "").startswith("1") or method[:1].isupper() or method.startswith("_"):
            answer = {"jsonrpc": "2.0", "id": request.get("id"), "error": {"code": -32601, "message": "Method not found"}}
            return await JSONResponse(answer)(scope, receive, send)

        async def replay():
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)


    uvicorn.run(v03_only, host="127.0.0.1", port=PORT, log_level="warning", timeout_graceful_shutdown=1)
'''
"""A v0.3-only agent: run with :func:`tests.serving.launch_script` (it answers ``/ready``)."""
