"""Read one YAML file into plain data that remembers where every key and value came from.

The loader never hands raw ruamel objects to later layers: a mapping becomes an
:class:`LMap` (a ``dict``) and a sequence an :class:`LList` (a ``list``), each carrying
the 1-based position of itself and of its children. Everything hostile is refused
here, before any model sees it: oversized files, non-UTF-8 bytes, tabs in
indentation, duplicate keys, alias-expansion bombs and absurd nesting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from framework.errors import Diagnostic

MAX_FILE_BYTES = 1024 * 1024
"""Config files above this size are refused unread (real ones are a few KB)."""
MAX_NODES = 100_000
"""Values visited while expanding aliases; a "billion laughs" file hits this at once."""
MAX_DEPTH = 64
"""Nesting depth of mappings and lists."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"


@dataclass(frozen=True, slots=True)
class Loc:
    """A 1-based position in a file."""

    file: Path
    line: int
    column: int


class LMap(dict[str, Any]):
    """A mapping read from YAML: ``key_locs[k]`` is where key ``k`` is, ``value_locs[k]`` its value."""

    __slots__ = ("key_locs", "loc", "value_locs")

    def __init__(self, loc: Loc) -> None:
        super().__init__()
        self.loc = loc
        self.key_locs: dict[str, Loc] = {}
        self.value_locs: dict[str, Loc] = {}


class LList(list[Any]):
    """A sequence read from YAML: ``item_locs[i]`` is where item ``i`` is."""

    __slots__ = ("item_locs", "loc")

    def __init__(self, loc: Loc) -> None:
        super().__init__()
        self.loc = loc
        self.item_locs: list[Loc] = []


class SourceError(Exception):
    """Raised inside this module; carries the diagnostic for the caller to collect."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


Interpolate = Callable[[str, Loc, str], str]
"""Called for each string value: (value, where it starts, raw source text of it) -> new value."""


def diag(loc: Loc, message: str, *, key_path: str = "", hint: str = "") -> Diagnostic:
    return Diagnostic(str(loc.file), loc.line, loc.column, message, key_path=key_path, hint=hint)


def read_text(path: Path) -> str:
    """The file's text, refusing what no config file should be."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SourceError(diag(Loc(path, 0, 0), f"cannot read file: {exc.strerror}")) from exc
    if size > MAX_FILE_BYTES:
        raise SourceError(
            diag(
                Loc(path, 0, 0),
                f"file is {size / 1_048_576:.1f} MiB; config files are limited to {MAX_FILE_BYTES // 1_048_576} MiB",
                hint="split it into several files, or move data out of the YAML",
            )
        )
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SourceError(
            diag(
                Loc(path, line, column),
                f"file is not valid UTF-8 (byte 0x{data[exc.start]:02x})",
                hint="save the file with UTF-8 encoding",
            )
        ) from exc
    return text.removeprefix("\ufeff")


_TAB_INDENT = re.compile(r"^( *)\t", re.MULTILINE)


