"""What serving costs: `ca serve` against a bare a2a-sdk echo server, under the same load.

    python bench/serve.py [--requests 1000] [--concurrency 16] [--store sqlite|memory]

Both servers run in their own process on a free loopback port, both on a2a-sdk 1.3.0's
Starlette routes and uvicorn, both keeping tasks in a SQLite file in the SDK's task table, and
with the SDK's OpenTelemetry wrappers off (OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false). The
bare server uses a2a-sdk's DatabaseTaskStore as it comes (by default; see --store): it writes
the task on every event through SQLAlchemy's async engine. `ca serve` writes the same rows
its own way (framework/transports/a2a_task_store.py): a task when it is created and when it
ends or waits, on a plain sqlite3 connection. So the difference is our code, store included:
executor, runtime, governance, conversation checkpoints, task record, audit and task store.
To compare the rest alone, give the bare server the cheapest store: --store memory.

1. Throughput: --requests non-streaming SendMessage (raw JSON-RPC, ``A2A-Version: 1.0``,
   every request a new context) at --concurrency, after a warm-up; req/s, p50 and p99
   latency, failures (anything but a completed task echoing the request's text), for each
   server, and the ratio ca/bare (goal >= 0.9). RSS of `ca serve` before and after.
2. Streaming time to first event of `ca serve`: SendStreamingMessage, from sending the
   request to the first SSE event (median of --ttfe-runs).
3. Spawn to card ready of `ca serve`: from process start until the agent card answers
   (median of --spawn-runs; goal <= 1.5 s).

The bare server is this file run with ``--bare-server``: an AgentExecutor that replies
with the input text as a completed task with one artifact.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
CARD = "/.well-known/agent-card.json"
HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
OTEL_ENV = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"
READY_TIMEOUT = 60.0  # seconds a server may take to answer its card
REQUEST_TIMEOUT = 30.0  # seconds one request may take
LOAD_TIMEOUT = 900.0  # seconds one load run may take in all
WARMUP = 50

PROJECT = {
    "ca.yaml": "default_agent: echo\n",
    "agents/echo.yaml": "name: echo\n",  # no model: the built-in offline model, which echoes
}


# -- the bare a2a-sdk server (run in its own process) --------------------------------------


def bare_server(port: int, store: str) -> None:
    """A minimal a2a-sdk echo agent on ``port``; ``store`` is a SQLAlchemy URL or ``memory``."""
    import uvicorn
    from a2a.helpers.proto_helpers import new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import DatabaseTaskStore, InMemoryTaskStore, TaskStore, TaskUpdater
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        Task,
        TaskState,
        TaskStatus,
    )
    from starlette.applications import Starlette

    class Echo(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            task_id, context_id = context.task_id or "", context.context_id or ""
            if context.current_task is None:
                await event_queue.enqueue_event(
                    Task(
                        id=task_id,
                        context_id=context_id,
                        status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                        history=[context.message] if context.message is not None else [],
                    )
                )
            updater = TaskUpdater(event_queue, task_id, context_id)
            await updater.add_artifact([new_text_part(context.get_user_input())], name="reply")
            await updater.complete()

        async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
            await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()

    url = f"http://{HOST}:{port}/"
    card = AgentCard(
        name="echo",
        description="Echoes the input",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echoes the input", tags=["echo"])],
    )
    task_store: TaskStore
    if store == "memory":
        task_store = InMemoryTaskStore()
    elif store.startswith("sdk-default:"):
        from sqlalchemy.ext.asyncio import create_async_engine

        task_store = DatabaseTaskStore(create_async_engine(store.removeprefix("sdk-default:")))
    else:
        from sqlalchemy import event
        from sqlalchemy.ext.asyncio import create_async_engine

        # The engine settings of `ca serve` (framework.protocols.a2a.http.task_store), repeated
        # here so the bare server imports nothing of ours: one connection, WAL.
        engine = create_async_engine(store, connect_args={"timeout": 30}, pool_size=1, max_overflow=0)

        def wal(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        event.listen(engine.sync_engine, "connect", wal)
        task_store = DatabaseTaskStore(engine)
    handler = DefaultRequestHandler(Echo(), task_store, card)
    routes = [*create_agent_card_routes(card, card_url=CARD), *create_jsonrpc_routes(handler, rpc_url="/")]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if isinstance(task_store, DatabaseTaskStore):
            await task_store.initialize()
        yield

    app = Starlette(routes=routes, lifespan=lifespan)
    uvicorn.run(app, host=HOST, port=port, log_level="warning", lifespan="on")


# -- processes -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def server_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), OTEL_ENV: "false"}


def otel_honoured() -> bool:
    """Whether this a2a-sdk reads the switch (it decides at import of a2a.utils.telemetry)."""
    code = "import a2a.utils.telemetry as t; print(t.ENABLED_ENV_VAR, t.otel_enabled)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=server_env(), capture_output=True, text=True, timeout=60, check=False
    ).stdout.split()
    return out == [OTEL_ENV, "False"]


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    started: float
    output: IO[bytes]

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


def spawn(name: str, command: list[str], cwd: Path, port: int) -> Server:
    # A file, not a pipe, so a chatty server never blocks on it; stop() reads and closes it.
    err = tempfile.TemporaryFile()  # noqa: SIM115
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, env=server_env(), stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    return Server(name, port, proc, start, err)


def spawn_ca(project: Path) -> Server:
    port = free_port()
    return spawn("ca serve", [sys.executable, "-m", "framework", "serve", "--port", str(port)], project, port)


def spawn_bare(store: str) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--bare-server", str(port), "--store-url", store]
    return spawn("bare a2a-sdk", command, REPO, port)


def wait_ready(server: Server) -> float:
    """Seconds from spawn until the agent card answers 200 (polled every 5 ms)."""
    import httpx

    deadline = server.started + READY_TIMEOUT
    with httpx.Client(timeout=2) as http:
        while time.perf_counter() < deadline:
            if server.proc.poll() is not None:
                sys.exit(f"{server.name} exited with {server.proc.returncode}:\n{stop(server)}")
            try:
                if http.get(server.url + CARD).status_code == 200:
                    return time.perf_counter() - server.started
            except httpx.TransportError:
                pass
            time.sleep(0.005)
    sys.exit(f"{server.name} did not answer its card within {READY_TIMEOUT:.0f} s:\n{stop(server)}")


def stop(server: Server) -> str:
    """SIGTERM, then SIGKILL after 15 s; returns what the process wrote."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(timeout=10)
    server.output.seek(0)
    text = server.output.read().decode(errors="replace")
    server.output.close()
    return text


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- load ----------------------------------------------------------------------------------


