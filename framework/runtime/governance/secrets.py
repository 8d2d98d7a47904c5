"""Secret values, and masking them out of everything the process emits or stores.

A value is secret when it comes from a variable whose name looks secret (``*KEY*``,
``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, …) — in the project's ``.env``, in the process
environment, or interpolated into the YAML as ``${VAR}`` — or from a variable the project
names as holding a credential whatever its name: ``server.auth`` tokens and keys, registry
``headers_env`` (of registries and MCP servers), a model's ``api_key_env``, the secret-named
``env`` of an MCP server.

:data:`KNOWN` is the process's one set of them: the runtime adds a project's values when it
opens or reloads it, and every way out masks through it — the run events every transport
shows (terminal, ``--json``, A2A, ACP), the task rows, the conversation checkpoints, the audit
log, log records and error messages. Every occurrence becomes ``***``; the longest values are
replaced first, in one pass, so a secret containing another is masked whole. Values shorter
than :data:`MIN_SECRET_CHARS` are left alone (masking ``"1"`` or ``"on"`` would mangle ordinary
text while hiding nothing), and so are ambient values — secret-looking variables of the
environment the project does not name — shorter than :data:`MIN_AMBIENT_CHARS`.

A value is masked in each form it takes in text ca emits (:func:`forms`): as it is, without the
scheme of an ``Authorization`` value (``Bearer TOKEN`` also masks ``TOKEN``, which is what leaks),
escaped inside a JSON string or a Python ``repr`` (a tool's result holding it in a dict), and
percent-encoded (in a URL). A model streams text in chunks that may split a secret anywhere:
:meth:`SecretValues.held_back` says how much of a chunk's end to keep until the next one
(:mod:`framework.runtime.masked_stream`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from framework.spec.secret_values import MASK, MIN_AMBIENT_CHARS, MIN_SECRET_CHARS, pattern
from framework.spec.secret_values import secret_values as project_secrets

__all__ = ["KNOWN", "MASK", "MIN_AMBIENT_CHARS", "MIN_SECRET_CHARS", "SecretValues", "forms", "mask", "project_secrets"]


_SCHEME = re.compile(r"(?:bearer|basic|token|bot|apikey)\s+(\S+)", re.IGNORECASE)
"""An ``Authorization`` value: the scheme, then the credential that is the secret."""


def forms(value: str) -> set[str]:
    """The forms ``value`` takes in text ca emits (see the module docstring)."""
    found = {value}
    if scheme := _SCHEME.fullmatch(value.strip()):
        found.add(scheme.group(1))
    for plain in list(found):
        found |= {json.dumps(plain)[1:-1], json.dumps(plain, ensure_ascii=False)[1:-1], repr(plain)[1:-1]}
        found.add(quote(plain, safe=""))
    return found


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value of at least four characters replaced by ``***``."""
    found = pattern(frozenset(secrets))
    return text if found is None else found.sub(MASK, text)


class SecretValues:
    """A growing set of secret values that masks text, JSON-like values and dataclasses."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset()
        self._regex: re.Pattern[str] | None = None
        self._starts: dict[str, tuple[str, ...]] = {}
        """The values (every form) by their first character, for :meth:`held_back`."""
        self._longest = 0
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        """Mask these values too from now on, in each of their :func:`forms`."""
        with self._lock:
            added = {form for v in values if len(v) >= MIN_SECRET_CHARS for form in forms(v)}
            grown = self._values | {form for form in added if len(form) >= MIN_SECRET_CHARS}
            if grown != self._values:
                starts: dict[str, list[str]] = {}
                for form in grown:
                    starts.setdefault(form[0], []).append(form)
                self._starts = {first: tuple(found) for first, found in starts.items()}
                self._longest = max(map(len, grown))
                self._values = grown
                self._regex = pattern(grown)

    @property
    def values(self) -> frozenset[str]:
        """The values masked now (every form of each)."""
        return self._values

    def unsplit(self, text: str, cut: int) -> int:
        """``cut``, or the start of a secret that ``text`` holds whole across it (the earliest): text
        sent up to there never ends inside a secret."""
        regex = self._regex
        if regex is None:
            return cut
        for found in regex.finditer(text):
            if found.start() >= cut:
                break
            if found.end() > cut:
                return found.start()
        return cut

    def held_back(self, text: str) -> int:
        """How many characters at the end of ``text`` may be the start of a secret
        that the next chunk of a stream completes: the longest end of ``text`` that begins a known
        value and is shorter than it. Those characters wait for that chunk."""
        starts, window = self._starts, text[-(self._longest - 1) :] if self._longest > 1 else ""
        for at, first in enumerate(window):
            rest = window[at:]
            if any(len(rest) < len(value) and value.startswith(rest) for value in starts.get(first, ())):
                return len(rest)
        return 0

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __bool__(self) -> bool:
        return self._regex is not None

    def text(self, value: str) -> str:
        """``value`` with every secret in it masked."""
        regex = self._regex
        return regex.sub(MASK, value) if regex is not None else value

    def value(self, value: Any, *, other: Callable[[Any, Callable[[Any], Any]], Any] | None = None) -> Any:
        """A copy of ``value`` with every string in it masked: dict keys and values, lists, tuples,
        dataclasses (the run events) and pydantic models (langchain messages). ``other(item, mask)``
        may rebuild objects of further types (returning ``item`` itself leaves one as it is)."""
        if self._regex is None:
            return value

        def walk(item: Any) -> Any:
            if isinstance(item, str):
                return self.text(item)
            if isinstance(item, Mapping):
                return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in item.items()}
            if isinstance(item, list):
                return [walk(v) for v in item]
            if isinstance(item, tuple) and not hasattr(item, "_fields"):
                return tuple(walk(v) for v in item)
            if dataclasses.is_dataclass(item) and not isinstance(item, type):
                changes = {f.name: walk(getattr(item, f.name)) for f in dataclasses.fields(item) if f.init}
                return dataclasses.replace(item, **changes)
            if isinstance(item, BaseModel):
                return item.model_copy(update={name: walk(getattr(item, name)) for name in type(item).model_fields})
            return other(item, walk) if other is not None else item

        return walk(value)

    def found_in(self, data: str | bytes) -> bool:
        """Whether any secret occurs in ``data`` (text, or UTF-8 bytes such as a serialised record)."""
        regex = self._regex
        if regex is None:
            return False
        text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
        return regex.search(text) is not None


KNOWN = SecretValues()
"""Every secret value this process knows of (see the module docstring)."""


_installed: list[bool] = []


def mask_logs() -> None:
    """Mask known secrets in every log record of the process, whatever logger and handler it meets.

    Installed once as the log record factory: a record's message (and its traceback) is formatted
    and masked when it is made, before any handler sees it.
    """
    if _installed:
        return
    _installed.append(True)
    make = logging.getLogRecordFactory()

    def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if KNOWN:
            message = record.getMessage()
            if KNOWN.found_in(message):
                record.msg, record.args = KNOWN.text(message), None
            if record.exc_info and record.exc_info[1] is not None:
                record.exc_text = KNOWN.text(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(masked_record)
