"""The tools of MCP servers as langchain tools, through an interface the protocol layer supplies.

The compiler speaks no MCP: :class:`McpServers` lists a server's tools and calls one (the
protocol layer's client, ``framework.protocols.mcp``, implements it; the runtime passes it in).
Each tool reaches the model as ``SERVER_TOOL`` and governance as ``SERVER.TOOL`` with
``metadata = {"ca_name", "capability": "mcp", "annotations", "mcp_pin"}``: the server's hints
(``readOnlyHint`` ...) for profile rules, and how the tool stands against ``ca.mcp.lock``. A tool
changed since the lock (or absent from it) keeps its name but not its description, so what a
server says after review never reaches the model, and governance refuses its calls.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.tools import BaseTool, StructuredTool, ToolException

from framework.errors import ToolError
from framework.spec.agent import LlmAgent
from framework.spec.capabilities import Capabilities
from framework.spec.mcp import McpTool
from framework.spec.mcp_lock import McpLock, tool_digest

RESULT_LIMIT = 64 * 1024
"""Characters of a tool result the model gets at most; the rest is cut with a note saying so."""


@dataclass(frozen=True)
class McpToolInfo:
    """One tool as a server lists it (``annotations`` keep the wire's camelCase hint names)."""

    server: str
    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    annotations: Mapping[str, Any] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return tool_digest(self.description, self.input_schema, self.annotations)

    @property
    def ca_name(self) -> str:
        return f"{self.server}.{self.name}"


@dataclass(frozen=True)
class McpResult:
    """A tool's answer as text the model can read (images and blobs are described, not passed)."""

    text: str
    is_error: bool = False


CLIENT_PREFIX = "client."
"""Servers an editor passed (ACP session/new) are named ``client.NAME``; their tools ``client.NAME.TOOL``."""


@dataclass(frozen=True)
class ClientServer:
    """An MCP server a client (an editor, over ACP) asked the agent to use: stdio or HTTP."""

    name: str
    """``client.NAME``."""
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    sse: bool = False
    """An HTTP server spoken to over the older HTTP+SSE transport (ACP ``type: "sse"``)."""


CLIENT_MCP: ContextVar[tuple[ClientServer, ...]] = ContextVar("ca_client_mcp", default=())
"""Set by a transport whose client passed MCP servers (ACP sessions); an agent whose
``capabilities.mcp.from_client`` is true gets their tools in runs of that context."""


class McpServers(Protocol):
    """The MCP client side of one runtime: one session per server, shared by every agent."""

    def tools(self, server: str) -> Sequence[McpToolInfo]:
        """The server's tools (listed once, then cached); blocks while the server starts."""
        ...

    async def prepare(self, servers: Iterable[str]) -> None:
        """Start and list ``servers`` now, without blocking the event loop."""
        ...

    async def call(self, server: str, tool: str, args: Mapping[str, Any]) -> McpResult:
        """Call a tool; a server that fails or crashed gives an error result (``is_error``)."""
        ...

    def add_clients(self, servers: Iterable[ClientServer]) -> None:
        """Make the servers a client passed known by name (started on first use, like the others)."""
        ...


def mcp_refs(agent: LlmAgent) -> list[McpTool]:
    return [t for t in agent.tools if isinstance(t, McpTool)]


def selected(ref: McpTool, name: str) -> bool:
    """Whether the tool ``name`` passes the ref's ``include`` / ``exclude`` globs."""
    if ref.include is not None and not any(fnmatch.fnmatchcase(name, g) for g in ref.include):
        return False
    return not any(fnmatch.fnmatchcase(name, g) for g in ref.exclude)


def model_name(ca_name: str) -> str:
    """What a model sees: providers take ``[A-Za-z0-9_-]{1,64}``."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", ca_name)[:64]


def build_mcp_tools(agent: LlmAgent, servers: McpServers | None, lock: McpLock) -> list[BaseTool]:
    """The MCP tools of ``agent``, in the order of its ``tools:`` list."""
    refs = mcp_refs(agent)
    if not refs:
        return []
    if servers is None:
        raise ToolError(
            f"agent {agent.name!r} uses MCP server {refs[0].mcp!r}, but this was compiled without "
            "an MCP client; run it with `ca run` or `ca serve`"
        )
    out: list[BaseTool] = []
    for ref in refs:
        for info in servers.tools(ref.mcp):
            if selected(ref, info.name):
                out.append(mcp_tool(info, servers, lock))
    return out


def takes_clients(caps: Capabilities | None) -> bool:
    """Whether an agent with these capabilities uses the MCP servers a client passes."""
    return caps is not None and caps.mcp.from_client


def client_tools(
    caps: Capabilities | None, servers: McpServers | None, clients: Sequence[ClientServer]
) -> list[BaseTool]:
    """The tools of the servers a client passed, for an agent whose capabilities take them (else none).

    They are not pinned (``ca.mcp.lock`` covers the servers of ``ca.yaml``); profile rules and
    the audit see them as ``client.NAME.TOOL``.
    """
    if servers is None or not clients or not takes_clients(caps):
        return []
    servers.add_clients(clients)
    return [mcp_tool(info, servers, McpLock()) for client in clients for info in servers.tools(client.name)]


def mcp_tool(info: McpToolInfo, servers: McpServers, lock: McpLock) -> BaseTool:
    pin = lock.pin(info.server, info.name, info.digest)
    description = info.description or f"The {info.name!r} tool of MCP server {info.server!r}."
    if pin in ("changed", "new"):
        description = (
            f"Tool {info.name!r} of MCP server {info.server!r} is not as reviewed in ca.mcp.lock; "
            "calls are refused until it is reviewed and locked again."
        )
    schema = dict(info.input_schema) or {"type": "object", "properties": {}}
    schema.setdefault("type", "object")

    async def call(**kwargs: Any) -> str:
        result = await servers.call(info.server, info.name, kwargs)
        text = capped(result.text)
        if result.is_error:
            raise ToolException(text or f"MCP tool {info.ca_name!r} failed")
        return text

    def blocking(**kwargs: Any) -> str:
        raise ToolException(f"MCP tool {info.ca_name!r} runs only in an async run")

    return StructuredTool(
        name=model_name(info.ca_name),
        description=description,
        args_schema=schema,
        func=blocking,
        coroutine=call,
        handle_tool_error=True,
        metadata={
            "ca_name": info.ca_name,
            "capability": "mcp",
            "annotations": dict(info.annotations),
            "mcp_pin": pin,
        },
    )


def capped(text: str, limit: int = RESULT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut: MCP results are capped at {limit}]"


__all__ = [
    "CLIENT_MCP",
    "RESULT_LIMIT",
    "ClientServer",
    "McpResult",
    "McpServers",
    "McpToolInfo",
    "build_mcp_tools",
    "client_tools",
    "mcp_refs",
]
