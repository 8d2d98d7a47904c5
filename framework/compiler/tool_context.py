"""What every builtin tool is built on: the context it runs in, and the line its failure becomes.

Its own module because the tool builders (:mod:`.builtin_tools`, :mod:`.tools`) and the tools'
implementations (:mod:`.fs_tools`, :mod:`.exec_tools`) all need these, and the builders import
the implementations: kept in either, they would import each other.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from framework.compiler.confine import Access
from framework.spec.capabilities import Capabilities


@dataclass(frozen=True)
class ToolContext:
    """What a tool needs to know about where it runs: the project, the agent, its capabilities.

    ``root`` is resolved (symbolic links included) on construction. ``access`` is the agent's
    capability rules, which the tools apply to every file and URL they reach (the runtime's
    governance provides them); None: only the project root confines them.
    """

    root: Path
    agent: str
    capabilities: Capabilities | None = None
    access: Access | None = None
    sources: Mapping[str, bytes] = field(default_factory=dict)
    """Python tool files as the project was validated (``Project.tool_files``): run instead of the file."""
    mask: Callable[[str], str] = str
    """Masks the process's known secrets out of a text (the runtime provides it): what a tool cuts
    short is masked first (:func:`head`). By default nothing is masked."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(os.path.realpath(self.root)))


OVERHANG = 64 * 1024
"""Bytes read past a tool's limit so that a secret the cut would split is masked whole (:func:`head`)."""


def head(ctx: ToolContext, data: bytes, limit: int, decode: Callable[[bytes], str]) -> str:
    """The text of the first ``limit`` bytes of ``data`` as a tool shows it when it cuts ``data``
    short: masked before the cut, so that a secret running across it is masked whole, not shown
    in part. ``data`` should run on past ``limit`` by :data:`OVERHANG` bytes where it does."""
    shown = len(decode(data[:limit]))
    return ctx.mask(decode(data[: limit + OVERHANG]))[:shown]


def failure_line(exc: BaseException) -> str:
    """``ExceptionType: message`` (the type alone when the message is empty), for one-line errors."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
