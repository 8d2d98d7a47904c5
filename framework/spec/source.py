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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml.cyaml import CSafeLoader
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from ruamel.yaml.nodes import ScalarNode

from framework.errors import Diagnostic

MAX_FILE_BYTES = 1024 * 1024
"""Config files above this size are refused unread (real ones are a few KB)."""
MAX_NODES = 100_000
"""Values visited while expanding aliases; a "billion laughs" file hits this at once."""
MAX_DEPTH = 64
"""Nesting depth of mappings and lists."""

_MERGE_TAG = "tag:yaml.org,2002:merge"


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
    try:
        return _Builder(path, text, interpolate).build()
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        extra = f" ({exc.context})" if exc.context and exc.problem else ""
        raise SourceError(diag(Loc(path, line, col), f"invalid YAML: {problem}{extra}")) from exc
    except YAMLError as exc:
        raise SourceError(diag(Loc(path, 1, 1), f"invalid YAML: {exc}")) from exc


def _loc(path: Path, event: Any) -> Loc:
    """Where an event's content starts (inside the quotes for a quoted scalar)."""
    mark = event.start_mark
    quoted = isinstance(event, ScalarEvent) and event.style in ('"', "'")
    return Loc(path, mark.line + 1, mark.column + 1 + (1 if quoted else 0))


@dataclass
class _Frame:
    """An open mapping or sequence while its events arrive."""

    value: LMap | LList
    anchor: str | None
    size: int = 1
    key: str | None = None
    key_is_merge: bool = False
    merged: list[LMap] = field(default_factory=list)


_NOTHING = object()


class _Builder:
    """Builds located data straight from libyaml's event stream.

    No node tree and no recursion: depth and alias expansion are limited as events
    arrive, so hostile files fail fast and in constant stack space.
    """

    def __init__(self, path: Path, text: str, interpolate: Interpolate | None) -> None:
        self.path = path
        self.text = text
        self.interpolate = interpolate
        self.loader = CSafeLoader(text)
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.visited = 0
        self.root: Any = _NOTHING

    def build(self) -> Any:
        documents = 0
        while self.loader.check_event():
            event = self.loader.get_event()
            if isinstance(event, DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise SourceError(
                        diag(
                            _loc(self.path, event),
                            "only one YAML document per file ('---' starts another)",
                            hint="move the second document into its own file",
                        )
                    )
            elif isinstance(event, ScalarEvent):
                self.scalar(event)
            elif isinstance(event, MappingStartEvent | SequenceStartEvent):
                self.open(event)
            elif isinstance(event, MappingEndEvent | SequenceEndEvent):
                frame = self.stack.pop()
                self.close(frame)
            elif isinstance(event, AliasEvent):
                if event.anchor not in self.anchors:
                    raise SourceError(
                        diag(
                            _loc(self.path, event),
                            f"unknown alias '*{event.anchor}'",
                            hint=f"define it first with '&{event.anchor}'",
                        )
                    )
                value, size = self.anchors[event.anchor]
                self.add(value, size, _loc(self.path, event), is_scalar=False)
        if self.root is _NOTHING:
            raise SourceError(diag(Loc(self.path, 1, 1), "file is empty", hint="add at least a `name:` key"))
        return self.root

    def open(self, event: Any) -> None:
        loc = _loc(self.path, event)
        if len(self.stack) >= MAX_DEPTH:
            raise SourceError(diag(loc, f"structure is nested too deeply (more than {MAX_DEPTH} levels)"))
        container: LMap | LList = LMap(loc) if isinstance(event, MappingStartEvent) else LList(loc)
        self.stack.append(_Frame(container, event.anchor))

    def close(self, frame: _Frame) -> None:
        value = frame.value
        if isinstance(value, LMap):
            # `<<: *defaults`: keys written explicitly win over merged ones.
            for source in frame.merged:
                for key, item in source.items():
                    if key not in value:
                        value[key] = item
                        value.key_locs[key] = source.key_locs[key]
                        value.value_locs[key] = source.value_locs[key]
        if frame.anchor is not None:
            self.anchors[frame.anchor] = (value, frame.size)
        self.add(value, frame.size, value.loc, is_scalar=False, counted=True)

    def scalar(self, event: ScalarEvent) -> None:
        loc = _loc(self.path, event)
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(ScalarNode, event.value, event.implicit)
        expecting_key = bool(self.stack) and isinstance(self.stack[-1].value, LMap) and self.stack[-1].key is None
        if expecting_key and not self.stack[-1].key_is_merge and str(tag) == _MERGE_TAG:
            self.stack[-1].key_is_merge = True
            self.visited += 1
            return
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style or None)
        try:
            value = self.loader.construct_object(node, deep=True)
        except YAMLError as exc:
            raise SourceError(diag(loc, f"invalid value: {exc}")) from exc
        if expecting_key:
            value = (
                event.value
                if isinstance(value, str)
                else (str(value).lower() if isinstance(value, bool) else str(value))
            )
        elif isinstance(value, str) and self.interpolate is not None:
            raw = self.text[event.start_mark.index : event.end_mark.index]
            value = self.interpolate(value, loc, raw)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, 1)
        self.add(value, 1, loc, is_scalar=True)

    def add(self, value: Any, size: int, loc: Loc, *, is_scalar: bool, counted: bool = False) -> None:
        """Place a finished value into the open container (or make it the document)."""
        self.visited += 1 if counted else size
        if self.visited > MAX_NODES:
            raise SourceError(
                diag(
                    loc,
                    f"document expands to more than {MAX_NODES:,} values (alias bomb?)",
                    hint="remove the nested aliases (&anchor / *alias)",
                )
            )
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        frame.size += size
        container = frame.value
        if isinstance(container, LList):
            container.item_locs.append(loc)
            container.append(value)
        elif frame.key_is_merge:
            sources = value if isinstance(value, LList) else [value]
            if not all(isinstance(source, LMap) for source in sources):
                raise SourceError(diag(loc, "`<<` merges only mappings"))
            frame.merged.extend(sources)
            frame.key_is_merge = False
        elif frame.key is None:
            if not is_scalar:
                raise SourceError(diag(loc, "keys must be plain strings, not lists or mappings"))
            key = str(value)
            if key in container.key_locs:
                first = container.key_locs[key]
                raise SourceError(
                    diag(loc, f"duplicate key {key!r} (first defined at line {first.line})", hint="remove one of them")
                )
            container.key_locs[key] = loc
            frame.key = key
        else:
            container[frame.key] = value
            container.value_locs[frame.key] = loc
            frame.key = None


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
