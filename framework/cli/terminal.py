"""Lines typed at the terminal, which Ctrl-C interrupts: the prompts of ``ca run`` and ``ca call``.

A prompt blocks the event loop's thread in a read of the terminal. Two things keep Ctrl-C from
reaching it on its own: asyncio's SIGINT handler only cancels the main task, which a blocked read
never notices (:func:`ctrl_c_interrupts_reads` puts Python's default handler back meanwhile); and
a read blocked in the kernel returns only when the signal is delivered to its own thread, while
the kernel may hand a signal sent to the process to any thread of it that does not block it (a
worker finishing, say), which runs Python's handler and leaves the read blocked. So :func:`line`
never blocks in a read: it waits in short polls, after each of which a handled signal raises, and
reads only what the terminal has (keeping what follows the line for the next one).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

POLL_S = 0.1
"""How long a prompt waits for input between looks at the signals that arrived meanwhile."""

_AHEAD: dict[int, bytearray] = {}
"""Per file descriptor: what was read past the last line returned (a terminal not in line mode
gives several lines at once)."""


@contextmanager
def ctrl_c_interrupts_reads() -> Iterator[None]:
    """Make Ctrl-C raise ``KeyboardInterrupt`` while reading the terminal (on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def line(stream: TextIO | None = None) -> str:
    """The next line typed on ``stream`` (the terminal on stdin), with its newline; at the end of
    input (Ctrl-D), what was typed before it, or ''."""
    stream = stream or sys.stdin
    fd = stream.fileno()
    ahead = _AHEAD.setdefault(fd, bytearray())
    while b"\n" not in ahead:
        if not select.select([fd], [], [], POLL_S)[0]:
            continue  # between two polls, a signal another thread took is handled here
        chunk = os.read(fd, 4096)
        if not chunk:  # the end of input: what is left is the last line
            taken = bytes(ahead)
            ahead.clear()
            return _text(taken, stream)
        ahead += chunk
    end = ahead.index(b"\n") + 1
    taken = bytes(ahead[:end])
    del ahead[:end]
    return _text(taken, stream)


def _text(data: bytes, stream: TextIO) -> str:
    return data.decode(stream.encoding or "utf-8", errors="replace")
