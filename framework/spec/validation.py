"""Validate located data against a spec model, turning pydantic's errors into Diagnostics."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, Union

from pydantic import BaseModel, Tag, ValidationError
from pydantic_core import ErrorDetails

from framework.errors import Diagnostic
from framework.spec.common import did_you_mean
from framework.spec.source import LMap, Loc, format_path, locate

M = TypeVar("M", bound=BaseModel)

_TYPE_NAMES = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def validate(
    model: type[M],
    data: LMap,
    *,
    base: tuple[str | int, ...] = (),
    texts: Mapping[Path, str] | None = None,
) -> tuple[M | None, list[Diagnostic]]:
    """The model instance, or None and one diagnostic per problem (all of them).

    ``texts`` (file -> source text) lets a problem inside a value (a regex error) point
    at its exact column even when the value is quoted or has escapes.
    """
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, [_diagnostic(model, data, err, base, texts or {}) for err in exc.errors(include_url=False)]


def shift(where: Loc, offset: int, texts: Mapping[Path, str]) -> Loc:
    """The position of character ``offset`` of the string value that starts at ``where``.

    Follows the value's source text: quotes, escapes (``\\d`` is one character of the
    value, two of the file) and ``|`` / ``>`` block scalars. When the text is not at
    hand, or the value spans lines in a way that cannot be followed, ``where`` itself.
    """
    if offset <= 0:
        return where
    lines = texts.get(where.file, "").splitlines()
    if not 0 < where.line <= len(lines):
        return where
    line = lines[where.line - 1]
    start = where.column - 1
    if line[start : start + 1] in ("|", ">"):
        return _block_shift(where, offset, lines)
    quote = line[start - 1] if start > 0 and line[start - 1] in "'\"" else ""
    i, n = start, 0
    while i < len(line) and n < offset:
        if quote == "'" and line.startswith("''", i):
            i += 2
        elif quote == '"' and line[i] == "\\":
            i += {"x": 4, "u": 6, "U": 10}.get(line[i + 1 : i + 2], 2)
        elif quote and line[i] == quote:
            return where  # the value goes on past the closing quote: cannot follow it
        else:
            i += 1
        n += 1
    if n < offset:
        return where  # the value continues on the next lines
    return Loc(where.file, where.line, i + 1)


def _block_shift(where: Loc, offset: int, lines: list[str]) -> Loc:
    body = lines[where.line :]
    indents = [len(text) - len(text.lstrip(" ")) for text in body if text.strip()]
    if not indents:
        return where
    indent = indents[0]
    for number, text in enumerate(body, start=where.line + 1):
        if text.strip() and len(text) - len(text.lstrip(" ")) < indent:
            break
        content = text[indent:]
        if offset <= len(content):
            return Loc(where.file, number, indent + offset + 1)
        offset -= len(content) + 1
    return where


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)


def _diagnostic(
    model: type[BaseModel],
    data: LMap,
    err: ErrorDetails,
    base: tuple[str | int, ...],
    texts: Mapping[Path, str],
) -> Diagnostic:
    loc_parts, _ = _resolve(model, tuple(err["loc"]))
    kind = err["type"]
    ctx = err.get("ctx") or {}
    hint = ""
    misspelt = _misspelt_tag(model, tuple(err["loc"]), err["input"])
    if misspelt is not None:
        # {pyhton: ...} in a union told apart by a key: name the misspelt key.
        key, hint = misspelt
        where, path = locate(data, (*loc_parts, key), key=True)
        message = f"unknown key {key!r}"
    elif kind == "extra_forbidden":
        where, path = locate(data, loc_parts, key=True)
        key = str(loc_parts[-1])
        _, allowed = _resolve(model, tuple(err["loc"])[:-1])
        suggestion = did_you_mean(key, allowed)
        message = f"unknown key {key!r}"
        if suggestion:
            hint = suggestion
        elif allowed:
            hint = "allowed keys: " + ", ".join(sorted(allowed))
    elif kind == "missing":
        where, path = locate(data, loc_parts)
        message = f"missing required key {loc_parts[-1]!r}"
        path = [*path, loc_parts[-1]]
    else:
        sub = ctx.get("path")
        where, path = locate(data, (*loc_parts, *sub) if isinstance(sub, list | tuple) else loc_parts)
        if kind in _TYPE_NAMES:
            message = f"expected {_TYPE_NAMES[kind]}, got {_describe(err['input'])}"
        elif kind == "literal_error":
            message = f"invalid value {_describe(err['input'])}: expected {ctx.get('expected', '')}"
            if isinstance(err["input"], str):
                choices = [c.strip(" '") for c in str(ctx.get("expected", "")).replace(" or ", ",").split(",")]
                hint = did_you_mean(err["input"], [c for c in choices if c])
        elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            bound = {
                "greater_than_equal": ">=",
                "greater_than": ">",
                "less_than_equal": "<=",
                "less_than": "<",
            }[kind]
            limit = next(iter(ctx.values()), "")
            message = f"value {_describe(err['input'])} is out of range: must be {bound} {limit}"
        elif kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
            message = _length_message(kind, ctx, err["input"])
        elif kind == "finite_number":
            message = f"expected a finite number, got {_describe(err['input'])}"
        else:
            message = err["msg"]
            if message.startswith("Value error, "):
                message = message.removeprefix("Value error, ")
            hint = str(ctx.get("hint") or "")
        offset = ctx.get("column_offset")
        if where is not None and isinstance(offset, int) and offset:
            where = shift(where, offset, texts)
    where = where or data.loc
    return Diagnostic(
        str(where.file),
        where.line,
        where.column,
        message,
        key_path=format_path(tuple(base) + tuple(path)),
        hint=hint,
    )


def _length_message(kind: str, ctx: Mapping[str, Any], value: Any) -> str:
    if kind.startswith("string"):
        if kind == "string_too_short" and ctx.get("min_length") == 1:
            return "must not be empty"
        bound = ctx.get("min_length") if kind == "string_too_short" else ctx.get("max_length")
        relation = "at least" if kind == "string_too_short" else "at most"
        return f"expected {relation} {bound} characters, got {len(value) if isinstance(value, str) else '?'}"
    short = kind == "too_short"
    bound = ctx.get("min_length") if short else ctx.get("max_length")
    items = "item" if bound == 1 else "items"
    return f"expected {'at least' if short else 'at most'} {bound} {items}, got {ctx.get('actual_length', '?')}"


def _misspelt_tag(model: type[BaseModel], loc: tuple[str | int, ...], value: Any) -> tuple[str, str] | None:
    """(key, did-you-mean) when ``value`` is a mapping that misspells the key telling a union's members apart."""
    if not isinstance(value, Mapping):
        return None
    tags = [tag for tp in _walk(model, loc)[1] for tag, _ in _members(tp) if tag is not None]
    if not tags or any(tag in value for tag in tags):
        return None
    for key in value:
        suggestion = did_you_mean(str(key), tags)
        if suggestion:
            return str(key), suggestion
    return None


