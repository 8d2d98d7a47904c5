"""Tests on a step's output for routers and loops: contains, regex, json_path (+ equals) and label."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from framework.spec.workflow import Condition

Classify = Callable[[str, list[str]], Awaitable[str]]
"""(text, labels) -> the label that fits the text best."""

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)```", re.DOTALL)


async def first_label_in(text: str, labels: list[str]) -> str:
    """The default classifier: the first label found in ``text`` (ignoring case), else the first label."""
    lowered = text.lower()
    return next((label for label in labels if label.lower() in lowered), labels[0])


async def label_or_other(text: str, labels: list[str]) -> str:
    """The default for a loop's ``until: {label: X}`` (labels ``[X, "other"]``): X when found in ``text``."""
    return labels[0] if labels[0].lower() in text.lower() else labels[-1]


class LazyLabel:
    """The label of one text, asked of the classifier at most once and only when a condition needs it."""

    def __init__(self, classify: Classify, text: str, labels: list[str]) -> None:
        self._classify = classify
        self._text = text
        self._labels = labels
        self._label: str | None = None

    async def __call__(self) -> str:
        """Classify on first use; later calls return the same label."""
        if self._label is None:
            self._label = await self._classify(self._text, self._labels)
        return self._label


def json_lookup(text: str, path: str) -> tuple[bool, Any]:
    """Follow a dotted path (``a.b.0.c``) into ``text`` read as JSON: (found, value).

    A ```` ```json ```` fence around the document is tolerated, since models like to add one.
    """
    fenced = _FENCE.search(text)
    try:
        value: Any = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return False, None
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _equal(found: Any, expected: Any) -> bool:
    # JSON `true` must not equal YAML `1` (Python says True == 1).
    if isinstance(found, bool) or isinstance(expected, bool):
        return found is expected
    return bool(found == expected)


async def holds(condition: Condition, text: str, label: Callable[[], Awaitable[str]]) -> bool:
    """Whether ``condition`` holds for ``text``; ``label`` gives the classifier's label when one is needed."""
    if condition.contains is not None:
        return condition.contains in text
    if condition.regex is not None:
        return condition.regex.search(text) is not None
    if condition.json_path is not None:
        found, value = json_lookup(text, condition.json_path)
        return found and (condition.equals is None or _equal(value, condition.equals))
    return await label() == condition.label
