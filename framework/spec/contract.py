"""Contracts: what an agent must never do and must always do, checked by the runtime."""

from __future__ import annotations

import re
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from framework.spec.common import Regex, Spec, did_you_mean, fail


class ToolPattern(Spec):
    """A tool call: the tool's name (glob) and argument globs."""

    tool: str = Field(description="Tool name or glob, e.g. 'shell' or 'fs.*'.")
    args: dict[str, str] = Field(default_factory=dict, description="Argument name -> glob on its value.")


def _not_empty(pattern: re.Pattern[str] | None) -> re.Pattern[str] | None:
    if pattern is not None and not pattern.pattern:
        raise fail(
            "contract",
            "an empty `output_matches` matches every output",
            hint="write the pattern the output must (not) contain, like '(?i)password\\s*[:=]'",
        )
    return pattern


class MustNot(Spec):
    """Either a forbidden tool call (``tool`` + ``args``) or a forbidden output pattern."""

    tool: str | None = None
    args: dict[str, str] = Field(default_factory=dict)
    output_matches: Regex | None = None

    @field_validator("output_matches")
    @classmethod
    def _forbids_something(cls, value: re.Pattern[str] | None) -> re.Pattern[str] | None:
        value = _not_empty(value)
        if value is not None and value.search(""):
            raise fail(
                "contract",
                "must_not `output_matches` {pattern!r} matches an empty text, so it forbids every output",
                pattern=value.pattern,
                hint="make the pattern need at least one character (e.g. '+' instead of '*')",
            )
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        if (self.tool is None) == (self.output_matches is None):
            raise fail("contract", "a must_not rule needs exactly one of 'tool' or 'output_matches'")
        if self.args and self.tool is None:
            raise fail("contract", "'args' belongs with 'tool'")
        return self


class MustAlways(Spec):
    """A required tool call before completion, a JSON Schema for the output, or an output pattern."""

    tool_called: str | None = None
    args: dict[str, str] = Field(default_factory=dict)
    before: Literal["complete"] = "complete"
    output_schema: dict[str, Any] | None = None
    output_matches: Regex | None = None

    _output_matches_not_empty = field_validator("output_matches")(_not_empty)

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        kinds = [k for k in ("tool_called", "output_schema", "output_matches") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise fail(
                "contract",
                "a must_always rule needs exactly one of 'tool_called', 'output_schema' or 'output_matches'",
            )
        if self.args and self.tool_called is None:
            raise fail("contract", "'args' belongs with 'tool_called'")
        return self

    @field_validator("output_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_json_schema(value)


def check_json_schema(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` if it is a valid JSON Schema (draft 2020-12); else a validation error naming the problem."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError, best_match

    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        # "not valid under any of the given schemas" says nothing: take the deepest
        # alternative's reason instead ("'objekt' is not one of ['array', ...]").
        problem: Any = exc
        if exc.context:
            deepest = max(len(e.absolute_path) for e in exc.context)
            problem = best_match(e for e in exc.context if len(e.absolute_path) == deepest)
        hint = ""
        if problem.validator == "enum" and isinstance(problem.instance, str):
            hint = did_you_mean(problem.instance, [str(v) for v in problem.validator_value])
        raise fail(
            "json_schema",
            "invalid JSON Schema: {error}",
            error=problem.message,
            path=list(problem.absolute_path),
            hint=hint,
        ) from exc
    return value


class OnViolation(Spec):
    action: Literal["fail", "retry"] = Field(
        default="fail", description="fail the task, or explain the violation to the model and let it retry."
    )
    max_retries: int = Field(default=2, ge=0, le=10)


class Contract(Spec):
    must_not: list[MustNot] = Field(default_factory=list)
    must_always: list[MustAlways] = Field(default_factory=list)
    on_violation: OnViolation = Field(default_factory=OnViolation)
