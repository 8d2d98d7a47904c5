"""Matching a call against a ``{tool, args}`` pattern, as profile rules and contracts write them.

Tool names and argument values are matched with *text globs*: ``*`` matches any run of
characters (``/`` and newlines included), ``?`` any one character, everything else itself, and
the whole value must match (``git push*`` matches ``git push --force``, not ``echo git push``).
Patterns are case-sensitive.

An argument can be written several ways that mean the same thing to the tool, and a pattern
meant to catch it must not be dodged by rewriting it, so some arguments are matched in every
*reading* and a pattern matches when any reading does:

* ``path`` of an ``fs.*`` call: as given, and normalised (``\\`` as ``/``, ``.`` and ``..``
  folded, no leading ``./``) — ``./src/../.env`` is read as ``.env`` too;
* ``command`` of a ``shell`` call: as given, with runs of blanks collapsed, and as the words the
  program receives (``'git' push`` is read as ``git push`` too, since no shell runs it).

Any other value is matched as its text: a string as it is, anything else as compact JSON.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import Any

from framework.runtime.governance.calls import ToolCall
from framework.spec.common import text_glob

_BLANKS = re.compile(r"[ \t]+")


def glob_matches(pattern: str, text: str) -> bool:
    """Whether the text glob ``pattern`` matches all of ``text``."""
    return text_glob(pattern).fullmatch(text) is not None


def collapse_blanks(text: str) -> str:
    """``text`` with runs of spaces and tabs made one space, and none at either end."""
    return _BLANKS.sub(" ", text).strip(" ")


def value_text(value: Any) -> str:
    """An argument value as the text globs match: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def normal_path(path: str) -> str:
    """``path`` folded lexically the way the file tools read it (no file system access)."""
    folded = posixpath.normpath(path.replace("\\", "/")) if path else path
    return folded.removeprefix("./")


def readings(call: ToolCall, name: str) -> tuple[str, ...] | None:
    """Every reading of argument ``name`` of ``call`` (see the module docstring); None if it is missing."""
    if name not in call.args:
        return None
    text = value_text(call.args[name])
    found = [text]
    if name == "path" and call.capability in ("fs.read", "fs.write"):
        found.append(normal_path(text))
    elif name == "command" and call.capability == "shell":
        found.append(collapse_blanks(text))
        # Unbalanced quotes: the raw readings stand (the tool refuses to run such a line).
        with contextlib.suppress(ValueError):
            found.append(" ".join(shlex.split(text)))
    return tuple(dict.fromkeys(found))


def args_match(globs: Mapping[str, str], call: ToolCall) -> bool:
    """Whether every argument named in ``globs`` is present and some reading of it matches its glob."""
    for name, pattern in globs.items():
        values = readings(call, name)
        if values is None or not any(glob_matches(pattern, v) for v in values):
            return False
    return True


def call_matches(tool: str | None, globs: Mapping[str, str] | None, call: ToolCall) -> bool:
    """Whether ``call`` matches a ``tool`` glob (None: any tool) and the argument ``globs``."""
    if tool is not None and not glob_matches(tool, call.tool):
        return False
    return not globs or args_match(globs, call)


def describe(tool: str | None, globs: Mapping[str, str] | None, *, key: str = "tool") -> str:
    """A ``{tool: ..., args: {...}}`` pattern written back as the YAML flow mapping a user wrote."""
    parts = [] if tool is None else [f"{key}: {tool!r}"]
    if globs:
        inner = ", ".join(f"{name}: {pattern!r}" for name, pattern in globs.items())
        parts.append(f"args: {{{inner}}}")
    return "{" + ", ".join(parts) + "}"
