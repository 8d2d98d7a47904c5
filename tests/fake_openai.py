"""A local OpenAI-compatible chat server for the tests (the provider edge we do not own), and a
trap that proves nothing connects to a port any more.

:class:`FakeOpenAI` streams chat completions the way OpenAI does: asked with tools and a
user message last, it calls the first tool with ``tool_args``; once a tool answered, it
replies ``The tool said: <result>``; asked without tools, it says ``says`` when given (a judge's
verdict, say), else echoes the message. Every request body is kept in ``requests``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.conftest import free_port

USAGE = {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


class FakeOpenAI:
    """``with FakeOpenAI(tool_args) as server``: ``server.url`` ends in ``/v1``. ``stalls``: seconds
    the first requests wait before their answer starts, one each (a model call still in flight)."""

    def __init__(
        self,
        tool_args: dict[str, Any] | None = None,
        port: int | None = None,
        stalls: Sequence[float] = (),
        says: str | None = None,
    ) -> None:
        self.tool_args = tool_args or {}
        self.says = says
        self.stalls = list(stalls)
        self.port = port or free_port()
        self.requests: list[dict[str, Any]] = []
        app = Starlette(routes=[Route("/v1/chat/completions", self._completions, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if len(self.requests) <= len(self.stalls):
            await asyncio.sleep(self.stalls[len(self.requests) - 1])
        last = body["messages"][-1]
        tools = body.get("tools") or []

        async def stream() -> AsyncIterator[str]:
            yield _chunk({"role": "assistant", "content": ""})
            if last["role"] == "user" and tools:
                name = tools[0]["function"]["name"]
                call = {
                    "index": 0,
                    "id": "call_fake_1",
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                }
                yield _chunk({"tool_calls": [call]})
                arguments = json.dumps(self.tool_args)
                for part in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                    yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                yield _chunk({}, "tool_calls")
            else:
                said = last["content"] if last["role"] == "tool" else f"you said {last['content']}"
                text = self.says if self.says is not None and not tools else f"The tool said: {said}"
                for word in text.split(" "):
                    yield _chunk({"content": word + " "})
                yield _chunk({}, "stop")
            tail = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake-model"}
            yield f"data: {json.dumps({**tail, 'choices': [], 'usage': USAGE})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")


class ConnectionTrap:
    """Listens on ``port`` and counts every connection attempt (none should come)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connections = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> ConnectionTrap:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.sock.close()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()
