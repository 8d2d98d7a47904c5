"""The MCP client side of a runtime: one session per declared server, shared by every agent.

Sessions live on a thread of their own with its own event loop. The ``mcp`` SDK wants a
session entered and left by one task (:class:`_Session` gives each an owner task), a graph
being compiled needs a server's tool list from synchronous code, and a server starting must not
stall the loop that serves requests. Calls cross threads through ``run_coroutine_threadsafe``.

Lifecycle: a server starts on first use (its tool list or a call), once per runtime and
declaration (see :class:`McpHub`); a crashed server gives the failing call an error result and is
started again once, on the next call; after a second crash its calls fail until the process
restarts. :meth:`McpHub.close` ends every session (the SDK closes a stdio server's stdin, then
signals its process group). Stdio servers run in a session of their own and exit on end of
input, so a ``ca`` killed with SIGKILL leaves none behind: their stdin closes with it.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import json
import threading
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from framework.compiler.confine import confine
from framework.compiler.mcp_tools import ClientServer, McpResult, McpToolInfo
from framework.errors import McpServerFailed, PathRefused, ToolError
from framework.spec.mcp import McpServer
from framework.spec.project import Project

T = TypeVar("T")
MAX_RESTARTS = 1
"""A crashed server is started again this many times per runtime."""


class ServerDown(Exception):
    """The server's connection is gone (it exited or crashed)."""


class _Session:
    """One server's connection, entered and left by its own owner task (on the hub's loop)."""

    def __init__(
        self,
        name: str,
        spec: McpServer,
        root: Path,
        environ: Mapping[str, str],
        headers: Mapping[str, str] | None = None,
        *,
        sse: bool = False,
    ) -> None:
        self.name = name
        self.sse = sse
        self.spec = spec
        self.headers = dict(headers or {})
        self.root = root
        self.environ = environ
        self.client: Any = None
        self.error: BaseException | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self.calls = 0
        """Tool calls in progress on this session."""
        self.retired = False
        """No bundle that serves declares it any more: it stops once its last call ends."""

    def _target(self) -> Any:
        from mcp import StdioServerParameters

        spec = self.spec
        if spec.command is not None:
            try:
                cwd = self.root / confine(self.root, spec.cwd) if spec.cwd else self.root
            except PathRefused as exc:
                raise McpServerFailed(f"MCP server {self.name!r}: cwd {spec.cwd!r}: {exc}") from exc
            return StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=cwd)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        headers = dict(self.headers)
        for header, var in spec.headers_env.items():
            if var not in self.environ:
                raise McpServerFailed(
                    f"MCP server {self.name!r}: header {header!r} needs variable {var}, which is not set"
                )
            headers[header] = self.environ[var]
        assert spec.url is not None
        if self.sse:
            from mcp.client.sse import sse_client

            return sse_client(spec.url, headers=headers, timeout=spec.timeout)
        client = httpx2.AsyncClient(headers=headers, timeout=spec.timeout)
        return streamable_http_client(spec.url, http_client=client)

    async def start(self) -> None:
        self._owner = asyncio.create_task(self._own(self._target()), name=f"mcp:{self.name}")
        try:
            async with asyncio.timeout(self.spec.timeout):
                await self._ready.wait()
        except TimeoutError:
            await self.close()
            raise McpServerFailed(
                f"MCP server {self.name!r} did not answer within {self.spec.timeout:g} s of starting; "
                f"check its command (or url), or raise its `timeout:` in ca.yaml"
            ) from None
        if self.client is None:
            raise McpServerFailed(f"MCP server {self.name!r} could not start: {_reason(self.error)}")

    async def _own(self, target: Any) -> None:
        from mcp import Client

        try:
            async with Client(target, read_timeout_seconds=self.spec.timeout) as client:
                self.client = client
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # kept for start() to report; the owner task must end quietly
            self.error = exc
        finally:
            self.client = None
            self._ready.set()

    async def close(self) -> None:
        self._stop.set()
        if self._owner is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._owner), 10)
            except TimeoutError:
                self._owner.cancel()

    async def list_tools(self) -> list[McpToolInfo]:
        tools: list[McpToolInfo] = []
        cursor: str | None = None
        while True:
            result = await self._request(self.client.list_tools(cursor=cursor))
            for tool in result.tools:
                annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
                annotations.pop("title", None)  # a display name, not a hint
                tools.append(
                    McpToolInfo(self.name, tool.name, tool.description or "", dict(tool.input_schema), annotations)
                )
            cursor = result.next_cursor
            if not cursor:
                return tools

    async def call(self, tool: str, args: Mapping[str, Any]) -> McpResult:
        result = await self._request(self.client.call_tool(tool, dict(args)))
        return McpResult(result_text(result), bool(result.is_error))

    async def _request(self, request: Coroutine[Any, Any, T]) -> T:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        if self.client is None:
            request.close()
            raise ServerDown(f"MCP server {self.name!r} is not running: {_reason(self.error)}")
        try:
            async with asyncio.timeout(self.spec.timeout):
                return await request
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                self.client, self.error = None, exc  # the next call starts it again
                self._stop.set()
                raise ServerDown(f"MCP server {self.name!r} closed the connection (it exited or crashed)") from exc
            raise


