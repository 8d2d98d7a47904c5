"""Hot reload: watch the project's files and swap in a new bundle when they change.

Watched: ``agents/``, ``profiles/``, ``skills/``, ``tools/``, ``ca.yaml`` and ``.env``
(never ``.ca/``). A burst of saves is coalesced. A change that arrives while a reload runs
waits for it up to :data:`ABANDON_AFTER` seconds from its start, then abandons it (it would
load a state already gone; a tool whose import hangs holds up no fix) for a new one, so the end
state is always the files' last state.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable
from pathlib import Path

from framework.compiler.bundle import Bundle
from framework.compiler.precompile import compile_graphs
from framework.errors import Diagnostic
from framework.runtime.heap import freeze_loaded
from framework.runtime.runtime import Runtime

WATCHED_DIRS = ("agents", "profiles", "skills", "tools")
WATCHED_FILES = ("ca.yaml", "ca.yml", ".env")
DEBOUNCE_MS = 60
STEP_MS = 15
ABANDON_AFTER = 2.0
"""Seconds a reload runs before a newer change may abandon it (one takes ~50 ms; a tool's slow
import longer): saves that come faster than reloads finish still get their states served."""

Report = Callable[[bool, list[Diagnostic]], None]


def watched(root: Path) -> Callable[[object, str], bool]:
    """The watchfiles filter: project files that change what the bundle is."""
    dirs = tuple(str(root / d) + "/" for d in WATCHED_DIRS)
    files = {str(root / f) for f in WATCHED_FILES}

    def accept(change: object, path: str) -> bool:
        if path in files:
            return True
        return (
            path.startswith(dirs)
            and not path.endswith(("~", ".swp", ".swx", ".tmp", ".pyc"))
            and "/__pycache__/" not in path
        )

    return accept


def print_report(ok: bool, errors: list[Diagnostic]) -> None:
    """The default report on stderr: what was reloaded, or every error as file:line:col."""
    if ok:
        return
    for diagnostic in errors:
        sys.stderr.write(diagnostic.render() + "\n")
    sys.stderr.write(f"reload failed: {len(errors)} error(s); still serving the last good version\n")


async def _warm(bundle: Bundle) -> None:
    """Compile the start-up bundle; a tool that does not import is said on stderr (its agent fails
    when called until a fix is saved, which reloads)."""
    for diagnostic in await compile_graphs(bundle):
        sys.stderr.write(diagnostic.render() + "\n")
        sys.stderr.write("warning: the agents using it fail when called until this is fixed\n")


async def watch(runtime: Runtime, report: Report = print_report) -> None:
    """Reload on every change until cancelled."""
    from watchfiles import awatch

    root = runtime.root
    # The start-up bundle is compiled too, so it is a complete "last good version" to fall back to.
    warming = asyncio.create_task(_warm(runtime.bundle))
    reloading: asyncio.Task[None] | None = None
    started = 0.0
    try:
        async for _changes in awatch(
            root, watch_filter=watched(root), debounce=DEBOUNCE_MS, step=STEP_MS, recursive=True
        ):
            if reloading is not None and not reloading.done():  # compiling a state the files have left
                age = asyncio.get_running_loop().time() - started
                await asyncio.wait([reloading], timeout=max(ABANDON_AFTER - age, 0))
                reloading.cancel()  # still running: abandoned, never swapped in
            started = asyncio.get_running_loop().time()
            reloading = asyncio.create_task(_reload(runtime, report))
            reloading.add_done_callback(_said)
    except Exception as exc:  # e.g. the system's limit on watched folders: say so, keep serving
        sys.stderr.write(f"error: hot reload stopped: {type(exc).__name__}: {exc}\n")
    finally:
        warming.cancel()
        if reloading is not None:
            reloading.cancel()


def _said(reloading: asyncio.Task[None]) -> None:
    """A reload that failed in a way Runtime.reload does not report (its report itself): say so."""
    if not reloading.cancelled() and (exc := reloading.exception()) is not None:
        sys.stderr.write(f"error: reload failed: {type(exc).__name__}: {exc}\n")


async def _reload(runtime: Runtime, report: Report) -> None:
    """One reload and its report (cancelled, before it swaps anything, when a newer change comes)."""
    ok = await runtime.reload()
    if ok and gc.get_freeze_count():  # the server froze its heap at start (heap.py): the old bundle may go
        freeze_loaded()
    if ok:
        bundle = runtime.bundle
        sys.stderr.write(f"reloaded: {bundle.project.summary()} (bundle {bundle.digest[:12]})\n")
        if runtime.restart_needed:
            changed = ", ".join(runtime.restart_needed)
            sys.stderr.write(f"ca.yaml: restart to apply {changed}; the rest is live\n")
    report(ok, list(runtime.diagnostics))
