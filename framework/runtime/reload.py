"""Hot reload: watch the project's files and swap in a new bundle when they change.

:func:`apply` is one reload of a :class:`~framework.runtime.runtime.Runtime` (load, validate,
compile, swap, then stop what only the old bundles used); :func:`watch` runs one per change.

Watched: ``agents/``, ``profiles/``, ``skills/``, ``tools/``, ``ca.yaml`` and ``.env``
(never ``.ca/``). A burst of saves is coalesced. A change that arrives while a reload runs
waits for it up to :data:`ABANDON_AFTER` seconds from its start, then abandons it (it would
load a state already gone; a tool whose import hangs holds up no fix) for a new one, so the end
state is always the files' last state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from framework.compiler.bundle import Bundle
from framework.compiler.precompile import compile_graphs
from framework.errors import Diagnostic, RunError
from framework.runtime.heap import freeze_loaded
from framework.runtime.restart import needs_restart, pinned
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
    """A reload that failed in a way reload.apply does not report (its report itself): say so."""
    if not reloading.cancelled() and (exc := reloading.exception()) is not None:
        sys.stderr.write(f"error: reload failed: {type(exc).__name__}: {exc}\n")


async def _reload(runtime: Runtime, report: Report) -> None:
    """One reload and its report (cancelled, before it swaps anything, when a newer change comes)."""
    ok = await apply(runtime)
    if ok and gc.get_freeze_count():  # the server froze its heap at start (heap.py): the old bundle may go
        freeze_loaded()
    if ok:
        bundle = runtime.bundle
        sys.stderr.write(f"reloaded: {bundle.project.summary()} (bundle {bundle.digest[:12]})\n")
        if runtime.restart_needed:
            changed = ", ".join(runtime.restart_needed)
            sys.stderr.write(f"ca.yaml: restart to apply {changed}; the rest is live\n")
    report(ok, list(runtime.diagnostics))


async def apply(runtime: Runtime) -> bool:
    """Load, validate and compile ``runtime``'s project again, then swap its bundle in one assignment.

    Every graph is compiled (python tools imported again) off the event loop before the swap,
    in threads a stopping process does not wait for.
    A bad edit changes nothing: the last good bundle keeps serving and the errors are kept
    in ``runtime.diagnostics`` (and returned by ``_cleveragents/diagnostics``) until a fix loads.
    Tasks already running finish on the bundle they started with; a task paused for a
    decision resumes on the bundle current when the decision arrives. Settings read once at
    start-up (``server.auth``, the address, ...) keep their start-up values in the new bundle;
    the ones the files change are listed in ``runtime.restart_needed``.
    """
    from framework.errors import SpecError
    from framework.spec import load_project

    if runtime.compile_project is None:
        raise RunError("this runtime was not opened with Runtime.open and cannot reload")
    root = runtime.root
    bundle: Bundle | None = None
    try:
        project = await asyncio.to_thread(load_project, root)
        restart_needed = needs_restart(runtime.started, project.config)
        project = dataclasses.replace(project, config=pinned(runtime.started, project.config))
        bundle = await runtime.compile_project(project)
        errors = await compile_graphs(bundle)
    except asyncio.CancelledError:  # abandoned for a newer change: its compiles may still run, in threads
        if bundle is not None and runtime.abandoned is not None:
            runtime.abandoned(bundle)
        raise
    except SpecError as exc:
        errors = list(exc.errors) or [Diagnostic(str(root), 0, 0, str(exc))]
    except Exception as exc:  # e.g. a file that vanished mid-read: the next change event reloads again
        errors = [Diagnostic(str(root), 0, 0, f"reload failed: {type(exc).__name__}: {exc}")]
    # Decided: nothing below awaits, so a reload is either abandoned before this point (a newer
    # change cancels it) or done whole: the swap, its listeners and its report.
    if errors or bundle is None:
        runtime.diagnostics = errors
        _settle(runtime)
        return False
    runtime.bundle = bundle
    runtime.diagnostics = []
    runtime.restart_needed = restart_needed
    for listener in list(runtime.listeners):
        try:
            listener()
        except Exception as exc:  # one transport's failure must not stop the watcher or the others
            print(f"error: after the reload: {type(exc).__name__}: {exc}", file=sys.stderr)
    _settle(runtime)
    return True


def _settle(runtime: Runtime) -> None:
    """Once a reload is decided: what only the other bundles used stops (their MCP servers), in
    the background (``runtime.settled``)."""
    if runtime.serving is not None:
        runtime.settled = asyncio.ensure_future(_serving(runtime.serving, runtime))


async def _serving(serving: Callable[[Bundle], Awaitable[None]], runtime: Runtime) -> None:
    try:
        await serving(runtime.bundle)  # the bundle serving when this starts: a later reload's, if it swapped meanwhile
    except Exception as exc:  # a server that does not stop cleanly must not fail the reload
        print(f"warning: after the reload: {type(exc).__name__}: {exc}", file=sys.stderr)
