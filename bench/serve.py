"""What serving costs: `ca serve` against two bare a2a-sdk echo servers, under the same load.

    python bench/serve.py [--requests 600] [--concurrency 16] [--rounds 3] [--warmup 50] [--floor]
                          [--store sqlite|sqlite-sdk-default|postgresql://USER@HOST:PORT/DB] [--telemetry]

Three servers, each in its own process on a free loopback port, on a2a-sdk 1.3.0's Starlette
routes and uvicorn, with the SDK's OpenTelemetry wrappers off
(OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false):

* the bare echo with InMemoryTaskStore: what a user compares frameworks against, and the
  headline ratio (goal: ca/bare >= 0.55 in throughput, <= 2.4 ms of CPU per request);
* the bare echo with DatabaseTaskStore on SQLite (--store sqlite|sqlite-sdk-default): the SDK's
  own durable store, with ca serve's engine settings or SQLAlchemy's defaults;
* `ca serve` with an offline echo agent: tasks, conversations, audit all durable in SQLite.

``--floor`` adds, before `ca serve` in every round, the least a server on ca's required stack
does: the bare echo's a2a-sdk server (InMemoryTaskStore) whose executor runs LangGraph's prebuilt
agent (langchain's ``create_agent``, as ca compiles one) on a chat model that echoes, each
request a new thread, its checkpoints in memory, then committed to SQLite once per run as ca
commits them. No ca code, no task, audit or governance record: its ratio to the in-memory echo
is the best any server that compiles its agents into LangGraph graphs and keeps its
conversations can reach here.

Rounds are interleaved (memory, durable, ca, then again), each server a fresh process per round
and alone on the machine while it is loaded. Per server: --requests non-streaming SendMessage
(raw JSON-RPC, ``A2A-Version: 1.0``, every request a new context) at --concurrency after
--warmup requests; req/s, CPU per request (the server process and its children, from /proc),
p50/p99, RSS ready -> after, spawn -> card ready and failures (anything but a completed task
echoing the request's text), each a median over rounds with min–max; then the per-round ratios.
Last, the streaming time to first event of `ca serve`.

``--telemetry`` adds two servers to every round, right after `ca serve`: the same `ca serve` with
tracing on as a user switches it on (``OTEL_EXPORTER_OTLP_ENDPOINT``; a2a-sdk's spans on too, ca's
default), and with ca's spans only (``OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false``), both
exporting over OTLP/HTTP to a local sink in a process of its own (bench/otlp_sink.py). The
overhead per request is the paired difference with the untraced `ca serve` of the same round.

``--store postgresql://USER@HOST:PORT/DB`` (the durable echo stays on SQLite) adds two more at the
end of every round, each on a database of its own, created empty on that server (named after DB,
which need not exist) and dropped after, so rounds are comparable: `ca serve` with that database
as ``store.url``, one replica; then two replicas on separate project folders (as on two hosts)
sharing the one database, the second started once the first answers (as a rolling start does), the
bench's own client sending request i to replica i mod 2 — round-robin, as a load balancer would,
with no balancer process in the way. The same load and concurrency as every other server; CPU per
request and RSS are summed over both replicas' processes; spawn -> ready is the slower replica's,
each from its own spawn. The database's side is shown apart (it is not in the replicas' CPU per
request): the transactions per request and the connections opened during the load
(pg_stat_database, once its counts have settled after it), and, where the PostgreSQL server runs
on this machine, the CPU of its backends serving that database (their /proc, found through
pg_stat_activity; a connection opened and closed within the load is missed). Then the per-round
ratios 1 replica / SQLite `ca serve`, 2 replicas / SQLite and 2 replicas / 1 replica. On one
machine the replicas, the database and the client share its cores: two replicas show what
coordinating through the database costs, not what a second host would add.

The bare server is this file run with ``--bare-server``: an AgentExecutor that replies
with the input text as a completed task with one artifact. Processes and databases are handled
by bench/servers.py.
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
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.* (the bare server imports nothing of ca)
from bench.servers import (
    CARD,
    HOST,
    OTEL_ENV,
    REPO,
    Database,
    Server,
    backend_cpu_between,
    check_postgres,
    free_port,
    fresh_database,
    is_postgres,
    rss_kib,
    server_env,
    shown,
    spawn,
    spawn_ca,
    stop,
    tree_cpu_seconds,
    wait_ready,
    write_project,
)

HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
REQUEST_TIMEOUT = 30.0  # seconds one request may take
LOAD_TIMEOUT = 900.0  # seconds one load run may take in all
WARMUP = 50
STATS_WAIT = 10.0  # seconds PostgreSQL may take to publish the load's counts (an idle backend waits up to 10 s)


# -- the bare a2a-sdk server (run in its own process) --------------------------------------


def bare_server(port: int, store: str, model_url: str | None = None) -> None:
    """A minimal a2a-sdk echo agent on ``port``; ``store`` is a SQLAlchemy URL or ``memory``, or
    ``graph-…`` for the floor's agent (:func:`agent_graph`, on the model at ``model_url`` if given)."""
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

    graph = agent_graph(store, model_url) if store.startswith("graph-") else None

    class Echo(AgentExecutor):
        async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
            task_id, context_id = context.task_id or "", context.context_id or ""
            reply = context.get_user_input()
            if graph is not None:  # the floor: the reply is the graph's, its conversation kept by thread
                config = {"configurable": {"thread_id": context_id}}
                values = await graph.ainvoke({"messages": [("user", reply)]}, config, durability="exit")
                reply = values["messages"][-1].text
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
            await updater.add_artifact([new_text_part(reply)], name="reply")
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
    if store == "memory" or graph is not None:
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


