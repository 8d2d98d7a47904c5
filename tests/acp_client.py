"""An ACP client for the tests: the official ACP SDK client (agent-client-protocol) driving a real
``ca run --stdio`` process, with every message recorded in wire order.

The SDK dispatches notifications as tasks, so a client's own callbacks do not see the wire
order; a stream observer (:class:`Wire`) records it, and ordering claims are checked there.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar, cast

from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.helpers import text_block
from acp.interfaces import Client as ClientProtocol
from acp.meta import PROTOCOL_VERSION
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)
from acp.stdio import spawn_agent_process

from tests.conftest import CA, REPO

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 90) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def agent_env(extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """A full environment (the SDK would pass a trimmed one), PYTHONPATH at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "PYTHONPATH": str(REPO), **(extra or {})}


def tool_line(tool: str, **args: Any) -> str:
    return f"@tool {tool} {json.dumps(args)}"


# -- the SDK client ------------------------------------------------------------------------


class Client:
    """An ACP client for tests. Permission requests are answered from ``answers`` in order: an
    option id, ``"cancelled"``, or ``"hold"`` (wait for :meth:`release`). With no answer left it
    answers ``cancelled``, so an unexpected question cannot hang a test (``asked`` records it)."""

    def __init__(self, answers: list[str] | None = None) -> None:
        self.answers = list(answers or [])
        self.asked: list[dict[str, Any]] = []
        self.held: asyncio.Future[str] | None = None
        self.reads: list[str] = []
        self.writes: list[tuple[str, str]] = []

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.asked.append(
            {
                "session": session_id,
                "toolCall": tool_call.model_dump(by_alias=True, exclude_none=True),
                "options": [o.model_dump(by_alias=True, exclude_none=True) for o in options],
            }
        )
        answer = self.answers.pop(0) if self.answers else "cancelled"
        if answer == "hold":
            self.held = asyncio.get_running_loop().create_future()
            answer = await self.held
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=answer))

    def release(self, answer: str) -> None:
        assert self.held is not None and not self.held.done()
        self.held.set_result(answer)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None  # the wire log has every update, in order

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        self.reads.append(path)
        return ReadTextFileResponse(content="unsaved editor buffer\n")

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.writes.append((path, content))
        return WriteTextFileResponse()


@dataclass
class Wire:
    """Every JSON-RPC message in both directions, in the order the client saw them."""

    events: list[tuple[StreamDirection, dict[str, Any]]] = field(default_factory=list)

    def observe(self, event: StreamEvent) -> None:
        self.events.append((event.direction, event.message))

    @property
    def incoming(self) -> list[dict[str, Any]]:
        return [m for d, m in self.events if d == StreamDirection.INCOMING]

    def updates(self, session: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.incoming
            if m.get("method") == "session/update"
            and m["params"]["sessionId"] == session
            and (kind is None or m["params"]["update"]["sessionUpdate"] == kind)
        ]

    def request_id(self, method: str, session: str | None = None) -> int:
        """The id of the client's last ``method`` request (for ``session``)."""
        ids = [
            m["id"]
            for d, m in self.events
            if d == StreamDirection.OUTGOING
            and m.get("method") == method
            and "id" in m
            and (session is None or (m.get("params") or {}).get("sessionId") == session)
        ]
        assert ids, f"no {method} request was sent"
        return int(ids[-1])

    def position_of_answer(self, request_id: int) -> int:
        """Index in :attr:`incoming` of the agent's answer to our request ``request_id``."""
        for i, m in enumerate(self.incoming):
            if m.get("id") == request_id and "method" not in m:
                return i
        raise AssertionError(f"no answer to request {request_id}")

    def updates_after(self, position: int, session: str) -> list[dict[str, Any]]:
        return [
            m
            for m in self.incoming[position + 1 :]
            if m.get("method") == "session/update" and m["params"]["sessionId"] == session
        ]

    async def wait_for(self, predicate: Callable[[], object], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; wire: {self.incoming[-5:]}")
            await asyncio.sleep(0.01)


@dataclass
class Agent:
    conn: ClientSideConnection
    wire: Wire
    client: Client
    root: Path
    process: Any

    async def initialize(self, fs: bool = False) -> Any:
        caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs))
        return await self.conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=caps,
            client_info=Implementation(name="tests", version="0"),
        )

    async def new_session(self) -> str:
        response = await self.conn.new_session(cwd=str(self.root), mcp_servers=[])
        return str(response.session_id)

    async def prompt(self, session: str, text: str) -> str:
        response = await self.conn.prompt(session_id=session, prompt=[text_block(text)])
        return str(response.stop_reason)

    def text(self, session: str, since: int = 0) -> str:
        """The agent's reply text in ``session`` (chunks joined), from update number ``since`` on."""
        return "".join(
            u["content"]["text"]
            for u in self.wire.updates(session)[since:]
            if u["sessionUpdate"] == "agent_message_chunk"
        )


