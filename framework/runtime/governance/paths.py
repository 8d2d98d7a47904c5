"""File capabilities: confine a path to the project root, then match it against the declared globs.

Confinement is :func:`framework.compiler.confine.confine`, the function the tools apply again
when they run (see its module for what it refuses), so governance judges the file the tool
will touch. The *real* path, relative to the root, is matched against the globs — what will be
touched, not how it was spelt, so a link inside the root is judged by where it leads.
:func:`check_real_path` is that match alone: the tools ask it (through
:class:`~framework.runtime.governance.access.CapabilityAccess`) about every file they reach
below a folder argument, so a search or a listing is bound by the same globs as a read.

Path globs: ``*`` matches within one folder name, ``?`` one character of a name, ``**`` any
number of folders (``src/**`` matches ``src`` itself and all below it, ``**/*.md`` matches
``a.md`` and ``docs/a.md``); a trailing ``/`` means ``/**``; a leading ``./`` is ignored;
names starting with a dot are matched like any other. ``.`` (the root) matches only ``**``,
``*`` or ``.``.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from framework.compiler.confine import confine
from framework.errors import PathRefused
from framework.runtime.governance.calls import Decision, ToolCall, allow, deny
from framework.spec.capabilities import Capabilities


@functools.lru_cache(maxsize=1024)
def path_glob(pattern: str) -> re.Pattern[str]:
    """The regular expression for a path glob (see the module docstring)."""
    glob = pattern.replace("\\", "/")
    while glob.startswith("./"):
        glob = glob[2:]
    if glob.endswith("/"):
        glob += "**"
    out: list[str] = []
    segments = glob.split("/")
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        if segment == "**":
            # '**/' any folders (none included); a final '/**' the folder itself or anything below.
            if i == last:
                out.append("(?:/.*)?" if i else ".*")
            else:
                out.append("(?:.*/)?" if i == 0 else "/(?:.*/)?")
            continue
        if i and segments[i - 1] != "**":
            out.append("/")
        out.append(_segment(segment))
    return re.compile("".join(out), re.DOTALL)


def _segment(segment: str) -> str:
    parts = []
    for j, char in enumerate(segment):
        if char == "*":
            if j and segment[j - 1] == "*":
                continue
            # '**' inside a name ('a**b') behaves like '*' would across folders.
            parts.append(".*" if segment[j + 1 : j + 2] == "*" else "[^/]*")
        elif char == "?":
            parts.append("[^/]")
        else:
            parts.append(re.escape(char))
    return "".join(parts)


def path_matches(pattern: str, rel: str) -> bool:
    """Whether the path glob ``pattern`` matches ``rel`` (relative to the root, ``/``-separated)."""
    return path_glob(pattern).fullmatch(rel) is not None


def _suggestion(rel: str) -> str:
    folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
    return f"{folder}/**" if folder else ("**" if rel == "." else rel)


def check_fs(call: ToolCall, caps: Capabilities | None, root: Path, *, root_is_real: bool = False) -> Decision:
    """The file capability check for ``fs.read``, ``fs.write``, ``fs.list`` and ``fs.search``
    (``root_is_real``: the caller resolved the root's links already)."""
    write = call.capability == "fs.write"
    rule = f"capabilities.fs.{'write' if write else 'read'}"
    default = "." if call.tool in ("fs.list", "fs.search") else None
    path = call.args.get("path", default)
    if path is None:
        return deny(f"{call.tool} needs a 'path' argument", rule)
    try:
        rel = confine(root if root_is_real else Path(os.path.realpath(root)), path)
    except PathRefused as exc:
        return deny(f"{exc} (no capability can allow a path outside the project root)", rule)
    return check_real_path(rel, caps, write=write)


def check_real_path(rel: str, caps: Capabilities | None, *, write: bool) -> Decision:
    """Whether the real path ``rel`` (relative to the root, from ``confine``) may be read or written."""
    op = "write" if write else "read"
    rule = f"capabilities.fs.{op}"
    lists: dict[str, list[str]] = {}
    if caps is not None:  # a write glob allows reading too
        lists = {"write": caps.fs.write} if write else {"read": caps.fs.read, "write": caps.fs.write}
    for key, globs in lists.items():
        for pattern in globs:
            if path_matches(pattern, rel):
                return allow(f"{rel!r} matches {pattern!r} in capabilities.fs.{key}", rule)
    hint = _suggestion(rel)
    where = f"capabilities.fs.{op}" + (" (nor in fs.write, which also allows reading)" if op == "read" else "")
    if caps is None:
        return deny(
            f"path {rel!r} is not in {rule}: the agent declares no capabilities; "
            f"add capabilities: {{fs: {{{op}: [{hint!r}]}}}}",
            rule,
        )
    return deny(f"path {rel!r} is not in {where}; add a glob such as {hint!r} to {rule}", rule)
