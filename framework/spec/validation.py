"""Validate located data against a spec model, turning pydantic's errors into Diagnostics."""

from __future__ import annotations

import types
import typing
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


def validate(model: type[M], data: LMap, *, base: tuple[str | int, ...] = ()) -> tuple[M | None, list[Diagnostic]]:
    """The model instance, or None and one diagnostic per problem (all of them)."""
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, [_diagnostic(model, data, err, base) for err in exc.errors(include_url=False)]


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


def _diagnostic(model: type[BaseModel], data: LMap, err: ErrorDetails, base: tuple[str | int, ...]) -> Diagnostic:
    loc_parts, _ = _resolve(model, tuple(err["loc"]))
    kind = err["type"]
    ctx = err.get("ctx") or {}
    hint = ""
    if kind == "extra_forbidden":
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
        where, path = locate(data, loc_parts)
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
        elif kind in ("too_short", "too_long"):
            message = err["msg"][0].lower() + err["msg"][1:]
        else:
            message = err["msg"]
            if message.startswith("Value error, "):
                message = message.removeprefix("Value error, ")
        offset = ctx.get("column_offset")
        if where is not None and isinstance(offset, int) and offset:
            where = Loc(where.file, where.line, where.column + offset)
    where = where or data.loc
    return Diagnostic(
        str(where.file),
        where.line,
        where.column,
        message,
        key_path=format_path(tuple(base) + tuple(path)),
        hint=hint,
    )


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


def _resolve(model: type[BaseModel], loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], list[str]]:
    """Walk the model's types along pydantic's ``loc``.

    Returns the path in the user's data (union tags removed) and the keys allowed in
    the mapping at the end of it (for did-you-mean on an unknown key).
    """
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
    fields: list[str] = []
    for tp in candidates:
        for _, cls in _members(tp):
            if isinstance(cls, type) and issubclass(cls, BaseModel):
                fields.extend(n for n in cls.model_fields if n not in fields)
    return tuple(path), fields
