"""``ca.mcp.lock``: the digest of every MCP tool the project reviewed, beside ``ca.yaml``.

``ca mcp lock`` writes it; the user commits it. At run time a tool whose digest (of its
description, input schema and annotations) differs from the locked one, or that the lock does
not list, is refused until ``ca mcp lock`` runs again: a server cannot change what a tool says
it does after a person approved it. Without the file, tools are not pinned (``ca validate`` warns).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from framework.errors import Diagnostic, SpecError

LOCK_FILE = "ca.mcp.lock"
LOCK_VERSION = 1

Pin = Literal["unlocked", "locked", "changed", "new"]
"""How a tool stands against the lock: no lock file, as reviewed, changed since, not reviewed."""


def tool_digest(description: str, input_schema: Mapping[str, Any], annotations: Mapping[str, Any]) -> str:
    """``sha256:`` of what a tool tells the model and governance (canonical JSON)."""
    body = {"description": description, "inputSchema": input_schema, "annotations": annotations}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class McpLock:
    """The locked digests: server -> tool -> digest. ``present`` is False without a lock file."""

    servers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    present: bool = False

    def pin(self, server: str, tool: str, digest: str) -> Pin:
        if not self.present:
            return "unlocked"
        locked = self.servers.get(server, {}).get(tool)
        if locked is None:
            return "new"
        return "locked" if locked == digest else "changed"


def lock_path(root: Path) -> Path:
    return root / LOCK_FILE


def read_lock(root: Path) -> McpLock:
    """The project's lock, or an empty one (``present=False``) when there is no file.

    Raises SpecError for a file that is not a lock this version wrote.
    """
    path = lock_path(root)
    if not path.is_file():
        return McpLock()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _invalid(path, f"cannot read the MCP lock file ({exc})") from exc
    servers = data.get("servers") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("version") != LOCK_VERSION or not isinstance(servers, dict):
        raise _invalid(path, f"not an MCP lock file of version {LOCK_VERSION}")
    out: dict[str, dict[str, str]] = {}
    for server, entry in servers.items():
        tools = entry.get("tools") if isinstance(entry, dict) else None
        if not isinstance(tools, dict) or not all(isinstance(v, str) for v in tools.values()):
            raise _invalid(path, f"server {server!r} has no valid `tools` map")
        out[str(server)] = dict(tools)
    return McpLock(out, present=True)


def _invalid(path: Path, message: str) -> SpecError:
    return SpecError([Diagnostic(str(path), 0, 0, message, hint="run `ca mcp lock` to write it again")])


def write_lock(root: Path, servers: Mapping[str, Mapping[str, str]]) -> Path:
    """Write the lock (sorted, one tool a line) and return its path."""
    body = {
        "version": LOCK_VERSION,
        "servers": {name: {"tools": dict(sorted(tools.items()))} for name, tools in sorted(servers.items())},
    }
    path = lock_path(root)
    path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return path
