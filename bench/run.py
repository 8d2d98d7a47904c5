"""What running an agent costs: cold start to first token, and framework overhead per turn.

    python bench/run.py [--runs 7] [--turns 200] [--floor] [--telemetry [--rounds 3]]

1. Cold `ca run` on the offline model, whole process: time from spawn to the first
   streamed text event on stdout (median of --runs).
2. Turns per second of a compiled agent with a zero-latency scripted model, in one
   process, through the real Runner (event translation) and the SQLite conversation
   store: one turn = one user message answered, each in a new conversation.

``--floor`` times, interleaved with each cold `ca run`, the required stack's floor: a process
that imports LangGraph's prebuilt agent (langchain's ``create_agent``, as ca compiles one), builds
it on a chat model that echoes with its checkpoints in SQLite (bench/serve.py's floor agent), and
prints its first streamed token; no ca code: what the stack costs a process that uses it as its
libraries ship it (ca defers parts of their imports: framework/deferred.py).

``--telemetry`` measures what tracing costs, on and off interleaved, exporting over OTLP/HTTP to
a local sink in a process of its own (bench/otlp_sink.py):

3. Cold `ca run` to first token, off and on alternately (on: ``OTEL_EXPORTER_OTLP_ENDPOINT``
   set, so the SDK is imported and a provider built before the run).
4. Turns through the Runtime (what `ca run` and `ca serve` drive: task record, audit, the run's
   ``invoke_agent`` and ``chat`` spans, with the audit records as events), --rounds rounds off
   and on alternately, each a fresh Runtime: wall and CPU time (this process, the exporter's
   thread included) per turn, and the paired difference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
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


def time_to_first_token(project: Path, extra: dict[str, str] | None = None, *, floor: bool = False) -> float:
    command = [sys.executable, "-m", "framework", "run", "assistant", "hello there", "--json"]
    if floor:
        command = [sys.executable, __file__, "--floor-process", str(project / "floor.db")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "CA_MODEL": "offline", **(extra or {})}
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        first = None
        for line in proc.stdout:
            if first is None and line.startswith(b'{"kind": "text"'):
                first = time.perf_counter() - start
        proc.wait()
    if first is None or proc.returncode != 0:
        sys.exit(f"{command[1]} failed (exit {proc.returncode})")
    return first


async def floor_process(path: str) -> None:
    """The floor's one turn: its first token on stdout as `ca run --json` prints one."""
    from bench.serve import agent_graph

    graph = agent_graph(f"graph-sqlite:{path}")
    config = {"configurable": {"thread_id": os.urandom(8).hex()}}
    async for chunk, _ in graph.astream({"messages": [("user", "hello there")]}, config, stream_mode="messages"):
        if chunk.text:
            print(json.dumps({"kind": "text", "text": chunk.text}), flush=True)


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


def cold_traced(project: Path, runs: int, endpoint: str) -> tuple[list[float], list[float]]:
    """Time to first token with tracing off and on, alternately."""
    off: list[float] = []
    on: list[float] = []
    for _ in range(runs):
        off.append(time_to_first_token(project))
        on.append(time_to_first_token(project, {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "bench"}))
    return off, on


async def runtime_turns(project: Path, turns: int) -> tuple[float, float]:
    """Wall and CPU milliseconds per turn through a fresh Runtime (tracing as currently installed)."""
    import uuid
    from contextlib import AsyncExitStack

    from framework.runtime.events import RunFinished
    from framework.runtime.runtime import Runtime
    from framework.spec import load_project

    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(load_project(project), source="cli", stack=stack)

        async def one() -> None:
            async for event in runtime.send("fast", "go", conversation=uuid.uuid4().hex):
                if isinstance(event, RunFinished):
                    assert event.state == "completed", event.error

        for _ in range(10):  # warm-up
            await one()
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(turns):
            await one()
        return (time.perf_counter() - start) / turns * 1000, (time.process_time() - cpu) / turns * 1000


