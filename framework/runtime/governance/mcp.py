"""The capability check of an MCP tool call: listed in ``capabilities.mcp.allow``, and as reviewed.

A call of ``SERVER.TOOL`` runs only when a glob of ``capabilities.mcp.allow`` matches that name
(``notes.*``, ``github.list_*``) — declaring the server in ``tools:`` is not enough, so an agent
sees a server's tools but may call only the ones granted. When the project has ``ca.mcp.lock``,
a tool whose description, input schema or annotations changed since the lock, or that the lock
does not list, is refused until a person reviews it and runs ``ca mcp lock`` again.

The tools of servers an editor passes over ACP (``client.NAME.TOOL``) are the editor user's
choice: ``capabilities.mcp.from_client: true`` grants them all (profiles still ask by their
annotations); they are not pinned.
"""

from __future__ import annotations

from framework.runtime.governance.calls import Decision, ToolCall, allow, deny
from framework.runtime.governance.matching import glob_matches
from framework.spec.capabilities import Capabilities

RULE = "capabilities.mcp.allow"
RULE_CLIENT = "capabilities.mcp.from_client"


def check_mcp(call: ToolCall, caps: Capabilities | None) -> Decision:
    """Whether the MCP tool call ``call`` (``tool`` is ``SERVER.TOOL``) is granted and pinned."""
    if call.tool.startswith("client."):  # a server the editor passed (ACP session/new)
        if caps is not None and caps.mcp.from_client:
            return allow(f"MCP tool {call.tool!r} of an editor's server: capabilities.mcp.from_client", RULE_CLIENT)
        return deny(
            f"MCP tool {call.tool!r} is of a server the editor passed; set capabilities.mcp.from_client: true "
            "to let the agent use them",
            RULE_CLIENT,
        )
    server = call.tool.partition(".")[0]
    granted = [] if caps is None else caps.mcp.allow
    if not any(glob_matches(pattern, call.tool) for pattern in granted):
        listed = ", ".join(map(repr, granted)) or "none"
        return deny(
            f"MCP tool {call.tool!r} is not in {RULE} ({listed}); add {call.tool!r} "
            f"(or {server + '.*'!r} for every tool of {server!r}) to {RULE}",
            RULE,
        )
    if call.pin == "changed":
        return deny(
            f"MCP tool {call.tool!r} changed since ca.mcp.lock was written (its description, input schema "
            "or annotations differ): review the server's change, then run `ca mcp lock`",
            "mcp.lock",
        )
    if call.pin == "new":
        return deny(
            f"MCP tool {call.tool!r} is not in ca.mcp.lock: review it, then run `ca mcp lock`",
            "mcp.lock",
        )
    return allow(f"MCP tool {call.tool!r} is granted by {RULE}", RULE)
