"""An ACP session as the connection holds it, and what a prompt turn uses of that connection.

Both live here so the server (:mod:`.server`) can start prompt turns (:mod:`.prompt`) without
the turn importing the server back: the turn sees the server only as a :class:`Connection`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Session:
    """One session of the connection: its mode (profile), the running prompt and the plan shown."""

    id: str
    cwd: str
    mode: str | None
    prompt: asyncio.Task[Any] | None = None
    permission: asyncio.Future[Any] | None = None
    """The permission request a prompt waits on; session/cancel answers it "cancelled"."""
    cancelled: bool = False
    plan: list[dict[str, Any]] = field(default_factory=list)
    mcp: tuple[Any, ...] = ()
    """The MCP servers the editor passed (``ClientServer``), for agents whose capabilities take them."""


class Connection(Protocol):
    """What a prompt turn uses of its ACP connection (:class:`~framework.protocols.acp.server.AcpServer`)."""

    runtime: Any
    """The project's Runtime (set once loaded)."""
    agent_name: str | None

    def update(self, session: str, update: dict[str, Any]) -> None:
        """Send a session/update notification."""
        ...

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Call the client and wait for its answer."""
        ...

    def commands(self) -> list[dict[str, Any]]:
        """The agent's skills as ACP slash commands."""
        ...