@dataclass(frozen=True)
class Declared:
    """Where a server not started yet comes from: a project's ``mcp_servers`` and the environment
    their values are read in (``.env`` and the process's), as one bundle saw them."""

    project: Project
    environ: Mapping[str, str]
    keys: dict[str, Key] = field(default_factory=dict, compare=False)
    """Each server's key, worked out once (see :meth:`McpHub._key`)."""


Key = tuple[str, str]
"""A session: (the server's name, a digest of its declaration; "" for a server an editor passed)."""


class McpHub:
    """Implements :class:`framework.compiler.mcp_tools.McpServers` for one runtime.

    The sessions are shared by every bundle of the runtime, one per server and declaration. Each
    bundle uses the hub through :meth:`declared_by`, so a server one bundle starts comes from that
    bundle's declarations: a reload that is rejected after it was built changes nothing the
    version still serving uses, and an edited declaration starts its own server. :meth:`retire`
    stops the servers of other declarations once a reload has decided which bundle serves. The
    hub's own methods use the declarations it was opened with (``ca mcp list``, ``ca mcp lock``).
    """

    def __init__(self, project: Project, environ: Mapping[str, str]) -> None:
        self.declared = Declared(project, environ)
        self._sessions: dict[Key, _Session] = {}
        self._lists: dict[Key, tuple[McpToolInfo, ...]] = {}
        self._restarts: dict[Key, int] = {}
        self._locks: dict[Key, asyncio.Lock] = {}
        self._clients: dict[str, ClientServer] = {}
        self._relist: set[Key] = set()
        """Servers started again since their tools were listed: listed again before the next call."""
        self._changed: dict[Key, set[str]] = {}
        """Tools whose definition differs from the one the agents were compiled with: refused."""
        self._retiring: set[_Session] = set()
        """Retired sessions still in a call (:meth:`retire`): stopped when it ends, or with the hub."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self._closed = False
        """Closed with its runtime: a compile still running in a thread then starts no server."""

    # -- the hub's own loop ------------------------------------------------------

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._guard:
            if self._closed:
                coro.close()
                raise McpServerFailed("MCP servers are not started any more: the runtime is closing")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="ca-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _on_hub(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(self._submit(coro))

    # -- McpServers --------------------------------------------------------------

    def tools(self, server: str, declared: Declared | None = None) -> Sequence[McpToolInfo]:
        declared = declared or self.declared
        key = self._key(server, declared)
        if key not in self._lists:
            self._submit(self._list(key, declared)).result()
        return self._lists[key]

    async def prepare(self, servers: Iterable[str], declared: Declared | None = None) -> None:
        declared = declared or self.declared
        for server in servers:
            if (key := self._key(server, declared)) not in self._lists:
                await self._on_hub(self._list(key, declared))

    async def call(
        self, server: str, tool: str, args: Mapping[str, Any], declared: Declared | None = None
    ) -> McpResult:
        declared = declared or self.declared
        return await self._on_hub(self._call(self._key(server, declared), tool, args, declared))

    def add_clients(self, servers: Iterable[ClientServer]) -> None:
        for server in servers:
            known = self._clients.get(server.name)
            if known is not None and known != server:  # same name, another server: stop the old one
                self._forget((server.name, ""))
                self._submit(self._drop((server.name, "")))
            self._clients[server.name] = server

    async def list_fresh(self, server: str) -> list[McpToolInfo]:
        """The server's tools as it lists them now (``ca mcp list``, ``ca mcp lock``)."""
        return await self._on_hub(self._list(self._key(server, self.declared), self.declared, fresh=True))

    def declared_by(self, project: Project, environ: Mapping[str, str]) -> BundleServers:
        """The hub as the bundle built from ``project`` in ``environ`` uses it."""
        return BundleServers(self, Declared(project, environ))

    async def retire(self, serving: Declared) -> None:
        """Stop every declared server ``serving`` does not declare so (an edited or removed
        declaration, or one of a rejected reload); one in the middle of a call stops when the call
        ends. A run of an older bundle that calls one again starts it again; the next reload stops it."""
        with self._guard:
            if self._loop is None or self._closed:  # no server was ever started, or all are stopping
                return
        await self._on_hub(self._retire({self._key(name, serving) for name in serving.project.config.mcp_servers}))

    def _key(self, server: str, declared: Declared) -> Key:
        """The session of ``server`` as ``declared`` declares it: an editor's server by its name, a
        declared one by its declaration, its project's folder and the header values it reads."""
        if server in self._clients:
            return server, ""
        key = declared.keys.get(server)
        if key is None:
            declaration = declared.project.config.mcp_servers.get(server)
            if declaration is None:
                return server, "undeclared"  # its session refuses to start, naming the server
            headers = {header: declared.environ.get(var) for header, var in declaration.headers_env.items()}
            text = json.dumps(
                [declaration.model_dump(mode="json"), str(declared.project.root), headers], sort_keys=True
            )
            key = declared.keys[server] = (server, hashlib.sha256(text.encode()).hexdigest())
        return key

    def _forget(self, key: Key) -> None:
        """Drop what is known of a session that is stopped for good (its tools, restarts, changes)."""
        self._lists.pop(key, None)
        self._restarts.pop(key, None)
        self._changed.pop(key, None)
        self._relist.discard(key)

    # -- on the hub's loop ---------------------------------------------------------

    def _lock(self, key: Key) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    async def _session(self, key: Key, declared: Declared) -> _Session:
        server = key[0]
        async with self._lock(key):
            session = self._sessions.get(key)
            if session is not None and session.client is not None:
                return session
            if session is not None:  # it crashed: start it again, a limited number of times
                await session.close()
                if self._restarts.get(key, 0) >= MAX_RESTARTS:
                    raise ServerDown(
                        f"MCP server {server!r} crashed again after a restart; it is not started again "
                        "until `ca` restarts (see its error output)"
                    )
                self._restarts[key] = self._restarts.get(key, 0) + 1
                self._relist.add(key)
            client = self._clients.get(server)
            if client is not None:
                spec, headers, sse = _client_spec(client), dict(client.headers), client.sse
            elif (declaration := declared.project.config.mcp_servers.get(server)) is not None:
                spec, headers, sse = declaration, {}, False
            else:
                raise McpServerFailed(f"MCP server {server!r} is not declared in ca.yaml `mcp_servers:`")
            session = _Session(server, spec, declared.project.root, declared.environ, headers, sse=sse)
            self._sessions[key] = session
            await session.start()
            return session

    async def _retire(self, kept: set[Key]) -> None:
        for key in [k for k in self._sessions if k[1] and k not in kept]:
            self._forget(key)
            async with self._lock(key):
                session = self._sessions.pop(key, None)
            if session is None:
                continue
            if session.calls:  # a run of an older version is in the middle of a call: stopped after it
                session.retired = True
                self._retiring.add(session)
            else:
                await session.close()

    async def _drop(self, key: Key) -> None:
        async with self._lock(key):
            session = self._sessions.pop(key, None)
            if session is not None:
                await session.close()

    async def _list(self, key: Key, declared: Declared, *, fresh: bool = False) -> list[McpToolInfo]:
        if key in self._lists and not fresh:
            return list(self._lists[key])
        try:
            tools = await (await self._session(key, declared)).list_tools()
        except ToolError:
            raise
        except Exception as exc:
            raise McpServerFailed(f"MCP server {key[0]!r}: cannot list its tools: {_reason(exc)}") from exc
        self._lists.setdefault(key, tuple(tools))
        return tools

    async def _call(self, key: Key, tool: str, args: Mapping[str, Any], declared: Declared) -> McpResult:
        server = key[0]
        try:
            session = await self._session(key, declared)
            session.calls += 1  # counted before anything awaits: a retire now waits for this call
            try:
                return await self._call_on(session, key, tool, args)
            finally:
                session.calls -= 1
                if session.retired and not session.calls:
                    self._retiring.discard(session)
                    await session.close()
        except ServerDown as exc:
            return McpResult(f"{exc}; it will be started again for the next call", is_error=True)
        except TimeoutError:
            return McpResult(f"MCP tool {server}.{tool} did not answer within its server's timeout", is_error=True)
        except Exception as exc:  # the server's error, or one starting it: the model gets it as the result
            return McpResult(f"MCP tool {server}.{tool} failed: {_reason(exc)}", is_error=True)

    async def _call_on(self, session: _Session, key: Key, tool: str, args: Mapping[str, Any]) -> McpResult:
        server = key[0]
        if key in self._relist:  # a restarted server may list other tools than the agents were given
            self._relist.discard(key)
            listed = {t.name: t.digest for t in self._lists.get(key, ())}
            now = {t.name: t.digest for t in await session.list_tools()}
            self._changed[key] = {name for name, digest in listed.items() if now.get(name) != digest}
        if tool in self._changed.get(key, ()):
            return McpResult(
                f"MCP tool {server}.{tool} changed when its server restarted; it is refused until ca "
                "restarts (review the change, then run `ca mcp lock`)",
                is_error=True,
            )
        return await session.call(tool, args)

    async def _close_all(self) -> None:
        sessions, self._sessions = [*self._sessions.values(), *self._retiring], {}
        self._retiring = set()
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)

    async def close(self) -> None:
        """End every session and the hub's thread; nothing starts a server again after this."""
        with self._guard:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._close_all(), loop))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, 5)
        loop.close()
        self._loop = self._thread = None


