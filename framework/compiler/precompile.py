"""Compile every graph of a bundle ahead of its first run; a tool that fails becomes a Diagnostic.

``reload.apply`` awaits :func:`compile_graphs` on a new bundle before swapping it in, so a tool
file that no longer imports is a bad edit like a YAML error; the watcher calls it on the
start-up bundle so the "last good version" is complete. Each graph compiles through
``Bundle.agraph``: in a daemon thread, which neither the event loop nor a stopping process waits
for (a tool whose import hangs delays no Ctrl-C).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from framework.compiler.bundle import Bundle
from framework.compiler.mcp_tools import mcp_refs
from framework.errors import Diagnostic, McpServerFailed, ModelError, ToolError
from framework.spec.agent import LlmAgent

_WHERE = re.compile(r"^(?P<file>[^\s:]+\.py)(?::(?P<line>\d+))?(?::(?P<column>\d+))?: (?P<message>.*)$", re.S)


async def compile_graphs(bundle: Bundle) -> list[Diagnostic]:
    """Compile every agent's graph now (python tools are imported again); the tools that failed.

    Awaited by ``reload.apply`` so a bundle is swapped in already compiled, and a tool
    file that no longer imports is a bad edit like a YAML error. A model that cannot be built
    (e.g. an unset API key) or an MCP server that does not start is not an error here: it fails when
    that agent runs, as at start-up.
    """
    errors: list[Diagnostic] = []
    async for name, exc in failures(bundle):
        message = str(exc) if isinstance(exc, ToolError) else f"agent {name!r} does not compile: {exc}"
        errors.append(_tool_diagnostic(bundle, name, message))
    return errors


async def failures(
    bundle: Bundle, *, mcp: bool = True, stopping: Callable[[], bool] = lambda: False
) -> AsyncIterator[tuple[str, Exception]]:
    """Compile the agents of ``bundle`` one after the other (``Bundle.agraph``); each that does not
    compile, with what it raised. A model that cannot be built (a key unset) or an MCP server that
    does not start is not one: that agent's run says so. Without ``mcp``, agents that use an MCP
    server are left to their first run, which starts it (docs/mcp.md). Ends early once ``stopping()``."""
    for name in sorted(bundle.agents):
        if stopping():
            return
        spec = bundle.agent(name)
        if not mcp and isinstance(spec, LlmAgent) and mcp_refs(spec):
            continue
        try:
            await bundle.agraph(name)
        except (ModelError, McpServerFailed):
            continue
        except Exception as exc:
            yield name, exc


def _tool_diagnostic(bundle: Bundle, agent: str, message: str) -> Diagnostic:
    """``tools/x.py:3:5: syntax error ...`` as a Diagnostic; else one on the agent's file."""
    match = _WHERE.match(message)
    if match:
        path, line = bundle.project.root / match["file"], int(match["line"] or 0)
        source_line = None
        with contextlib.suppress(OSError, UnicodeDecodeError, IndexError):
            source_line = path.read_text(encoding="utf-8").splitlines()[line - 1] if line > 0 else None
        return Diagnostic(
            _shown(path), line, int(match["column"] or (1 if line else 0)), match["message"], source_line=source_line
        )
    source = bundle.project.sources.get(f"agent:{agent}")
    return Diagnostic(_shown(source or bundle.project.root), 0, 0, message)


def _shown(path: Path) -> str:
    """Relative to the current directory when inside it, like the loader's diagnostics."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
