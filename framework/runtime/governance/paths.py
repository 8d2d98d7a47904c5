"""File capabilities: confine a path to the project root, then match it against the declared globs.

Confinement mirrors ``framework.compiler.builtin_tools.resolve_path`` (which the tools apply
again when they run; it is not imported because that module loads langchain): ``\\`` counts as
``/``; absolute, drive-letter and ``~`` paths are refused; ``..`` may fold inside the root but
not climb out; symbolic links are resolved (``realpath``) and the real path must stay inside.
On top of that, governance refuses text a person would not read as the path it is:

* control characters (NUL, newline, escape, C1 controls) anywhere;
* percent-escapes whose decoding (repeated, for double encoding) contains a ``..`` segment, a
  leading ``/``, ``\\`` or ``~``, a control character or invalid UTF-8 (so overlong forms such as
  ``%c0%ae`` are refused); other escapes stay literal — ``100%25.txt`` is that file name;
* text whose Unicode NFKC form does the same (``．．／`` is refused); other compatibility
  characters stay literal — ``ｓｒｃ/a`` is not ``src/a`` and matches no ``src/**`` glob.

The *real* path, relative to the root, is then matched against the globs — what will be touched,
not how it was spelt, so a link inside the root is judged by where it leads.

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
import unicodedata
from pathlib import Path
from urllib.parse import unquote_to_bytes

from framework.runtime.governance.calls import Decision, ToolCall, allow, deny, shown
from framework.spec.capabilities import Capabilities

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


class PathRefused(ValueError):
    """A path argument that governance refuses before any glob is consulted."""


def _plain_problem(rel: str) -> str | None:
    """What is wrong with ``rel`` (``\\`` already turned into ``/``) regardless of the root, if anything."""
    if _CONTROL.search(rel):
        return "contains a control character"
    if rel.startswith("/") or _DRIVE.match(rel):
        return "is absolute; give a path relative to the project root"
    if rel.startswith("~"):
        return "starts with '~'; give a path relative to the project root"
    return None


def _decodings(path: str) -> list[str]:
    """``path`` percent-decoded (up to three times) and NFKC-normalised, where that changes it."""
    out: list[str] = []
    text = path
    for _ in range(3):
        if not _ESCAPE.search(text):
            break
        try:
            text = unquote_to_bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PathRefused(f"path {shown(path)} has percent-escapes that are not valid UTF-8") from exc
        out.append(text)
    nfkc = unicodedata.normalize("NFKC", path)
    if nfkc != path:
        out.append(nfkc)
    return out


def confine(root: Path, path: object) -> str:
    """The real location of ``path`` relative to ``root`` (``root`` already real), as ``a/b`` or ``.``.

    Raises :class:`PathRefused` with a sentence for the user when the path is refused.
    """
    if not isinstance(path, str):
        raise PathRefused(f"the path must be a string, got {type(path).__name__}")
    if not path:
        raise PathRefused("the path is empty; use '.' for the project root")
    rel = path.replace("\\", "/")
    if problem := _plain_problem(rel):
        raise PathRefused(f"path {shown(path)} {problem}")
    for decoded in _decodings(path):
        dec = decoded.replace("\\", "/")
        if _plain_problem(dec) or ".." in dec.split("/"):
            raise PathRefused(
                f"path {shown(path)} reads as {shown(decoded)} once decoded; write the path plainly, "
                "without percent-escapes or look-alike characters"
            )
    if not Path(os.path.normpath(root / rel)).is_relative_to(root):
        raise PathRefused(f"path {shown(path)} is outside the project root; '..' may not climb out of it")
    real = Path(os.path.realpath(root / rel))
    if not real.is_relative_to(root):
        raise PathRefused(f"path {shown(path)} leads outside the project root through a symbolic link")
    return real.relative_to(root).as_posix()


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


def check_fs(call: ToolCall, caps: Capabilities | None, root: Path) -> Decision:
    """The file capability check for ``fs.read``, ``fs.write``, ``fs.list`` and ``fs.search``."""
    op = "write" if call.capability == "fs.write" else "read"
    rule = f"capabilities.fs.{op}"
    default = "." if call.tool in ("fs.list", "fs.search") else None
    path = call.args.get("path", default)
    if path is None:
        return deny(f"{call.tool} needs a 'path' argument", rule)
    real_root = Path(os.path.realpath(root))
    try:
        rel = confine(real_root, path)
    except PathRefused as exc:
        return deny(f"{exc} (no capability can allow a path outside the project root)", rule)
    lists: dict[str, list[str]] = {}
    if caps is not None:  # a write glob allows reading too
        lists = {"write": caps.fs.write} if op == "write" else {"read": caps.fs.read, "write": caps.fs.write}
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
