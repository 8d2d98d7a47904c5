"""Path confinement: the one function that turns a path argument into a real location inside the
project root.

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

This module imports nothing heavy: governance (which must not load langchain) uses it too.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote_to_bytes

from framework.spec.common import shown

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


class PathRefused(ValueError):
    """A path that no capability can allow: it leaves the project root or does not read as itself."""


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
