"""A2A over stdio: newline-delimited JSON-RPC 2.0 on stdin/stdout (``ca run --stdio``).

Each request line goes to the same Starlette app ``ca serve`` runs, in process (through
httpx's ASGI transport), so every operation, error and result is the one HTTP gives:

* v1.0 method names (``SendMessage``, ``GetTask`` …) and v0.3 names (``message/send`` …);
* the aliases ``agent/discover`` (the agent's card) and ``tasks/send`` (= ``message/send``);
* the ``_cleveragents/*`` platform methods.

Streaming methods (``SendStreamingMessage``, ``message/stream``, ``SubscribeToTask``,
``tasks/resubscribe``) send each event as a notification
``{"method": "_cleveragents/stream", "params": {"id": REQUEST_ID, "event": EVENT}}`` and end
with the response to the request, whose result is the last event. Requests run
concurrently (a cancel can overtake a send). A malformed line gets -32700 and the loop
goes on. At end of input, requests in flight finish, then the process exits; every task
is in the stores. Nothing but protocol is written to stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TextIO

import httpx

from framework.runtime.runtime import Runtime
from framework.transports.a2a_http import build_app
from framework.transports.jsonrpc import Code, JsonRpcError, error, result

STREAMING = {"SendStreamingMessage", "message/stream", "SubscribeToTask", "tasks/resubscribe"}
ALIASES = {"tasks/send": "message/send", "tasks/sendSubscribe": "message/stream"}
V1_METHODS = {
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
}


class StdioServer:
    """Serves one agent's endpoint on a pair of text streams."""

    def __init__(self, client: httpx.AsyncClient, agent: str, out: TextIO) -> None:
        self.client = client
        self.path = f"/agents/{agent}/"
        self.agent = agent
        self.out = out
        self._write_lock = asyncio.Lock()

    async def write(self, message: dict[str, Any]) -> None:
        async with self._write_lock:
            self.out.write(json.dumps(message, ensure_ascii=False) + "\n")
            self.out.flush()

    async def handle_line(self, line: str) -> None:
        try:
            obj = json.loads(line)
        except ValueError as exc:
            await self.write(error(None, JsonRpcError(Code.PARSE_ERROR, f"invalid JSON: {exc}")))
            return
        if not isinstance(obj, dict):
            await self.write(error(None, JsonRpcError(Code.INVALID_REQUEST, "a request must be a JSON object")))
            return
        method = obj.get("method")
        request_id = obj.get("id")
        if method == "agent/discover":
            card = await self.client.get(f"{self.path}.well-known/agent-card.json")
            await self.write(result(request_id, card.json()))
            return
        if isinstance(method, str) and method in ALIASES:
            obj = {**obj, "method": ALIASES[method]}
            method = obj["method"]
        headers = {"content-type": "application/json"}
        if method in V1_METHODS:
            headers["A2A-Version"] = "1.0"
        body = json.dumps(obj).encode()
        if method in STREAMING:
            await self._stream(body, headers, request_id)
            return
        response = await self.client.post(self.path, content=body, headers=headers)
        if request_id is not None or response.status_code >= 400:
            await self.write(_decode(response.content, request_id))

    async def _stream(self, body: bytes, headers: dict[str, str], request_id: Any) -> None:
        last: dict[str, Any] | None = None
        async with self.client.stream("POST", self.path, content=body, headers=headers) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                await self.write(_decode(await response.aread(), request_id))
                return
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:].strip())
                if last is not None:
                    await self.write(
                        {
                            "jsonrpc": "2.0",
                            "method": "_cleveragents/stream",
                            "params": {"id": request_id, "event": last.get("result", last.get("error"))},
                        }
                    )
                last = event
        await self.write(last if last is not None else result(request_id, None))


def _decode(content: bytes, request_id: Any) -> dict[str, Any]:
    try:
        decoded = json.loads(content)
    except ValueError:
        return error(request_id, JsonRpcError(Code.INTERNAL_ERROR, content.decode(errors="replace")[:500]))
    return decoded if isinstance(decoded, dict) else result(request_id, decoded)


@asynccontextmanager
async def in_process_client(runtime: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client wired straight into the app (its lifespan run by hand: ASGITransport does not)."""
    app = build_app(runtime)
    async with app.app.router.lifespan_context(app.app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stdio", timeout=None) as client:  # noqa: S113 - streams last as long as their task
            yield client


async def serve_stdio(
    runtime: Runtime, agent: str, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout, first_line: str = ""
) -> None:
    """Read requests until end of input; answer each; finish what is in flight.

    ``first_line`` is a line already read (to choose the protocol) and still to answer.
    """
    runtime.bundle.agent(agent)
    loop = asyncio.get_running_loop()
    async with in_process_client(runtime) as client:
        server = StdioServer(client, agent, stdout)
        in_flight: set[asyncio.Task[None]] = set()
        pending_first = first_line
        while True:
            if pending_first:
                line, pending_first = pending_first, ""
            else:
                line = await loop.run_in_executor(None, stdin.readline)
            if not line:
                break
            if not line.strip():
                continue
            task = asyncio.create_task(server.handle_line(line))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
