"""The project's ``.env`` file: ``NAME=value`` lines read with the standard library only.

One parser for every reader of ``.env``: the loader (values for ``${VAR}`` in the YAML) and the
ACP ``initialize`` fast path (is the model's key set?), which must answer before pydantic or
anything heavy is imported. The syntax is python-dotenv's, which the loader used before:

* ``NAME=value``, optionally after ``export``; blank lines and ``# comment`` lines are skipped;
* an unquoted value ends at a `` #`` comment and loses surrounding blanks; ``NAME= # note`` is empty;
* ``'single'`` quotes keep the text as written (``\\'`` and ``\\\\`` aside); ``"double"`` quotes
  also decode ``\\n``, ``\\t`` and the other C escapes; either may span lines;
* ``${OTHER}`` and ``${OTHER:-default}`` in a value take an earlier line's value, else the
  environment's, else the default (else nothing);
* a line that is none of these is skipped; ``NAME`` alone (no ``=``) sets nothing.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping

_BLANKS = re.compile(r"\s*")
_SPACE = re.compile(r"[^\S\r\n]*")
_EXPORT = re.compile(r"(?:export[^\S\r\n]+)?")
_QUOTED_NAME = re.compile(r"'([^']+)'")
_NAME = re.compile(r"([^=\#\s]+)")
_EQUALS = re.compile(r"=[^\S\r\n]*")
_SINGLE = re.compile(r"'((?:\\.|[^'\\])*)'", re.DOTALL)
_DOUBLE = re.compile(r'"((?:\\.|[^"\\])*)"', re.DOTALL)
_UNQUOTED = re.compile(r"[^\r\n]*")
_COMMENT = re.compile(r"(?:[^\S\r\n]*#[^\r\n]*)?")
_END_OF_LINE = re.compile(r"[^\S\r\n]*(?:\r\n|\n|\r|$)")
_REST_OF_LINE = re.compile(r"[^\r\n]*(?:\r|\n|\r\n)?")
_SINGLE_ESCAPES = re.compile(r"\\[\\']")
_DOUBLE_ESCAPES = re.compile(r"\\[\\'\"abfnrtv]")
_REFERENCE = re.compile(r"\$\{(?P<name>[^}:]*)(?::-(?P<default>[^}]*))?\}")


class _Malformed(Exception):
    """A line that is not a binding: it is skipped from where it went wrong to its end."""

    def __init__(self, at: int) -> None:
        self.at = at


def parse_env_file(text: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables ``text`` (a ``.env`` file's content) sets; ``environ`` fills ``${NAME}`` references."""
    text = text.removeprefix("\ufeff")
    values: dict[str, str | None] = {}
    pos = 0
    while pos < len(text):
        pos, binding = _binding(text, pos)
        if binding is not None:
            name, raw = binding
            # A later line sees the lines before it; a NAME without a value counts as empty.
            known = {**environ, **{k: v or "" for k, v in values.items()}}
            values[name] = None if raw is None else _expand(raw, known)
    return {name: value for name, value in values.items() if value is not None}


def _binding(text: str, pos: int) -> tuple[int, tuple[str, str | None] | None]:
    """The binding starting at ``pos`` (None for a comment, blank or malformed line) and where the next starts."""
    pos = _match(_BLANKS, text, pos).end()
    if pos >= len(text):
        return pos, None
    try:
        pos = _match(_EXPORT, text, pos).end()
        name: str | None = None
        if not text.startswith("#", pos):
            found = _match(_QUOTED_NAME if text.startswith("'", pos) else _NAME, text, pos)
            name, pos = found.group(1), found.end()
        pos = _match(_SPACE, text, pos).end()
        value: str | None = None
        if text.startswith("=", pos):
            equals = _match(_EQUALS, text, pos)
            pos = equals.end()
            if len(equals.group(0)) > 1 and text.startswith("#", pos):
                value = ""  # `NAME= # note`: empty, and the rest is a comment
            else:
                value, pos = _value(text, pos)
        pos = _match(_COMMENT, text, pos).end()
        pos = _match(_END_OF_LINE, text, pos).end()
    except _Malformed as bad:
        return _match(_REST_OF_LINE, text, bad.at).end(), None
    return pos, None if name is None else (name, value)


def _value(text: str, pos: int) -> tuple[str, int]:
    if text.startswith("'", pos):
        found = _match(_SINGLE, text, pos)
        return _decode(_SINGLE_ESCAPES, found.group(1)), found.end()
    if text.startswith('"', pos):
        found = _match(_DOUBLE, text, pos)
        return _decode(_DOUBLE_ESCAPES, found.group(1)), found.end()
    if pos >= len(text) or text[pos] in "\r\n":
        return "", pos
    found = _match(_UNQUOTED, text, pos)
    return re.sub(r"\s+#.*", "", found.group(0)).rstrip(), found.end()


def _match(pattern: re.Pattern[str], text: str, pos: int) -> re.Match[str]:
    found = pattern.match(text, pos)
    if found is None:
        raise _Malformed(pos)
    return found


def _decode(escapes: re.Pattern[str], value: str) -> str:
    return escapes.sub(lambda m: codecs.decode(m.group(0), "unicode-escape"), value)


def _expand(value: str, known: Mapping[str, str]) -> str:
    return _REFERENCE.sub(lambda m: known.get(m["name"], m["default"] or ""), value)
