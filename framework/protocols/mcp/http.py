"""``/mcp`` on ``ca serve``: the agents as an MCP server over streamable HTTP, behind the same auth.

Nothing of the ``mcp`` SDK is imported until the first request to ``/mcp``: the session manager
is built then, and its task group runs in an owner task of its own until the server stops.
Requests reach it after ``ca serve``'s authentication (``server.auth``), like A2A's. On a
loopback bind, DNS-rebinding protection admits only loopback ``Host`` headers.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Receive, Scope, Send

from framework.runtime.runtime import Runtime

MCP_PATH = "/mcp"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class McpEndpoint:
    """The ASGI app of ``/mcp``."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._manager: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = await self._started()
        await manager.handle_request(scope, receive, send)

    async def _started(self) -> Any:
        async with self._lock:
            if self._manager is not None:
                return self._manager
            from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
            from mcp.server.transport_security import TransportSecuritySettings

            from framework.protocols.mcp.server import agent_server

            host = self.runtime.started.server.host
            if host in LOOPBACK:
                security = TransportSecuritySettings(
                    enable_dns_rebinding_protection=True,
                    allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"],
                    allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
                )
            else:  # behind a proxy or on a public address: auth (required there) protects it
                security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
            manager = StreamableHTTPSessionManager(agent_server(self.runtime), security_settings=security)
            ready = asyncio.Event()

            async def own() -> None:
                async with manager.run():
                    ready.set()
                    await self._stop.wait()

            self._owner = asyncio.create_task(own(), name="mcp-http")
            await ready.wait()
            self._manager = manager
            return manager

    async def close(self) -> None:
        """Stop the session manager (its open sessions end) if it was started."""
        self._stop.set()
        if self._owner is not None:
            await self._owner
