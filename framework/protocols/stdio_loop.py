"""The loop of a stdio server (``ca run --stdio`` for A2A and ACP, ``ca mcp serve``): its request
lines, read on a thread of their own, and its stop on Ctrl-C or SIGTERM, which never waits for input.

A blocking read in the event loop's default executor holds up the end of the process:
``asyncio.run`` joins that executor's threads when it returns, so after Ctrl-C ``ca run --stdio``
stayed until the client closed its end of the pipe (an editor may never do so). The reader here
is a daemon thread instead, left blocked in its read when the process ends.

A daemon thread still blocked at exit holds the lock of the buffered stream it reads, so that
stream must be the reader's alone: never ``sys.stdin``, which the interpreter may touch while it
shuts down (Python then aborts with a fatal error). :func:`framework.cli.stdio.protocol_input`
opens such a stream.

:func:`run` runs a server's coroutine until it returns or is stopped: Ctrl-C and SIGTERM cancel it
alike, so that it cancels its work in progress (recorded ``canceled``, tools stopped) and closes its
stores before the process exits 130.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, BinaryIO

from framework.protocols.jsontext import read_line


class LineReader:
    """One line per :meth:`read`, as :func:`read_line` gives it (bytes, ``b""`` at the end, or an
    over-long line's size), read from ``stream`` on a daemon thread only when asked for.

    One line is read per call, never ahead, so a client that writes faster than it is served is
    held back by its pipe; the thread ends with the stream. A read cancelled while the thread waits
    for input loses the line that comes next: cancel only to stop reading.
    """

    def __init__(self, stream: BinaryIO, limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._asks: queue.SimpleQueue[asyncio.Future[bytes | int]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ended = False
        """The stream has ended (the thread is gone): every later read is ``b""``."""

    async def read(self) -> bytes | int:
        if self._ended:
            return b""
        future: asyncio.Future[bytes | int] = asyncio.get_running_loop().create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="ca-stdin", daemon=True)
            self._thread.start()
        self._asks.put(future)
        return await future

    def _serve(self) -> None:
        while True:
            future = self._asks.get()
            try:
                line = read_line(self._stream, self._limit)
            except (OSError, ValueError) as exc:  # the stream failed or was closed: the asker hears it
                if not _deliver(future, exc):
                    return
                continue
            self._ended = line == b""
            if not _deliver(future, line) or self._ended:
                return


def _deliver(future: asyncio.Future[bytes | int], outcome: bytes | int | BaseException) -> bool:
    """Hand ``outcome`` to the loop that asked; False once that loop is closed (nobody reads any more)."""
    try:
        future.get_loop().call_soon_threadsafe(_settle, future, outcome)
    except RuntimeError:  # the loop is closed: the server has stopped, this line has no reader
        return False
    return True


def _settle(future: asyncio.Future[bytes | int], outcome: bytes | int | BaseException) -> None:
    if future.done():  # cancelled: the server stopped reading
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


LINE_LIMIT = 64 * 1024 * 1024
"""Bytes one ACP or MCP message may have (a prompt or a tool call can embed files); a longer line
is refused and skipped. A2A over stdio takes ``server.max_request_bytes``, as over HTTP."""

EXIT_INTERRUPTED = 130
"""The exit code of a server stopped by Ctrl-C or SIGTERM."""

STOP_GRACE = 10.0
"""Seconds the work a stop cancelled gets to end (its task recorded, its tools' processes killed);
``ca serve``'s too."""


def run(main: Coroutine[Any, Any, int]) -> int:
    """``main``'s exit code, or :data:`EXIT_INTERRUPTED` when Ctrl-C or SIGTERM cancelled it.

    A stopped server ends its process here, once ``main`` has cancelled its work and closed its
    stores: a synchronous tool still running in asyncio's default executor (a ``time.sleep``, a
    blocking HTTP call) cannot be interrupted, and the interpreter would wait for it at exit.
    """
    runner = asyncio.Runner()
    try:
        code = runner.run(_stoppable(main))
    except KeyboardInterrupt:  # the runner cancelled main on Ctrl-C, and main has ended
        code = EXIT_INTERRUPTED
    except BaseException:
        runner.close()
        raise
    if code == EXIT_INTERRUPTED:
        _wind_down(runner.get_loop())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    runner.close()
    return code


def _wind_down(loop: asyncio.AbstractEventLoop) -> None:
    """What ``Runner.close`` does but wait for the default executor's threads: the tasks left are
    cancelled (a run's tool then kills its process group) and the async generators closed."""
    left = asyncio.all_tasks(loop)
    for task in left:
        task.cancel()
    if left:
        loop.run_until_complete(asyncio.wait(left, timeout=STOP_GRACE))
    try:
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), STOP_GRACE))
    except TimeoutError:
        sys.stderr.write(f"warning: stopping: what was running did not end within {STOP_GRACE:g} s\n")


async def _stoppable(main: Coroutine[Any, Any, int]) -> int:
    """``main``, which SIGTERM cancels as ``asyncio.run`` cancels it on Ctrl-C."""
    task = asyncio.current_task()
    assert task is not None
    terminated = False

    def terminate() -> None:
        nonlocal terminated
        terminated = True
        task.cancel()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, terminate)
    try:
        return await main
    except asyncio.CancelledError:
        if not terminated:
            raise
        return EXIT_INTERRUPTED
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
