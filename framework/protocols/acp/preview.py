"""What a file held before ``fs.write`` replaces it: the old side of the diff an editor shows.

The preview is read when the tool call starts, before governance has judged the path, so it
goes through the one confinement the tools use (:func:`~framework.compiler.confine.confine`,
then :func:`~framework.compiler.confine.open_confined`): a path that is refused, leaves the
project (``..``, an absolute path, a symbolic link pointing out) or turns into a link after the
check gets no preview, and nothing outside the project is opened. A preview is at most
:data:`PREVIEW_LIMIT` bytes of UTF-8 text from a regular file; anything else gets none.
Callers run :func:`before_write` in a thread (it does file I/O).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from framework.compiler.confine import confine, open_confined
from framework.errors import PathChanged, PathRefused

PREVIEW_LIMIT = 256 * 1024
"""The largest old file (in bytes) whose text is sent as the diff's ``oldText``."""

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO in the project must not block the open


@dataclass(frozen=True)
class Before:
    """The file's text before the write; ``text`` is None when there was no file (a new file)."""

    text: str | None


def before_write(root: Path, path: object) -> Before | None:
    """The old text of ``path`` (relative to the project ``root``), or None when no preview is shown."""
    real_root = Path(os.path.realpath(root))
    try:
        rel = confine(real_root, path)
        fd = open_confined(real_root, rel, os.O_RDONLY | _NONBLOCK)
    except FileNotFoundError:
        return Before(None)
    except (PathRefused, PathChanged, OSError):
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        data = file.read(PREVIEW_LIMIT + 1)
    if len(data) > PREVIEW_LIMIT:
        return None
    try:
        return Before(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None
