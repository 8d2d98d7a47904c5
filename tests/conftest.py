"""Shared fixtures: a runner for the real ``ca`` process and a temporary project builder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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


def writer_agent(name: str = "writer", file: str = "effects.log", extra: str = "") -> str:
    """A manual-profile agent whose only tool call appends 'hello' to ``file`` (``tools/side.py``:
    :data:`SIDE_EFFECT`), then answers "done": every call waits for an approval. ``extra``: more
    YAML lines (e.g. a budget)."""
    return f"""
        name: {name}
        profile: manual{extra}
        model:
          provider: scripted
          replies:
            - tool_calls: [{{name: append, args: {{file: {file}, text: hello}}}}]
            - done
        tools:
          - python: tools/side.py:append
    """


ProjectFactory = Callable[[dict[str, str]], Path]


@pytest.fixture
def make_project(tmp_path: Path) -> ProjectFactory:
    """Write ``{relative path: text}`` into a fresh folder; text is dedented."""

    def make(files: dict[str, str]) -> Path:
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return tmp_path

    return make
