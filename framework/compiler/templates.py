"""``{{ input }}`` and ``{{ steps.ID.output }}`` in workflow inputs, tool args, gate messages and outputs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from langchain_core.messages import AnyMessage, HumanMessage

from framework.spec.workflow import STEP_OUTPUT, TEMPLATE


def render_template(text: str, *, input: str, outputs: Mapping[str, str]) -> str:
    """Replace each ``{{ input }}`` and ``{{ steps.ID.output }}`` in ``text``.

    A step that has not run renders as the empty string. The loader has already refused any
    other expression, so one that still turns up is left as written.
    """

    def substitute(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr == "input":
            return input
        ref = STEP_OUTPUT.match(expr)
        if ref is None:
            return match.group(0)
        return outputs.get(ref.group(1), "")

    return TEMPLATE.sub(substitute, text)


def input_text(messages: Sequence[AnyMessage]) -> str:
    """The text of the last human message: what ``{{ input }}`` stands for."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""
