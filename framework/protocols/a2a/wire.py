"""Field names on the A2A wire: A2A's JSON is camelCase (spec §5.5), so the data parts and
metadata CleverAgents adds to it are too (``callId``, ``stopReason``, ``usage.inputTokens``).

Only the field names we define change; values the user owns (a tool's ``args``, a gate's
``payload`` text) are passed as they are. ``ca run --json`` keeps Python's snake_case.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

EVENT_KEY = "caEvent"
"""The key of the data part of a WORKING status that carries a run event (tool call, result, step)."""

_UPPER = re.compile(r"_([a-z0-9])")
_LOWER = re.compile(r"(?<=[a-z0-9])([A-Z])")
_NESTED = ("usage",)
"""Fields whose own field names are ours too."""


def camel(name: str) -> str:
    return _UPPER.sub(lambda m: m.group(1).upper(), name)


def snake(name: str) -> str:
    return _LOWER.sub(lambda m: "_" + m.group(1).lower(), name)


def to_wire(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data``'s field names (and those of its ``usage``) in camelCase."""
    return {camel(k): to_wire(v) if k in _NESTED and isinstance(v, Mapping) else v for k, v in data.items()}


def from_wire(data: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`to_wire`: a remote CleverAgents server's fields, as our events name them."""
    return {snake(k): from_wire(v) if snake(k) in _NESTED and isinstance(v, Mapping) else v for k, v in data.items()}