def agent_graph(store: str, model_url: str | None = None) -> Any:
    """The floor's agent: LangGraph's prebuilt agent (langchain's ``create_agent``, as ca compiles
    one) on a chat model that echoes, its checkpoints in memory (``graph-memory``) or committed to
    the SQLite file of ``graph-sqlite:PATH`` once per run (``durability="exit"``, as ca runs it),
    by the library's saver called on the event loop (as ca does; aiosqlite's thread hops cost more).
    With ``model_url``, the model is langchain-openai's ``ChatOpenAI`` on that OpenAI-compatible
    server (bench/slow_model.py's), as langchain-openai ships it."""
    import sqlite3

    from langchain.agents import create_agent
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    class EchoModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "echo"

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any) -> Any:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=messages[-1].text))])

        async def _agenerate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any
        ) -> Any:
            return self._generate(messages)

    class OnLoop(SqliteSaver):
        async def aget_tuple(self, config: Any) -> Any:
            return self.get_tuple(config)

        async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            return self.put(config, checkpoint, metadata, new_versions)

        async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            self.put_writes(config, writes, task_id, task_path)

    saver: BaseCheckpointSaver[Any]
    if store == "graph-memory":
        saver = InMemorySaver()
    else:
        conn = sqlite3.connect(store.removeprefix("graph-sqlite:"), check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # as ca's stores: a SIGKILL loses nothing committed
        saver = OnLoop(conn)
        saver.setup()
    model: BaseChatModel = EchoModel()
    if model_url is not None:
        from langchain_openai import ChatOpenAI

        model = ChatOpenAI(model="slow", base_url=model_url, api_key="sk-bench", max_retries=0, timeout=60)
    return create_agent(model, tools=[], checkpointer=saver)


# -- processes -----------------------------------------------------------------------------


def otel_honoured() -> bool:
    """Whether this a2a-sdk reads the switch (it decides at import of a2a.utils.telemetry)."""
    code = "import a2a.utils.telemetry as t; print(t.ENABLED_ENV_VAR, t.otel_enabled)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=server_env(), capture_output=True, text=True, timeout=60, check=False
    ).stdout.split()
    return out == [OTEL_ENV, "False"]


def traced_env(endpoint: str, *, sdk_spans: bool) -> dict[str, str]:
    """Tracing on as a user switches it on: an OTLP endpoint; a2a-sdk's spans by ca's default (on) or off."""
    env = {k: v for k, v in server_env().items() if k != OTEL_ENV}
    return {
        **env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "bench",
        **({} if sdk_spans else {OTEL_ENV: "false"}),
    }


def spawn_bare(store: str, model_url: str | None = None) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--bare-server", str(port), "--store-url", store]
    return spawn("bare a2a-sdk", command + (["--model-url", model_url] if model_url else []), REPO, port)


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
    server_cpu: float = 0.0  # seconds of CPU the server (or all replicas) used during the load
    database_cpu: float | None = None  # seconds of CPU the PostgreSQL backends used, when they can be read
    connections: int = 0  # PostgreSQL connections opened during the load
    transactions: int = 0  # PostgreSQL transactions during the load

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000 if ordered else float("nan")


