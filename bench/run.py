"""What running an agent costs: cold start to first token, and framework overhead per turn.

    python bench/run.py [--runs 7] [--turns 200]

1. Cold `ca run` on the offline model, whole process: time from spawn to the first
   streamed text event on stdout (median of --runs).
2. Turns per second of a compiled agent with a zero-latency scripted model, in one
   process, through the real Runner (event translation) and the SQLite conversation
   store: one turn = one user message answered, each in a new conversation.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

AGENT = """\
name: fast
model:
  provider: scripted
  replies: ["done"]
"""


def time_to_first_token(project: Path) -> float:
    command = [sys.executable, "-m", "framework", "run", "assistant", "hello there", "--json"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "CA_MODEL": "offline"}
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        first = None
        for line in proc.stdout:
            if first is None and line.startswith(b'{"kind": "text"'):
                first = time.perf_counter() - start
        proc.wait()
    if first is None or proc.returncode != 0:
        sys.exit(f"ca run failed (exit {proc.returncode})")
    return first


async def turns_per_second(project: Path, turns: int) -> tuple[float, float]:
    from framework.compiler.bundle import build_bundle
    from framework.runtime.events import RunFinished
    from framework.runtime.runner import Runner
    from framework.runtime.stores import open_checkpointer
    from framework.spec import load_project

    loaded = load_project(project)
    async with open_checkpointer(loaded.root) as saver:
        runner = Runner(build_bundle(loaded, checkpointer=saver))

        async def one(i: int) -> None:
            async for event in runner.run("fast", "go", thread_id=f"bench-{i}"):
                if isinstance(event, RunFinished):
                    assert event.state == "completed", event.error

        for i in range(10):  # warm-up: compile, first queries
            await one(-i - 1)
        start = time.perf_counter()
        for i in range(turns):
            await one(i)
        elapsed = time.perf_counter() - start
    return turns / elapsed, elapsed / turns * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run(
            [sys.executable, "-m", "framework", "init", str(project)], env=env, check=True, capture_output=True
        )
        (project / "agents" / "fast.yaml").write_text(AGENT)
        time_to_first_token(project)  # warm the OS file cache and .ca/ once
        firsts = [time_to_first_token(project) for _ in range(args.runs)]
        rate, per_turn = asyncio.run(turns_per_second(project, args.turns))
    print(f"cold `ca run` to first token (offline model, whole process, {args.runs} runs)")
    print(f"  median {statistics.median(firsts):.3f} s   min {min(firsts):.3f} s   max {max(firsts):.3f} s")
    print(f"turns per second, zero-latency scripted model, one process ({args.turns} turns, SQLite store)")
    print(f"  {rate:.1f} turns/s   {per_turn:.2f} ms per turn")


if __name__ == "__main__":
    main()
