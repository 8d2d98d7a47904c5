"""Concurrency under a slow model: many tasks in flight at once, each waiting on its model.

    python bench/slow_model.py [--tasks 1000] [--delay 2.0] [--floor]

`ca serve` runs one agent whose model is a local OpenAI-compatible server (this file run
with ``--fake-provider``) that answers every chat completion after --delay seconds, through
the real provider integration (langchain-openai). --tasks SendMessage requests are sent at
once (each a new context), then as many SendStreamingMessage, each mode on a fresh server (so
its memory is not what the other mode left). The waits overlap, so the wall time should be the
delay plus our own CPU: the goal is <= 5 s for 1000 tasks at a 2-s delay. Printed per mode: wall
time, failures, p50/p99, the peak number of model requests in flight at the provider, the
server's RSS per in-flight task (peak RSS during the load minus RSS before it, divided by
--tasks) and its CPU time per task (the server process and its children).

``--floor`` loads, after `ca serve` in each mode, bench/serve.py's floor of the required stack on
the same provider: a2a-sdk serving LangGraph's prebuilt agent on langchain-openai's ``ChatOpenAI``
as it ships, its checkpoints committed to SQLite; no ca code, no task or audit record.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve import (
    HEADERS,
    REQUEST_TIMEOUT,
    free_port,
    rss_kib,
    send_body,
    spawn,
    spawn_bare,
    stop,
    tree_cpu_seconds,
    wait_ready,
)

REPLY = "slow and steady"


# -- the fake provider (run in its own process) ----------------------------------------------


def fake_provider(port: int, delay: float) -> None:
    """An OpenAI-compatible chat completions endpoint that answers after ``delay`` seconds."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    state = {"in_flight": 0, "peak": 0}

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> str:
        body: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "slow"}
        body["choices"] = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
        if usage:
            body["usage"] = usage
        return f"data: {json.dumps(body)}\n\n"

    async def completions(request: Request) -> Response:
        body = await request.json()
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        try:
            await asyncio.sleep(delay)
        finally:
            state["in_flight"] -= 1
        usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
        if not body.get("stream"):
            message = {"role": "assistant", "content": REPLY}
            return JSONResponse(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "slow",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": usage,
                }
            )

        async def stream() -> Any:
            yield chunk({"role": "assistant", "content": REPLY})
            yield chunk({}, "stop")
            yield chunk({}, usage=usage)
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def peak(_: Request) -> Response:
        answer = JSONResponse(dict(state))
        state["peak"] = state["in_flight"]
        return answer

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]), Route("/peak", peak)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=4096)


# -- load ------------------------------------------------------------------------------------


def project(root: Path, provider_url: str) -> None:
    (root / "agents").mkdir(parents=True)
    (root / "ca.yaml").write_text("default_agent: slow\n")
    (root / "agents" / "slow.yaml").write_text(
        "name: slow\n"
        "model:\n"
        "  provider: openai\n"
        "  name: slow\n"
        f"  base_url: {provider_url}\n"
        "  api_key_env: FAKE_PROVIDER_KEY\n"
        "  params: {max_retries: 0, timeout: 60}\n"
    )


async def one(http: Any, url: str, streaming: bool) -> tuple[float, str | None]:
    start = time.perf_counter()
    method = "SendStreamingMessage" if streaming else "SendMessage"
    body = send_body("hello", method=method)
    try:
        if not streaming:
            async with http.post(url, json=body) as response:
                answer = await response.json()
            state = answer.get("result", {}).get("task", {}).get("status", {}).get("state")
            problem = None if state == "TASK_STATE_COMPLETED" else f"state {state}: {str(answer)[:200]}"
        else:
            last = b""
            async with http.post(url, json=body, headers={"Accept": "text/event-stream"}) as response:
                async for line in response.content:
                    if line.startswith(b"data:"):
                        last = line
            problem = None if b"TASK_STATE_COMPLETED" in last else f"last event: {_said(last)}"
    except Exception as exc:  # a bench reports every failure and goes on
        problem = f"{type(exc).__name__}: {exc}"
    return time.perf_counter() - start, problem


def _said(event: bytes) -> str:
    """A stream's last event, shortly: its state and the first text of its message (a failure's reason)."""
    try:
        status = json.loads(event.removeprefix(b"data:"))["result"]["statusUpdate"]["status"]
        text = next((p["text"] for p in status.get("message", {}).get("parts", []) if "text" in p), "")
        return f"{status['state']}: {text[:300]}"
    except (ValueError, KeyError, TypeError):
        return repr(event[:300])


