"""What serving costs: `ca serve` against two bare a2a-sdk echo servers, under the same load.

    python bench/serve.py [--requests 600] [--concurrency 16] [--rounds 3] [--store sqlite|sqlite-sdk-default]
                          [--telemetry]

Three servers, each in its own process on a free loopback port, on a2a-sdk 1.3.0's Starlette
routes and uvicorn, with the SDK's OpenTelemetry wrappers off
(OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false):

* the bare echo with InMemoryTaskStore: what a user compares frameworks against, and the
  headline ratio (goal: ca/bare >= 0.55 in throughput, <= 2.4 ms of CPU per request);
* the bare echo with DatabaseTaskStore on SQLite (--store): the SDK's own durable store;
* `ca serve` with an offline echo agent: tasks, conversations, audit all durable in SQLite.

Rounds are interleaved (memory, durable, ca, then again), each server a fresh process per round
and alone on the machine while it is loaded. Per server: --requests non-streaming SendMessage
(raw JSON-RPC, ``A2A-Version: 1.0``, every request a new context) at --concurrency after a
warm-up; req/s, CPU per request (the server process and its children, from /proc), p50/p99,
RSS ready -> after, spawn -> card ready and failures (anything but a completed task echoing
the request's text), each a median over rounds with min–max; then the per-round ratios. Last,
the streaming time to first event of `ca serve`.

``--telemetry`` adds two servers to every round, right after `ca serve`: the same `ca serve` with
tracing on as a user switches it on (``OTEL_EXPORTER_OTLP_ENDPOINT``; a2a-sdk's spans on too, ca's
default), and with ca's spans only (``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false``), both
exporting over OTLP/HTTP to a local sink in a process of its own (bench/otlp_sink.py). The
overhead per request is the paired difference with the untraced `ca serve` of the same round.

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
sys.path.insert(0, str(REPO))  # bench.otlp_sink (the bare server imports nothing of ours)
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


def traced_env(endpoint: str, *, sdk_spans: bool) -> dict[str, str]:
    """Tracing on as a user switches it on: an OTLP endpoint; a2a-sdk's spans by ca's default (on) or off."""
    env = {k: v for k, v in server_env().items() if k != OTEL_ENV}
    return {
        **env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "bench",
        **({} if sdk_spans else {OTEL_ENV: "false"}),
    }


def spawn(name: str, command: list[str], cwd: Path, port: int, env: dict[str, str] | None = None) -> Server:
    # A file, not a pipe, so a chatty server never blocks on it; stop() reads and closes it.
    err = tempfile.TemporaryFile()  # noqa: SIM115
    start = time.perf_counter()
    environ = server_env() if env is None else env
    proc = subprocess.Popen(command, cwd=cwd, env=environ, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    return Server(name, port, proc, start, err)


def spawn_ca(project: Path, env: dict[str, str] | None = None) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "framework", "serve", "--port", str(port)]
    return spawn("ca serve", command, project, port, env)


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


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and its live descendants (a tool's or worker's process counts too)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += cpu_seconds(current)
        except OSError:
            continue
        todo.extend(children.get(current, []))
    return total


@dataclass
class Round:
    """One server's figures in one round: a fresh process, warmed, then loaded."""

    load: Load
    spawn: float  # seconds from spawn to card ready
    rss_ready: int  # KiB after warm-up
    rss_after: int  # KiB after the load


def measure(server: Server, requests: int, concurrency: int) -> Round:
    spawn_time = wait_ready(server)
    asyncio.run(run_load(server.url + "/", WARMUP, concurrency))
    ready = rss_kib(server.proc.pid)
    cpu = tree_cpu_seconds(server.proc.pid)
    load = asyncio.run(run_load(server.url + "/", requests, concurrency))
    load.server_cpu = tree_cpu_seconds(server.proc.pid) - cpu
    return Round(load, spawn_time, ready, rss_kib(server.proc.pid))


def spread(values: list[float], unit: str, digits: int = 1) -> str:
    """The median with min–max, e.g. ``612.3 req/s (598.1–640.2)``."""
    return f"{statistics.median(values):.{digits}f} {unit} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def report(name: str, rounds: list[Round]) -> None:
    failures = [f for r in rounds for f in r.load.failures]
    total = sum(r.load.requests for r in rounds)
    print(name)
    print(f"  throughput   {spread([r.load.rate for r in rounds], 'req/s')}")
    print(f"  CPU/request  {spread([r.load.server_cpu / r.load.requests * 1000 for r in rounds], 'ms', 2)}")
    print(f"  p50          {spread([r.load.percentile(0.50) for r in rounds], 'ms')}")
    print(f"  p99          {spread([r.load.percentile(0.99) for r in rounds], 'ms')}")
    print(
        f"  RSS          {spread([r.rss_ready / 1024 for r in rounds], 'MiB')} ready -> "
        f"{spread([r.rss_after / 1024 for r in rounds], 'MiB')} after"
    )
    print(f"  spawn->ready {spread([r.spawn for r in rounds], 's', 3)}")
    print(f"  failures     {len(failures)}/{total}")
    for problem in sorted(set(failures))[:5]:
        print(f"    e.g. {problem}")


