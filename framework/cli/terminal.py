"""Lines typed at the terminal, which Ctrl-C interrupts: the prompts of ``ca run`` and ``ca call``.

A prompt blocks the event loop's thread in a read of the terminal. Two things keep Ctrl-C from
reaching it on its own: asyncio's SIGINT handler only cancels the main task, which a blocked read
never notices (:func:`ctrl_c_interrupts_reads` puts Python's default handler back meanwhile); and
a read blocked in the kernel returns only when the signal is delivered to its own thread, while
the kernel may hand a signal sent to the process to any thread of it that does not block it (a
worker finishing, say), which runs Python's handler and leaves the read blocked (:func:`line`
waits in short polls instead, after each of which a handled signal raises).
"""

from __future__ import annotations

import select
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

POLL_S = 0.1
"""How long a prompt waits for input between looks at the signals that arrived meanwhile."""


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
    """The next line typed on ``stream`` (the terminal on stdin), with its newline; '' at its end."""
    stream = stream or sys.stdin
    while not select.select([stream], [], [], POLL_S)[0]:
        pass  # between two polls, a signal another thread took is handled here
    return stream.readline()
