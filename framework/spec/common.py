"""Building blocks shared by every spec model: the strict base class and value types."""

from __future__ import annotations

import functools
import re
import types
import typing
from decimal import Decimal
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from framework.errors import did_you_mean as did_you_mean  # the spec layer's callers import it from here


class Spec(BaseModel):
    """Base of every spec model: unknown keys are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """``max_turns: true`` is a mistake, not 1: pydantic would accept it, the spec does not."""
        if isinstance(value, bool) and info.field_name is not None:
            expected = _numeric_fields(cls).get(info.field_name)
            if expected:
                raise fail(
                    "bool_for_number", "expected {expected}, got {value}", expected=expected, value=str(value).lower()
                )
        return value


@functools.cache
def _numeric_fields(model: type[BaseModel]) -> dict[str, str]:
    """Fields of ``model`` that take a number but not a boolean -> "an integer" or "a number"."""
    out = {}
    for name, field in model.model_fields.items():
        if any(isinstance(m, BeforeValidator) for m in field.metadata):
            continue  # a Duration or Money says itself what it expects
        kinds = _plain_types(field.annotation)
        if bool not in kinds and (int in kinds or float in kinds):
            out[name] = "a number" if float in kinds else "an integer"
    return out


def _plain_types(tp: Any) -> set[Any]:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        inner, *meta = typing.get_args(tp)
        return {object} if any(isinstance(m, BeforeValidator) for m in meta) else _plain_types(inner)
    if origin in (Union, types.UnionType):
        return {t for arg in typing.get_args(tp) for t in _plain_types(arg)}
    return {tp}


def string_form(*examples: str) -> ConfigDict:
    """Config for a model that may also be written as a string: its JSON Schema says so."""

    def extend(schema: dict[str, Any]) -> None:
        as_object = dict(schema)
        schema.clear()
        schema["anyOf"] = [{"type": "string", "examples": list(examples)}, as_object]

    return ConfigDict(json_schema_extra=extend)


QUOTE_LIMIT = 120
"""Longest piece of caller-supplied text (a path, a command, a URL) quoted in a message."""


def shown(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` quoted with ``repr`` for a message, cut to ``limit`` characters (``…`` marks the cut)."""
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + "…"


def fail(kind: str, message: str, *, hint: str = "", **ctx: Any) -> PydanticCustomError:
    """A validation error whose message reaches the user verbatim, formatted with ``str.format(**ctx)``.

    Travelling on as context for the diagnostic: ``hint`` (what to change, e.g. a did-you-mean),
    ``column_offset`` (where in the value the problem is) and ``path`` (keys below the value
    that hold the problem, for a nested structure such as a JSON Schema).
    """
    extra: dict[str, Any] = {k: ctx[k] for k in ("column_offset", "path") if k in ctx}
    if hint:
        extra["hint"] = hint
    return PydanticCustomError(kind, message.format(**ctx), extra or None)


Version = Annotated[Literal[1], Field(description="Spec format version; 1 is the only one.")]

_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def _check_name(value: str) -> str:
    if not _NAME_RE.fullmatch(value):
        raise fail(
            "name",
            "invalid name {value!r}: use lowercase letters, digits, '-' and '_', starting with a letter",
            value=value,
        )
    return value


Name = Annotated[
    str,
    AfterValidator(_check_name),
    WithJsonSchema({"type": "string", "pattern": _NAME_RE.pattern}),
]
"""Agent, profile, skill and step identifiers."""

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _parse_duration(value: Any) -> float:
    if isinstance(value, bool):
        raise fail(
            "duration", "expected a duration like '30s', '10m' or '1h30m', got {value}", value=str(value).lower()
        )
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().replace(" ", "")
        parts = _DURATION_RE.findall(text)
        if "".join(n + u for n, u in parts) != text:
            raise fail(
                "duration",
                "invalid duration {value!r}: write a number with a unit (ms, s, m, h, d), like '30s' or '1h30m'",
                value=value,
            )
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    else:
        raise fail("duration", "expected a duration like '30s', '10m' or '1h30m', got {value!r}", value=value)
    if seconds != seconds:  # NaN
        raise fail("duration", "expected a duration like '30s', '10m' or '1h30m', got {value!r}", value=value)
    if seconds <= 0:
        raise fail("duration", "a duration must be greater than zero, got {value!r}", value=value)
    if seconds > 30 * 86400:
        raise fail("duration", "duration {value!r} is longer than the 30-day maximum", value=value)
    return seconds


Duration = Annotated[
    float,
    BeforeValidator(_parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h|d))+$"},
                {"type": "number", "exclusiveMinimum": 0},
            ],
            "description": "A duration: '500ms', '30s', '10m', '1h30m', '2d', or seconds as a number.",
        }
    ),
]
"""A duration in seconds, written ``30s``, ``10m``, ``1h30m`` or a number of seconds."""

_MONEY_RE = re.compile(r"^\$?\s*(\d+(?:\.\d+)?)\s*(?:usd|USD)?$")


def _parse_money(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise fail("money", "expected an amount in US dollars like 0.50, got {value}", value=str(value).lower())
    if isinstance(value, int | float):
        amount = Decimal(str(value))
    elif isinstance(value, str) and (m := _MONEY_RE.match(value.strip())):
        amount = Decimal(m.group(1))
    else:
        raise fail(
            "money",
            "invalid amount {value!r}: write US dollars as a number, like 0.50 or '$0.50'",
            value=value,
        )
    if not amount.is_finite():
        raise fail("money", "invalid amount {value!r}: write US dollars as a finite number, like 0.50", value=value)
    if amount < 0:
        raise fail("money", "an amount must be zero or more, got {value!r}", value=value)
    return amount


Money = Annotated[
    Decimal,
    BeforeValidator(_parse_money),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"^\$?\d+(\.\d+)?( ?USD)?$"},
            ],
            "description": "US dollars: 0.50, '$0.50' or '0.50 USD'.",
        }
    ),
]


def _compile_regex(value: Any) -> re.Pattern[str]:
    if isinstance(value, re.Pattern):
        return value
    if not isinstance(value, str):
        raise fail("regex", "expected a regular expression string, got {value!r}", value=value)
    try:
        return re.compile(value)
    except re.error as exc:
        raise fail(
            "regex",
            "invalid regular expression: {error} at position {pos}",
            error=exc.msg,
            pos=exc.pos or 0,
            column_offset=exc.pos or 0,
        ) from exc


@functools.lru_cache(maxsize=1024)
def text_glob(pattern: str) -> re.Pattern[str]:
    """The regular expression for a text glob (profile rules, contracts): ``*`` any characters
    (``/`` and newlines too), ``?`` one, the rest literal; it must match the whole text."""
    parts = []
    for char in pattern:
        if char == "*":
            parts.append(".*")
        elif char == "?":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


Regex = Annotated[
    re.Pattern[str],
    BeforeValidator(_compile_regex),
    WithJsonSchema({"type": "string", "format": "regex"}),
]
"""A regular expression, compiled when the project loads."""

PositiveInt = Annotated[int, Field(ge=1, le=1_000_000_000_000)]

Action = Literal["allow", "ask", "deny"]
CapabilityClass = Literal["fs.read", "fs.write", "shell", "network", "agent", "mcp"]