def ratios(ca: list[Round], base: list[Round], name: str) -> None:
    """Per-round ratios (each round's servers ran back to back), as medians with min–max."""
    rate = [c.load.rate / b.load.rate for c, b in zip(ca, base, strict=True) if b.load.rate]
    cpu = [b.load.server_cpu / c.load.server_cpu for c, b in zip(ca, base, strict=True) if c.load.server_cpu]
    print(f"  against {name}: throughput ca/base {spread(rate, '×', 2)}, CPU per request base/ca {spread(cpu, '×', 2)}")


def overhead(what: str, traced: list[Round], plain: list[Round]) -> None:
    """What tracing on costs `ca serve` per request: paired with the untraced server of each round."""
    cpu = [
        (t.load.server_cpu / t.load.requests - p.load.server_cpu / p.load.requests) * 1000
        for t, p in zip(traced, plain, strict=True)
    ]
    p50 = [t.load.percentile(0.5) - p.load.percentile(0.5) for t, p in zip(traced, plain, strict=True)]
    rate = [t.load.rate / p.load.rate for t, p in zip(traced, plain, strict=True) if p.load.rate]
    print(f"tracing on ({what}; OTLP/HTTP to a local sink) against off, per request, paired by round")
    print(f"  CPU/request  on - off {spread(cpu, 'ms', 2)}")
    print(f"  p50          on - off {spread(p50, 'ms', 2)}")
    print(f"  throughput   on/off {spread(rate, '×', 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, each with fresh servers")
    parser.add_argument(
        "--store",
        choices=["sqlite", "sqlite-sdk-default"],
        default="sqlite",
        help="the durable baseline's task store: DatabaseTaskStore on SQLite with ca serve's engine settings"
        " (default) or with SQLAlchemy's defaults",
    )
    parser.add_argument("--ttfe-runs", type=int, default=20)
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help="also load ca serve with tracing on, exporting over OTLP/HTTP to a local sink, and print the overhead",
    )
    parser.add_argument("--bare-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--store-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        bare_server(args.bare_server, args.store_url)
        return
    if not (1 <= args.requests <= 100_000 and 1 <= args.concurrency <= 256 and 1 <= args.rounds <= 50):
        sys.exit("--requests must be 1..100000, --concurrency 1..256 and --rounds 1..50")

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    honoured = "honoured by" if otel_honoured() else "NOT read by"
    print(f"{OTEL_ENV}=false for every server but the traced one: {honoured} a2a-sdk")
    memory = "bare a2a-sdk echo, InMemoryTaskStore"
    durable = "bare a2a-sdk echo, DatabaseTaskStore on SQLite"
    ca = "ca serve, offline echo agent, SQLite (.ca/state.db)"
    traced = "ca serve, tracing on (ca's and a2a-sdk's spans), OTLP/HTTP to a local sink"
    ours = f"ca serve, tracing on, ca's spans only ({OTEL_ENV}=false), OTLP/HTTP to a local sink"
    rounds: dict[str, list[Round]] = {memory: [], durable: [], ca: []}
    if args.telemetry:
        rounds |= {traced: [], ours: []}
    sink = None
    if args.telemetry:
        from bench.otlp_sink import Sink

        sink = Sink(free_port())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in range(args.rounds):
                sqlite = f"sqlite+aiosqlite:///{Path(tmp) / f'bare{n}.db'}"
                stores = {memory: "memory", durable: sqlite if args.store == "sqlite" else f"sdk-default:{sqlite}"}
                # Interleaved, fresh processes (and projects) per round, one server at a time on the machine.
                for name in rounds:
                    if name in (ca, traced, ours):
                        project = Path(tmp) / f"project{n}-{list(rounds).index(name)}"
                        write_project(project)
                        env = None
                        if name != ca and sink is not None:
                            env = traced_env(sink.endpoint, sdk_spans=name == traced)
                        server = spawn_ca(project, env)
                    else:
                        server = spawn_bare(stores[name])
                    try:
                        rounds[name].append(measure(server, args.requests, args.concurrency))
                        if name == ca and n == args.rounds - 1:
                            ttfe = asyncio.run(time_to_first_event(server.url + "/", args.ttfe_runs))
                    finally:
                        stop(server)  # a traced server flushes its spans to the sink as it stops
        exported = sink.count() if sink is not None else (0, 0)
    finally:
        if sink is not None:
            sink.stop()

    print(
        f"{args.requests} non-streaming SendMessage at concurrency {args.concurrency}, each a new context "
        f"(after {WARMUP} warm-up requests), raw JSON-RPC over httpx, loopback; "
        f"median (min–max) of {args.rounds} interleaved rounds"
    )
    for name, measured in rounds.items():
        report(name, measured)
    print("ca serve")
    ratios(rounds[ca], rounds[memory], "the in-memory echo (headline; goal >= 0.55×, CPU <= 2.4 ms/request)")
    ratios(rounds[ca], rounds[durable], "the durable SQLite echo")
    if args.telemetry:
        overhead("ca's and a2a-sdk's spans", rounds[traced], rounds[ca])
        overhead("ca's spans only", rounds[ours], rounds[ca])
        print(f"  exported     {exported[0]} OTLP requests, {exported[1] / 1024:.0f} KiB to the sink in all")
    print(f"ca serve streaming time to first event (SendStreamingMessage, {args.ttfe_runs} runs)")
    print(f"  {spread([t * 1000 for t in ttfe], 'ms')}")
    print(f"machine: load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
