"""MCP: the client side (tools of the servers in ``ca.yaml``), imported only when a runtime uses one.

``open_mcp`` is what entry points pass to ``Runtime.open(mcp=...)``; nothing of the ``mcp`` SDK
is imported until a server is first started.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from framework.protocols.mcp.client import McpHub
    from framework.spec.project import Project


def open_mcp(project: Project, environ: Mapping[str, str]) -> McpHub:
    """The MCP client side of one runtime (sessions start on first use)."""
    from framework.protocols.mcp.client import McpHub

    return McpHub(project, environ)


__all__ = ["open_mcp"]