class BundleServers:
    """:class:`McpServers` for one bundle: the shared hub, starting servers from that bundle's declarations."""

    def __init__(self, hub: McpHub, declared: Declared) -> None:
        self.hub = hub
        self.declared = declared
        self.abandoned = False
        """A newer change abandoned this bundle's reload: a compile still running starts no server."""

    def tools(self, server: str) -> Sequence[McpToolInfo]:
        self._starting(server)
        return self.hub.tools(server, self.declared)

    async def prepare(self, servers: Iterable[str]) -> None:
        servers = list(servers)
        for server in servers:
            self._starting(server)
        await self.hub.prepare(servers, self.declared)

    def _starting(self, server: str) -> None:
        if self.abandoned:
            raise McpServerFailed(f"MCP server {server!r} is not started: a newer change abandoned this version")

    async def call(self, server: str, tool: str, args: Mapping[str, Any]) -> McpResult:
        return await self.hub.call(server, tool, args, self.declared)

    def add_clients(self, servers: Iterable[ClientServer]) -> None:
        self.hub.add_clients(servers)

    def abandon(self) -> None:
        self.abandoned = True

    async def retire_others(self) -> None:
        """This bundle serves now: stop the servers only other declarations started (:meth:`McpHub.retire`)."""
        await self.hub.retire(self.declared)


