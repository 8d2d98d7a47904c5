"""Capabilities: what an agent may touch. Deny by default: nothing unlisted is allowed."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, WithJsonSchema

from framework.spec.common import Duration, Name, PositiveInt, Spec, fail


def _check_glob(value: str) -> str:
    if not value:
        raise fail("glob", "a path pattern cannot be empty")
    if value.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", value):
        raise fail(
            "glob",
            "path pattern {value!r} is absolute; patterns are relative to the project root, like 'src/**'",
            value=value,
        )
    if ".." in re.split(r"[\\/]", value):
        raise fail(
            "glob",
            "path pattern {value!r} climbs out with '..'; agents are confined to the project root",
            value=value,
        )
    return value


PathGlob = Annotated[str, AfterValidator(_check_glob), WithJsonSchema({"type": "string", "examples": ["src/**"]})]

_HOST_RE = re.compile(
    r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*(:\d{1,5})?$"
)


def _check_host(value: str) -> str:
    if "://" in value or "/" in value:
        raise fail(
            "host",
            "network.allow takes host names like 'api.github.com', not URLs: {value!r}",
            value=value,
        )
    if not _HOST_RE.fullmatch(value.lower()):
        raise fail(
            "host",
            "invalid host pattern {value!r}: write 'example.com', '*.example.com' or 'localhost:8080'",
            value=value,
        )
    suffix = value.lower().removeprefix("*.").split(":")[0] if value.startswith("*.") else ""
    if suffix and ("." not in suffix or suffix in _SHARED_SUFFIXES) and suffix != "localhost":
        raise fail(
            "host",
            "host pattern {value!r} allows every host under {suffix!r}, a suffix shared by unrelated sites",
            value=value,
            suffix=suffix,
            hint="name the domain you mean, like '*.example.com' or 'api.example.com'",
        )
    return value.lower()


_SHARED_SUFFIXES = frozenset(
    {"co.uk", "org.uk", "ac.uk", "gov.uk", "com.au", "net.au", "org.au", "co.jp", "ne.jp", "or.jp"}
    | {"com.br", "com.cn", "com.mx", "co.nz", "co.in", "co.za", "com.tr", "co.kr", "com.tw", "com.sg"}
    | {"github.io", "herokuapp.com", "appspot.com", "azurewebsites.net", "cloudfront.net", "vercel.app"}
)
"""Suffixes under which anyone can register a name: ``*.co.uk`` is as wide as ``*.com``. A short
list of the common ones, not the whole Public Suffix List: a plain ``*.TLD`` is caught anyway."""


HostPattern = Annotated[str, AfterValidator(_check_host), WithJsonSchema({"type": "string"})]


SHELL_BASE_ENV = (
    "PATH",
    "HOME",
    "LANG",
    *("LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_MONETARY", "LC_NUMERIC", "LC_TIME"),
    *("LC_ADDRESS", "LC_IDENTIFICATION", "LC_MEASUREMENT", "LC_NAME", "LC_PAPER", "LC_TELEPHONE"),
    "TERM",
    "TZ",
)
"""The variables every command gets (when set): where programs are, the user's home, the locale
(its POSIX and glibc categories by name, not every ``LC_*``), the terminal type and the time zone.
None of them holds a credential; everything else must be named in ``capabilities.shell.env``."""

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_env_name(value: str) -> str:
    if not _ENV_NAME_RE.fullmatch(value):
        raise fail(
            "env_name",
            "{value!r} is not an environment variable name: use letters, digits and '_', not starting with a digit",
            hint="name each variable exactly as the environment spells it, like 'DATABASE_URL' (no wildcards)",
            value=value,
        )
    return value


EnvName = Annotated[
    str, AfterValidator(_check_env_name), WithJsonSchema({"type": "string", "pattern": _ENV_NAME_RE.pattern})
]


class FsCapabilities(Spec):
    read: list[PathGlob] = Field(default_factory=list, description="Globs the agent may read.")
    write: list[PathGlob] = Field(default_factory=list, description="Globs the agent may write.")


class ShellCapabilities(Spec):
    allow: list[str] = Field(
        default_factory=list,
        description="Command-line patterns ('pytest *'); metacharacters are refused unless a pattern has them.",
    )
    env: list[EnvName] = Field(
        default_factory=list,
        description="Environment variables passed to commands, besides "
        "PATH, HOME, LANG, the LC_ locale categories, TERM and TZ; no other variable reaches them.",
    )
    timeout: Duration = Field(default=60.0, description="Per command.")
    max_output_bytes: PositiveInt = Field(default=65536, le=16 * 1024 * 1024)


class NetworkCapabilities(Spec):
    allow: list[HostPattern] = Field(default_factory=list, description="Hosts for http.get and remote agents.")


MCP_TOOL_GLOB = re.compile(r"^[A-Za-z0-9_*?.-]+$")


def _check_server_glob(value: str) -> str:
    server, dot, tool = value.partition(".")
    if not dot or not server or not tool or not MCP_TOOL_GLOB.fullmatch(value):
        raise fail(
            "mcp_glob",
            "capabilities.mcp.allow takes 'SERVER.TOOL' patterns like 'github.*' or 'notes.list_*', got {value!r}",
            value=value,
        )
    return value


ServerToolGlob = Annotated[str, AfterValidator(_check_server_glob), WithJsonSchema({"type": "string"})]


class McpCapabilities(Spec):
    allow: list[ServerToolGlob] = Field(
        default_factory=list,
        description="'SERVER.TOOL' patterns of MCP tools the agent may call, e.g. 'github.*' or 'notes.list_*'.",
    )
    from_client: bool = Field(
        default=False,
        description="Use the MCP servers an editor passes in ACP session/new (tools named client.SERVER.TOOL).",
    )


class Capabilities(Spec):
    fs: FsCapabilities = Field(default_factory=FsCapabilities)
    shell: ShellCapabilities = Field(default_factory=ShellCapabilities)
    network: NetworkCapabilities = Field(default_factory=NetworkCapabilities)
    agents: list[Name] = Field(default_factory=list, description="Agents of the project this agent may call.")
    mcp: McpCapabilities = Field(default_factory=McpCapabilities)
