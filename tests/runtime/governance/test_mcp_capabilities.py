"""The capability check of MCP tool calls: SERVER.TOOL globs, the lock, the editor's servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.runtime.governance import ToolCall
from framework.runtime.governance.capabilities import check_capabilities
from framework.spec.capabilities import Capabilities


def caps(allow: list[str], from_client: bool = False) -> Capabilities:
    return Capabilities.model_validate({"mcp": {"allow": allow, "from_client": from_client}})


def mcp(tool: str, pin: str = "unlocked") -> ToolCall:
    return ToolCall(tool, "mcp", {}, pin=pin)


@pytest.mark.parametrize(
    ("allow", "tool", "action", "rule"),
    [
        (["notes.*"], "notes.add", "allow", "capabilities.mcp.allow"),
        (["notes.list_*"], "notes.list_all", "allow", "capabilities.mcp.allow"),
        (["notes.list_*"], "notes.add", "deny", "capabilities.mcp.allow"),
        (["github.*"], "notes.add", "deny", "capabilities.mcp.allow"),
        ([], "notes.add", "deny", "capabilities.mcp.allow"),
    ],
)
def test_a_call_runs_only_when_a_glob_grants_it(allow: list[str], tool: str, action: str, rule: str) -> None:
    decision = check_capabilities(mcp(tool), caps(allow), root=Path("."))
    assert (decision.action, decision.rule) == (action, rule)


def test_a_denial_says_what_to_add() -> None:
    decision = check_capabilities(mcp("notes.add"), caps(["notes.list_*"]), root=Path("."))
    assert decision.reason == (
        "MCP tool 'notes.add' is not in capabilities.mcp.allow ('notes.list_*'); add 'notes.add' "
        "(or 'notes.*' for every tool of 'notes') to capabilities.mcp.allow"
    )
    assert check_capabilities(mcp("notes.add"), None, root=Path(".")).denied


@pytest.mark.parametrize(("pin", "denied"), [("unlocked", False), ("locked", False), ("changed", True), ("new", True)])
def test_a_tool_not_as_locked_is_refused(pin: str, denied: bool) -> None:
    decision = check_capabilities(mcp("notes.add", pin), caps(["notes.*"]), root=Path("."))
    assert decision.denied is denied
    if denied:
        assert decision.rule == "mcp.lock" and "`ca mcp lock`" in decision.reason


def test_an_editor_server_needs_from_client() -> None:
    tool = mcp("client.notes.echo")
    assert check_capabilities(tool, caps(["client.*"]), root=Path(".")).denied  # globs do not grant them
    allowed = check_capabilities(tool, caps([], from_client=True), root=Path("."))
    assert allowed.allowed and allowed.rule == "capabilities.mcp.from_client"


def test_allow_takes_server_tool_patterns_only() -> None:
    with pytest.raises(ValueError, match=r"'SERVER\.TOOL' patterns"):
        caps(["notes"])
