"""The prompts' reading of the terminal (framework/cli/terminal.py), on a real pseudo-terminal."""

from __future__ import annotations

import os
import pty
import signal
import termios
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

import pytest

from framework.cli import terminal

Later = Callable[[float, Callable[[], object]], None]


@pytest.fixture
def tty() -> Iterator[tuple[int, TextIO]]:
    """A pseudo-terminal: the fd its keyboard is typed on, and its other end as a prompt reads it."""
    master, slave = pty.openpty()
    stream = open(slave, encoding="utf-8", closefd=False)  # noqa: SIM115 - closed below
    try:
        yield master, stream
    finally:
        stream.close()
        os.close(slave)
        os.close(master)


@pytest.fixture
def later() -> Iterator[Later]:
    """``later(seconds, act)``: ``act()`` on a thread of its own after ``seconds``, unless the test ended."""
    timers: list[threading.Timer] = []

    def schedule(seconds: float, act: Callable[[], object]) -> None:
        timers.append(timer := threading.Timer(seconds, act))
        timer.start()

    yield schedule
    for timer in timers:
        timer.cancel()
        timer.join()


def test_ctrl_c_that_another_thread_received_interrupts_the_wait(tty: tuple[int, TextIO], later: Later) -> None:
    """The kernel may give SIGINT to any thread of the process: Python's handler then runs there, and
    a read blocked in the main thread would not return until Enter (typed here after 3 s)."""
    master, stream = tty
    later(0.3, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGINT))  # to that thread only
    later(3.0, lambda: os.write(master, b"\n"))
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), terminal.ctrl_c_interrupts_reads():
        terminal.line(stream)
    assert time.monotonic() - start < 1.5


def test_lines_a_terminal_gives_at_once_are_each_read(tty: tuple[int, TextIO], later: Later) -> None:
    """A terminal out of line mode gives both lines to one read: the second is not waited for."""
    master, stream = tty
    attributes = termios.tcgetattr(stream.fileno())
    attributes[3] &= ~termios.ICANON
    termios.tcsetattr(stream.fileno(), termios.TCSANOW, attributes)
    os.write(master, b"e\n{}\n")
    later(3.0, lambda: os.write(master, b"late\n"))
    start = time.monotonic()
    assert [terminal.line(stream), terminal.line(stream)] == ["e\n", "{}\n"]
    assert time.monotonic() - start < 1.5


def test_the_end_of_input_gives_what_was_typed_before_it_then_nothing(tty: tuple[int, TextIO]) -> None:
    master, stream = tty
    os.write(master, b"ab\x04")  # Ctrl-D after some text ends that text; a second ends the input
    os.write(master, b"\x04")
    assert terminal.line(stream) == "ab"
    os.write(master, b"\x04")
    assert terminal.line(stream) == ""
    os.write(master, "é\n".encode())
    assert terminal.line(stream) == "é\n"