def _client_spec(client: ClientServer) -> McpServer:
    """A client's server as a declaration (not validated: the client, not a YAML file, chose it)."""
    return McpServer.model_construct(
        command=client.command,
        args=list(client.args),
        env=dict(client.env),
        cwd=None,
        url=client.url,
        headers_env={},
        timeout=60.0,
    )


def result_text(result: Any) -> str:
    """A ``CallToolResult`` as text: text parts as they are, embedded text resources with their URI,
    images, audio and binary resources described (the model gets text only), structured content as JSON."""
    from mcp.types import (
        AudioContent,
        BlobResourceContents,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            kind = "image" if isinstance(block, ImageContent) else "audio"
            size = len(base64.b64decode(block.data, validate=False)) if block.data else 0
            parts.append(
                f"[{kind} {block.mime_type}, {size} bytes: not passed on, this agent's tools return text only]"
            )
        elif isinstance(block, EmbeddedResource):
            res = block.resource
            if isinstance(res, TextResourceContents):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            elif isinstance(res, BlobResourceContents):
                parts.append(f"[resource {res.uri}: {res.mime_type or 'binary'} content, not passed on]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource link {block.uri}" + (f" ({block.name})" if block.name else "") + "]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _reason(exc: BaseException | None) -> str:
    if exc is None:
        return "no reason given"
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else None
        return _reason(inner) if inner is not None else str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"program not found: {exc.filename or exc}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