@asynccontextmanager
async def agent(
    root: Path, *args: str, client: Client | None = None, env: dict[str, str] | None = None
) -> AsyncIterator[Agent]:
    """``ca run --stdio [ARGS]`` in ``root`` with an SDK client connected; stderr goes to a file."""
    wire = Wire()
    client = client or Client()
    with tempfile.TemporaryFile() as stderr:
        try:
            async with spawn_agent_process(
                cast(ClientProtocol, client),  # not a subclass of the Protocol: see REFERENCE.md
                sys.executable,
                "-m",
                "framework",
                "run",
                "--stdio",
                *args,
                cwd=root,
                env=env if env is not None else agent_env(),
                transport_kwargs={"stderr": stderr},
                observers=[wire.observe],
            ) as (conn, process):
                yield Agent(conn, wire, client, root, process)
        except BaseException:
            stderr.seek(0)
            sys.stdout.write("agent stderr (tail):\n" + stderr.read().decode(errors="replace")[-4000:])
            raise


class Raw:
    """``ca run --stdio`` on plain pipes, no SDK: JSON lines in and out; stderr to a file.
    ``with Raw(...) as raw``; :meth:`close` ends the session (stdin closed) and gives the exit code."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.root, self.args, self.env = root, args, env or agent_env()
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self.next_id = 100
        self.code: int | None = None

    def __enter__(self) -> Raw:
        self.stack = ExitStack()
        self.stderr: IO[bytes] = self.stack.enter_context(tempfile.TemporaryFile())
        self.proc = subprocess.Popen(
            [*CA, "run", "--stdio", *self.args],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            encoding="utf-8",
        )
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            if error is not None:
                sys.stdout.write("agent stderr (tail):\n" + self.stderr_text()[-4000:])
            if self.code is None:
                self.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.stack.close()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, message: dict[str, Any] | str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: Any = None) -> int:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.next_id

    def read(self, timeout: float = 30) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        assert line is not None, "the agent closed stdout"
        self.seen.append(line)
        return dict(json.loads(line))

    def answer(
        self, request_id: Any, timeout: float = 30, on_request: Callable[[dict[str, Any]], Any] | None = None
    ) -> dict[str, Any]:
        """Read until the answer to ``request_id``; the agent's own requests go to ``on_request``."""
        while True:
            message = self.read(timeout)
            if "method" in message and "id" in message:
                assert on_request is not None, f"unexpected request from the agent: {message}"
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": on_request(message)})
            elif "method" not in message and message.get("id") == request_id:
                return message

    def close(self) -> int:
        """Close stdin, wait for the exit; every remaining stdout line goes to ``seen``."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.code = self.proc.wait(timeout=30)
        self.pump.join(timeout=10)
        while not self.lines.empty():
            line = self.lines.get_nowait()
            if line is not None:
                self.seen.append(line)
        return self.code

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")


def initialize_params() -> dict[str, Any]:
    return {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
