"""The two values governance works on: a tool call about to run, and the verdict on it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from framework.spec.common import Action
from framework.spec.common import shown as shown  # re-exported: every reason quotes with it
from framework.spec.tools import BUILTIN_TOOLS

CallCapability = Literal["fs.read", "fs.write", "shell", "network", "python", "agent", "mcp"]
"""What a call touches: the capability classes of the spec plus ``python`` (declared code)."""

CALL_CAPABILITIES: frozenset[str] = frozenset(get_args(CallCapability))


@dataclass(frozen=True)
class ToolCall:
    """A tool call as governance sees it, before it runs.

    ``tool`` is the spec name: a builtin (``fs.read``, ``shell``, ``http.get``), a python tool's
    name, or, for an agent call, the callee's name or the URL of a remote agent. ``capability``
    is the class the tool belongs to (the ``capability`` metadata of every built tool) and
    ``args`` the arguments the model gave, unvalidated. An MCP tool (``SERVER.TOOL``) also
    carries the hints its server gave (``annotations``: ``readOnlyHint`` ...) and how it stands
    against ``ca.mcp.lock`` (``pin``: unlocked, locked, changed, new).
    """

    tool: str
    capability: CallCapability
    args: Mapping[str, Any] = field(default_factory=dict)
    annotations: Mapping[str, Any] = field(default_factory=dict)
    pin: str = ""

    @classmethod
    def builtin(cls, name: str, **args: Any) -> ToolCall:
        """A call of the builtin tool ``name``, classed as ``BUILTIN_TOOLS`` says.

        >>> ToolCall.builtin("fs.list", path="src").capability
        'fs.read'
        """
        capability = BUILTIN_TOOLS[name]
        assert capability in CALL_CAPABILITIES, capability
        return cls(name, cast(CallCapability, capability), args)


@dataclass(frozen=True)
class Decision:
    """A verdict on a call: ``allow``, ``ask`` a person, or ``deny``.

    ``reason`` is written for the user (a denial says what to add to the YAML to allow the
    call); ``rule`` names what decided, e.g. ``"profile supervised rule 2"`` or
    ``"capabilities.fs.read"``.
    """

    action: Action
    reason: str
    rule: str = ""

    @property
    def allowed(self) -> bool:
        return self.action == "allow"

    @property
    def denied(self) -> bool:
        return self.action == "deny"


def allow(reason: str, rule: str) -> Decision:
    """An ``allow`` decision."""
    return Decision("allow", reason, rule)


def deny(reason: str, rule: str) -> Decision:
    """A ``deny`` decision."""
    return Decision("deny", reason, rule)
