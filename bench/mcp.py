"""What an MCP tool call costs: first call (server spawn included), and warm calls through our
client and our whole chain against a direct call with the official ``mcp`` SDK.

    python bench/mcp.py [--calls 200] [--turns 40]

One temporary project whose agent uses the test server (``tests/fixtures/mcp/server.py``, built
with the ``mcp`` SDK) over stdio. Figures:

* first call: a fresh Runtime, one task whose one tool call is ``notes.echo`` — wall time from
  ``send`` to the call's result (the server is started by that task);
* direct: ``mcp.Client.call_tool("echo")`` on a warm session, mean over ``--calls``;
* our client: ``McpHub.call`` (a session on the hub's thread; the call crosses threads), mean;
* agent loop: one task of ``--turns`` tool calls (one per model turn, a zero-latency scripted
  model, profile autonomous, the full governance chain and audit), mean per call, for
  ``notes.echo`` and for a python tool that does nothing: the difference is what an MCP tool
  costs over any other tool, to compare with the direct call.
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
# This file is named mcp.py: its folder must not shadow the mcp package it measures.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO))
SERVER = REPO / "tests" / "fixtures" / "mcp" / "server.py"


def write_project(root: Path, turns: int) -> None:
    (root / "agents").mkdir()
    (root / "tools").mkdir()
    (root / "tools" / "noop.py").write_text("def noop(text: str) -> str:\n    return text\n")
    (root / "ca.yaml").write_text(f"mcp_servers:\n  notes: {{command: {sys.executable}, args: [{SERVER}]}}\n")
    for name, tool, ref in (
        ("first", "notes.echo", "{mcp: notes}"),
        ("viamcp", "notes.echo", "{mcp: notes}"),
        ("viapy", "noop", "{python: 'tools/noop.py:noop'}"),
    ):
        n = 1 if name == "first" else turns
        call = f"    - tool_calls: [{{name: {tool}, args: {{text: hi}}}}]\n"
        (root / "agents" / f"{name}.yaml").write_text(
            f"name: {name}\nprofile: autonomous\nmodel:\n  provider: scripted\n  replies:\n{call * n}    - done\n"
            f"tools: [{ref}]\ncapabilities: {{mcp: {{allow: ['notes.*']}}}}\n"
            f"budget: {{max_tool_calls: {n * 10}, max_turns: {n * 10}, max_tokens: 100000000}}\n"
        )


async def task(runtime: object, agent: str, conversation: str, expect: int) -> tuple[float, float]:
    """(seconds to the first tool result, seconds for the whole task)."""
    from framework.runtime.events import RunFinished, ToolCallFinished

    start, first, ok = time.perf_counter(), 0.0, 0
    async for event in runtime.send(agent, "go", conversation=conversation):  # type: ignore[attr-defined]
        if isinstance(event, ToolCallFinished):
            ok += 0 if event.is_error else 1
            first = first or time.perf_counter() - start
        if isinstance(event, RunFinished) and (event.state != "completed" or ok != expect):
            sys.exit(f"{agent}: {event.state} {event.error} ({ok}/{expect} calls)")
    return first, time.perf_counter() - start


async def direct(calls: int) -> float:
    from mcp import Client, StdioServerParameters

    async with Client(StdioServerParameters(command=sys.executable, args=[str(SERVER)])) as client:
        for _ in range(10):
            await client.call_tool("echo", {"text": "hi"})
        start = time.perf_counter()
        for _ in range(calls):
            await client.call_tool("echo", {"text": "hi"})
        return (time.perf_counter() - start) / calls


async def main(calls: int, turns: int) -> None:
    from framework.protocols.a2a import open_remote
    from framework.protocols.mcp import open_mcp
    from framework.runtime.runtime import Runtime
    from framework.spec import load_project

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_project(root, turns)
        project = load_project(root)
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(project, stack=stack, remote=open_remote, mcp=open_mcp)
            first, _ = await task(runtime, "first", "c-first", 1)
            hub = runtime.bundle.mcp
            assert hub is not None
            for _ in range(10):
                await hub.call("notes", "echo", {"text": "hi"})
            start = time.perf_counter()
            for _ in range(calls):
                await hub.call("notes", "echo", {"text": "hi"})
            client = (time.perf_counter() - start) / calls
            loops: dict[str, list[float]] = {"viamcp": [], "viapy": []}
            for i in range(6):  # the first round warms up
                for agent in loops:
                    _, whole = await task(runtime, agent, f"c-{agent}-{i}", turns)
                    if i:
                        loops[agent].append(whole / turns)
        sdk = await direct(calls)
    mcp_loop, py_loop = statistics.median(loops["viamcp"]), statistics.median(loops["viapy"])
    ms = 1000
    print(f"first MCP call (server spawn included):   {first * ms:8.1f} ms")
    print(f"direct mcp SDK call (warm):               {sdk * ms:8.3f} ms")
    print(f"our client, McpHub.call (warm):           {client * ms:8.3f} ms  (+{(client - sdk) * ms:.3f} ms)")
    print(f"agent loop, per MCP tool call:            {mcp_loop * ms:8.3f} ms")
    print(f"agent loop, per python tool call:         {py_loop * ms:8.3f} ms")
    extra = mcp_loop - py_loop - sdk
    print(f"MCP tool over any tool, beyond the SDK:   {extra * ms:8.3f} ms  (goal <= 2 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.turns))
