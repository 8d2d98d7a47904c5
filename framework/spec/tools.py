"""Tool references in an agent's ``tools:`` list."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, WithJsonSchema, field_validator, model_validator

from framework.spec.common import Name, Spec, did_you_mean, fail
from framework.spec.mcp import McpTool

BUILTIN_TOOLS: dict[str, str] = {
    "fs.read": "fs.read",
    "fs.write": "fs.write",
    "fs.list": "fs.read",
    "fs.search": "fs.read",
    "shell": "shell",
    "http.get": "network",
}
"""Builtin tool name -> the capability class it needs."""

_PYTHON_REF = re.compile(r"^(?P<target>[^:]+):(?P<func>[A-Za-z_][A-Za-z0-9_]*)$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class BuiltinTool(Spec):
    """A builtin tool, written as its bare name: ``fs.read``."""

    builtin: str

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"builtin": value} if isinstance(value, str) else value

    @field_validator("builtin")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in BUILTIN_TOOLS:
            suggestion = did_you_mean(value, BUILTIN_TOOLS)
            raise fail(
                "tool",
                "unknown builtin tool {value!r}; builtins are {names}",
                value=value,
                names=", ".join(BUILTIN_TOOLS),
                hint=suggestion,
            )
        return value

    @property
    def name(self) -> str:
        return self.builtin


class PythonTool(Spec):
    """A Python callable: ``tools/lint.py:lint`` (a file in the project) or ``package.module:func``."""

    python: str
    name: str | None = Field(default=None, description="Tool name shown to the model (default: the function's).")
    description: str | None = None

    @field_validator("python")
    @classmethod
    def _shape(cls, value: str) -> str:
        m = _PYTHON_REF.match(value)
        if not m:
            raise fail(
                "tool",
                "invalid python tool {value!r}: write 'tools/file.py:function' or 'module:function'",
                value=value,
            )
        target = m.group("target")
        if not target.endswith(".py") and not _MODULE.match(target):
            raise fail("tool", "invalid module name {target!r} in python tool {value!r}", target=target, value=value)
        return value

    @property
    def target(self) -> str:
        return self.python.rsplit(":", 1)[0]

    @property
    def function(self) -> str:
        return self.python.rsplit(":", 1)[1]

    @property
    def is_file(self) -> bool:
        return self.target.endswith(".py")


class AgentTool(Spec):
    """Another agent as a tool: a name in this project, or the URL of a remote A2A agent."""

    agent: str
    name: str | None = None
    description: str | None = None

    @field_validator("agent")
    @classmethod
    def _shape(cls, value: str) -> str:
        if value.startswith(("http://", "https://")):
            return value
        if "://" in value:
            raise fail("tool", "remote agents are reached over http:// or https://, got {value!r}", value=value)
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", value):
            raise fail("tool", "invalid agent reference {value!r}: give an agent name or an http(s) URL", value=value)
        return value

    @property
    def is_remote(self) -> bool:
        return self.agent.startswith(("http://", "https://"))


class AgentSelector(Spec):
    """Every agent (local or from a registry) whose skills carry all of these tags."""

    class Select(Spec):
        tags: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)

    agents: Select


def _tool_kind(value: Any) -> str | None:
    """The union member for raw YAML data (validation) or a model instance (serialisation)."""
    if isinstance(value, str | BuiltinTool):
        return "builtin"
    if isinstance(value, PythonTool | AgentTool | AgentSelector | McpTool):
        return {PythonTool: "python", AgentTool: "agent", AgentSelector: "agents", McpTool: "mcp"}[type(value)]
    if isinstance(value, dict):
        for key in ("python", "agent", "agents", "mcp"):
            if key in value:
                return key
        if "builtin" in value:
            return "builtin"
    return None


ToolRef = Annotated[
    Annotated[BuiltinTool, Tag("builtin"), WithJsonSchema({"type": "string", "enum": list(BUILTIN_TOOLS)})]
    | Annotated[PythonTool, Tag("python")]
    | Annotated[AgentTool, Tag("agent")]
    | Annotated[AgentSelector, Tag("agents")]
    | Annotated[McpTool, Tag("mcp")],
    Discriminator(
        _tool_kind,
        custom_error_type="tool",
        custom_error_message=(
            "a tool is a builtin name (fs.read), {python: file.py:func}, {agent: NAME or URL} "
            "{agents: {tags: [...]}} or {mcp: SERVER}"
        ),
    ),
]

ToolKind = Literal["builtin", "python", "agent", "agents", "mcp"]

__all__ = [
    "BUILTIN_TOOLS",
    "AgentSelector",
    "AgentTool",
    "BuiltinTool",
    "McpTool",
    "Name",
    "PythonTool",
    "ToolKind",
    "ToolRef",
]
