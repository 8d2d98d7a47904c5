"""Processes opening a new project's stores at the same instant (an editor spawning two agents, a
server and a CLI started together): each opens them, none is told the database is locked.

SQLite answers BUSY at once, whatever the busy timeout, to all but one of the connections that switch
a new file to WAL together, or find a table missing while another creates it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import write_project

pytestmark = pytest.mark.e2e

ROUNDS = 6
PROCESSES = 3
OPEN = """
import asyncio, sys, time
from contextlib import AsyncExitStack
from pathlib import Path

from framework.runtime.runtime import Runtime
from framework.spec import load_project

async def main() -> None:
    project = load_project(Path(sys.argv[1]))
    while time.time() < float(sys.argv[2]):  # every process opens at the same instant
        pass
    async with AsyncExitStack() as stack:
        await Runtime.open(project, source="cli", stack=stack)

asyncio.run(main())
"""


def test_processes_opening_a_new_project_together_all_open_it(tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        root = write_project(
            tmp_path / f"round{round_}", {"ca.yaml": "default_agent: echo\n", "agents/echo.yaml": "name: echo\n"}
        )
        at = time.time() + 3.0  # past every process's imports
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN, str(root), repr(at)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(PROCESSES)
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, f"round {round_}: {err[-2000:]}"
            assert "locked" not in err, err
