"""Shared fixtures and the helpers every kind of test uses: a runner for the real ``ca`` process,
project files, free loopback ports and the JSON lines of ``ca run --json``.

Helpers that only some tests need live beside this file, in support modules (never in a test
module): :mod:`tests.serving` (servers as real processes), :mod:`tests.a2a_peers` (A2A messages
and a ``ca run --stdio`` peer), :mod:`tests.driving` (the Runtime in-process),
:mod:`tests.fake_agent` (a recording A2A server in a thread), :mod:`tests.corpus` (the
invalid-project fixtures).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
CA = [sys.executable, "-m", "framework"]


def run_ca(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run the real ``ca`` command line in a new process (its standard input is not a terminal)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [*CA, *args],
        cwd=cwd or REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        input=stdin,
    )


def free_port() -> int:
    """A TCP port free on loopback right now (for a server the test starts)."""
    [port] = free_ports(1)
    return port


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (held open together so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def read_rest(master: int) -> bytes:
    """What a pseudo-terminal's program still wrote to it, read until it goes quiet or closes."""
    rest = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal's other end closed with the process
            break
        if not chunk:
            break
        rest += chunk
    return rest


def events(stdout: str) -> list[dict[str, Any]]:
    """The events ``ca run --json`` printed, one JSON object a line."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


SIDE_EFFECT = '''
    from pathlib import Path


    def append(file: str, text: str) -> str:
        """Append a line to a file (a side effect that must happen exactly once)."""
        with Path(file).open("a") as f:
            f.write(text + "\\n")
        return "appended"
'''
"""``tools/side.py`` for tests: a python tool whose effect shows whether (and how often) it ran."""

NAP = '''
    import asyncio
    from pathlib import Path


    async def nap(seconds: float) -> str:
        """Sleep for a while; leave a mark when the sleep is interrupted."""
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            Path("nap-interrupted").write_text("yes")
            raise
        return "rested"
'''
"""``tools/nap.py`` for tests: a slow python tool that leaves ``nap-interrupted`` behind when cancelled."""


NAPPER = """
name: napper
profile: autonomous
model:
  provider: scripted
  replies:
    - tool_calls: [{name: nap, args: {seconds: 20}}]
    - rested
tools:
  - python: tools/nap.py:nap
"""
"""``agents/napper.yaml`` for tests: an agent whose one tool call naps 20 s (``tools/nap.py``: :data:`NAP`),
so its task stays running while a test looks at it."""


def writer_agent(
    name: str = "writer", file: str = "effects.log", extra: str = "", *, reply: str = "done", description: str = ""
) -> str:
    """A manual-profile agent whose only tool call appends 'hello' to ``file`` (``tools/side.py``:
    :data:`SIDE_EFFECT`), then answers ``reply``: every call waits for an approval. ``extra``: more
    YAML lines (e.g. a budget)."""
    described = f"\n        description: {description}" if description else ""
    return f"""
        name: {name}{described}
        profile: manual{extra}
        model:
          provider: scripted
          replies:
            - tool_calls: [{{name: append, args: {{file: {file}, text: hello}}}}]
            - {reply}
        tools:
          - python: tools/side.py:append
    """


def write_project(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``{relative path: text}`` under ``root`` (text dedented); ``root``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


ProjectFactory = Callable[[dict[str, str]], Path]


@pytest.fixture(scope="session", autouse=True)
def no_server_outlives_the_session() -> Iterator[None]:
    """Kill, at the end of the session, any server a test started and did not stop (tests.serving)."""
    yield
    from tests.serving import kill_launched  # tests.serving imports this module

    left = kill_launched()
    if left:
        print(f"\nkilled {len(left)} server process(es) the tests left running: pids {left}", file=sys.stderr)


@pytest.fixture
def make_project(tmp_path: Path) -> ProjectFactory:
    """Write ``{relative path: text}`` into a fresh folder; text is dedented."""

    def make(files: dict[str, str]) -> Path:
        return write_project(tmp_path, files)

    return make