def _members(tp: Any, tag: str | None = None) -> list[tuple[str | None, Any]]:
    """(union tag, class) for each concrete class behind Annotated / Optional / Union."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        inner, *meta = typing.get_args(tp)
        tags = [m.tag for m in meta if isinstance(m, Tag)]
        return _members(inner, tags[0] if tags else tag)
    if origin in (Union, types.UnionType):
        return [m for arg in typing.get_args(tp) for m in _members(arg)]
    return [(tag, tp)]


def resolve_path(model: type[BaseModel], loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Pydantic's ``loc`` of an error as a path in the user's data (union tags left out)."""
    return _resolve(model, loc)[0]


def _resolve(model: type[BaseModel], loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], list[str]]:
    """Walk the model's types along pydantic's ``loc``.

    Returns the path in the user's data (union tags removed) and the keys allowed in
    the mapping at the end of it (for did-you-mean on an unknown key).
    """
    path, candidates = _walk(model, loc)
    fields: list[str] = []
    for tp in candidates:
        for _, cls in _members(tp):
            if isinstance(cls, type) and issubclass(cls, BaseModel):
                fields.extend(n for n in cls.model_fields if n not in fields)
    return path, fields


def _walk(model: type[BaseModel], loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], list[Any]]:
    """The path in the user's data along pydantic's ``loc``, and the types expected at its end."""
    candidates: list[Any] = [model]
    path: list[str | int] = []
    for part in loc:
        members = [m for tp in candidates for m in _members(tp)]
        tagged = [cls for tag, cls in members if tag is not None and tag == part]
        if tagged and isinstance(part, str):
            candidates = tagged  # a discriminator tag, not a key of the data
            continue
        path.append(part)
        next_candidates: list[Any] = []
        for _, cls in members:
            origin = typing.get_origin(cls)
            if isinstance(cls, type) and issubclass(cls, BaseModel) and isinstance(part, str):
                field = cls.model_fields.get(part)
                if field is not None:
                    next_candidates.append(field.annotation)
            elif origin in (list, tuple) and isinstance(part, int):
                next_candidates.extend(typing.get_args(cls)[:1])
            elif origin is dict and isinstance(part, str):
                next_candidates.extend(typing.get_args(cls)[1:2])
        candidates = next_candidates
    return tuple(path), candidates
