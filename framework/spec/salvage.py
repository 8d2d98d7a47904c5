"""The valid part of a file that failed validation, so cross-file checks still see it.

A file with an unknown key or a bad value is reported where it is wrong; its other
references (an unknown agent, a call cycle, a missing python function, a duplicate name)
must be reported in the same run, not after the first errors are fixed. :func:`salvage`
leaves out each part pydantic refused (the key, the list item, then the mapping holding
it, until the rest validates) and validates what remains. The checker is told which
top-level keys lost something, so it does not report as missing what was only left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from framework.spec.source import LList, LMap, locate
from framework.spec.validation import resolve_path

M = TypeVar("M", bound=BaseModel)

MAX_ROUNDS = 12
"""Each round leaves out at least one part; real files converge in two or three."""


class PrunedList(LList):
    """A list with items left out: ``origin[i]`` is the index item ``i`` had in the file."""

    __slots__ = ("origin",)

    def __init__(self, source: LList) -> None:
        super().__init__(source.loc)
        self.origin: list[int] = []


@dataclass(frozen=True)
class Salvaged(Generic[M]):
    """A model built from the valid part of a file."""

    spec: M
    data: LMap
    """What was validated: the file's data without the refused parts (positions kept)."""
    dropped: frozenset[str]
    """Top-level keys under which something was left out."""
    lost_ids: frozenset[str]
    """Every ``id`` that was inside a left-out part (e.g. a workflow step's)."""


def salvage(model: type[M], data: LMap) -> Salvaged[M] | None:
    """``model`` from ``data`` without the parts it refuses, or None when nothing sensible remains.

    Nothing remains when the refusal is about the whole file (a missing or invalid ``name``,
    or a rule that spans keys).
    """
    pruned = _copy(data)
    assert isinstance(pruned, LMap)
    dropped: set[str] = set()
    lost: set[str] = set()
    for _ in range(MAX_ROUNDS):
        try:
            spec = model.model_validate(pruned)
        except ValidationError as exc:
            targets = {tuple(locate(pruned, resolve_path(model, tuple(e["loc"])))[1]) for e in exc.errors()}
            if () in targets:
                return None
            # Later list items first, so an index still names the same item when its turn comes.
            progress = False
            for path in sorted(targets, key=_order, reverse=True):
                removed = _remove(pruned, path)
                if removed is not _ABSENT:
                    progress = True
                    dropped.add(str(path[0]))
                    lost.update({removed} if path[-1] == "id" and isinstance(removed, str) else _ids(removed))
            if not progress:
                return None  # the refused parts cannot be told apart from the rest
            continue
        return Salvaged(spec, pruned, frozenset(dropped), frozenset(lost))
    return None


def original_path(data: Any, path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """``path`` in pruned data as the file numbers it (list indexes from before items were left out)."""
    out: list[str | int] = []
    current = data
    for part in path:
        if isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            out.append(current.origin[part] if isinstance(current, PrunedList) else part)
            current = current[part]
        elif isinstance(current, dict) and part in current:
            out.append(part)
            current = current[part]
        else:
            out.append(part)
            current = None
    return tuple(out)


_ABSENT = object()


def _order(path: tuple[str | int, ...]) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, p) if isinstance(p, int) else (1, p) for p in path)


def _remove(data: LMap, path: tuple[str | int, ...]) -> Any:
    """Take the value at ``path`` out of ``data``; the value, or _ABSENT when it is not there."""
    parent: Any = data
    for part in path[:-1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return _ABSENT
    last = path[-1]
    if isinstance(parent, LMap) and isinstance(last, str) and last in parent:
        parent.key_locs.pop(last, None)
        parent.value_locs.pop(last, None)
        return parent.pop(last)
    if isinstance(parent, PrunedList) and isinstance(last, int) and 0 <= last < len(parent):
        parent.item_locs.pop(last)
        parent.origin.pop(last)
        return parent.pop(last)
    return _ABSENT


def _copy(value: Any) -> Any:
    """A copy of located data whose mappings and lists can be pruned without touching the original."""
    if isinstance(value, LMap):
        out = LMap(value.loc)
        for key, item in value.items():
            out[key] = _copy(item)
        out.key_locs.update(value.key_locs)
        out.value_locs.update(value.value_locs)
        return out
    if isinstance(value, LList):
        copied = PrunedList(value)
        copied.extend(_copy(item) for item in value)
        copied.item_locs.extend(value.item_locs)
        copied.origin.extend(value.origin if isinstance(value, PrunedList) else range(len(value)))
        return copied
    return value


def _ids(value: Any) -> set[str]:
    """Every string under an ``id`` key in ``value``."""
    if isinstance(value, dict):
        found = {value["id"]} if isinstance(value.get("id"), str) else set()
        for item in value.values():
            found |= _ids(item)
        return found
    if isinstance(value, list):
        return {i for item in value for i in _ids(item)}
    return set()
