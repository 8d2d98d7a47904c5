"""The file tools: ``fs.read``, ``fs.write``, ``fs.list``, ``fs.search`` and the editor's file system.

Every file or folder they touch goes through one sequence: :func:`~framework.compiler.confine.confine`
(its real location inside the root), the agent's :class:`~framework.compiler.confine.Access`
(its capability globs, when governance runs) on that real location, then
:func:`~framework.compiler.confine.open_confined` (no symbolic link followed on the way, so a
link swapped in after the check is refused). The argument goes through it, and so does each
entry a listing shows and each file a search reads: a link inside an allowed folder counts as
where it leads, and is left out when that is not allowed.

``fs.search`` matches in a child process (:mod:`framework.compiler.search_worker`) that is
killed after :data:`SEARCH_TIMEOUT` seconds: Python's ``re`` cannot be interrupted, and a
pattern such as ``(a+)+$`` takes exponential time on a long line.

Split from :mod:`framework.compiler.builtin_tools`, which builds them into tools.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from langchain_core.tools import ToolException

from framework.compiler.confine import confine, open_confined, scan_confined
from framework.compiler.search_worker import Outcome
from framework.compiler.tool_context import OVERHANG, ToolContext, head
from framework.errors import PathChanged, PathRefused
from framework.spec.common import shown

READ_LIMIT = 256 * 1024
LIST_LIMIT = 1000
SEARCH_LIMIT = 200
SEARCH_FILE_LIMIT = 4 * 1024 * 1024
SEARCH_LINE_CHARS = 400
SEARCH_SKIP_DIRS = frozenset({".git", ".venv", ".ca", "node_modules"})
SEARCH_TIMEOUT = 10.0
"""Seconds one ``fs.search`` may spend reading and matching before its worker is killed."""

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block the open: it is refused after
_OUTSIDE = "they lie outside capabilities.fs.read or the project (a link counts as where it leads)"
# The worker runs this very framework, found where the parent found it (PYTHONPATH, a checkout
# or site-packages), in isolated mode: no PYTHON* variables, no user site, no current folder.
_PACKAGES = str(Path(__file__).resolve().parents[2])
_WORKER = [
    sys.executable,
    "-I",
    "-c",
    f"import sys; sys.path.insert(0, {_PACKAGES!r}); from framework.compiler.search_worker import main; main()",
]


def _locate(ctx: ToolContext, path: str, *, write: bool = False) -> str:
    """The real location of ``path`` if the agent may touch it; :class:`PathRefused` otherwise."""
    rel = confine(ctx.root, path)
    if ctx.access is not None and (refusal := ctx.access.path(rel, write=write)):
        raise PathRefused(f"denied: {refusal}")
    return rel


def reach(ctx: ToolContext, path: str, *, write: bool = False) -> str:
    """The real location of a path argument (``a/b`` or ``.``), or the refusal as a ``ToolException``."""
    try:
        return _locate(ctx, path, write=write)
    except PathRefused as exc:
        raise ToolException(str(exc)) from exc


def _open(ctx: ToolContext, rel: str, flags: int, *, make_folders: bool = False) -> int:
    try:
        return open_confined(ctx.root, rel, flags, make_folders=make_folders)
    except PathChanged as exc:
        raise ToolException(str(exc)) from exc


def read_file(ctx: ToolContext, path: str) -> str:
    """Implementation of ``fs.read``."""
    rel = reach(ctx, path)
    try:
        fd = _open(ctx, rel, os.O_RDONLY | _NONBLOCK)
        with os.fdopen(_regular(fd, rel, "use fs.list to see its entries"), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(READ_LIMIT + OVERHANG)
    except FileNotFoundError as exc:
        raise ToolException(f"no such file: {rel!r}") from exc
    except OSError as exc:
        raise ToolException(f"cannot read {rel!r}: {exc.strerror or exc}") from exc
    if size <= READ_LIMIT:
        return data.decode("utf-8", errors="replace")
    text = head(ctx, data, READ_LIMIT, lambda part: part.decode("utf-8", errors="replace"))
    return text + f"\n[truncated: showing the first {READ_LIMIT} of {size} bytes]"


def _regular(fd: int, rel: str, folder_hint: str) -> int:
    """``fd`` if it is a regular file; otherwise it is closed and the ``ToolException`` to show raised."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise ToolException(f"{rel!r} is a folder; {folder_hint}")
    raise ToolException(f"{rel!r} is not a regular file")


