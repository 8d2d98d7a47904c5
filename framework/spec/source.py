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
from ruamel.yaml.loader import SafeLoader
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.reader import ReaderError

from framework.errors import Diagnostic

MAX_FILE_BYTES = 1024 * 1024
"""Config files above this size are refused unread (real ones are a few KB)."""
MAX_NODES = 100_000
"""Values visited while expanding aliases; a "billion laughs" file hits this at once."""
MAX_DEPTH = 64
"""Nesting depth of mappings and lists."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


class _Loader(CSafeLoader):
    processing_version = (1, 2)
    """The resolver implements YAML 1.2; tell the constructor, which otherwise applies 1.1
    rules (and prints a warning to stderr for a float such as ``1e3``)."""


class _Yaml12Loader(SafeLoader):
    """ruamel's own (pure Python) parser, for what libyaml refuses but YAML 1.2 allows.

    libyaml follows YAML 1.1 inside ``{...}`` and ``[...]``: a plain value there may not
    hold a ':' (``{url: https://host}``, ``{python: tools/lint.py:lint}``). YAML 1.2 allows
    a ':' that no space follows, and ruamel's scanner implements that. It is several times
    slower, so it reads only the files libyaml refused for this one reason.
    """

    processing_version = (1, 2)


def _colon_in_flow(exc: MarkedYAMLError) -> bool:
    """libyaml's YAML 1.1 refusal of a ':' inside a plain value of a '{' mapping or '[' list."""
    return exc.problem == "found unexpected ':'" and (exc.context or "").startswith("while scanning a plain scalar")


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
    if not text.strip():
        raise SourceError(diag(Loc(path, 1, 1), "file is empty", hint="add at least a `name:` key"))
    if all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise SourceError(diag(Loc(path, 1, 1), "file has only comments", hint="add at least a `name:` key"))
    try:
        try:
            return _Builder(path, text, interpolate).build()
        except MarkedYAMLError as exc:
            if not _colon_in_flow(exc):
                raise
        return _Builder(path, text, interpolate, loader=_Yaml12Loader).build()
    except MarkedYAMLError as exc:
        raise SourceError(_syntax_error(path, text, exc)) from exc
    except ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise SourceError(
            diag(
                Loc(path, line, column),
                f"control character U+{exc.character:04X} is not allowed in YAML",
                hint="remove it; inside double quotes it can be written as an escape, like \\x07",
            )
        ) from exc
    except YAMLError as exc:
        raise SourceError(diag(Loc(path, 1, 1), f"invalid YAML: {exc}")) from exc


_JARGON = (
    ("flow sequence", "'[' list"),
    ("flow mapping", "'{' mapping"),
    ("block mapping", "mapping"),
    ("block collection", "list"),
    ("quoted scalar", "quoted string"),
    ("simple key", "key"),
    ("node content", "value"),
    ("flow node", "value"),
    ("block node", "value"),
)


def _plain(text: str) -> str:
    """libyaml's wording in the words of someone writing a config file."""
    for jargon, plain in _JARGON:
        text = text.replace(jargon, plain)
    return text.removeprefix("while ")


def _syntax_error(path: Path, text: str, exc: MarkedYAMLError) -> Diagnostic:
    """A YAML syntax error pointing where the user must change the file, saying what to change.

    libyaml reports where it gave up; for a bracket or quote left open that is the end
    of the file or a later line, so those point back at where the construct opens.
    """
    problem: str = exc.problem or exc.context or "invalid syntax"
    context: str = (exc.context or "") if exc.problem else ""
    at: Any = exc.problem_mark or exc.context_mark
    opened: Any = exc.context_mark if exc.problem_mark else None

    def loc(mark: Any) -> Loc:
        return Loc(path, mark.line + 1, mark.column + 1) if mark else Loc(path, 1, 1)

    def where(mark: Any) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    later = at is not None and opened is not None and at.line > opened.line
    if "quoted scalar" in context and "end of stream" in problem and opened is not None:
        quote = text[opened.index : opened.index + 1] or '"'
        return diag(loc(opened), "invalid YAML: this quoted string is never closed", hint=f"add the closing {quote}")
    if context.startswith(("while parsing a flow sequence", "while parsing a flow mapping")) and opened is not None:
        close = "]" if "sequence" in context else "}"
        if later:
            return diag(
                loc(opened),
                f"invalid YAML: this '{text[opened.index : opened.index + 1]}' is never closed",
                hint=f"add the missing '{close}' (or a ',' between items); "
                f"the parser gave up at {where(at) if at else 'the end'}",
            )
        return diag(
            loc(at),
            f"invalid YAML: expected ',' or '{close}' here",
            hint=f"separate items with ',', close with '{close}'",
        )
    if "block mapping" in context and "expected key" in problem and opened is not None:
        if at is not None and text.startswith("-", at.index):
            return diag(
                loc(at),
                f"invalid YAML: a '- ' list item among the keys of the mapping at line {opened.line + 1}",
                hint="put the list under a key: `key:`, then the '- ' items indented below it",
            )
        return diag(
            loc(at),
            f"invalid YAML: bad indentation: this line starts in column {at.column + 1 if at else '?'}, "
            f"but the keys of the mapping at line {opened.line + 1} start in column {opened.column + 1}",
            hint="indent the keys of one mapping to the same column",
        )
    if "block collection" in context and "'-'" in problem and opened is not None:
        return diag(
            loc(at),
            f"invalid YAML: expected a '- ' item here, in column {opened.column + 1} "
            f"like the other items of the list at line {opened.line + 1}",
            hint="fix the indentation: the items of one list start in the same column",
        )
    if "simple key" in context and "expected ':'" in problem and opened is not None:
        return diag(
            loc(opened),
            "invalid YAML: this key has no ':' after it",
            hint="write `key: value`, or indent the line to continue the value above",
        )
    if problem.startswith("mapping values are not allowed"):
        return diag(
            loc(at),
            "invalid YAML: ':' is not allowed here",
            hint="quote a value that contains ': ' (like \"a: b\"), or fix the indentation of this line",
        )
    if problem.startswith("found unknown escape character"):
        return diag(
            loc(at),
            "invalid YAML: unknown escape sequence in a double-quoted string",
            hint="write \\\\ for a backslash, or use single quotes, where a backslash is just a backslash",
        )
    if problem.startswith("found character that cannot start any token") and at is not None:
        char = text[at.index : at.index + 1]
        return diag(loc(at), f"invalid YAML: a value cannot start with {char!r}", hint="quote the value")
    message = f"invalid YAML: {_plain(problem)}"
    if context and opened is not None:
        message += f" ({_plain(context)} at {where(opened)})"
    if at is not None and opened is not None and not text[at.index :].strip():
        at = opened  # the end of the file is no place to point at
    return diag(loc(at), message)


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

    def __init__(self, path: Path, text: str, interpolate: Interpolate | None, *, loader: type[Any] = _Loader) -> None:
        self.path = path
        self.text = text
        self.interpolate = interpolate
        self.loader = loader(text)
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
        if self.root is _NOTHING or self.root is None:
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
        if expecting_key or str(tag) == _TIMESTAMP_TAG:
            # A key is its text as written; so is a date: no spec value is one, and the
            # text stays valid where a string is expected (2024-13-45 is no date at all).
            value = event.value
        else:
            value = self.construct(ScalarNode(tag, event.value, event.start_mark, event.end_mark), loc)
        if not expecting_key and isinstance(value, str) and self.interpolate is not None:
            raw = self.text[event.start_mark.index : event.end_mark.index]
            value = self.interpolate(value, loc, raw)
        if event.anchor is not None:
            self.anchors[event.anchor] = (value, 1)
        self.add(value, 1, loc, is_scalar=True)

    def construct(self, node: ScalarNode, loc: Loc) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except YAMLError as exc:
            problem = str(getattr(exc, "problem", None) or getattr(exc, "context", None) or exc)
            tag = re.match(r"could not determine a constructor for the tag '(.*)'", problem)
            if tag:
                shown = tag.group(1).replace("tag:yaml.org,2002:", "!!")
                raise SourceError(
                    diag(loc, f"unsupported YAML tag {shown!r}", hint="remove the tag: only plain YAML values are read")
                ) from exc
            raise SourceError(diag(loc, f"invalid value: {problem}")) from exc
        except (ValueError, OverflowError) as exc:  # e.g. an integer of 5000 digits
            text = str(node.value)
            shown = text if len(text) <= 40 else text[:37] + "..."
            if str(node.tag) == _INT_TAG:
                raise SourceError(diag(loc, f"number {shown} is too large ({len(text)} digits)")) from exc
            raise SourceError(diag(loc, f"invalid value {shown!r}: {exc}")) from exc

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