def parse(path: Path, text: str, interpolate: Interpolate | None = None) -> Any:
    """Parse one YAML document into LMap / LList / scalars. Raises SourceError."""
    tab = _TAB_INDENT.search(text)
    if tab:
        line = text.count("\n", 0, tab.start()) + 1
        raise SourceError(
            diag(
                Loc(path, line, len(tab.group(1)) + 1),
                "tab character in indentation; YAML indents with spaces only",
                hint="replace the tab with spaces",
            )
        )
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise SourceError(diag(Loc(path, 1, 1), "file is empty", hint="add at least a `name:` key"))
    yaml = YAML(typ="safe", pure=True)
    try:
        node = yaml.compose(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        extra = f" ({exc.context})" if exc.context and exc.problem else ""
        raise SourceError(diag(Loc(path, line, col), f"invalid YAML: {problem}{extra}")) from exc
    except RecursionError as exc:
        raise SourceError(
            diag(Loc(path, 1, 1), f"structure is nested too deeply (more than {MAX_DEPTH} levels)")
        ) from exc
    except YAMLError as exc:
        raise SourceError(diag(Loc(path, 1, 1), f"invalid YAML: {exc}")) from exc
    if node is None:
        raise SourceError(diag(Loc(path, 1, 1), "file is empty", hint="add at least a `name:` key"))
    return _Converter(path, text, interpolate, yaml.constructor).convert(node, 0)


def position(node: Node, path: Path) -> Loc:
    """Where a node's content starts (inside the quotes for a quoted scalar)."""
    mark = node.start_mark
    column = mark.column + 1
    if isinstance(node, ScalarNode) and node.style in ('"', "'"):
        column += 1
    return Loc(path, mark.line + 1, column)


class _Converter:
    """Turns a composed node tree into located plain data, enforcing the limits."""

    def __init__(self, path: Path, text: str, interpolate: Interpolate | None, constructor: SafeConstructor) -> None:
        self.path = path
        self.text = text
        self.interpolate = interpolate
        self.visited = 0
        self.constructor = constructor

    def convert(self, node: Node, depth: int) -> Any:
        self.visited += 1
        if self.visited > MAX_NODES:
            raise SourceError(
                diag(
                    position(node, self.path),
                    f"document expands to more than {MAX_NODES:,} values (alias bomb?)",
                    hint="remove the nested aliases (&anchor / *alias)",
                )
            )
        if depth > MAX_DEPTH:
            raise SourceError(
                diag(
                    position(node, self.path),
                    f"structure is nested too deeply (more than {MAX_DEPTH} levels)",
                )
            )
        if isinstance(node, MappingNode):
            return self._mapping(node, depth)
        if isinstance(node, SequenceNode):
            result = LList(position(node, self.path))
            for item in node.value:
                result.item_locs.append(position(item, self.path))
                result.append(self.convert(item, depth + 1))
            return result
        return self._scalar(node)

    def _scalar(self, node: Node) -> Any:
        try:
            value = self.constructor.construct_object(node, deep=True)
        except YAMLError as exc:
            raise SourceError(diag(position(node, self.path), f"invalid value: {exc}")) from exc
        if isinstance(value, str) and self.interpolate is not None:
            raw = self.text[node.start_mark.index : node.end_mark.index]
            value = self.interpolate(value, position(node, self.path), raw)
        return value

    def _mapping(self, node: MappingNode, depth: int) -> LMap:
        result = LMap(position(node, self.path))
        merged: list[LMap] = []
        for key_node, value_node in node.value:
            if str(key_node.tag) == _MERGE_TAG:
                merged.extend(self._merge_sources(value_node, depth))
                continue
            key_loc = position(key_node, self.path)
            if not isinstance(key_node, ScalarNode):
                raise SourceError(diag(key_loc, "keys must be plain strings, not lists or mappings"))
            key = key_node.value if str(key_node.tag) == _STR_TAG else self._scalar(key_node)
            if not isinstance(key, str):
                key = str(key).lower() if isinstance(key, bool) else str(key)
            if key in result.key_locs:
                first = result.key_locs[key]
                raise SourceError(
                    diag(
                        key_loc,
                        f"duplicate key {key!r} (first defined at line {first.line})",
                        hint="remove one of them",
                    )
                )
            result.key_locs[key] = key_loc
            result.value_locs[key] = position(value_node, self.path)
            result[key] = self.convert(value_node, depth + 1)
        # `<<: *defaults` — keys written explicitly win over merged ones.
        for source in merged:
            for key, value in source.items():
                if key not in result:
                    result[key] = value
                    result.key_locs[key] = source.key_locs[key]
                    result.value_locs[key] = source.value_locs[key]
        return result

    def _merge_sources(self, node: Node, depth: int) -> list[LMap]:
        items = node.value if isinstance(node, SequenceNode) else [node]
        sources = [self.convert(item, depth + 1) for item in items]
        for item, source in zip(items, sources, strict=True):
            if not isinstance(source, LMap):
                raise SourceError(diag(position(item, self.path), "`<<` merges only mappings"))
        return sources


def locate(data: Any, loc: tuple[str | int, ...], *, key: bool = False) -> tuple[Loc | None, list[str | int]]:
    """The position of the value (or key) at ``loc`` in located data, and the path actually found.

    Elements of ``loc`` that are not keys of the data (pydantic's union tags, a missing
    field) are skipped, so the deepest existing place is returned.
    """
    current: Any = data
    found: Loc | None = getattr(data, "loc", None)
    path: list[str | int] = []
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(current, Mapping) and isinstance(part, str) and part in current:
            if isinstance(current, LMap):
                found = (current.key_locs if (key and last) else current.value_locs).get(part, found)
            current = current[part]
            path.append(part)
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            found = current.item_locs[part] if isinstance(current, LList) else found
            current = current[part]
            path.append(part)
    return found, path


def format_path(path: list[str | int] | tuple[str | int, ...]) -> str:
    """``tools[2].agent`` style key path."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
