"""JSON text as every wire takes it in: bytes become values here, strictly, once per message.

RFC 8259 leaves a few texts to each parser's taste, and Python's ``json`` accepts some that no
other layer of ours can carry: a2a-sdk's protobuf types, the task store and our own answers
then fail on them later, far from the request (an ``Infinity`` stored in a task made every later
``ListTasks`` fail). So every HTTP body, stdio line and ACP line is decoded by :func:`decode`:

* bytes must be UTF-8 (a wire never guesses an encoding);
* ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON;
* nesting deeper than :data:`MAX_DEPTH` is refused (Python's own recursion limit would
  otherwise answer with an internal error, and protobuf's at a depth of 100).

Values that are valid JSON but do not survive a round trip through the rest of the system are
found by :func:`unrepresentable`, so the caller can answer with the request's id ("invalid
params"): a number outside the range of a double (``1e999``), an integer of more than
:data:`MAX_INT_DIGITS` digits or beyond ±2**53 (A2A data travels as protobuf ``Struct``, whose
numbers are doubles), and a string with an unpaired surrogate escape (``"\\ud800"``, which no
UTF-8 output can write). Only the standard library is used: ``ca run --stdio`` imports this
before anything else.
"""

from __future__ import annotations

import json
import math
from typing import Any, BinaryIO

MAX_DEPTH = 64
"""How deeply arrays and objects may nest in one message."""

MAX_INT_DIGITS = 4300
"""Python's own limit for converting digits to an integer (``sys.get_int_max_str_digits``)."""

MAX_EXACT_INT = 2**53
"""Integers beyond ±2**53 are not exact in a double, the number type of A2A data."""


class JsonTextError(ValueError):
    """The text is not JSON this server accepts (JSON-RPC: -32700 parse error)."""


class Unrepresentable:
    """A number in the text that no Python int or finite float can hold; kept as its text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Unrepresentable({self.text[:20]!r})"


def _parse_int(text: str) -> int | Unrepresentable:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        return Unrepresentable(text)
    return int(text)


def _parse_float(text: str) -> float | Unrepresentable:
    value = float(text)
    return value if math.isfinite(value) else Unrepresentable(text)


def _parse_constant(name: str) -> Any:
    raise JsonTextError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)


def decode(raw: bytes | str) -> Any:
    """The value of one JSON text; raises :class:`JsonTextError` with a one-line reason."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonTextError(f"the text is not UTF-8 (byte {exc.start}: {exc.reason})") from None
    raw = raw.removeprefix("\ufeff")
    try:
        value = _DECODER.decode(raw)
    except RecursionError:
        raise JsonTextError(f"arrays and objects nest deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise JsonTextError(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    _check_depth(value)
    return value


def _check_depth(value: Any) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            raise JsonTextError(f"arrays and objects nest deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def unrepresentable(value: Any, where: str = "params") -> str | None:
    """A one-line reason naming the first value under ``value`` that would not survive being stored
    and sent back (see the module's docstring), or None when every value is safe."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return f"{path}: a string with an unpaired surrogate escape (\\ud800-\\udfff) is not Unicode text"
        elif isinstance(item, Unrepresentable):
            return f"{path}: the number {_short(item.text)} is out of range; send it as a string"
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_EXACT_INT:
            return (
                f"{path}: the integer {_short(str(item))} is beyond ±2**53 and would lose digits; send it as a string"
            )
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                if not _encodable(key):
                    return f"{path}: a key with an unpaired surrogate escape (\\ud800-\\udfff) is not Unicode text"
                stack.append((child, path + _segment(key)))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in reversed(list(enumerate(item))))
    return None


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _segment(key: str) -> str:
    """``.key`` for a plain key, else the key as a (short) JSON string: a reason stays on one line."""
    return f".{key}" if key.isidentifier() and len(key) <= 40 else f"[{json.dumps(key[:40])}]"


def _short(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} characters)"


def read_line(stream: BinaryIO, limit: int) -> bytes | int:
    """The next line of a newline-delimited stream (b"" at its end), or, for a line longer than
    ``limit`` bytes, its length: the rest of that line is read and dropped, never kept."""
    line = stream.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line
    size = len(line)
    while line and not line.endswith(b"\n"):
        line = stream.readline(1 << 16)
        size += len(line)
    return size