async def run_load(
    urls: list[str],
    requests: int,
    concurrency: int,
    body: Callable[[str], dict[str, Any]] = send_body,
    *,
    conversations: bool = False,
) -> Load:
    """``requests`` SendMessage (``body`` of their text) from ``concurrency`` workers, request i to
    ``urls[i % len(urls)]`` (round-robin, as a load balancer would spread them); bounded by LOAD_TIMEOUT in all.
    ``conversations``: each worker's messages name one contextId of its own, one message at a time (a
    conversation whose history grows), instead of what ``body`` names."""
    import httpx

    result = Load(requests)
    counter = iter(range(requests))
    deadline = time.perf_counter() + LOAD_TIMEOUT
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, limits=limits, headers=HEADERS) as http:

        async def worker() -> None:
            context = uuid.uuid4().hex
            for i in counter:
                if time.perf_counter() > deadline:
                    result.failures.append("not sent: load deadline passed")
                    continue
                text = f"load {i} {uuid.uuid4().hex[:8]}"
                payload = body(text)
                if conversations:
                    payload["params"]["message"]["contextId"] = context
                start = time.perf_counter()
                try:
                    response = await http.post(urls[i % len(urls)], json=payload)
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


@dataclass
class Round:
    """One server's figures in one round: a fresh process, warmed, then loaded."""

    load: Load
    spawn: float  # seconds from spawn to card ready
    rss_ready: int  # KiB after warm-up
    rss_after: int  # KiB after the load


def settled(db: Database, before: tuple[int, int]) -> tuple[int, int]:
    """The database's counts once PostgreSQL has published the load's: unchanged over 0.5 s, 1 s on."""
    deadline = time.perf_counter() + STATS_WAIT
    time.sleep(1.0)
    last = db.activity()
    while time.perf_counter() < deadline:
        time.sleep(0.5)
        now = db.activity()
        if now == last and now[1] > before[1]:
            return now
        last = now
    return last


def measure(servers: list[Server], requests: int, concurrency: int, warmup: int, db: Database | None = None) -> Round:
    """Warm up, then load ``servers`` (spread round-robin over them); CPU and RSS summed over them."""
    spawn_time = max(wait_ready(server) for server in servers)  # each from its own spawn
    urls = [server.url + "/" for server in servers]
    if warmup:
        asyncio.run(run_load(urls, warmup, concurrency))
    ready = sum(rss_kib(server.proc.pid) for server in servers)
    cpu = sum(tree_cpu_seconds(server.proc.pid) for server in servers)
    backends = db.backends_cpu() if db is not None else None
    activity = db.activity() if db is not None else (0, 0)
    load = asyncio.run(run_load(urls, requests, concurrency))
    load.server_cpu = sum(tree_cpu_seconds(server.proc.pid) for server in servers) - cpu
    if db is not None:
        load.database_cpu = backend_cpu_between(backends, db.backends_cpu())
        now = settled(db, activity)
        load.connections, load.transactions = now[0] - activity[0], now[1] - activity[1]
    return Round(load, spawn_time, ready, sum(rss_kib(server.proc.pid) for server in servers))


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
    database = [r.load.database_cpu / r.load.requests * 1000 for r in rounds if r.load.database_cpu is not None]
    if database:
        print(f"  PostgreSQL   {spread(database, 'ms', 2)} CPU/request in its backends for this database")
    if any(r.load.transactions for r in rounds):
        transactions = [r.load.transactions / r.load.requests for r in rounds]
        print(f"  PostgreSQL   {spread(transactions, 'transactions/request')}")
        print(f"  PostgreSQL   {spread([float(r.load.connections) for r in rounds], 'connections opened', 0)}")
    print(f"  failures     {len(failures)}/{total}")
    for problem in sorted(set(failures))[:5]:
        print(f"    e.g. {problem}")


def ratios(ca: list[Round], base: list[Round], name: str, who: str = "ca") -> None:
    """Per-round ratios (each round's servers ran back to back), as medians with min–max."""
    rate = [c.load.rate / b.load.rate for c, b in zip(ca, base, strict=True) if b.load.rate]
    cpu = [b.load.server_cpu / c.load.server_cpu for c, b in zip(ca, base, strict=True) if c.load.server_cpu]
    print(
        f"  against {name}: throughput {who}/base {spread(rate, '×', 2)},"
        f" CPU per request base/{who} {spread(cpu, '×', 2)}"
    )