def send_body(text: str, method: str = "SendMessage") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": method,
        "params": {
            "message": {
                "messageId": uuid.uuid4().hex,
                "contextId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
        },
    }


def check(answer: dict[str, Any], text: str) -> str | None:
    """None when ``answer`` is a completed task whose artifact echoes ``text``, else why not."""
    if "error" in answer:
        return f"error {answer['error'].get('code')}: {answer['error'].get('message')}"
    task = answer.get("result", {}).get("task", {})
    state = task.get("status", {}).get("state")
    if state != "TASK_STATE_COMPLETED":
        return f"state {state}"
    replies = [p.get("text", "") for a in task.get("artifacts", []) for p in a.get("parts", [])]
    if not any(text in r for r in replies):
        return f"reply {replies!r} does not echo {text!r}"
    return None


@dataclass
class Load:
    requests: int
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    server_cpu: float = 0.0  # seconds of CPU the server used during the load

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000 if ordered else float("nan")


async def run_load(url: str, requests: int, concurrency: int) -> Load:
    """``requests`` SendMessage from ``concurrency`` workers; bounded by LOAD_TIMEOUT in all."""
    import httpx

    result = Load(requests)
    counter = iter(range(requests))
    deadline = time.perf_counter() + LOAD_TIMEOUT
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=limits, headers=HEADERS) as http:

        async def worker() -> None:
            for i in counter:
                if time.perf_counter() > deadline:
                    result.failures.append("not sent: load deadline passed")
                    continue
                text = f"load {i} {uuid.uuid4().hex[:8]}"
                start = time.perf_counter()
                try:
                    response = await http.post(url, json=send_body(text))
                    problem = f"HTTP {response.status_code}" if response.status_code != 200 else None
                    problem = problem or check(response.json(), text)
                except (httpx.HTTPError, ValueError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                if problem is None:
                    result.latencies.append(time.perf_counter() - start)
                else:
                    result.failures.append(problem)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.elapsed = time.perf_counter() - start
    return result


async def time_to_first_event(url: str, runs: int) -> list[float]:
    """Seconds from sending SendStreamingMessage to the first SSE event, ``runs`` times in a row."""
    import httpx

    times: list[float] = []
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, headers=HEADERS) as http:
        for i in range(runs):
            body = send_body(f"stream {i}", method="SendStreamingMessage")
            start = time.perf_counter()
            first = None
            async with http.stream("POST", url, json=body, headers={"Accept": "text/event-stream"}) as response:
                async for line in response.aiter_lines():
                    if first is None and line.startswith("data:"):
                        first = time.perf_counter() - start
            if first is None:
                sys.exit(f"SendStreamingMessage answered no event (HTTP {response.status_code})")
            times.append(first)
    return times


# -- main ----------------------------------------------------------------------------------


