"""Path confinement: the one function that turns a path argument into a real location inside the
project root, and the one way the file tools open that location.

:func:`confine` is used by governance to judge a call and by the tools to run it, so both see
the same file. ``\\`` counts as ``/``; absolute, drive-letter and ``~`` paths are refused; ``..``
may fold inside the root but not climb out; symbolic links are resolved (``realpath``) and the
real path must stay inside. Text a person would not read as the path it is, is refused too:

* control characters (NUL, newline, escape, C1 controls) anywhere;
* percent-escapes whose decoding (repeated, for double encoding) contains a ``..`` segment, a
  leading ``/``, ``\\`` or ``~``, a control character or invalid UTF-8 (so overlong forms such as
  ``%c0%ae`` are refused); other escapes stay literal — ``100%25.txt`` is that file name;
* text whose Unicode NFKC form does the same (``．．／`` is refused); other compatibility
  characters stay literal — ``ｓｒｃ/a`` is not ``src/a``.

:func:`open_confined` opens a real path from :func:`confine` one folder at a time from the root,
never following a symbolic link (``O_NOFOLLOW`` with ``dir_fd``): ``confine`` resolved every link,
so a link met on the way was swapped in after the check, and the open fails with
:class:`PathChanged` instead of reaching wherever the new link points.

:class:`Access` is what governance adds on top: whether a real path may be read or written and
a URL fetched under the agent's capabilities. Tools ask it about every file and every URL they
reach, not only about their arguments.

This module imports nothing heavy: governance (which must not load langchain) uses it too.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import unicodedata
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote_to_bytes

from framework.errors import PathChanged, PathRefused
from framework.spec.common import shown

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# Opening relative to a folder's descriptor is what makes the walk race-free; Windows has no
# dir_fd (and creating links there needs privileges), so it opens the checked path directly.
_WALKS = bool(_NOFOLLOW) and os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd


class Access(Protocol):
    """The capability rules a builtin tool applies to everything it touches (governance provides them).

    Each method returns why the thing may not be touched — the reason a direct call gets — or
    None when it may.
    """

    def path(self, rel: str, *, write: bool) -> str | None:
        """Whether the real path ``rel`` (from :func:`confine`) may be read, or written."""
        ...

    def url(self, url: str) -> str | None:
        """Whether ``url`` may be fetched (the first URL of a request and every redirect)."""
        ...


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
    # In strings, not pathlib: governance and the tool confine every file argument, each time.
    # normcase: on Windows, as pathlib compared there, without regard to case ('/' becomes '\\').
    raw = str(root)
    joined = (raw if raw.endswith(os.sep) else raw + os.sep) + rel  # rel is relative (checked above)
    base = os.path.normcase(raw)
    inside = base if base.endswith(os.sep) else base + os.sep
    folded = os.path.normcase(os.path.normpath(joined))
    if folded != base and not folded.startswith(inside):
        raise PathRefused(f"path {shown(path)} is outside the project root; '..' may not climb out of it")
    real = os.path.realpath(joined)
    within = os.path.normcase(real)
    if within == base:
        return "."
    if not within.startswith(inside):
        raise PathRefused(f"path {shown(path)} leads outside the project root through a symbolic link")
    return real[len(inside) :].replace(os.sep, "/")


def open_confined(root: Path, rel: str, flags: int = os.O_RDONLY, *, make_folders: bool = False) -> int:
    """A descriptor of ``rel`` (a real path from :func:`confine`), opened from ``root`` without
    following any symbolic link; ``make_folders`` creates missing folders on the way.

    Raises :class:`PathChanged` when a part of the path is a link now, ``OSError`` as ``os.open`` does.
    """
    if not _WALKS:
        if make_folders:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
        return os.open(root / rel, flags, 0o666)
    names = [] if rel == "." else rel.split("/")
    folder = os.open(root, os.O_RDONLY | _DIRECTORY)
    if not names:
        return folder
    try:
        for depth, name in enumerate(names[:-1], start=1):
            if make_folders:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=folder)
            inner = _open_at(folder, name, os.O_RDONLY | _DIRECTORY, rel, "/".join(names[:depth]))
            os.close(folder)
            folder = inner
        return _open_at(folder, names[-1], flags, rel, rel)
    finally:
        os.close(folder)


def make_folders_confined(root: Path, rel: str) -> None:
    """Create the folder ``rel`` (a real path from :func:`confine`) and the missing ones above it,
    from ``root`` without following any symbolic link, as :func:`open_confined` does on its way."""
    if rel in ("", "."):
        return
    if not _WALKS:
        (root / rel).mkdir(parents=True, exist_ok=True)
        return
    os.close(open_confined(root, f"{rel}/.", os.O_RDONLY | _DIRECTORY, make_folders=True))


def _open_at(folder: int, name: str, flags: int, rel: str, part: str) -> int:
    """``name`` in the open ``folder``, not followed if it is a link (``part``: the path up to it)."""
    try:
        return os.open(name, flags | _NOFOLLOW, 0o666, dir_fd=folder)
    except OSError as exc:
        if _is_link(name, folder):
            raise PathChanged(
                f"path {shown(rel)} changed after it was checked: {shown(part)} is now a symbolic link, "
                "which is not followed; run the tool again to judge the new path"
            ) from exc
        raise


def scan_confined(root: Path, rel: str) -> list[tuple[str, bool]]:
    """The entries of the folder ``rel`` (a real path from :func:`confine`) as (name, is a folder),
    the folder opened like :func:`open_confined` opens a file."""
    if not _WALKS:
        with os.scandir(root / rel) as entries:
            return [(e.name, e.is_dir()) for e in entries]
    folder = open_confined(root, rel, os.O_RDONLY | _DIRECTORY)
    try:
        # Scanning the descriptor: the entries are those of the folder that was opened, whatever
        # its path names now.
        with os.scandir(folder) as entries:
            return [(e.name, e.is_dir()) for e in entries]
    finally:
        os.close(folder)


def _is_link(name: str, folder: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:  # gone as well: the caller reports the open's own error
        return False
