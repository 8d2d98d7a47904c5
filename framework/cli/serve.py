"""``ca serve``: host every agent of a project over A2A on HTTP."""

from __future__ import annotations

import asyncio
import errno
import gc
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING

import uvicorn
from uvicorn.server import HANDLED_SIGNALS

from framework.errors import UsageError
from framework.runtime.heap import freeze_loaded, starting_up
from framework.runtime.logs import chosen, configure
from framework.runtime.store_url import unreachable
from framework.spec.project import LogFormat

if TYPE_CHECKING:
    from framework.compiler.bundle import Bundle

_log = logging.getLogger(__name__)


@dataclass
class ServeOptions:
    project: Path
    host: str | None
    port: int | None
    public_url: str | None
    insecure: bool
    reload: bool = False
    log_format: LogFormat | None = None
    """``--log-format``; None: ``CA_LOG_FORMAT``, else human."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


LOCK_FILE = "serve.lock"
"""Under the project's ``.ca/``: held by the one ``ca serve`` of a project folder while it runs."""


def hold_serve_lock(root: Path) -> IO[str]:
    """Take the project's serve lock (released when the process exits, however it exits).

    A second ``ca serve`` of the same folder would mark the first one's running tasks failed
    at its start (it takes them for a dead server's): it is refused instead. Replicas share
    state through ``store.url``, each in its own folder.
    """
    import fcntl

    from framework.runtime.stores import state_dir

    handle = (state_dir(root) / LOCK_FILE).open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UsageError(
            f"another ca serve ({holder}) already serves {root}: stop it first, or serve a copy of the "
            "project from another folder (replicas share tasks through store.url)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    return handle


def event_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``ca serve`` runs on: uvloop's where it is installed (uvicorn[standard]; not on
    Windows), which spends less CPU per request than asyncio's own; None (asyncio's) elsewhere."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


INTERRUPTED = 130
"""The exit code of a ``ca serve`` stopped by Ctrl-C (SIGINT), as of every ``ca`` command; SIGTERM's is 0."""

STREAMS_GRACE = 1.0
"""Seconds the streams still open once the runs have stopped get to end on their own before they are
ended (a subscription to a task another replica runs never ends here)."""


class Draining(uvicorn.Server):
    """uvicorn's server, stopping as ``ca serve`` must: on SIGTERM (or Ctrl-C) it stops accepting,
    lets the running tasks finish for up to ``server.shutdown_timeout``, cancels what is left
    (``stop_runs``), and only then closes the connections and runs the lifespan's shutdown.

    A second Ctrl-C cancels the runs at once (``stop_runs``'s ``now`` is set); the stop goes on as
    above, the clients told their tasks' ends and the lifespan shut down, instead of uvicorn's
    ``force_exit``, which skips both. The signals are not raised again once stopped, as uvicorn does:
    ``ca serve`` closes its runtime and exits with :attr:`exit_code`.
    """

    def __init__(self, config: uvicorn.Config, stop_runs: Callable[[asyncio.Event], Awaitable[None]]) -> None:
        super().__init__(config)
        self.stop_runs = stop_runs
        self.now = asyncio.Event()
        """Set by a second Ctrl-C: cancel the runs now."""
        self.signals: list[int] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # sse-starlette ends every SSE stream as soon as uvicorn gets the signal, each without its end:
        # a streaming client of a run allowed to finish got a truncated body. The streams are ended here
        # once the runs are stopped (``shutdown``).
        from sse_starlette.sse import AppStatus

        AppStatus.enable_automatic_graceful_drain = False  # what its (untyped) disable_automatic_graceful_drain does

    @property
    def exit_code(self) -> int:
        """:data:`INTERRUPTED` after a Ctrl-C, 0 otherwise (SIGTERM: a graceful stop)."""
        return INTERRUPTED if signal.SIGINT in self.signals else 0

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, without raising the signals again once stopped: raised again, SIGTERM killed the
        process before its runtime was closed (exit -15), and SIGINT became a KeyboardInterrupt."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)
        if self.should_exit and sig == signal.SIGINT and self._loop is not None:
            self._loop.call_soon_threadsafe(self.now.set)  # a signal handler: not on the loop's turn
        self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        from sse_starlette.sse import AppStatus

        for listening in self.servers:
            listening.close()
        for sock in sockets or []:
            sock.close()
        await self.stop_runs(self.now)
        # The streams of the runs stopped end with their tasks' ends, written meanwhile; the others
        # are ended before uvicorn's own wait runs out (it would cancel them: a traceback each).
        ending = asyncio.get_running_loop().call_later(STREAMS_GRACE, setattr, AppStatus, "should_exit", True)
        try:
            await super().shutdown(sockets)
        finally:
            ending.cancel()
            AppStatus.should_exit = False  # process-wide: a later server of this process streams again


def listen_on(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound here so that a port in use is a UsageError naming it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say they are TCP,
    # and an accepted connection inherits this one's protocol; with Nagle on, each small SSE event
    # waits for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is already in use (another server?): stop it, or choose another with "
                "--port or ca.yaml server.port"
            ) from None
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; check --host and --port") from None
    return sock


