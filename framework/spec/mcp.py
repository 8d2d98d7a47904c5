"""Model Context Protocol servers: declared once in ``ca.yaml``, used by agents as tools.

``mcp_servers:`` maps a name to a server: a program spoken to over stdio (``command``,
``args``, ``env``) or a streamable HTTP endpoint (``url``, ``headers_env``). An agent uses one
with ``tools: [{mcp: NAME, include: [...], exclude: [...]}]``; each tool reaches governance as
``NAME.TOOL`` and runs only when ``capabilities.mcp.allow`` lists it.
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import AfterValidator, Field, WithJsonSchema, model_validator

from framework.spec.capabilities import MCP_TOOL_GLOB, EnvName
from framework.spec.common import Duration, Name, Spec, fail


def _check_tool_glob(value: str) -> str:
    if not MCP_TOOL_GLOB.fullmatch(value):
        raise fail(
            "mcp_glob",
            "invalid MCP tool pattern {value!r}: use tool names with '*' and '?', like 'read_*'",
            value=value,
        )
    return value


ToolGlob = Annotated[str, AfterValidator(_check_tool_glob), WithJsonSchema({"type": "string"})]


def _check_http(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise fail("url", "an MCP server url is http:// or https://, got {value!r}", value=value)
    return value


class McpServer(Spec):
    """One MCP server: ``command`` (stdio) or ``url`` (streamable HTTP), never both."""

    command: str | None = Field(default=None, description="Program to start (stdio); found on PATH.")
    args: list[str] = Field(default_factory=list, description="Its arguments; ${VAR} is substituted.")
    env: dict[EnvName, str] = Field(
        default_factory=dict,
        description="Variables for the program (besides HOME, LOGNAME, PATH, SHELL, TERM, USER); "
        "write values as ${VAR} to take them from the environment or .env.",
    )
    cwd: str | None = Field(default=None, description="Working folder, relative to the project root (default: it).")
    url: Annotated[str, AfterValidator(_check_http)] | None = Field(
        default=None, description="Streamable HTTP endpoint, e.g. https://host.example/mcp."
    )
    headers_env: dict[str, EnvName] = Field(
        default_factory=dict, description="HTTP header -> variable holding its value (e.g. Authorization)."
    )
    timeout: Duration = Field(default=60.0, description="Deadline of starting the server and of each call.")

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise fail(
                "mcp_server",
                "an MCP server needs exactly one of `command` (a program spoken to over stdio) "
                "or `url` (streamable HTTP)",
            )
        if self.url is not None and (self.args or self.env or self.cwd):
            raise fail("mcp_server", "`args`, `env` and `cwd` are for stdio servers (`command`), not for `url`")
        if self.command is not None and self.headers_env:
            raise fail("mcp_server", "`headers_env` is for HTTP servers (`url`), not for `command`")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"


class McpTool(Spec):
    """The tools of an MCP server declared in ``ca.yaml``: ``{mcp: NAME}``, optionally narrowed."""

    mcp: Name
    include: list[ToolGlob] | None = Field(default=None, description="Only the tools matching one of these.")
    exclude: list[ToolGlob] = Field(default_factory=list, description="Never the tools matching one of these.")


__all__ = ["McpServer", "McpTool", "Name"]
