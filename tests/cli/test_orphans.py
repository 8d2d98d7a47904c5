"""A `ca approve` killed mid-tool leaves its task `working`; the next open of the project settles it.

Only a task whose process is really gone is settled (failed, with the reason): a task another
live process is running is never touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CA, NAPPER, REPO, ProjectFactory, run_ca

NAP_MARKED = '''
    import asyncio
    from pathlib import Path


    async def nap(seconds: float) -> str:
        """Leave ``napping`` behind, then sleep."""
        Path("napping").write_text("yes")
        await asyncio.sleep(seconds)
        return "rested"
'''

SLOW_WRITER = NAPPER.replace("name: napper", "name: slow").replace("profile: autonomous", "profile: manual")
"""The napper under the manual profile: its nap waits for an approval."""


def _task(root: Path, task_id: str) -> dict[str, Any]:
    listed = run_ca("tasks", "list", "--json", cwd=root)
    assert listed.returncode == 0, listed.stderr
    [task] = [t for t in json.loads(listed.stdout) if t["id"] == task_id]
    return dict(task)


def _approving(make_project: ProjectFactory) -> tuple[Path, str, subprocess.Popen[bytes]]:
    """A paused task of ``slow`` and a `ca approve` of it, returned once its 20-s tool is running."""
    root = make_project({"tools/nap.py": NAP_MARKED, "agents/slow.yaml": SLOW_WRITER})
    paused = run_ca("run", "slow", "go", "--json", cwd=root)
    assert paused.returncode == 3, paused.stderr
    task_id = json.loads(paused.stdout.splitlines()[-1])["task_id"]
    proc = subprocess.Popen(
        [*CA, "approve", task_id], cwd=root, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while not (root / "napping").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("ca approve never started the tool")
        time.sleep(0.05)
    return root, task_id, proc


def test_a_killed_approve_leaves_its_task_failed_with_the_reason(make_project: ProjectFactory) -> None:
    root, task_id, proc = _approving(make_project)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert _task(root, task_id)["state"] == "working"  # nothing settled it yet

    again = run_ca("run", "slow", "hello", cwd=root)  # the next open of the project
    assert again.returncode == 3, again.stderr
    task = _task(root, task_id)
    assert task["state"] == "failed"
    assert f"pid {proc.pid}" in task["error"] and "stopped while this task was running" in task["error"]
    assert task["failure"]["code"] == "run_failed"


def test_a_task_a_live_process_runs_is_left_working(make_project: ProjectFactory) -> None:
    root, task_id, proc = _approving(make_project)
    try:
        other = run_ca("run", "slow", "hello", cwd=root)  # opens the project while approve runs
        assert other.returncode == 3, other.stderr
        assert _task(root, task_id)["state"] == "working"
    finally:
        proc.kill()
        proc.wait(timeout=10)
