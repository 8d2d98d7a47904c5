"""Shell capability: a command line is allowed only when an allow pattern matches all of it.

The ``shell`` tool splits its command line with ``shlex`` and runs the program directly, never
through a shell, so ``;``, ``|`` or ``$(...)`` would reach the program as plain words. A command
carrying them is still almost always an injection attempt or a misunderstanding, so governance
refuses them. The rules, in order:

1. the command is a non-empty string without control characters other than tabs (NUL, ``\\r``
   and ``\\n`` included);
2. it splits with ``shlex`` (unbalanced quotes are refused with the parse error);
3. some pattern of ``capabilities.shell.allow`` matches the whole command line, runs of blanks
   collapsed to one space in both. In a pattern ``*`` matches any run of characters and ``?``
   one character — except shell metacharacters: ``;`` ``&`` (so ``&&``) ``|`` (so ``||``)
   backtick ``>`` ``<`` (so ``>>`` and ``<(``) and the pairs ``$(`` ``${``, which only a
   pattern's literal text can match. So ``pytest *`` allows ``pytest -q tests`` but not
   ``pytest -q; rm x``, and a command needing ``>`` as an argument needs a pattern spelling
   ``>`` where it appears. Metacharacters count wherever they are, *inside quotes too*:
   ``echo "a; b"`` is refused by ``echo *`` — the simple rule a reader can check at a glance.
   A pattern ending in `` *`` also matches the command without arguments (``pytest *`` allows
   ``pytest``); a pattern without wildcards matches exactly that command line;
4. when the pattern's first word has no wildcard, it must also be the program that runs (the
   first word after ``shlex``), so quoting cannot glue a different program name together.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Sequence

from framework.runtime.governance.calls import Decision, ToolCall, allow, deny, shown
from framework.runtime.governance.matching import collapse_blanks
from framework.spec.capabilities import Capabilities

RULE = "capabilities.shell.allow"

_META = re.compile(r"&&|\|\||>>|\$\(|\$\{|[;&|`<>]")
"""Metacharacters as the user reads them: the longer operators first, so ``&&`` is named as such."""
_FREE = r"(?:(?!\$[({])[^;&|`<>\r\n\x00])"
"""One character a wildcard may stand for: anything but a metacharacter."""
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {"\x00": "a NUL byte", "\n": "a newline", "\r": "a carriage return"}


@functools.lru_cache(maxsize=1024)
def shell_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression for an allow pattern (see the module docstring)."""
    text = collapse_blanks(pattern)
    bare = text.endswith(" *")  # 'pytest *' allows a bare 'pytest' too
    parts = []
    for char in text.removesuffix(" *") if bare else text:
        if char == "*":
            parts.append(_FREE + "*")
        elif char == "?":
            parts.append(_FREE)
        else:
            parts.append(re.escape(char))
    if bare:
        parts.append(f"(?: {_FREE}*)?")
    return re.compile("".join(parts))


@functools.lru_cache(maxsize=1024)
def _program(pattern: str) -> str | None:
    """The program a pattern names: its first word as ``shlex`` reads it, if that has no wildcard."""
    try:
        words = shlex.split(pattern)
    except ValueError:
        return None
    first = words[0] if words else ""
    return None if not first or "*" in first or "?" in first else first


def matching_pattern(command: str, argv: Sequence[str], patterns: Sequence[str]) -> str | None:
    """The first pattern allowing ``command`` (already checked for control characters), if any."""
    line = collapse_blanks(command)
    for pattern in patterns:
        if not shell_pattern(pattern).fullmatch(line):
            continue
        program = _program(pattern)
        if program is None or argv[0] == program:
            return pattern
    return None


def _suggestion(argv: Sequence[str]) -> str:
    return f"{argv[0]} *" if len(argv) > 1 else argv[0]


def _metacharacters(command: str) -> list[str]:
    return list(dict.fromkeys(_META.findall(command)))


def check_shell(call: ToolCall, caps: Capabilities | None) -> Decision:
    """The shell capability check (rules 1–4 of the module docstring)."""
    command = call.args.get("command")
    if not isinstance(command, str):
        return deny("a shell call needs a 'command' argument holding one command line as a string", RULE)
    if control := _CONTROL.search(command):
        char = control.group()
        name = _CONTROL_NAMES.get(char, f"the control character {char!r}")
        return deny(
            f"command {shown(command)} contains {name}; give one command line per call, "
            "without control characters (no shell runs it, so lines cannot be chained)",
            RULE,
        )
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return deny(f"cannot split the command line {shown(command)}: {exc}; balance its quotes", RULE)
    if not argv:
        return deny("the command line is empty; give the program to run and its arguments", RULE)
    patterns = [] if caps is None else caps.shell.allow
    if pattern := matching_pattern(command, argv, patterns):
        return allow(f"command matches {pattern!r} in {RULE}", RULE)
    meta = _metacharacters(command)
    if meta:
        names = ", ".join(repr(m) for m in meta)
        return deny(
            f"command {shown(command)} contains the shell metacharacter(s) {names}, which no pattern in "
            f"{RULE} spells out; no shell runs the command, so run one program per call without them, "
            "or add a pattern to capabilities.shell.allow that contains them literally where they appear",
            RULE,
        )
    hint = _suggestion(argv)
    if caps is None:
        return deny(
            f"command {shown(command)} is not allowed: the agent declares no capabilities; "
            f"add capabilities: {{shell: {{allow: [{hint!r}]}}}}",
            RULE,
        )
    listed = ", ".join(repr(p) for p in patterns) or "none"
    return deny(
        f"command {shown(command)} matches no pattern in {RULE} ({listed}); add a pattern such as {hint!r}",
        RULE,
    )
