"""A2A over stdio: newline-delimited JSON-RPC 2.0 on stdin/stdout (``ca run --stdio``).

Each request line goes to the same Starlette app ``ca serve`` runs, in process (through
httpx's ASGI transport), so every operation, error and result is the one HTTP gives:

* v1.0 method names (``SendMessage``, ``GetTask`` …) and v0.3 names (``message/send`` …);
* the aliases ``agent/discover`` (the agent's card, without its HTTP interfaces) and ``tasks/send``
  (= ``message/send``), and the seed's request shapes (:mod:`.stdio_shapes`);
* the ``_cleveragents/*`` platform methods.

Streaming methods (``SendStreamingMessage``, ``message/stream``, ``SubscribeToTask``,
``tasks/resubscribe``) send each event as a notification
``{"method": "_cleveragents/stream", "params": {"id": REQUEST_ID, "event": EVENT}}`` and end
with the response to the request, whose result is the last event. Requests run
concurrently (a cancel can overtake a send). A malformed line gets -32700 and the loop
goes on. At end of input, requests in flight finish (and tasks a non-blocking send left
running), then the process exits; every task is in the stores. Nothing but protocol is
written to stdout. The caller is the local user who started the process, so ``server.auth``
asks it for no credentials.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TextIO

import httpx
from starlette.types import Receive, Scope, Send

from framework.protocols.a2a.auth import LOCAL_CALLER
from framework.protocols.a2a.http import build_app
from framework.protocols.a2a.stdio_shapes import CARD_METHODS, stdio_card, translate
from framework.protocols.jsonrpc import Code, JsonRpcError, error, result
from framework.runtime.runtime import Runtime

JSON = {"content-type": "application/json"}
SENDS = {"SendMessage", "message/send"}
RUNNING = {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "submitted", "working"}
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
        self.running: set[str] = set()

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
        request_id = obj.get("id") if isinstance(obj, dict) else None
        try:
            await self._dispatch(obj, line)
        except Exception as exc:  # a bug here must not leave the caller waiting for an answer forever
            if request_id is None:
                sys.stderr.write(f"error: request failed: {type(exc).__name__}: {exc}\n")
                return
            failure = JsonRpcError(Code.INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")
            await self.write(error(request_id if isinstance(request_id, str | int) else None, failure))

    async def _dispatch(self, obj: Any, line: str) -> None:
        if not isinstance(obj, dict):  # batches and other non-objects: the app answers as over HTTP
            response = await self.client.post(self.path, content=line.encode(), headers=JSON)
            await self.write(_decode(response.content, None))
            return
        request_id = obj.get("id")
        try:
            obj = translate(obj)
        except JsonRpcError as exc:
            await self.write(error(request_id if isinstance(request_id, str | int) else None, exc))
            return
        method = obj.get("method")
        name = method if isinstance(method, str) else ""
        if name == "agent/discover":
            card = await self.client.get(f"{self.path}.well-known/agent-card.json")
            await self.write(result(request_id, stdio_card(card.json())))
            return
        if name in ALIASES:
            name = ALIASES[name]
            obj = {**obj, "method": name}
        headers = {**JSON, "A2A-Version": "1.0"} if name in V1_METHODS else JSON
        body = json.dumps(obj).encode()
        if name in STREAMING:
            await self._stream(body, headers, request_id)
            return
        response = await self.client.post(self.path, content=body, headers=headers)
        if request_id is not None or response.status_code >= 400:
            answer = _decode(response.content, request_id)
            if name in SENDS:
                self._track(answer)
            if name in CARD_METHODS and isinstance(answer.get("result"), dict):
                answer["result"] = stdio_card(answer["result"])
            await self.write(answer)

    def _track(self, answer: dict[str, Any]) -> None:
        """Remember a task a send left running (``returnImmediately``): end of input waits for it."""
        value = answer.get("result")
        task = value.get("task", value) if isinstance(value, dict) else None  # v1.0 wraps the task, v0.3 not
        if isinstance(task, dict) and isinstance(task.get("id"), str) and _state(task) in RUNNING:
            self.running.add(task["id"])

    async def drain(self) -> None:
        """Wait until the tasks sends left running are done (finished, failed, or waiting for input)."""
        while self.running:
            for task_id in sorted(self.running):
                request = {"jsonrpc": "2.0", "id": 0, "method": "GetTask", "params": {"id": task_id}}
                response = await self.client.post(
                    self.path, content=json.dumps(request).encode(), headers={**JSON, "A2A-Version": "1.0"}
                )
                task = _decode(response.content, 0).get("result")
                if not isinstance(task, dict) or _state(task) not in RUNNING:
                    self.running.discard(task_id)
            if self.running:
                await asyncio.sleep(0.05)

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


def _state(task: dict[str, Any]) -> Any:
    status = task.get("status")
    return status.get("state") if isinstance(status, dict) else None


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

    async def local(scope: Scope, receive: Receive, send: Send) -> None:
        await app({**scope, LOCAL_CALLER: True}, receive, send)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=local)
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
        await server.drain()