def traced_turns(project: Path, turns: int, rounds: int, endpoint: str) -> dict[bool, list[tuple[float, float]]]:
    """Rounds of :func:`runtime_turns` with tracing off and on, alternately, in this process."""
    from framework.runtime import telemetry

    os.environ.update({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "bench"})
    tracing = telemetry.start()  # the provider and exporter `ca` builds from these variables
    assert tracing is not None
    figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(rounds):
        for on in (False, True):
            if on:
                os.environ.pop("OTEL_SDK_DISABLED", None)
                telemetry.install(tracing.provider, contents=False)
            else:
                telemetry.uninstall()  # flushes what the last round exported
                os.environ["OTEL_SDK_DISABLED"] = "true"  # so Runtime.open starts no tracing of its own
            figures[on].append(asyncio.run(runtime_turns(project, turns)))
    telemetry.uninstall()
    return figures


def spread(values: list[float], unit: str, digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} {unit} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def report_telemetry(args: argparse.Namespace, project: Path) -> None:
    sys.path.insert(0, str(REPO))
    from bench.otlp_sink import Sink

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    sink = Sink(port)
    try:
        off, on = cold_traced(project, args.runs, sink.endpoint)
        figures = traced_turns(project, args.turns, args.rounds, sink.endpoint)
        exported = sink.count()
    finally:
        sink.stop()
    print(f"telemetry (OTLP/HTTP to a local sink), off and on interleaved; load average {os.getloadavg()[0]:.2f}")
    print(f"  cold `ca run` to first token ({args.runs} runs each)")
    print(f"    off {spread(off, 's', 3)}   on {spread(on, 's', 3)}")
    print(f"    on - off, paired: {spread([b - a for a, b in zip(off, on, strict=True)], 's', 3)}")
    print(f"  turns through the Runtime ({args.rounds} rounds of {args.turns} turns each, fresh Runtime per round)")
    for label, index in (("wall", 0), ("CPU", 1)):
        plain = [f[index] for f in figures[False]]
        traced = [f[index] for f in figures[True]]
        delta = [b - a for a, b in zip(plain, traced, strict=True)]
        print(
            f"    {label:4} off {spread(plain, 'ms')}   on {spread(traced, 'ms')}   on - off {spread(delta, 'ms')} per turn"
        )
    print(f"  exported {exported[0]} OTLP requests, {exported[1] / 1024:.0f} KiB to the sink")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--telemetry", action="store_true", help="also measure tracing off against on (see above)")
    parser.add_argument("--rounds", type=int, default=3, help="with --telemetry: interleaved rounds off and on")
    parser.add_argument("--floor", action="store_true", help="also time the required stack's floor (see above)")
    parser.add_argument("--floor-process", metavar="DB", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_process:
        asyncio.run(floor_process(args.floor_process))
        return
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run(
            [sys.executable, "-m", "framework", "init", str(project)], env=env, check=True, capture_output=True
        )
        (project / "agents" / "fast.yaml").write_text(AGENT)
        time_to_first_token(project)  # warm the OS file cache and .ca/ once
        if args.floor:
            time_to_first_token(project, floor=True)
        firsts, floors = [], []
        for _ in range(args.runs):
            firsts.append(time_to_first_token(project))
            if args.floor:
                floors.append(time_to_first_token(project, floor=True))
        rate, per_turn = asyncio.run(turns_per_second(project, args.turns))
        print(f"cold `ca run` to first token (offline model, whole process, {args.runs} runs)")
        print(f"  median {statistics.median(firsts):.3f} s   min {min(firsts):.3f} s   max {max(firsts):.3f} s")
        if floors:
            print("the required stack's floor to first token (LangGraph's prebuilt agent on SQLite, no ca code)")
            print(f"  median {statistics.median(floors):.3f} s   min {min(floors):.3f} s   max {max(floors):.3f} s")
        print(f"turns per second, zero-latency scripted model, one process ({args.turns} turns, SQLite store)")
        print(f"  {rate:.1f} turns/s   {per_turn:.2f} ms per turn")
        if args.telemetry:
            report_telemetry(args, project)


if __name__ == "__main__":
    main()