def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Implementation of ``fs.write``."""
    rel = reach(ctx, path, write=True)
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolException(f"content for {rel!r} is not valid text: {exc.reason}") from exc
    try:
        fd = _open(ctx, rel, os.O_WRONLY | os.O_CREAT | _NONBLOCK, make_folders=True)
    except IsADirectoryError as exc:
        raise ToolException(f"{rel!r} is a folder; give a file path") from exc
    except OSError as exc:
        raise ToolException(f"cannot write {rel!r}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(_regular(fd, rel, "give a file path"), "wb") as fh:
            fh.truncate(0)  # only now: the descriptor is the checked file, not a swapped-in link
            fh.write(data)
    except OSError as exc:
        raise ToolException(f"cannot write {rel!r}: {exc.strerror or exc}") from exc
    return f"wrote {len(data)} bytes to {rel}"


def list_folder(ctx: ToolContext, path: str = ".") -> str:
    """Implementation of ``fs.list``."""
    rel = reach(ctx, path)
    try:
        entries = scan_confined(ctx.root, rel)
    except PathChanged as exc:
        raise ToolException(str(exc)) from exc
    except FileNotFoundError as exc:
        raise ToolException(f"no such folder: {rel!r}") from exc
    except NotADirectoryError as exc:
        raise ToolException(f"{rel!r} is a file, not a folder; use fs.read to read it") from exc
    except OSError as exc:
        raise ToolException(f"cannot list {rel!r}: {exc.strerror or exc}") from exc
    names, hidden = [], 0
    for name, is_dir in entries:
        try:
            _locate(ctx, name if rel == "." else f"{rel}/{name}")
        except PathRefused:
            hidden += 1
            continue
        names.append(name + "/" if is_dir else name)
    names.sort()
    lines = names[:LIST_LIMIT]
    if len(names) > LIST_LIMIT:
        lines.append(f"[{len(names) - LIST_LIMIT} more entries not shown]")
    if hidden:
        lines.append(f"[{hidden} {'entry' if hidden == 1 else 'entries'} not shown: {_OUTSIDE}]")
    return "\n".join(lines) if lines else "(empty folder)"


def _searchable(ctx: ToolContext, rel: str) -> tuple[list[str], int]:
    """The real paths of the files a search of ``rel`` reads, and how many it must skip."""
    if not (ctx.root / rel).is_dir():
        return [rel], 0
    files: dict[str, None] = {}  # a file reached through an alias is searched once
    skipped = 0
    for folder, dirs, names in os.walk(ctx.root / rel):  # links to folders are not followed
        dirs[:] = sorted(d for d in dirs if d not in SEARCH_SKIP_DIRS)
        base = Path(folder).relative_to(ctx.root).as_posix()
        for name in sorted(names):
            try:
                files[_locate(ctx, name if base == "." else f"{base}/{name}")] = None
            except PathRefused:
                skipped += 1
    return list(files), skipped


def search_files(ctx: ToolContext, pattern: str, path: str = ".") -> str:
    """Implementation of ``fs.search``."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ToolException(f"invalid regular expression {pattern!r}: {exc}") from exc
    rel = reach(ctx, path)
    if not (ctx.root / rel).exists():
        raise ToolException(f"no such file or folder: {rel!r}")
    files, skipped = _searchable(ctx, rel)
    job = {
        "root": str(ctx.root),
        "pattern": pattern,
        "files": files,
        "limit": SEARCH_LIMIT,
        "file_limit": SEARCH_FILE_LIMIT,
        "line_chars": SEARCH_LINE_CHARS,
    }
    outcome = _match(job, pattern)
    found = [f"{file}:{number}: {line}" for file, number, line in outcome.found]
    if outcome.stopped:
        found.append(f"[stopped after {SEARCH_LIMIT} matches; narrow the pattern or the path]")
    if outcome.unreadable:
        found.append(f"[{outcome.unreadable} file(s) could not be read]")
    if skipped:
        found.append(f"[{skipped} file(s) skipped: {_OUTSIDE}]")
    if not outcome.found:
        found.insert(0, f"no matches for {pattern!r} in {rel}")
    return "\n".join(found)


def _match(job: dict[str, object], pattern: str) -> Outcome:
    """Run the worker on ``job`` within :data:`SEARCH_TIMEOUT` seconds."""
    try:
        done = subprocess.run(_WORKER, input=json.dumps(job).encode(), capture_output=True, timeout=SEARCH_TIMEOUT)
    except subprocess.TimeoutExpired as exc:  # run() has killed the worker
        raise ToolException(
            f"fs.search stopped after {SEARCH_TIMEOUT:g} s: the pattern {shown(pattern)} takes too long on "
            "these files (nested repetition such as '(a+)+' can take exponential time); simplify the "
            "pattern or search a narrower path"
        ) from exc
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise ToolException(f"fs.search failed: its worker exited with code {done.returncode}: {last}")
    return Outcome.from_json(done.stdout)
