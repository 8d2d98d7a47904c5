"""Workflow templates: ``{{ input }}``, ``{{ steps.ID.output }}``, ``{{ request.message_id }}`` and
``{{ request.metadata.KEY }}``, in step inputs, tool args, gate and ask messages, artifacts and outputs."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage

from framework.spec.workflow import REQUEST_FIELD, STEP_OUTPUT, TEMPLATE


def render_template(
    text: str, *, input: str, outputs: Mapping[str, str], request: Mapping[str, Any] | None = None
) -> str:
    """Replace each template expression in ``text``.

    A step that has not run, and a request field the message did not carry, render as the
    empty string. The loader has already refused any other expression, so one that still
    turns up is left as written.
    """

    def substitute(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr == "input":
            return input
        ref = STEP_OUTPUT.match(expr)
        if ref is not None:
            return outputs.get(ref.group(1), "")
        if REQUEST_FIELD.match(expr):
            return request_value(request or {}, expr.removeprefix("request."))
        return match.group(0)

    return TEMPLATE.sub(substitute, text)


def request_value(request: Mapping[str, Any], path: str) -> str:
    """``message_id`` or ``metadata.a.b`` of the request, as text (JSON for a non-string value)."""
    value: Any = request
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return ""
        value = value[key]
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def input_text(messages: Sequence[AnyMessage]) -> str:
    """The text of the last human message: what ``{{ input }}`` stands for."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""