def compared(name: str, these: list[Round], base: list[Round]) -> None:
    """Per-round ratios these/base of throughput, CPU per request (the servers' processes) and p50/p99."""
    pairs = list(zip(these, base, strict=True))
    rate = [t.load.rate / b.load.rate for t, b in pairs if b.load.rate]
    cpu = [
        (t.load.server_cpu / t.load.requests) / (b.load.server_cpu / b.load.requests)
        for t, b in pairs
        if b.load.server_cpu
    ]
    p50 = [t.load.percentile(0.5) / b.load.percentile(0.5) for t, b in pairs]
    p99 = [t.load.percentile(0.99) / b.load.percentile(0.99) for t, b in pairs]
    print(f"  {name}")
    print(f"    throughput {spread(rate, '×', 2)}, CPU/request {spread(cpu, '×', 2)}")
    print(f"    p50 {spread(p50, '×', 2)}, p99 {spread(p99, '×', 2)}")


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


def check_floor(path: Path, requests: int) -> None:
    """That the durable floor ran its graph and committed each request's conversation: one thread each."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        (threads,) = conn.execute("SELECT count(DISTINCT thread_id) FROM checkpoints").fetchone()
    if threads != requests:
        sys.exit(f"the durable floor kept {threads} conversations in {path} for {requests} requests")


def store_option(value: str) -> str:
    """``--store``: ``sqlite``, ``sqlite-sdk-default`` or a PostgreSQL URL."""
    if value in ("sqlite", "sqlite-sdk-default") or is_postgres(value):
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: use sqlite, sqlite-sdk-default or postgresql://USER@HOST:PORT/DB")


MEMORY = "bare a2a-sdk echo, InMemoryTaskStore"
DURABLE = "bare a2a-sdk echo, DatabaseTaskStore on SQLite"
FLOOR = "a2a-sdk + LangGraph agent (create_agent, echo model), checkpoints in memory"
FLOOR_DURABLE = "a2a-sdk + LangGraph agent (create_agent, echo model), checkpoints committed to SQLite"
CA = "ca serve, offline echo agent, SQLite (.ca/state.db)"
TRACED = "ca serve, tracing on (ca's and a2a-sdk's spans), OTLP/HTTP to a local sink"
OURS = f"ca serve, tracing on, ca's spans only ({OTEL_ENV}=false), OTLP/HTTP to a local sink"
PG_ONE = "ca serve, PostgreSQL store.url, 1 replica"
PG_TWO = "ca serve, PostgreSQL store.url, 2 replicas (two folders, one database), requests round-robin"


def run_rounds(
    args: argparse.Namespace, names: list[str], tmp: Path, endpoint: str | None
) -> tuple[dict[str, list[Round]], list[float]]:
    """Every server of ``names`` in each of ``args.rounds`` rounds, interleaved; and the last SQLite
    `ca serve`'s streaming times to first event."""
    rounds: dict[str, list[Round]] = {name: [] for name in names}
    ttfe: list[float] = []
    for n in range(args.rounds):
        sqlite = f"sqlite+aiosqlite:///{tmp / f'bare{n}.db'}"
        stores = {
            MEMORY: "memory",
            DURABLE: f"sdk-default:{sqlite}" if args.store == "sqlite-sdk-default" else sqlite,
            FLOOR: "graph-memory",
            FLOOR_DURABLE: f"graph-sqlite:{tmp / f'floor{n}.db'}",
        }
        # Interleaved, fresh processes (projects, databases) per round, one server (or pair) at a time.
        for index, name in enumerate(names):
            with ExitStack() as stack:
                db = None
                if name in (PG_ONE, PG_TWO):
                    db = stack.enter_context(fresh_database(args.store, f"r{n}_{index}"))
                servers = []
                for replica in range(2 if name == PG_TWO else 1):
                    if name in stores:
                        server = spawn_bare(stores[name])
                    else:
                        project = tmp / f"project{n}-{index}-{replica}"
                        write_project(project, db.url if db is not None else None)
                        env = (
                            traced_env(endpoint, sdk_spans=name == TRACED)
                            if name in (TRACED, OURS) and endpoint
                            else None
                        )
                        server = spawn_ca(project, env)
                    servers.append(server)
                    stack.callback(stop, server)  # before the database is dropped; a traced server flushes its spans
                    if name == PG_TWO and replica == 0:
                        wait_ready(server)  # the second starts once the first has set up the empty database
                rounds[name].append(measure(servers, args.requests, args.concurrency, args.warmup, db))
                if name == FLOOR_DURABLE:
                    check_floor(Path(stores[name].removeprefix("graph-sqlite:")), args.requests + args.warmup)
                if name == CA and n == args.rounds - 1:
                    ttfe = asyncio.run(time_to_first_event(servers[0].url + "/", args.ttfe_runs))
    return rounds, ttfe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, each with fresh servers")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="requests to each server before it is measured")
    parser.add_argument(
        "--store",
        type=store_option,
        default="sqlite",
        help="sqlite or sqlite-sdk-default: the durable baseline's task store, DatabaseTaskStore on SQLite with"
        " ca serve's engine settings (default) or with SQLAlchemy's defaults; postgresql://USER@HOST:PORT/DB: also"
        " ca serve with that store.url, one replica and two, each on a fresh database (named after DB) per round",
    )
    parser.add_argument("--ttfe-runs", type=int, default=20)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also load the required stack's floor: a2a-sdk serving a LangGraph agent (create_agent on an echo"
        " model), its checkpoints in memory, then committed to SQLite; no ca code, no task or audit records",
    )
    parser.add_argument(
        "--telemetry",
        action="store_true",
        help="also load ca serve with tracing on, exporting over OTLP/HTTP to a local sink, and print the overhead",
    )
    parser.add_argument("--bare-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--store-url", help=argparse.SUPPRESS)
    parser.add_argument("--model-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_server:
        bare_server(args.bare_server, args.store_url, args.model_url)
        return
    if not (
        1 <= args.requests <= 100_000
        and 1 <= args.concurrency <= 256
        and 1 <= args.rounds <= 50
        and 0 <= args.warmup <= 10_000
        and 1 <= args.ttfe_runs <= 1000
    ):
        sys.exit(
            "--requests must be 1..100000, --concurrency 1..256, --rounds 1..50, --warmup 0..10000, --ttfe-runs 1..1000"
        )
    postgres = is_postgres(args.store)
    if postgres:
        check_postgres(args.store)

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    honoured = "honoured by" if otel_honoured() else "NOT read by"
    print(f"{OTEL_ENV}=false for every server but the traced one: {honoured} a2a-sdk")
    floor = [FLOOR, FLOOR_DURABLE] if args.floor else []
    names = (
        [MEMORY, DURABLE, *floor, CA]
        + ([TRACED, OURS] if args.telemetry else [])
        + ([PG_ONE, PG_TWO] if postgres else [])
    )
    sink = None
    if args.telemetry:
        from bench.otlp_sink import Sink

        sink = Sink(free_port())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rounds, ttfe = run_rounds(args, names, Path(tmp), sink.endpoint if sink is not None else None)
        exported = sink.count() if sink is not None else (0, 0)
    finally:
        if sink is not None:
            sink.stop()

    print(
        f"{args.requests} non-streaming SendMessage at concurrency {args.concurrency}, each a new context "
        f"(after {args.warmup} warm-up requests), raw JSON-RPC over httpx, loopback; "
        f"median (min–max) of {args.rounds} interleaved rounds"
    )
    for name, measured in rounds.items():
        report(name, measured)
    print("ca serve")
    ratios(rounds[CA], rounds[MEMORY], "the in-memory echo (headline; goal >= 0.55×, CPU <= 2.4 ms/request)")
    ratios(rounds[CA], rounds[DURABLE], "the durable SQLite echo")
    if args.floor:
        ratios(rounds[CA], rounds[FLOOR_DURABLE], "the stack's durable floor")
        print("the required stack's floor (no task, audit or governance records; no ca code)")
        ratios(rounds[FLOOR], rounds[MEMORY], "the in-memory echo, checkpoints in memory", who="floor")
        ratios(rounds[FLOOR_DURABLE], rounds[MEMORY], "the in-memory echo, checkpoints in SQLite", who="floor")
    if args.telemetry:
        overhead("ca's and a2a-sdk's spans", rounds[TRACED], rounds[CA])
        overhead("ca's spans only", rounds[OURS], rounds[CA])
        print(f"  exported     {exported[0]} OTLP requests, {exported[1] / 1024:.0f} KiB to the sink in all")
    if postgres:
        print(f"ca serve on PostgreSQL ({shown(args.store)}, a fresh database each), per round")
        compared("1 replica / SQLite", rounds[PG_ONE], rounds[CA])
        compared("2 replicas / SQLite", rounds[PG_TWO], rounds[CA])
        compared("2 replicas / 1 replica", rounds[PG_TWO], rounds[PG_ONE])
    print(f"ca serve streaming time to first event (SendStreamingMessage, {args.ttfe_runs} runs)")
    print(f"  {spread([t * 1000 for t in ttfe], 'ms')}")
    print(f"machine: load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
