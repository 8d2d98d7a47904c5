"""The matching half of ``fs.search``, run as a child process the parent can kill.

Python's ``re`` holds the interpreter while it matches and cannot be interrupted, so a pattern
with exponential backtracking would freeze the tool (and, through the GIL, the whole server).
:mod:`framework.compiler.fs_tools` checks which files may be searched, then runs :func:`main`
in a new interpreter with a wall-clock limit. The worker reads a job as JSON on stdin —
``root``, ``pattern``, ``files`` (real paths from ``confine`` that passed the capability check),
``limit``, ``file_limit``, ``line_chars`` — opens each file with
:func:`~framework.compiler.confine.open_confined` (no link followed), and writes an
:class:`Outcome` as JSON on stdout. It imports nothing heavy, to start in a few milliseconds.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from framework.compiler.confine import open_confined
from framework.errors import PathRefused

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


@dataclass
class Outcome:
    """What a search found: (file, line number, line) triples, whether it stopped at the limit,
    and how many files could not be read."""

    found: list[tuple[str, int, str]] = field(default_factory=list)
    stopped: bool = False
    unreadable: int = 0

    @classmethod
    def from_json(cls, data: bytes) -> Outcome:
        raw = json.loads(data)
        return cls([(str(f), int(n), str(t)) for f, n, t in raw["found"]], bool(raw["stopped"]), int(raw["unreadable"]))


def _text(root: Path, rel: str, file_limit: int) -> str | None:
    """The text of a regular file, or None for other files, binary files and files over ``file_limit``."""
    fd = open_confined(root, rel, os.O_RDONLY | _NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > file_limit:
            return None
        data = fh.read(file_limit + 1)
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def search(job: Mapping[str, Any]) -> Outcome:
    """Every line of the job's files that the pattern matches, up to its limit."""
    regex = re.compile(job["pattern"])
    root, limit, chars = Path(job["root"]), int(job["limit"]), int(job["line_chars"])
    outcome = Outcome()
    for rel in job["files"]:
        try:
            text = _text(root, rel, int(job["file_limit"]))
        except (OSError, PathRefused):  # gone, unreadable, or swapped for a link since the check
            outcome.unreadable += 1
            continue
        for number, line in enumerate((text or "").splitlines(), start=1):
            if regex.search(line):
                outcome.found.append((rel, number, line if len(line) <= chars else line[:chars] + "…"))
                if len(outcome.found) >= limit:
                    outcome.stopped = True
                    return outcome
    return outcome


def main() -> None:
    """Read a job from stdin, write its :class:`Outcome` to stdout."""
    json.dump(asdict(search(json.load(sys.stdin.buffer))), sys.stdout)
