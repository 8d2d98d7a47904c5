"""What governance costs per tool call: the full chain against the same run with it off.

    python bench/governance.py [--calls 40] [--runs 10]

One temporary project, one process, two Runtimes on the same stores: one governed
(capabilities, contract, profile, budgets, audit records for every call), one built
without the governance middleware. An agent with a zero-latency scripted model reads a
small file ``--calls`` times in one task (one ``fs.read`` per model turn, profile
autonomous, capabilities allowing the file, a budget it never reaches), then answers.
Both variants run once to warm up, then ``--runs`` times each, alternating, every task in
a new conversation. A tool call here is one turn of the agent loop: the model turn that
asks for it (budgets are checked before it, usage accounted after it) and the call itself
(capability, contract, profile and budget checks, execution, audit). The figures are the
mean wall time per tool call with and without governance, their ratio, and the difference.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def agent_yaml(calls: int) -> str:
    read = "    - tool_calls: [{name: fs.read, args: {path: notes.txt}}]\n"
    return (
        "name: reader\n"
        "model:\n"
        "  provider: scripted\n"
        "  replies:\n"
        f"{read * calls}"
        "    - read them all\n"
        "profile: autonomous\n"
        "tools: [fs.read]\n"
        'capabilities: {fs: {read: ["notes.txt"]}}\n'
        f"budget: {{max_tool_calls: {calls * 10}, max_turns: {calls * 10}, max_tokens: 100000000}}\n"
    )


async def measure(project: Path, calls: int, runs: int) -> tuple[list[float], list[float]]:
    """Seconds per task: (governed, ungoverned), ``runs`` of each."""
    from framework.runtime.events import RunFinished, ToolCallFinished
    from framework.runtime.runtime import Runtime
    from framework.spec import load_project

    async with AsyncExitStack() as stack:
        loaded = load_project(project)
        variants = {
            True: await Runtime.open(loaded, stack=stack, governed=True),
            False: await Runtime.open(loaded, stack=stack, governed=False),
        }
        counter = 0

        async def one(governed: bool) -> float:
            nonlocal counter
            counter += 1
            ok = 0
            start = time.perf_counter()
            async for event in variants[governed].send("reader", "read the notes", conversation=f"bench-{counter}"):
                if isinstance(event, ToolCallFinished) and not event.is_error:
                    ok += 1
                if isinstance(event, RunFinished):
                    elapsed = time.perf_counter() - start
                    if event.state != "completed" or ok != calls:
                        sys.exit(f"run failed (governed={governed}): {event.state} {event.error} {ok}/{calls} calls")
            return elapsed

        for governed in (True, False):  # warm-up: compile the graphs, first queries
            await one(governed)
        with_gov: list[float] = []
        without: list[float] = []
        for i in range(runs):
            order = (True, False) if i % 2 == 0 else (False, True)  # alternate which goes first
            for governed in order:
                (with_gov if governed else without).append(await one(governed))
    return with_gov, without


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40, help="fs.read calls in each task")
    parser.add_argument("--runs", type=int, default=10, help="tasks of each variant")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "agents").mkdir()
        (project / "agents" / "reader.yaml").write_text(agent_yaml(args.calls))
        (project / "notes.txt").write_text("remember the milk\n")
        with_gov, without = asyncio.run(measure(project, args.calls, args.runs))
    governed = statistics.mean(with_gov) / args.calls * 1000
    plain = statistics.mean(without) / args.calls * 1000
    print(
        f"governance overhead per tool call ({args.calls} fs.read calls per task, {args.runs} tasks per variant,"
        " zero-latency scripted model, one process, SQLite stores)"
    )
    print(f"  governed    {governed:.3f} ms per tool call   (median task {statistics.median(with_gov) * 1000:.1f} ms)")
    print(f"  ungoverned  {plain:.3f} ms per tool call   (median task {statistics.median(without) * 1000:.1f} ms)")
    print(f"  ratio       {governed / plain:.2f}x")
    print(f"  overhead    {governed - plain:+.3f} ms per tool call")


if __name__ == "__main__":
    main()