async def load(url: str, tasks: int, streaming: bool, pid: int) -> dict[str, Any]:
    import aiohttp

    peak_rss = [rss_kib(pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak_rss.append(rss_kib(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    before = rss_kib(pid)
    connector = aiohttp.TCPConnector(limit=tasks)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT * 4)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=HEADERS) as http:
        sampler.start()
        start = time.perf_counter()
        results = await asyncio.gather(*(one(http, url, streaming) for _ in range(tasks)))
        wall = time.perf_counter() - start
    done.set()
    sampler.join()
    times = sorted(t for t, _ in results)
    return {
        "wall": wall,
        "failures": [p for _, p in results if p],
        "p50": times[len(times) // 2],
        "p99": times[min(len(times) - 1, round(0.99 * (len(times) - 1)))],
        "rss_per_task": (max(peak_rss) - before) / tasks,
        "rss_before": before,
    }


def run_mode(root: Path, provider_port: int, tasks: int, delay: float, streaming: bool, *, floor: bool = False) -> None:
    """One mode's load on a new `ca serve` of a new project (or a new floor server); its figures printed."""
    import httpx

    provider_url = f"http://127.0.0.1:{provider_port}/v1"
    if floor:
        root.mkdir(parents=True)
        server = spawn_bare(f"graph-sqlite:{root / 'floor.db'}", provider_url)
    else:
        project(root, provider_url)
        port = free_port()
        os.environ["FAKE_PROVIDER_KEY"] = "sk-bench"
        server = spawn("ca serve", [sys.executable, "-m", "framework", "serve", "--port", str(port)], root, port)
    try:
        wait_ready(server)
        url = server.url + "/"
        asyncio.run(load(url, 20, streaming, server.proc.pid))  # warm-up
        httpx.get(f"http://127.0.0.1:{provider_port}/peak")  # resets the peak
        cpu = tree_cpu_seconds(server.proc.pid)
        figures = asyncio.run(load(url, tasks, streaming, server.proc.pid))
        cpu = tree_cpu_seconds(server.proc.pid) - cpu
        peak = httpx.get(f"http://127.0.0.1:{provider_port}/peak").json()["peak"]
    finally:
        stop(server)
    mode = "SendStreamingMessage" if streaming else "SendMessage"
    verdict = ""
    if tasks == 1000 and delay == 2.0:
        verdict = " (" + ("meets" if figures["wall"] <= 5.0 else "ABOVE") + " the goal of <= 5 s)"
    who = "the stack's floor (a2a-sdk + LangGraph agent on ChatOpenAI, no ca code)" if floor else "ca serve"
    print(f"{tasks} concurrent {mode}, model delay {delay:g} s, a fresh server: {who}")
    print(
        f"  wall {figures['wall']:.2f} s{verdict}   p50 {figures['p50']:.2f} s"
        f"   p99 {figures['p99']:.2f} s   failures {len(figures['failures'])}/{tasks}"
    )
    print(
        f"  peak model requests in flight {peak}   server RSS {figures['rss_before'] / 1024:.0f} MiB"
        f" before, +{figures['rss_per_task']:.1f} KiB per in-flight task"
        f"   server CPU {cpu / tasks * 1000:.1f} ms per task"
    )
    for problem in sorted(set(figures["failures"]))[:3]:
        print(f"    e.g. {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--floor", action="store_true", help="also load the required stack's floor (see above)")
    parser.add_argument("--fake-provider", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_provider:
        fake_provider(args.fake_provider, args.delay)
        return
    if not (1 <= args.tasks <= 20_000 and 0 <= args.delay <= 60):
        sys.exit("--tasks must be 1..20000 and --delay 0..60")
    import httpx

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    provider_port = free_port()
    provider = spawn(
        "fake provider",
        [sys.executable, __file__, "--fake-provider", str(provider_port), "--delay", str(args.delay)],
        Path(__file__).parent,
        provider_port,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{provider_port}/peak", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    sys.exit("the fake provider did not start")
                time.sleep(0.05)
        for streaming in (False, True):  # each mode on a fresh server: its memory is not the last mode's
            for floor in (False, True) if args.floor else (False,):
                with tempfile.TemporaryDirectory() as tmp:
                    run_mode(Path(tmp) / "project", provider_port, args.tasks, args.delay, streaming, floor=floor)
    finally:
        stop(provider)
    print(f"machine: load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
