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
concurrently (a cancel can overtake a send). Input is read as bytes and each line decoded on
its own, as the HTTP gate decodes a body (``framework.protocols.a2a.gate``): a malformed line
gets its error (-32700 for invalid JSON or UTF-8) and the loop goes on; blank lines are
skipped; a notification (no ``id``) runs and gets no answer; a line longer than
``server.max_request_bytes`` is refused unread. At end of input, requests in flight finish
(and tasks a non-blocking send left running), then the process exits; every task is in the stores. Nothing but protocol is
written to stdout. A message's ``metadata.traceparent`` (and ``tracestate``) is the W3C trace
context a caller on stdio cannot send as a header: with tracing on, the run continues its trace.
The caller is the local user who started the process, so ``server.auth``
asks it for no credentials.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, BinaryIO, TextIO

import httpx
from starlette.applications import Starlette
from starlette.types import Receive, Scope, Send

from framework.protocols.a2a.auth import LOCAL_CALLER
from framework.protocols.a2a.gate import V1_METHODS
from framework.protocols.a2a.http import build_server
from framework.protocols.a2a.stdio_shapes import CARD_METHODS, stdio_card, translate
from framework.protocols.jsonrpc import (
    Code,
    JsonRpcError,
    Request,
    answer_id,
    error,
    parse_request,
    read_message,
    result,
)
from framework.protocols.stdio_loop import STOP_GRACE, LineReader
from framework.runtime import telemetry
from framework.runtime.runtime import Runtime

logger = logging.getLogger(__name__)
STOPPED = (
    "the process was stopped (Ctrl-C or SIGTERM) before this task finished; it was canceled, not resumed, "
    "because a tool may have run halfway: send the message again"
)

JSON = {"content-type": "application/json"}
SENDS = {"SendMessage", "message/send"}
RUNNING = {"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "submitted", "working"}
STREAMING = {"SendStreamingMessage", "message/stream", "SubscribeToTask", "tasks/resubscribe"}
ALIASES = {"tasks/send": "message/send", "tasks/sendSubscribe": "message/stream"}


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

    async def handle_line(self, line: bytes) -> None:
        obj = None
        try:
            obj = read_message(line)
            request = parse_request(obj)
        except JsonRpcError as exc:
            if exc.code == Code.INVALID_PARAMS and isinstance(obj, dict) and "id" not in obj:
                logger.warning("dropped a notification: %s %s", exc.code, exc.message)
                return
            logger.warning("refused a request: %s %s", exc.code, exc.message)
            await self.write(error(answer_id(obj), exc))  # null when the id is what is invalid
            return
        try:
            await self._dispatch(obj, request, line)
        except Exception as exc:  # a bug here must not leave the caller waiting for an answer forever
            logger.error("error: request failed: %s: %s", type(exc).__name__, exc)
            if not request.notification:
                failure = JsonRpcError(Code.INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}")
                await self.write(error(request.id, failure))

    async def _dispatch(self, obj: dict[str, Any], request: Request, line: bytes) -> None:
        name, request_id = request.method, request.id
        body = line
        try:
            translated = translate(obj)  # the seed's shapes, as their A2A requests
        except JsonRpcError as exc:
            if not request.notification:
                await self.write(error(request_id, exc))
            return
        if translated != obj:
            obj, name = translated, str(translated["method"])
            body = json.dumps(obj, ensure_ascii=False).encode()
        if name == "agent/discover":
            if not request.notification:
                card = await self.client.get(f"{self.path}.well-known/agent-card.json")
                await self.write(result(request_id, stdio_card(card.json())))
            return
        if name in ALIASES:
            name = ALIASES[name]
            body = json.dumps({**obj, "method": name}, ensure_ascii=False).encode()
        headers = {**JSON, "A2A-Version": "1.0"} if name in V1_METHODS else JSON
        headers = {**headers, **_trace_context(obj)}
        if name in STREAMING and not request.notification:
            await self._stream(body, headers, request_id)
            return
        response = await self.client.post(self.path, content=body, headers=headers)
        if response.status_code == 204:  # a notification: run, not answered
            return
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


def _trace_context(obj: dict[str, Any]) -> dict[str, str]:
    """The W3C trace context of a request's message (``metadata.traceparent`` / ``tracestate``), as
    the headers an HTTP caller would send: with tracing on, the app makes it the parent of the run."""
    params = obj.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    return telemetry.carried(message.get("metadata")) if isinstance(message, dict) else {}


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
async def in_process_client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client wired straight into ``app`` (its lifespan run by hand: ASGITransport does not)."""

    async def local(scope: Scope, receive: Receive, send: Send) -> None:
        await app({**scope, LOCAL_CALLER: True}, receive, send)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=local)
        async with httpx.AsyncClient(transport=transport, base_url="http://stdio", timeout=None) as client:  # noqa: S113 - streams last as long as their task
            yield client


async def serve_stdio(runtime: Runtime, agent: str, stdin: BinaryIO, stdout: TextIO, first_line: bytes = b"") -> None:
    """Read requests until end of input; answer each; finish what is in flight.

    ``stdin`` is read as bytes, by a :class:`LineReader` (so it must be this server's alone);
    ``first_line`` is a line already read (to choose the protocol) and still to answer.
    """
    runtime.bundle.agent(agent)
    served = build_server(runtime)
    async with in_process_client(served.app) as client:
        server = StdioServer(client, agent, stdout)
        in_flight: set[asyncio.Task[None]] = set()
        limit = runtime.bundle.project.config.server.max_request_bytes
        lines = LineReader(stdin, limit)
        pending_first = first_line
        try:
            while True:
                line: bytes | int
                if pending_first:
                    line, pending_first = pending_first, b""
                else:
                    line = await lines.read()
                if isinstance(line, int):
                    message = f"a line of {line} bytes is longer than server.max_request_bytes ({limit} bytes)"
                    logger.warning("refused a request: %s", message)
                    await server.write(error(None, JsonRpcError(Code.INVALID_REQUEST, message)))
                    continue
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
        except asyncio.CancelledError:
            # Ctrl-C or SIGTERM, reading or draining: the runs in progress end canceled (their tools
            # stopped) while the stores are open, and each request in flight gets its task's end.
            await served.stop(0, STOPPED, None)
            if in_flight:
                await asyncio.wait(in_flight, timeout=STOP_GRACE)
            raise