def write_project(root: Path) -> None:
    for name, text in PROJECT.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def report(name: str, load: Load, store: str) -> None:
    print(f"{name} ({store})")
    print(
        f"  {load.rate:7.1f} req/s   p50 {load.percentile(0.50):6.1f} ms   p99 {load.percentile(0.99):6.1f} ms"
        f"   failures {len(load.failures)}/{load.requests}   ({load.elapsed:.1f} s)"
    )
    print(f"  server CPU {load.server_cpu / load.requests * 1000:.1f} ms per request")
    for problem in sorted(set(load.failures))[:5]:
        print(f"    e.g. {problem}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--store",
        choices=["sqlite", "sqlite-sdk-default", "memory"],
        default="sqlite",
        help="the bare server's task store: DatabaseTaskStore on SQLite with ca serve's engine settings (default)"
        " or with SQLAlchemy's defaults, or InMemoryTaskStore",
    )
    parser.add_argument("--ttfe-runs", type=int, default=20)
    parser.add_argument("--spawn-runs", type=int, default=5)
    parser.add_argument("--bare-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--store-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        bare_server(args.bare_server, args.store_url)
        return
    if not (1 <= args.requests <= 100_000 and 1 <= args.concurrency <= 256):
        sys.exit("--requests must be 1..100000 and --concurrency 1..256")

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    print(f"{OTEL_ENV}=false for both servers: {'honoured by' if otel_honoured() else 'NOT read by'} a2a-sdk")
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        write_project(project)
        sqlite = f"sqlite+aiosqlite:///{Path(tmp) / 'bare.db'}"
        bare_url, bare_store = {
            "sqlite": (sqlite, "DatabaseTaskStore on SQLite, ca serve's engine settings: one connection, WAL"),
            "sqlite-sdk-default": (f"sdk-default:{sqlite}", "DatabaseTaskStore on SQLite, SQLAlchemy's default engine"),
            "memory": ("memory", "InMemoryTaskStore"),
        }[args.store]
        ca_store = "SqliteTaskStore behind WriteBehindTaskStore, .ca/state.db"
        servers: list[Server] = []
        try:
            bare = spawn_bare(bare_url)
            servers.append(bare)
            wait_ready(bare)
            ca = spawn_ca(project)
            servers.append(ca)
            wait_ready(ca)

            loads: dict[str, Load] = {}
            rss: list[int] = []
            for server in (bare, ca):
                asyncio.run(run_load(server.url + "/", WARMUP, args.concurrency))
                if server is ca:
                    rss.append(rss_kib(ca.proc.pid))
                cpu = cpu_seconds(server.proc.pid)
                loads[server.name] = asyncio.run(run_load(server.url + "/", args.requests, args.concurrency))
                loads[server.name].server_cpu = cpu_seconds(server.proc.pid) - cpu
                if server is ca:
                    rss.append(rss_kib(ca.proc.pid))
            ttfe = asyncio.run(time_to_first_event(ca.url + "/", args.ttfe_runs))
        finally:
            for server in servers:
                stop(server)
        spawns: list[float] = []
        wait_ready(first := spawn_ca(project))  # warm the OS file cache once
        stop(first)
        for _ in range(args.spawn_runs):
            server = spawn_ca(project)
            try:
                spawns.append(wait_ready(server))
            finally:
                stop(server)

    print(
        f"{args.requests} non-streaming SendMessage at concurrency {args.concurrency}, each a new context "
        f"(after {WARMUP} warm-up requests), raw JSON-RPC over httpx, loopback"
    )
    report("bare a2a-sdk echo", loads["bare a2a-sdk"], bare_store)
    report("ca serve, offline echo agent", loads["ca serve"], ca_store)
    ratio = loads["ca serve"].rate / loads["bare a2a-sdk"].rate if loads["bare a2a-sdk"].rate else 0.0
    verdict = "meets" if ratio >= 0.9 else "BELOW"
    print(f"ratio ca/bare: {ratio:.2f}   ({verdict} the goal of >= 0.9)")
    cpu_ratio = loads["bare a2a-sdk"].server_cpu / loads["ca serve"].server_cpu if loads["ca serve"].server_cpu else 0.0
    print(f"  server CPU per request, bare/ca: {cpu_ratio:.2f}   (steadier than req/s on a busy machine)")
    print(f"ca serve RSS: {rss[0] / 1024:.1f} MiB before the load, {rss[1] / 1024:.1f} MiB after")
    print(f"ca serve streaming time to first event (SendStreamingMessage, median of {args.ttfe_runs})")
    print(
        f"  median {statistics.median(ttfe) * 1000:.1f} ms   min {min(ttfe) * 1000:.1f} ms   max {max(ttfe) * 1000:.1f} ms"
    )
    spawn_verdict = "meets" if statistics.median(spawns) <= 1.5 else "ABOVE"
    print(f"ca serve spawn to card ready (median of {args.spawn_runs})")
    print(
        f"  median {statistics.median(spawns):.3f} s   min {min(spawns):.3f} s   max {max(spawns):.3f} s"
        f"   ({spawn_verdict} the goal of <= 1.5 s)"
    )


if __name__ == "__main__":
    main()
