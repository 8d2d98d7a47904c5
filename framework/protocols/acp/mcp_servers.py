"""The MCP servers an editor passes in ACP ``session/new`` and ``session/load`` (``mcpServers``).

Each becomes a :class:`~framework.compiler.mcp_tools.ClientServer` named ``client.NAME``: stdio
(``{name, command, args, env: [{name, value}]}``), streamable HTTP (``{type: "http", name, url,
headers: [{name, value}]}``) and the older HTTP+SSE transport (``type: "sse"``, the same keys).
An entry of another type, or one not well formed, is skipped with a line on stderr. Header values, and env
values whose names look secret, are masked from then on like every other secret.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from framework.compiler.mcp_tools import CLIENT_PREFIX, ClientServer
from framework.runtime.governance.secrets import KNOWN
from framework.spec.interpolate import SECRET_NAME

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def client_servers(entries: list[Any]) -> tuple[ClientServer, ...]:
    """The usable entries of ``mcpServers``, in order (a later entry of the same name replaces one)."""
    found: dict[str, ClientServer] = {}
    for entry in entries:
        server = _one(entry)
        if server is not None:
            found[server.name] = server
    return tuple(found.values())


def _pairs(items: Any) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("value"), str)):
            return None
        out.append((item["name"], item["value"]))
    return tuple(out)


def _skip(entry: Any, why: str) -> None:
    name = entry.get("name") if isinstance(entry, dict) else None
    print(f"warning: editor MCP server {name!r} is not used: {why}", file=sys.stderr)


def _one(entry: Any) -> ClientServer | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not _NAME.fullmatch(entry["name"]):
        _skip(entry, "it needs a `name` of letters, digits, '_' and '-'")
        return None
    name = CLIENT_PREFIX + entry["name"]
    kind = entry.get("type", "stdio")
    if kind == "stdio":
        args, env = entry.get("args", []), _pairs(entry.get("env", []))
        if not isinstance(entry.get("command"), str) or not isinstance(args, list) or env is None:
            _skip(entry, "a stdio server needs `command`, `args` (strings) and `env` ([{name, value}])")
            return None
        KNOWN.add(value for key, value in env if SECRET_NAME.search(key))
        return ClientServer(name, command=entry["command"], args=tuple(map(str, args)), env=env)
    if kind in ("http", "sse"):
        headers = _pairs(entry.get("headers", []))
        url = entry.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or headers is None:
            _skip(entry, f"an {kind} server needs an http(s) `url` and `headers` ([{{name, value}}])")
            return None
        KNOWN.add(value for _, value in headers)
        return ClientServer(name, url=url, headers=headers, sse=kind == "sse")
    _skip(entry, f"transport {kind!r} is not supported (stdio, http and sse are)")
    return None