async def check_store(url: str) -> None:
    """Connect to a PostgreSQL task store once before serving, through its driver (asyncpg):
    unreachable, refused or missing is the one StoreUnreachable line the conversations and the
    audit give too, not a failed start-up deep in the server (SQLite needs no check)."""
    if url.startswith("sqlite"):
        return
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.ext.asyncio import create_async_engine

    from framework.runtime.store_url import libpq_url
    from framework.spec.urls import hidden

    where = hidden(libpq_url(url))
    try:
        engine = create_async_engine(url)
    except ImportError as exc:
        raise UsageError(
            f"store.url {where} needs the PostgreSQL driver ({exc.name or 'asyncpg'}): "
            "pip install 'cleveragents[postgres]', or use a sqlite:/// store"
        ) from None
    try:
        async with asyncio.timeout(10):
            async with engine.connect():
                pass
    except (OSError, TimeoutError, SQLAlchemyError) as exc:  # refused, unreachable, no such database, auth
        raise unreachable(url, getattr(exc, "orig", None) or exc) from None
    finally:
        await engine.dispose()


async def warm(bundle: Bundle, current: Callable[[], Bundle], stopping: Callable[[], bool]) -> None:
    """Compile the agents of ``bundle`` once the server answers (``precompile.failures``, as
    ``--reload`` does, but not those that use an MCP server): their first request then finds them
    compiled, or awaits the compile under way, in a daemon thread. It stops once the server does.
    A python tool that does not import is a warning now, naming the agent, which fails when called
    until the file is fixed. Then the graphs join the heap frozen at start (no collection: requests
    may be running), unless ``current()`` is another bundle by then."""
    from framework.compiler.precompile import failures

    async for name, exc in failures(bundle, mcp=False, stopping=stopping):
        _log.warning("agent %r fails when called until this is fixed: %s", name, exc)
    if gc.get_freeze_count() and current() is bundle and not stopping():
        gc.freeze()


async def serve(options: ServeOptions) -> int:
    with starting_up():  # what start-up loads is frozen; the whole heap once the server is ready
        from framework.protocols.a2a import open_remote
        from framework.protocols.a2a.http import build_server, describe, store_url
        from framework.protocols.mcp import open_mcp
        from framework.runtime.runtime import Runtime
        from framework.spec import load_project

        project = load_project(options.project)  # CA_HOST, CA_PORT … are in its config from here on
    log_format = chosen(options.log_format, os.environ)
    configure(log_format)
    server = project.config.server
    host = options.host or server.host
    port = options.port if options.port is not None else server.port
    if not is_loopback(host) and server.auth is None and not options.insecure:
        raise UsageError(
            f"refusing to serve on {host} without authentication: anyone who can reach it could run your agents.\n"
            "Configure server.auth in ca.yaml, bind to 127.0.0.1, or pass --insecure if you really mean it."
        )
    base_url = (options.public_url or server.public_url or f"http://{host}:{port}").rstrip("/")
    lock = hold_serve_lock(project.root)
    async with AsyncExitStack() as stack:
        stack.callback(lock.close)
        listening = listen_on(host, port)  # a port in use: one line, before anything else starts
        stack.callback(listening.close)
        with starting_up():
            runtime = await Runtime.open(
                project, source="a2a-http", stack=stack, base_url=base_url, remote=open_remote, mcp=open_mcp
            )
            await check_store(store_url(runtime))
            served = build_server(runtime)
        # uvicorn's own wait only cuts connections once it is over: the runs are stopped first
        # (``Draining``), so the grace left is for the answers to be written.
        # In JSON, uvicorn's records go through the root logger's JSON handler instead of its own.
        config = uvicorn.Config(
            served.app,
            host=host,
            port=port,
            log_level="warning",
            log_config=None if log_format == "json" else uvicorn.config.LOGGING_CONFIG,
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        uv = Draining(config, lambda now: served.stop(runtime.bundle.project.config.server.shutdown_timeout, None, now))
        task = asyncio.create_task(uv.serve(sockets=[listening]))
        watcher = None
        if options.reload:
            from framework.runtime.reload import watch

            watcher = asyncio.create_task(watch(runtime))
        while not uv.started and not task.done():
            await asyncio.sleep(0.02)
        if uv.started:
            print(describe(runtime, base_url), flush=True)
            freeze_loaded()
            if watcher is None:  # --reload's watcher compiles every agent itself
                watcher = asyncio.create_task(warm(runtime.bundle, lambda: runtime.bundle, lambda: uv.should_exit))
        try:
            await task
        except SystemExit:  # uvicorn's word for a start-up that failed (it logged why)
            pass
        finally:
            if watcher is not None:
                watcher.cancel()
        if not uv.started:
            sys.stderr.write(f"error: could not start the server on {host}:{port}\n")
            return 1
    return uv.exit_code
